#!/bin/bash
# Session 5, device call 4 (final): the draft GPU tests (topk route), then the final figures:
#   lowbit-video bench kernels --shapes wan-480p wan-720p --recipes <9 recipes> --json
#   lowbit-video bench e2e --model wan2.1-t2v-14b --random-weights --resolution 720p --recipe ... --blocks 8 --json
#   lowbit-video bench draft --shapes wan-720p --no-sweep --json (default, and with --config PAIR16=1 [PIPE16=1])
# (the device has no entry point installed: the same library functions, called here).
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
ln -sfn ../kernels lowbit_video/kernels
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_draft.py -k "not interpreter" 2>&1 | tee $OUT/pytest_draft.log | tail -2
timeout 260 python3 -c "
import json, sys
from lowbit_video.bench.kernels import bench_kernels
info = bench_kernels(['wan-480p', 'wan-720p'], ['mxattention', 'mxattention-no-uos', 'mxattention-no-pnq-uos', 'mxfp4-ocp',
                     'mxfp4-tfs', 'sage2-int8', 'rotateattention-half', 'int4-baseline', 'fp16'], log=lambda m: print(m, file=sys.stderr))
json.dump(info, open('$OUT/bench_kernels.json', 'w'), indent=1)
" 2>&1 | grep -v "^|" | tail -24
timeout 100 python3 -c "
import json, sys
from lowbit_video.bench.draft import bench_draft
runs = [bench_draft(['wan-720p'], sweep=False, config=c) for c in (None, {'PAIR16': True}, {'PAIR16': True, 'PIPE16': True})]
json.dump(runs, open('$OUT/draft.json', 'w'), indent=1)
" 2>&1 | grep -v "^wan" | tail -9
timeout 150 python3 -c "
import json, sys
from lowbit_video.bench.e2e import bench_e2e
rows = bench_e2e(['720p'], ['sage2-int8', 'mxattention', 'rotateattention-half', 'draftattention2'], blocks=8, reps=2,
                 log=lambda m: print(m, file=sys.stderr))
json.dump(rows, open('$OUT/e2e.json', 'w'), indent=1)
" 2>&1 | grep "^e2e\|Error\|error" | head -12
rm -f lowbit_video/kernels
