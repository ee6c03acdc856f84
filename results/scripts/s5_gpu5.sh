#!/bin/bash
# Session 5, device call 5: the draft GPU tests after the PAIR16 fix, then
#   lowbit-video bench draft --shapes wan-720p --no-sweep --json            (default)
#   lowbit-video bench draft --shapes wan-720p --no-sweep --config PAIR16=1 --json
#   lowbit-video bench kernels --shapes hunyuan-720p --recipes mxattention mxfp4-ocp sage2-int8 fp16 --json
set -o pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
ln -sfn ../kernels lowbit_video/kernels
timeout 100 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_draft.py -k "not interpreter" 2>&1 | tee $OUT/pytest_draft.log | tail -2
timeout 100 python3 -c "
import json, sys
from lowbit_video.bench.draft import bench_draft
runs = []
for c in (None, {'PAIR16': True}):
    runs.append(bench_draft(['wan-720p'], sweep=False, config=c, log=lambda m: print(m, file=sys.stderr)))
    json.dump(runs, open('$OUT/draft.json', 'w'), indent=1)
" 2>&1 | tail -8
timeout 110 python3 -c "
import json, sys
from lowbit_video.bench.kernels import bench_kernels
info = bench_kernels(['hunyuan-720p'], ['mxattention', 'mxfp4-ocp', 'sage2-int8', 'fp16'], log=lambda m: print(m, file=sys.stderr))
json.dump(info, open('$OUT/bench_hunyuan.json', 'w'), indent=1)
" 2>&1 | tail -7
rm -f lowbit_video/kernels
