#!/bin/bash
# Device call (issue 7): DraftAttention2 + NVFP4 GPU tests, then the draft benchmark (wan-720p with the
# error–latency sweep, wan-480p rows) and the NVFP4 kernel rows at wan-720p.
set -o pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
ln -sfn ../kernels lowbit_video/kernels
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_draft.py tests/test_kernels_attention.py -k "draft or nvfp4" 2>&1 | tee $OUT/pytest.log | tail -15
timeout 240 python3 results/scripts/bench_draft_h200.py $OUT/draft.json wan-720p wan-480p 2>&1 | tee $OUT/draft.log | tail -45
timeout 120 python3 -c "
import json, sys
from lowbit_video.bench.kernels import bench_kernels
info = bench_kernels(['wan-720p'], ['nvfp4', 'sage-nvfp4'], log=lambda m: print(m, file=sys.stderr))
json.dump(info, open('$OUT/bench_nvfp4.json', 'w'), indent=1)
" 2>&1 | tail -8
rm -f lowbit_video/kernels
