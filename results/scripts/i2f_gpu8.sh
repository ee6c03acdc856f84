#!/bin/bash
# Session 4, device call 8: the INT8/INT4 paths without I2F/F2I conversions (_small_i32_to_f32 and the code
# bits of the RNE trick): GPU tests of the affected kernels, then `bench kernels` (= lowbit-video bench kernels
# --shapes wan-480p wan-720p --recipes sage2-int8 rotateattention-half int4-baseline --json, and draftattention2
# at wan-720p).
set -o pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
ln -sfn ../kernels lowbit_video/kernels
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_attention.py tests/test_kernels_draft.py -k "(sage or int4 or draft or pipelined or dispatch) and not interpreter" 2>&1 | tee $OUT/pytest.log | tail -4
timeout 250 python3 -c "
import json, sys
from lowbit_video.bench.kernels import bench_kernels, to_markdown
info = bench_kernels(['wan-480p', 'wan-720p'], ['sage2-int8', 'rotateattention-half', 'int4-baseline'], log=lambda m: print(m, file=sys.stderr))
info2 = bench_kernels(['wan-720p'], ['draftattention2'], log=lambda m: print(m, file=sys.stderr))
json.dump({'main': info, 'draft': info2}, open('$OUT/bench_i2f.json', 'w'), indent=1)
print(to_markdown(info)); print(to_markdown(info2))
" 2>&1 | grep "^|"
rm -f lowbit_video/kernels
