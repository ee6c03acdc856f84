"""Folds session 7's device runs into results/kernels-h200.json (key `session7`): the Gluon rows (bench
`s7_gpu.sh`: results/bench-gluon-h200-session7.json, results/e2e720-gluon-h200-session7.json) and the Nsight
Compute summary (results/ncu/, results/scripts/ncu_summary.py). The Triton rows it re-measured (mxattention and
sage2-int8 at wan-480p / wan-720p, their 720p e2e) replace the older ones (kept under session7.superseded_rows).
Usage (on the kernels-h200.json of before session 7, b4ace02): python3 results/scripts/s7_update_json.py"""

import glob
import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from ncu_summary import summary  # noqa: E402

path = "results/kernels-h200.json"
d = json.load(open(path))
bk = json.load(open("results/bench-gluon-h200-session7.json"))
e2e = json.load(open("results/e2e720-gluon-h200-session7.json"))

plain = [dict(r, run="session7_call1") for r in bk["rows"] if "[" not in r["recipe"]]
keys = {(r["shape"], r["recipe"]) for r in plain}
superseded = [r for r in d["rows"] if (r["shape"], r["recipe"]) in keys]
d["rows"] = [r for r in d["rows"] if (r["shape"], r["recipe"]) not in keys] + plain
for r in e2e:
    if "[" not in r["recipe"] and r["recipe"] != "sdpa-cudnn":
        d["e2e"]["rows"].append(dict(r, run="session7_call1"))
d["session7"] = {
    "what": "the warp-specialized Gluon kernel (kernels/gluon_ws.py, config GLUON) for the MXFP4 recipes and "
            "sage2-int8 against the Triton kernel in the same run; Nsight Compute profiles of every kernel",
    "date": "2026-11-29",
    "command": "SHAPES='wan-480p wan-720p' E2E_RES=720p bash results/scripts/s7_gpu.sh; "
               "bash results/scripts/s7_ncu.sh LABEL... (calls 3, 4 and 6; labels in its header)",
    "gpu": bk["gpu"], "driver": bk["driver"], "torch": bk["torch"], "triton": bk["triton"],
    "baselines": bk["baselines"],
    "gluon_rows": [dict(r, run="session7_call1") for r in bk["rows"] if "[" in r["recipe"]],
    "e2e": e2e,
    "ncu": {"shape": "B=1 H=16 N=16384 D=128 bf16, one call per kernel, ncu --set full (clocks locked by ncu)",
            "kernels": [summary(p) for p in sorted(glob.glob("results/ncu/ncu_*.csv.gz"))]},
    "superseded_rows": superseded,
    # later calls on the MX Gluon kernel (each with its own same-run cuDNN baseline)
    "gluon_iterations": [
        {"call": 6, "commit": "7625aff", "change": "per-block P̃ work once per block (offline key loop 998 -> 952)",
         "bench": json.load(open("results/bench-gluon-quad-h200-session7.json"))},
        {"call": 7, "commit": "ℓ by MMA against ones (reverted)", "change": "PNQ rows of this call ran the reverted "
         "kernel, which failed the mxattention reference test: not valid; direct-placement rows ran call 6's kernel",
         "bench": json.load(open("results/bench-gluon-lmma-h200-session7.json"))},
        {"call": 8, "commit": "final", "change": "row sums as a short tree (same instruction count)",
         "bench": json.load(open("results/bench-gluon-tree-h200-session7.json"))},
    ],
    "mx_prepass_pieces": json.load(open("results/mx-prepass-pieces-h200-session7.json")),
    # call 9: V's fold exponents from one torch.aminmax (commit "prepass.mx_cols: ...")
    "mx_prepass_pieces_v_aminmax": json.load(open("results/mx-prepass-pieces-vfix-h200-session7.json")),
    "bench_v_aminmax": json.load(open("results/bench-vprepass-h200-session7.json")),
}
json.dump(d, open(path, "w"), indent=1)
print(len(plain), "rows in,", len(superseded), "superseded")
