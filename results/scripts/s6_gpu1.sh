#!/bin/bash
# Session 6, device call 1:
# 1. the Gluon probe (results/scripts/gluon_probe.py): plain FP8 attention with TMA and async wgmma against
#    cuDNN bf16 and the library's Triton kernels on the same tensors;
# 2. the stale rows: lowbit-video bench kernels --shapes wan-720p --recipes rotateattention-interleaved
#    rotateattention-full mxattention sage2-int8 --json;
# 3. lowbit-video bench e2e --model wan2.1-t2v-14b --random-weights --resolution 480p --blocks 8 --recipe
#    sage2-int8 mxattention rotateattention-half draftattention2 --json (480p not re-measured since session 4);
# 4. lowbit-video bench draft --shapes wan-720p --json (with the error-latency sweep, on the session-5 kernel).
# (the device has no entry point installed: the same library functions, called here)
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
ln -sfn ../kernels lowbit_video/kernels
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
timeout 170 python3 results/scripts/gluon_probe.py $OUT/gluon_probe.json 2>&1 | tail -30
timeout 120 python3 -c "
import json, sys
from lowbit_video.bench.kernels import bench_kernels
info = bench_kernels(['wan-720p'], ['rotateattention-interleaved', 'rotateattention-full', 'mxattention', 'sage2-int8'],
                     log=lambda m: print(m, file=sys.stderr))
json.dump(info, open('$OUT/bench_kernels.json', 'w'), indent=1)
" 2>&1 | grep -v "^|" | tail -8
timeout 140 python3 -c "
import json, sys
from lowbit_video.bench.e2e import bench_e2e
rows = bench_e2e(['480p'], ['sage2-int8', 'mxattention', 'rotateattention-half', 'draftattention2'], blocks=8, reps=2,
                 log=lambda m: print(m, file=sys.stderr))
json.dump(rows, open('$OUT/e2e480.json', 'w'), indent=1)
" 2>&1 | grep "^e2e\|Error\|error" | head -8
timeout 150 python3 -c "
import json, sys
from lowbit_video.bench.draft import bench_draft, equal_time_comparison
info = bench_draft(['wan-720p'], sweep=True, log=lambda m: print(m, file=sys.stderr))
info['equal_time'] = equal_time_comparison(info['sweep'], 'wan-720p')
json.dump(info, open('$OUT/draft_sweep.json', 'w'), indent=1)
for r in info['equal_time']: print(r)
" 2>&1 | tail -12
rm -f lowbit_video/kernels
