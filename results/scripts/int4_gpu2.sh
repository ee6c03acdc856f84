#!/bin/bash
# Device call 9: INT4 GPU tests after the rotation MMA moved to the input's 16-bit dtype, the pre-pass stage
# profile again, and the INT4 rows at wan-720p (= lowbit-video bench kernels --shapes wan-720p --recipes ...).
set -o pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
ln -sfn ../kernels lowbit_video/kernels
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_attention.py -k "int4 and not interpreter" 2>&1 | tee $OUT/pytest.log | tail -3
timeout 60 python3 results/scripts/int4_prepass_profile.py $OUT/int4_profile.json 2>&1 | tail -9
timeout 120 python3 -c "
import json, sys
from lowbit_video.bench.kernels import bench_kernels
info = bench_kernels(['wan-720p'], ['rotateattention-half', 'rotateattention-interleaved', 'rotateattention-full', 'int4-baseline'], log=lambda m: print(m, file=sys.stderr))
json.dump(info, open('$OUT/bench_int4.json', 'w'), indent=1)
" 2>&1 | grep "rotate\|int4\|cudnn"
rm -f lowbit_video/kernels
