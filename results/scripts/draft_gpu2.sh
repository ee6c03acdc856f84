#!/bin/bash
# Device call 2 (issue 7): draft GPU tests after the division-free pre-pass, the warp/stage sweep, then the
# draft benchmark with the best kernel config (wan-720p sweep + wan-480p rows).
set -o pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
ln -sfn ../kernels lowbit_video/kernels
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_draft.py tests/test_kernels_attention.py -k "(draft or nvfp4) and not interpreter" 2>&1 | tee $OUT/pytest.log | tail -8
timeout 150 python3 results/scripts/draft_tune_h200.py $OUT/tune.json 2>&1 | tail -16
CFG=$(python3 -c "
import json; r=json.load(open('$OUT/tune.json'))
best={}
for x in r['kernel']:
    if x['ms'] is not None:
        key=(x['num_warps'],x['stages']); best[key]=best.get(key,0)+x['ms']
(w,s)=min(best,key=best.get); pw=min(r['prepass'],key=lambda x:x['ms'])['prepass_warps']
print(json.dumps({'num_warps':w,'NUM_STAGES':s,'prepass_warps':pw}))")
echo "config $CFG"
timeout 240 python3 -c "
import json, sys
from lowbit_video.bench.draft import bench_draft
cfg = json.loads('$CFG')
info = bench_draft(['wan-720p'], sweep=True, config=cfg)
extra = bench_draft(['wan-480p'], sweep=False, config=cfg)
info['rows'] += extra['rows']; info['baselines'] += extra['baselines']
json.dump(info, open('$OUT/draft.json', 'w'), indent=1)
" 2>&1 | tail -30
rm -f lowbit_video/kernels
