"""Folds session 10's device runs into results/kernels-h200.json (key `session10`), and gives `e2e` the issue's shape.

Rows replace the older rows of the same (shape, recipe): call 5 (final code: sage2-int8 and the five MXFP4 recipes at
three shapes) except mxfp4-ocp and mxattention-no-pnq-uos, which come from call 7 (after EARLY_QK was turned off for
direct placement, call 6), and rotateattention-half at the Wan shapes from call 10 (Triton INT4 kernel, the ΔS table
in its new tiling from call 9's sweep). `e2e` becomes
the list the issue asks for: the latest row per (model, resolution, recipe), each with `model`, `ratio_cudnn`, and
the cuDNN time of its own run (`cudnn_ms`); every older e2e row and the former metadata move to `e2e_history`.
Usage (on the kernels-h200.json of 3724878): python3 results/scripts/s10_update_json.py"""

import json

path = "results/kernels-h200.json"
d = json.load(open(path))


def load(name):
    return json.load(open(f"results/{name}"))


c1, c2, c3, c5, c6, c7 = (load(f) for f in ("bench-kernels-h200-session10-call1.json", "bench-kernels-h200-session10-call2.json",
                                               "bench-kernels-h200-session10-call3-overlap.json", "bench-kernels-h200-session10-call5.json",
                                               "bench-kernels-h200-session10-call6-early-direct.json", "bench-kernels-h200-session10-call7.json"))
c10 = load("bench-kernels-h200-session10-call10.json")
direct = ("mxfp4-ocp", "mxattention-no-pnq-uos")
new = ([dict(r, run="session10_call5") for r in c5["rows"] if r["recipe"] not in direct]
       + [dict(r, run="session10_call7") for r in c7["rows"]]
       + [dict(r, run="session10_call10") for r in c10["rows"] if r["recipe"] == "rotateattention-half"])
keys = {(r["shape"], r["recipe"]) for r in new}
superseded = [r for r in d["rows"] if (r["shape"], r["recipe"]) in keys]
d["rows"] = [r for r in d["rows"] if (r["shape"], r["recipe"]) not in keys] + new


def with_cudnn(rows, run):
    base = {r["resolution"]: r["ms"] for r in rows if r["recipe"] == "sdpa-cudnn"}
    return [dict(r, run=run, model="wan2.1-t2v-14b", ratio_cudnn=r["x_cudnn"], cudnn_ms=base.get(r["resolution"]))
            for r in rows if r["recipe"] != "sdpa-cudnn"]


old = d["e2e"]
history = [dict(r, run=r.get("run", "issue7_call5 (session 4-5)")) for r in old["rows_issue7"]] + old["rows"]
e2e_new = (with_cudnn(load("e2e-h200-session10-call2.json"), "session10_call2")
           + with_cudnn(load("e2e-h200-session10-call5.json"), "session10_call5")
           + with_cudnn(load("e2e-h200-session10-call7.json"), "session10_call7"))
latest = {}
for r in history + e2e_new:  # oldest first: the last row of a (model, resolution, recipe) is its latest
    if r["recipe"] == "sdpa-cudnn":
        continue
    r = dict(r, model=r.get("model", "wan2.1-t2v-14b"), ratio_cudnn=r.get("ratio_cudnn", r["x_cudnn"]))
    latest[(r["model"], r["resolution"], r["recipe"])] = r
d["e2e"] = sorted(latest.values(), key=lambda r: (r["resolution"], -r["ratio_cudnn"]))
d["e2e_history"] = {k: v for k, v in old.items() if k not in ("rows", "rows_issue7")}
d["e2e_history"]["rows"] = history
d["session10"] = {
    "what": "EARLY_QK (next QKᵀ issued before the softmax) on by default for sage2-int8 and the PNQ MXFP4 recipes; "
            "the sage2 pre-pass's Q and V codes without fp64 (exact signs from fp32 FMAs), K's fp64 compares only "
            "near midpoints, subnormal scales brought into range first (wrong codes before); OVERLAP (pre-pass of "
            "head chunk i+1 beside the kernel on chunk i) measured slower and reverted",
    "date": "2026-11-30",
    "command": "bash results/scripts/gpu_calls.sh with each call's variables (results/kernels-h200.md, Session 10)",
    "gpu": c5["gpu"], "driver": c5["driver"], "torch": c5["torch"], "triton": c5["triton"],
    "baselines_call5": c5["baselines"], "baselines_call7": c7["baselines"], "baselines_call1": c1["baselines"],
    "early_pingpong_int4gluon_call1": {"rows": c1["rows"], "baselines": c1["baselines"]},
    "prepass_call2": {"rows": c2["rows"], "baselines": c2["baselines"],
                      "sage_prepass_pieces": load("sage-prepass-pieces-h200-session10-call2.json")},
    "overlap_call3": {"what": "config OVERLAP=2/4/8/20 (commit 6d98d41, reverted in 55416e9): slower",
                      "rows": c3["rows"], "baselines": c3["baselines"]},
    "early_direct_call6": {"what": "EARLY_QK on (then default) and off for the other four MXFP4 recipes",
                           "rows": c6["rows"], "baselines": c6["baselines"]},
    "int4_prepass_pieces_call8": load("int4-prepass-pieces-h200-session10-call8.json"),
    "delta_s_sweep_call9": load("delta-s-sweep-h200-session10-call9.json"),
    "int4_call10": {"what": "rotateattention-half with the ΔS table's new tiling, Triton and Gluon (GLUON=true) kernels",
                    "rows": c10["rows"], "baselines": c10["baselines"]},
    "superseded_rows": superseded,
}
json.dump(d, open(path, "w"), indent=1)
print(len(new), "rows in,", len(superseded), "superseded;", len(d["e2e"]), "e2e rows (latest)")
