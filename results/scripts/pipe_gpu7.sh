#!/bin/bash
# Session 4, device call 7: hunyuan-720p rows with the new defaults (= lowbit-video bench kernels --shapes
# hunyuan-720p --recipes ... --json) and e2e at 480p (= lowbit-video bench e2e --model wan2.1-t2v-14b
# --random-weights --resolution 480p --recipe sage2-int8 --recipe mxattention --blocks 8 --json).
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
ln -sfn ../kernels lowbit_video/kernels
timeout 250 python3 -c "
import json, sys
from lowbit_video.bench.kernels import bench_kernels, to_markdown
info = bench_kernels(['hunyuan-720p'], ['mxattention', 'mxfp4-ocp', 'mxfp4-tfs', 'sage2-int8', 'fp16'],
                     log=lambda m: print(m, file=sys.stderr))
json.dump(info, open('$OUT/bench_hunyuan.json', 'w'), indent=1)
print(to_markdown(info))
" 2>&1 | tail -12
timeout 200 python3 -c "
import json, sys
from lowbit_video.bench.e2e import bench_e2e
rows = bench_e2e(['480p'], ['sage2-int8', 'mxattention'], blocks=8, reps=3, log=lambda m: print(m, file=sys.stderr))
json.dump(rows, open('$OUT/e2e480.json', 'w'), indent=1)
" 2>&1 | grep "^e2e\|Error\|error" | head -20
rm -f lowbit_video/kernels
