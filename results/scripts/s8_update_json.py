"""Folds session 8's device runs into results/kernels-h200.json (key `session8`). Session 8 made the Gluon kernel
the default for sage2-int8 and the MXFP4 recipes, so its rows replace the older rows of the same (shape, recipe):
call 5 (final kernels: mxattention, mxfp4-ocp, sage2-int8 at three shapes) and call 3 (the other MXFP4 recipes,
whose kernel call 5 did not change). The Triton kernel's rows of the same runs (`recipe[GLUON=False]`) and the
replaced rows are kept under session8. e2e rows: call 5 (720p: sage2-int8, mxattention), call 4 (480p: sage2-int8,
mxattention, mxfp4-ocp; 720p: mxfp4-ocp). Nsight Compute summaries: results/ncu/ncu_*-s8.csv.gz.
Usage (on the kernels-h200.json of before session 8, 19274d7): python3 results/scripts/s8_update_json.py"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from ncu_summary import summary  # noqa: E402

path = "results/kernels-h200.json"
d = json.load(open(path))
c3 = json.load(open("results/bench-kernels-h200-session8-call3.json"))
c5 = json.load(open("results/bench-kernels-h200-session8-call5.json"))
e4 = json.load(open("results/e2e-h200-session8-call4.json"))
e5 = json.load(open("results/e2e720-h200-session8-call5.json"))

new = [dict(r, run="session8_call5", kernel="gluon") for r in c5["rows"] if "[" not in r["recipe"]]
done = {(r["shape"], r["recipe"]) for r in new}
new += [dict(r, run="session8_call3", kernel="gluon") for r in c3["rows"]
        if "[" not in r["recipe"] and (r["shape"], r["recipe"]) not in done]
keys = {(r["shape"], r["recipe"]) for r in new}
superseded = [r for r in d["rows"] if (r["shape"], r["recipe"]) in keys]
d["rows"] = [r for r in d["rows"] if (r["shape"], r["recipe"]) not in keys] + new
e2e_new = [dict(r, run="session8_call5") for r in e5 if "[" not in r["recipe"] and r["recipe"] != "sdpa-cudnn"]
e2e_new += [dict(r, run="session8_call4") for r in e4 if r["recipe"] != "sdpa-cudnn"
            and not (r["resolution"] == "720p" and r["recipe"] in ("sage2-int8", "mxattention"))]
d["e2e"]["rows"] += e2e_new
d["session8"] = {
    "what": "the Gluon kernel (kernels/gluon_ws.py) by default for sage2-int8 and the MXFP4 recipes: P̂ becomes the "
            "P̂·V̂ operand without shuffles (Vᵀ in the operand's key order), the last key tile peeled, sage2's key "
            "scales by TMA into the K stage; sage2 / INT4 K mean and V channel maxima by Triton reductions",
    "date": "2026-11-30",
    "command": "bash results/scripts/s8_gpu.sh with each call's variables (results/kernels-h200.md, Session 8); "
               "bash results/scripts/s7_ncu.sh sage-gluon-s8 mx-gluon-s8",
    "gpu": c5["gpu"], "driver": c5["driver"], "torch": c5["torch"], "triton": c5["triton"],
    "baselines_call5": c5["baselines"], "baselines_call3": c3["baselines"],
    "triton_rows": [dict(r, run=run) for run, b in (("session8_call3", c3), ("session8_call5", c5))
                    for r in b["rows"] if "[GLUON=False]" in r["recipe"]],
    "e2e_call5_all": e5, "e2e_call4_all": e4,
    "e2e_call7_rerun": json.load(open("results/e2e720-h200-session8-call7.json")),
    "e2e_call2_all": json.load(open("results/e2e720-h200-session8-call2.json")),
    "call1_bench": json.load(open("results/bench-gluon-perm-h200-session8-call1.json")),
    "sage_prepass_pieces_call3": json.load(open("results/sage-prepass-pieces-h200-session8-call3.json")),
    "sage_prepass_pieces_call5": json.load(open("results/sage-prepass-pieces-h200-session8-call5.json")),
    "ncu": {"shape": "B=1 H=16 N=16384 D=128 bf16, one call per kernel, ncu --set full (clocks locked by ncu)",
            "kernels": [summary(f"results/ncu/ncu_{k}.csv.gz") for k in ("sage-gluon-s8", "mx-gluon-s8")]},
    "superseded_rows": superseded,
}
json.dump(d, open(path, "w"), indent=1)
print(len(new), "rows in,", len(superseded), "superseded,", len(e2e_new), "e2e rows")
