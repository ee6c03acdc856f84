#!/bin/bash
# Session 6, device call 2: a register cap (config maxnreg) so that three 4-warp CTAs share an SM.
# 1. GPU test: the capped kernel's output equals the uncapped one bit for bit (sage2-int8, mxattention);
# 2. lowbit-video bench kernels --shapes wan-480p wan-720p --recipes sage2-int8 --config ... --json, rows:
#    default (3 stages), NUM_STAGES=2, maxnreg=168, NUM_STAGES=2 + maxnreg=168 (3 CTAs/SM: 168 regs x 128
#    threads x 3 <= 65536, 74 KB of shared memory each);
# 3. the Gluon probe at BM64 / 2 stages with and without maxnreg=168.
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
ln -sfn ../kernels lowbit_video/kernels
timeout 100 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_attention.py -k "register_cap" 2>&1 | tee $OUT/pytest.log | tail -3
timeout 200 python3 -c "
import json, sys
from lowbit_video.bench.kernels import bench_kernels
v = {}
for cfg in ({'NUM_STAGES': 2}, {'maxnreg': 168}, {'NUM_STAGES': 2, 'maxnreg': 168}):
    v['sage2-int8[' + ','.join(f'{k}={x}' for k, x in cfg.items()) + ']'] = dict(recipe='sage2-int8', config=cfg)
info = bench_kernels(['wan-480p', 'wan-720p'], ['sage2-int8'], variants=v, log=lambda m: print(m, file=sys.stderr))
json.dump(info, open('$OUT/bench_maxnreg.json', 'w'), indent=1)
" 2>&1 | grep -v "^|" | tail -12
timeout 120 python3 results/scripts/gluon_probe.py $OUT/gluon_probe_maxnreg.json --maxnreg 2>&1 | tail -6
rm -f lowbit_video/kernels
