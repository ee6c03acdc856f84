#!/bin/bash
# Session 5, device call 3: GPU kernel tests (MX exponent by significand compare, INT4 codes from the logits,
# MX V pre-pass in two tile passes), then `bench kernels` at wan-480p and wan-720p for the MXFP4 recipes,
# sage2, the INT4 recipes and dense.
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
ln -sfn ../kernels lowbit_video/kernels
timeout 280 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_attention.py -k "not interpreter" 2>&1 | tee $OUT/pytest.log | tail -3
timeout 280 python3 -c "
import json, sys
from lowbit_video.bench.kernels import bench_kernels, to_markdown
info = bench_kernels(['wan-480p', 'wan-720p'], ['mxattention', 'mxattention-no-uos', 'mxattention-no-pnq-uos', 'mxfp4-ocp',
                     'mxfp4-tfs', 'sage2-int8', 'rotateattention-half', 'int4-baseline', 'fp16'], log=lambda m: print(m, file=sys.stderr))
json.dump(info, open('$OUT/bench_kernels.json', 'w'), indent=1)
print(to_markdown(info))
" 2>&1 | grep -v "^|" | tail -24
rm -f lowbit_video/kernels
