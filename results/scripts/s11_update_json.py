"""Folds session 11's device runs into results/kernels-h200.json (key `session11`).

Rows replace the older rows of the same (shape, recipe), each from the run of the final defaults for it: sage2-int8
and the three direct-placement MXFP4 recipes (mxfp4-ocp, mxfp4-tfs, mxattention-no-pnq-uos) at the Wan shapes from
call 5; mxattention and mxattention-no-uos at the Wan shapes from call 6; sage2-int8, mxattention and
mxattention-no-uos at hunyuan-720p from call 3 (WORK_LOOP on for all of them then, as now for these three);
rotateattention-half at the Wan shapes from call 2 (its INT4 kernel changes). The direct-placement recipes keep
their session-10 hunyuan rows (their kernel is the session-10 structure again). `e2e`: sage2-int8 and mxattention
at 480p / 720p from call 4 replace their rows.
Usage (on the kernels-h200.json of 2d3bdba): python3 results/scripts/s11_update_json.py"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from json_fold import replace_e2e, replace_rows, run  # noqa: E402

path = "results/kernels-h200.json"
d = json.load(open(path))


def load(name):
    return json.load(open(f"results/{name}"))


c1 = load("bench-kernels-h200-session11-call1-persist.json")
c2n, c2h, c2n2 = (load(f"bench-kernels-h200-session11-call2-{x}.json") for x in ("new", "head", "new-again"))
c3, c5, c6 = (load(f"bench-kernels-h200-session11-call{i}.json") for i in (3, 5, 6))
c4l, c4h = load("bench-kernels-h200-session11-call4-loop.json"), load("bench-kernels-h200-session11-call4-head.json")
plain = lambda r: not r["options"]  # noqa: E731  (rows without a config variant)
direct = ("mxfp4-ocp", "mxfp4-tfs", "mxattention-no-pnq-uos")
new = ([dict(r, run="session11_call5") for r in c5["rows"] if plain(r) and r["recipe"] in ("sage2-int8",) + direct]
       + [dict(r, run="session11_call6") for r in c6["rows"] if plain(r)]
       + [dict(r, run="session11_call3") for r in c3["rows"] if plain(r) and r["shape"] == "hunyuan-720p"
          and r["recipe"] in ("sage2-int8", "mxattention", "mxattention-no-uos")]
       + [dict(r, run="session11_call2") for r in c2n["rows"] if plain(r) and r["recipe"] == "rotateattention-half"])
superseded = replace_rows(d, new)

e2e_new = replace_e2e(d, load("e2e-h200-session11-call4.json"), "session11_call4")

d["session11"] = {
    "what": "WORK_LOOP (the Gluon programs loop over their work tiles): on for sage2-int8 and the PNQ MXFP4 recipes, "
            "off for direct placement, each measured against the other in the same call; PERSIST (a persistent "
            "grid) measured no faster, off; the sage2 pre-pass in four launches (Q codes with K/V token statistics, "
            "their finalisation, K codes, V codes); INT4 P̃ codes by one FMA, the Gluon INT4 logits in FMAs",
    "date": "2026-11-30",
    "command": "bash results/scripts/gpu_calls.sh with each call's variables (results/kernels-h200.md, Session 11)",
    "gpu": c5["gpu"], "driver": c5["driver"], "torch": c5["torch"], "triton": c5["triton"],
    "persist_call1": run(c1, "PERSIST=true against the default (the work loop, one program per work tile)"),
    "ab_call2": {"what": "this session's code (new), the session-10 gluon_ws.py/launch.py (head), new again, "
                         "one device call, sage2-int8 and mxattention; new also rotateattention-half (INT4 changes)",
                 "new": run(c2n), "head": run(c2h), "new_again": run(c2n2),
                 "sage_prepass_pieces": load("sage-prepass-pieces-h200-session11-call2.json")},
    "all_mx_call3": dict(run(c3, "the work loop on for every Gluon recipe; pre-pass K/V codes fused in one launch"),
                         sage_prepass_pieces=load("sage-prepass-pieces-h200-session11-call3.json")),
    "ab_direct_call4": {"what": "direct-placement MXFP4 recipes with the work loop (loop) and the session-10 "
                                "structure (head), one call", "loop": run(c4l), "head": run(c4h)},
    "final_call5": run(c5, "final defaults except the PNQ MXFP4 recipes (WORK_LOOP then off for all MXFP4); "
                           "variants sage2-int8 WORK_LOOP=false, mxfp4-ocp WORK_LOOP=true"),
    "pnq_call6": run(c6, "mxattention, mxattention-no-uos with (default) and without WORK_LOOP"),
    "superseded_rows": superseded,
}
json.dump(d, open(path, "w"), indent=1)
print(len(new), "rows in,", len(superseded), "superseded;", len(e2e_new), "e2e rows replaced")
