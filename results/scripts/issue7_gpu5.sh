#!/bin/bash
# Device call 5 (issue 7): `bench kernels` at wan-720p over the issue-7 recipes (what
# `lowbit-video bench kernels --shapes wan-720p --recipes ... --json` runs; the device has no entry point),
# then e2e Wan2.1-14B-shaped forwards (8 of 40 blocks) at 720p for every new recipe.
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
ln -sfn ../kernels lowbit_video/kernels
timeout 200 python3 -c "
import json, sys
from lowbit_video.bench.kernels import bench_kernels, to_markdown
info = bench_kernels(['wan-720p'], ['sage2-int8', 'fp16', 'rotateattention-half', 'int4-baseline', 'nvfp4', 'sage-nvfp4',
                     'draftattention2', 'draftattention-sparse16'], log=lambda m: print(m, file=sys.stderr))
json.dump(info, open('$OUT/bench_kernels.json', 'w'), indent=1)
print(to_markdown(info))
" 2>&1 | tail -32
timeout 200 python3 -c "
import json, sys
from lowbit_video.bench.e2e import bench_e2e
rows = bench_e2e(['720p'], ['draftattention2', 'draftattention-sparse16', 'rotateattention-half', 'nvfp4'], blocks=8, reps=2,
                 log=lambda m: print(m, file=sys.stderr))
json.dump(rows, open('$OUT/e2e.json', 'w'), indent=1)
" 2>&1 | grep "^e2e\|Error\|error" | head -20
rm -f lowbit_video/kernels
