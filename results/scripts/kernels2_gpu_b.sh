#!/bin/bash
# Second device call (issue 6, second pass): sage2 tests after the V-scale fix, pre-pass tile sweep,
# sage2-int8 kernel timing, the bf16/fp32 accuracy diagnostic, e2e sage2-int8 (8 of 40 blocks).
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
ln -sfn ../kernels lowbit_video/kernels
timeout 50 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_attention.py -k "sage and not interpreter" 2>&1 | tee $OUT/pytest.log | tail -6
timeout 25 python3 results/scripts/sage_prepass_sweep.py 2>&1 | tee $OUT/sweep.json | tail -2
timeout 30 python3 -c "
import json, sys
from lowbit_video.bench.kernels import bench_kernels
info = bench_kernels(['wan-480p', 'wan-720p'], ['sage2-int8'], log=lambda m: print(m, file=sys.stderr))
json.dump(info, open('$OUT/bench_sage.json', 'w'), indent=1)
" 2>&1 | grep sage2
timeout 20 python3 results/scripts/sage_dtype_diag.py 2>&1 | tee $OUT/diag.json | tail -2
timeout 45 python3 -c "
import json, sys
from lowbit_video.bench.e2e import bench_e2e
rows = bench_e2e(['480p', '720p'], ['sage2-int8'], blocks=8, reps=2, log=lambda m: print(m, file=sys.stderr))
json.dump(rows, open('$OUT/e2e.json', 'w'), indent=1)
" 2>&1 | grep "^e2e"
rm -f lowbit_video/kernels
