#!/bin/bash
# Session 6, device call 4: sage2-int8 through the warp-specialized Gluon kernel (config GLUON, kernels/gluon_sage.py).
# 1. GPU tests: the Gluon kernel against the reference engine and the Triton kernel;
# 2. lowbit-video bench kernels --shapes wan-480p wan-720p hunyuan-720p --recipes sage2-int8 --config GLUON=true --json
#    (the default Triton row and the GLUON row in one run);
# 3. e2e 720p (Wan2.1-14B-shaped, 8 blocks) for sage2-int8 with the Triton kernel and with GLUON (the script
#    patches launch._config so the model's attention calls take GLUON: the CLI has no per-call config for e2e).
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
ln -sfn ../kernels lowbit_video/kernels
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_attention.py -k "gluon" 2>&1 | tee $OUT/pytest.log | tail -15
timeout 200 python3 -c "
import json, sys
from lowbit_video.bench.kernels import bench_kernels
v = {'sage2-int8[GLUON=True]': dict(recipe='sage2-int8', config={'GLUON': True})}
info = bench_kernels(['wan-480p', 'wan-720p', 'hunyuan-720p'], ['sage2-int8'], variants=v, log=lambda m: print(m, file=sys.stderr))
json.dump(info, open('$OUT/bench_gluon.json', 'w'), indent=1)
" 2>&1 | grep -v "^|" | tail -14
timeout 180 python3 -c "
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
