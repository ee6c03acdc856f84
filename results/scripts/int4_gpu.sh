#!/bin/bash
# One device call (issue 7, INT4 RotateAttention): the INT4 GPU tests, then a wan-720p benchmark of
# rotateattention-half against SDPA cuDNN / flash in the same process. Run from the repo root with OUT set.
set -o pipefail
ln -sfn ../kernels lowbit_video/kernels
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
timeout 115 python3 -m pytest -q -p no:cacheprovider -rf tests/test_kernels_attention.py -k "int4 and not interpreter" 2>&1 | tee $OUT/pytest.log | tail -25
timeout 60 python3 results/scripts/bench_int4_h200.py $OUT/bench_int4.json wan-720p 2>&1 | tee $OUT/bench.log | tail -12
rm -f lowbit_video/kernels
