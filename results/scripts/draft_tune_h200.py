"""Tile/warp sweep of the DraftAttention2 path on the H200 (wan-720p, structured inputs of bench/draft.py):
kernel ms per (num_warps, NUM_STAGES) for draftattention2 and draftattention-sparse16, pre-pass ms per
warp count, route ms. Usage: python results/scripts/draft_tune_h200.py OUT.json"""

import json
import statistics
import sys

import torch

from lowbit_video.attention.draft_layout import VideoGeometry
from lowbit_video.bench.draft import GEOMETRIES, structured_qkv
from lowbit_video.bench.kernels import cuda_times
from lowbit_video.kernels.draft import split_draft

geo = GEOMETRIES["wan-720p"]
q, k, v = structured_qkv(1, 40, geo, 128)
res = {"kernel": [], "prepass": [], "route": []}
med = lambda f: statistics.median(cuda_times(f, warmup=1, reps=3))
for recipe in ("draftattention2", "draftattention-sparse16"):
    prep, rte, kern, box = split_draft(q, k, v, recipe, VideoGeometry(*geo))
    prep()
    rte()
    res["route"].append({"recipe": recipe, "ms": med(rte)})
    for warps, stages in ((4, 2), (4, 3), (4, 4), (8, 2), (8, 3)):
        try:
            p2, r2, k2, b2 = split_draft(q, k, v, recipe, VideoGeometry(*geo), config={"num_warps": warps, "NUM_STAGES": stages})
            b2.update(pre=box["pre"], plan=box["plan"])
            ms = med(k2)
        except Exception as exc:
            ms = None
            print(recipe, warps, stages, "failed", exc, file=sys.stderr)
        res["kernel"].append({"recipe": recipe, "num_warps": warps, "stages": stages, "ms": ms})
        print(recipe, warps, stages, ms, flush=True)
for w in (4, 8, 16):
    p2, _, _, _ = split_draft(q, k, v, "draftattention2", VideoGeometry(*geo), config={"prepass_warps": w})
    ms = med(p2)
    res["prepass"].append({"prepass_warps": w, "ms": ms})
    print("prepass", w, ms, flush=True)
json.dump(res, open(sys.argv[1], "w"), indent=1)
