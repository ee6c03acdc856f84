#!/bin/bash
# Session 6, device call 8: the Gluon sage2 kernel with the int32 -> fp32 conversion of the logits by an integer and a float add instead of I2F (the
# quarter-rate pipe that exp2 and the E4M3 casts use; key loop 641 -> 705 instructions). GPU tests, then
#   lowbit-video bench kernels --shapes wan-480p wan-720p hunyuan-720p --recipes sage2-int8 --config GLUON=true --json
# and the 720p e2e with and without GLUON (as s6_gpu4.sh).
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
ln -sfn ../kernels lowbit_video/kernels
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_attention.py -k "gluon" 2>&1 | tee $OUT/pytest.log | tail -3
timeout 200 python3 -c "
import json, sys
from lowbit_video.bench.kernels import bench_kernels
v = {'sage2-int8[GLUON=True]': dict(recipe='sage2-int8', config={'GLUON': True}),
     'sage2-int8[GLUON=True,NUM_STAGES=2]': dict(recipe='sage2-int8', config={'GLUON': True, 'NUM_STAGES': 2})}
info = bench_kernels(['wan-480p', 'wan-720p', 'hunyuan-720p'], ['sage2-int8'], variants=v, log=lambda m: print(m, file=sys.stderr))
json.dump(info, open('$OUT/bench_gluon.json', 'w'), indent=1)
" 2>&1 | grep "sage2\|cudnn" | tail -12
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
rm -f lowbit_video/kernels
