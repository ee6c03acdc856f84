#!/bin/bash
# Session 6, device calls 4-8: the Gluon sage2 kernel (kernels/gluon_sage.py, now kernels/gluon_ws.py; config GLUON) against the Triton
# kernel in the same run. Each call ran this script on the tree of one commit:
#   call 4: b337dc6 (first version; bench without the NUM_STAGES=2 row)
#   call 5: 63739b1 (key scales a tile ahead; SHAPES="wan-480p wan-720p" E2E=0)
#   call 6: 0ac989d (coalesced key-scale loads, Õ rescaled after the wait)
#   call 7: 75eabf1 (ragged last tile peeled)  -- the code kept (a92046b is the same kernel)
#   call 8: 495cfe7 (magic-number int32 -> fp32 instead of I2F; reverted)
# Steps: GPU tests (-k gluon); lowbit-video bench kernels --shapes $SHAPES --recipes sage2-int8
# --config GLUON=true [--config NUM_STAGES=2] --json; the 720p e2e (8 blocks) with the Triton kernel and with
# GLUON (this script patches launch._config so the model's attention calls take GLUON: e2e has no per-call config).
set -o pipefail
SHAPES=${SHAPES:-"wan-480p wan-720p hunyuan-720p"}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
ln -sfn ../kernels lowbit_video/kernels
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_attention.py -k "gluon" 2>&1 | tee $OUT/pytest.log | tail -3
timeout 200 python3 -c "
import json, sys
from lowbit_video.bench.kernels import bench_kernels
v = {'sage2-int8[GLUON=True]': dict(recipe='sage2-int8', config={'GLUON': True}),
     'sage2-int8[GLUON=True,NUM_STAGES=2]': dict(recipe='sage2-int8', config={'GLUON': True, 'NUM_STAGES': 2})}
info = bench_kernels('$SHAPES'.split(), ['sage2-int8'], variants=v, log=lambda m: print(m, file=sys.stderr))
json.dump(info, open('$OUT/bench_gluon.json', 'w'), indent=1)
" 2>&1 | grep "sage2\|cudnn" | tail -12
if [ "${E2E:-1}" = 1 ]; then
timeout 150 python3 -c "
import json, sys
import lowbit_video.kernels.launch as L
from lowbit_video.bench.e2e import bench_e2e
rows = bench_e2e(['720p'], ['sage2-int8'], blocks=8, reps=2, log=lambda m: print(m, file=sys.stderr))
orig = L._config
L._config = lambda variant, d: dict(orig(variant, d), GLUON=True) if variant == 'sage' else orig(variant, d)
rows += [dict(r, recipe=r['recipe'] + '[GLUON]') for r in bench_e2e(['720p'], ['sage2-int8'], blocks=8, reps=2,
         log=lambda m: print(m, file=sys.stderr)) if r['recipe'] != 'sdpa-cudnn']
json.dump(rows, open('$OUT/e2e_gluon.json', 'w'), indent=1)
" 2>&1 | grep "^e2e\|Error\|error" | head -8
fi
rm -f lowbit_video/kernels
