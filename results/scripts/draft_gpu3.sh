#!/bin/bash
# (Ran at the commit it was added with; allocate_by_threshold and the allocator option were later removed.)
# Device call 3 (issue 7): draft GPU tests after the threshold allocation and the plan kernel; route
# timing split; the draft benchmark (wan-720p sweep + wan-480p rows) with the tuned config (defaults).
set -o pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
ln -sfn ../kernels lowbit_video/kernels
timeout 100 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_draft.py -k "not interpreter" 2>&1 | tee $OUT/pytest.log | tail -4
timeout 60 python3 - <<'PY' 2>&1 | tee $OUT/route.txt
import statistics, torch
from lowbit_video.attention.draft_layout import VideoGeometry
from lowbit_video.attention.draft_alloc import head_quotas
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
sc = lambda: draft_scores(pre["q_mean"], pre["q_max"], pre["k_mean"], pre["k_max"], scale=128**-0.5, maxpool_weight=0.5)
s = sc(); quotas = head_quotas(s.shape[-1], spec)
codes = allocate_by_threshold(s, quotas)
print("route ms: scores", med(sc), "allocate", med(lambda: allocate_by_threshold(s, quotas)), "plan", med(lambda: plan_from_codes(codes)), "whole", med(rte))
PY
timeout 240 python3 -c "
import json, sys
from lowbit_video.bench.draft import bench_draft
info = bench_draft(['wan-720p'], sweep=True)
extra = bench_draft(['wan-480p'], sweep=False)
info['rows'] += extra['rows']; info['baselines'] += extra['baselines']
json.dump(info, open('$OUT/draft.json', 'w'), indent=1)
" 2>&1 | tail -30
rm -f lowbit_video/kernels
