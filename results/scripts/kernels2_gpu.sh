#!/bin/bash
# One device call (issue 6, second pass): sage2 tests after the pre-pass fix, the bf16/fp32 accuracy
# diagnostic, e2e Wan2.1-14B-shaped forwards, sage2-int8 kernel timing with the new pre-pass.
# Run from the repo root with OUT set; wheels in .whl (diffusers 0.42.1, importlib_metadata, sageattention).
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
ln -sfn ../kernels lowbit_video/kernels
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
timeout 90 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_attention.py -k "sage and not interpreter" 2>&1 | tee $OUT/pytest.log | tail -15
timeout 35 python3 results/scripts/sage_dtype_diag.py 2>&1 | tee $OUT/diag.json | tail -3
timeout 110 python3 -c "
import json, sys
from lowbit_video.bench.e2e import bench_e2e
rows = bench_e2e(['480p', '720p'], ['sage2-int8', 'mxattention'], blocks=8, reps=3, log=lambda m: print(m, file=sys.stderr))
json.dump(rows, open('$OUT/e2e.json', 'w'), indent=1)
" 2>&1 | grep -v "should be kept" | tail -12
timeout 50 python3 -c "
import json, sys
from lowbit_video.bench.kernels import bench_kernels
info = bench_kernels(['wan-480p', 'wan-720p'], ['sage2-int8'], log=lambda m: print(m, file=sys.stderr))
json.dump(info, open('$OUT/bench_sage.json', 'w'), indent=1)
" 2>&1 | tail -12
rm -f lowbit_video/kernels
