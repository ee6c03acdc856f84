#!/bin/bash
# (Ran at the commit it was added with; allocate_by_threshold and the allocator option were later removed.)
# Device call 4 (issue 7): route allocator variants (engine sort vs kthvalue thresholds), then the draft
# benchmark (wan-720p sweep + wan-480p rows) with the faster one.
set -o pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
ln -sfn ../kernels lowbit_video/kernels
timeout 90 python3 - <<'PY' 2>&1 | tee $OUT/route.txt
import json, os, statistics, torch
from lowbit_video.attention.draft_layout import VideoGeometry
from lowbit_video.attention.draft_alloc import allocate, head_quotas
from lowbit_video.attention.draft_map import draft_scores
from lowbit_video.bench.draft import GEOMETRIES, structured_qkv
from lowbit_video.bench.kernels import cuda_times
from lowbit_video.kernels.draft import split_draft
from lowbit_video.kernels.draft_route import allocate_by_threshold, plan_from_codes
from lowbit_video.recipes import load_recipe
geo = GEOMETRIES["wan-720p"]; q, k, v = structured_qkv(1, 40, geo, 128)
prep, rte, kern, box = split_draft(q, k, v, "draftattention2", VideoGeometry(*geo)); prep()
pre = box["pre"]; spec = load_recipe("draftattention2").attention.draft
med = lambda f: statistics.median(cuda_times(f, warmup=1, reps=5))
s = draft_scores(pre["q_mean"], pre["q_max"], pre["k_mean"], pre["k_max"], scale=128**-0.5, maxpool_weight=0.5)
quotas = head_quotas(s.shape[-1], spec); flat = s.flatten(-2)
r = {"sort_only": med(lambda: torch.sort(flat, dim=-1, descending=True, stable=True)),
     "argsort_only": med(lambda: torch.argsort(flat, dim=-1, descending=True, stable=True)),
     "engine_allocate": med(lambda: allocate(s, quotas)), "threshold": med(lambda: allocate_by_threshold(s, quotas)),
     "equal": bool(torch.equal(allocate(s, quotas), allocate_by_threshold(s, quotas).long())),
     "plan_int64_codes": med(lambda: plan_from_codes(allocate(s, quotas)))}
print(json.dumps(r)); best = "sort" if r["engine_allocate"] <= r["threshold"] else "threshold"
open(os.environ["OUT"] + "/best.txt", "w").write(best)
PY
BEST=$(cat $OUT/best.txt)
timeout 240 python3 -c "
import json, sys
from lowbit_video.bench.draft import bench_draft
cfg = {'allocator': '$BEST'}
info = bench_draft(['wan-720p'], sweep=True, config=cfg)
extra = bench_draft(['wan-480p'], sweep=False, config=cfg)
info['rows'] += extra['rows']; info['baselines'] += extra['baselines']
json.dump(info, open('$OUT/draft.json', 'w'), indent=1)
" 2>&1 | tail -30
rm -f lowbit_video/kernels
