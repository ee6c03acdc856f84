#!/bin/bash
# Session 4, device call 5: e2e Wan2.1-14B-shaped forwards (8 of 40 blocks) at 720p with the new kernel
# defaults (= lowbit-video bench e2e --model wan2.1-t2v-14b --random-weights --resolution 720p --recipe ...
# --blocks 8 --json), cuDNN bf16 in the same run.
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
ln -sfn ../kernels lowbit_video/kernels
timeout 400 python3 -c "
import json, sys
from lowbit_video.bench.e2e import bench_e2e
rows = bench_e2e(['720p'], ['sage2-int8', 'mxattention', 'rotateattention-half', 'draftattention2'], blocks=8, reps=2,
                 log=lambda m: print(m, file=sys.stderr))
json.dump(rows, open('$OUT/e2e.json', 'w'), indent=1)
" 2>&1 | grep "^e2e\|Error\|error" | head -20
rm -f lowbit_video/kernels
