#!/bin/bash
# Session 5, device call 3: GPU tests of tests/test_kernels_attention.py (MX exponent by significand compare,
# INT4 codes from the logits, INT4 V and MX V pre-passes in Triton tile passes, ΔS table by 3xTF32), then
# `bench kernels` at wan-480p and wan-720p for mxattention, mxfp4-ocp, sage2-int8 and the INT4 recipes.
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
ln -sfn ../kernels lowbit_video/kernels
timeout 300 python3 -m pytest -q -x -p no:cacheprovider tests/test_kernels_attention.py -k "not interpreter" 2>&1 | tee $OUT/pytest.log | tail -3
timeout 200 python3 -c "
import json, sys
from lowbit_video.bench.kernels import bench_kernels, to_markdown
info = bench_kernels(['wan-480p', 'wan-720p'], ['mxattention', 'mxfp4-ocp', 'sage2-int8', 'rotateattention-half', 'int4-baseline'],
                     log=lambda m: print(m, file=sys.stderr))
json.dump(info, open('$OUT/bench_kernels.json', 'w'), indent=1)
" 2>&1 | tail -16
rm -f lowbit_video/kernels
