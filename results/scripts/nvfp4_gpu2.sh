#!/bin/bash
# Device call 10: NVFP4 + draft GPU tests after the Triton nvfp4 pre-pass (shared rounding helpers), and the
# nvfp4 rows at wan-720p (= lowbit-video bench kernels --shapes wan-720p --recipes nvfp4 sage-nvfp4).
set -o pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
ln -sfn ../kernels lowbit_video/kernels
timeout 100 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_attention.py tests/test_kernels_draft.py -k "(nvfp4 or draft) and not interpreter" 2>&1 | tee $OUT/pytest.log | tail -3
timeout 80 python3 -c "
import json, sys
from lowbit_video.bench.kernels import bench_kernels
info = bench_kernels(['wan-720p'], ['nvfp4'], log=lambda m: print(m, file=sys.stderr))
json.dump(info, open('$OUT/bench_nvfp4.json', 'w'), indent=1)
" 2>&1 | grep "nvfp4\|cudnn"
rm -f lowbit_video/kernels
