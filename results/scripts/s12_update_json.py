"""Folds session 12's device runs into results/kernels-h200.json (key `session12`).

Rows: the four INT4 recipes (rotateattention-half / -interleaved / -full, int4-baseline) at wan-480p, wan-720p and
hunyuan-720p from call 3, the final code (the Gluon kernel by default, QK_FP8, Õ in the last tile's P̃ units, the
2xTF32 unrotate pass); they replace older rows of the same (shape, recipe). `e2e`: rotateattention-half at 480p /
720p from call 3, the other three INT4 recipes at 720p from call 5. Call 1 (first version: Gluon INT4 opt-in, 3xTF32 unrotate at 64 rows) and call 2 (failed rows:
the unrotate pass out of shared memory, the Triton INT4 kernel's int32 ΔS-table offset at hunyuan-720p) are kept
as measured.
Usage (on the kernels-h200.json of e3a6120): python3 results/scripts/s12_update_json.py"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from json_fold import replace_e2e, replace_rows, run  # noqa: E402

path = "results/kernels-h200.json"
d = json.load(open(path))


def load(name):
    return json.load(open(f"results/session12/{name}"))


c1, c3 = load("call1-bench.json"), load("call3-bench.json")
plain = lambda r: not r["options"]  # noqa: E731  (rows without a config variant)
new = [dict(r, run="session12_call3") for r in c3["rows"] if plain(r)]
assert len(new) == 12, "4 INT4 recipes x 3 shapes"
superseded = replace_rows(d, new)

e2e_new = (replace_e2e(d, load("call3-e2e.json"), "session12_call3")
           + replace_e2e(d, load("call5-e2e.json"), "session12_call5"))

d["session12"] = {
    "what": "INT4 recipes on the Gluon kernel by default: QK_FP8 (Q/K INT4 codes as E4M3, an exact FP8 QK^T with "
            "fp32 output), the output accumulator and row sum kept in units of the last key tile's P-tilde scale "
            "(one FMA per output element per tile), the V Hadamard undone by a 2xTF32 Triton pass instead of a "
            "float64 torch matmul; the Triton INT4 kernel's Delta-S table offset in int64",
    "date": "2026-11-30",
    "command": "bash results/scripts/gpu_calls.sh with each call's variables (results/kernels-h200.md, Session 12)",
    "gpu": c3["gpu"], "driver": c3["driver"], "torch": c3["torch"], "triton": c3["triton"],
    "call1": run(c1, "first version, rotateattention-half: default (then the Triton kernel, QK_FP8 on), "
                     "QK_FP8=false, and three Gluon variants; unrotate 3xTF32 at 64 rows per program"),
    "call1_unrotate": load("call1-unrotate.json"),
    "call3": run(c3, "final code: the four INT4 recipes (Gluon by default), rotateattention-half with GLUON=false "
                     "(the Triton kernel) and QK_FP8=false"),
    "call3_unrotate": load("call3-unrotate.json"),
    "call5_e2e": load("call5-e2e.json"),
    "superseded_rows": superseded,
}
json.dump(d, open(path, "w"), indent=1)
print(len(new), "rows in,", len(superseded), "superseded;", len(e2e_new), "e2e rows replaced")
