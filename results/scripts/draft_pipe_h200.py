"""Session 4: software pipelining (PIPE4/8/16) of DraftAttention2's precision phases on the H200, wan-720p,
structured inputs of bench/draft.py; kernel ms per setting (pre-pass and route unchanged, timed once).
Usage: PYTHONPATH=$PWD python3 results/scripts/draft_pipe_h200.py OUT.json"""

import json
import statistics
import sys

from lowbit_video.attention.draft_layout import VideoGeometry
from lowbit_video.bench.draft import GEOMETRIES, structured_qkv
from lowbit_video.bench.kernels import cuda_times
from lowbit_video.kernels.draft import split_draft

geo = GEOMETRIES["wan-720p"]
q, k, v = structured_qkv(1, 40, geo, 128)
res = {"kernel": []}
med = lambda f: statistics.median(cuda_times(f, warmup=1, reps=3))
SETTINGS = [(False, False, False), (True, False, False), (False, True, False), (False, False, True),
            (True, True, True), (True, True, False)]
for recipe in ("draftattention2", "draftattention-sparse16"):
    prep, rte, kern, box = split_draft(q, k, v, recipe, VideoGeometry(*geo))
    prep()
    rte()
    for p4, p8, p16 in SETTINGS:
        if recipe == "draftattention-sparse16" and (p4 or p8):
            continue  # sparse16 has only the 16-bit phase
        for stages in (2, 3):
            cfg = {"PIPE4": p4, "PIPE8": p8, "PIPE16": p16, "NUM_STAGES": stages}
            try:
                p2, r2, k2, b2 = split_draft(q, k, v, recipe, VideoGeometry(*geo), config=cfg)
                b2.update(pre=box["pre"], plan=box["plan"])
                ms = med(k2)
            except Exception as exc:
                ms = None
                print(recipe, cfg, "failed", repr(exc)[:200], file=sys.stderr, flush=True)
            res["kernel"].append({"recipe": recipe, "config": cfg, "ms": ms})
            print(recipe, cfg, ms, flush=True)
            json.dump(res, open(sys.argv[1], "w"), indent=1)
