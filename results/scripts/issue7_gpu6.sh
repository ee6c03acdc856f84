#!/bin/bash
# Device call 6 (issue 7, final): every kernel GPU test (the shared _tile_step changed), the draft benchmark
# with the boundary allocation (wan-720p sweep + wan-480p rows), and a regression check of the issue-6 rows.
set -o pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
ln -sfn ../kernels lowbit_video/kernels
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_attention.py tests/test_kernels_draft.py -k "not interpreter" 2>&1 | tee $OUT/pytest.log | tail -4
timeout 200 python3 -c "
import json, sys
from lowbit_video.bench.draft import bench_draft
info = bench_draft(['wan-720p'], sweep=True)
extra = bench_draft(['wan-480p'], sweep=False)
info['rows'] += extra['rows']; info['baselines'] += extra['baselines']
json.dump(info, open('$OUT/draft.json', 'w'), indent=1)
" 2>&1 | tail -30
timeout 90 python3 -c "
import json, sys
from lowbit_video.bench.kernels import bench_kernels
info = bench_kernels(['wan-480p'], ['mxattention', 'sage2-int8'], log=lambda m: print(m, file=sys.stderr))
json.dump(info, open('$OUT/regress.json', 'w'), indent=1)
" 2>&1 | grep "mxattention\|sage2\|cudnn"
rm -f lowbit_video/kernels
