"""Folds session 5's device runs into results/kernels-h200.json: replaces the (shape, recipe) rows they
re-measured (old rows kept under session5.superseded_rows), adds the session's e2e rows and records
the commands. Usage: python3 results/scripts/s5_update_json.py"""

import json

path = "results/kernels-h200.json"
d = json.load(open(path))
k4 = json.load(open("results/bench-kernels-h200-session5.json"))       # call 4: wan-480p, wan-720p
hy = json.load(open("results/bench-hunyuan-h200-session5.json"))       # call 5: hunyuan-720p
c2 = json.load(open("results/bench-kernels-h200-session5-call2.json"))  # call 2: the MX ablation rows
dr = json.load(open("results/draft-h200-session5.json"))[0]            # call 5: draft, default config
e2e = json.load(open("results/e2e-h200-session5.json"))                # call 4: e2e 720p

new = []
for src, run in ((k4, "session5_call4"), (hy, "session5_call5")):
    for r in src["rows"]:
        new.append(dict(r, run=run))
for r in c2["rows"]:
    if r["recipe"] == "mxattention[no-P-quant]":
        new.append(dict(r, run="session5_call2"))
for r in dr["rows"]:
    flop = 4.0 * 40 * 75600 ** 2 * 128
    new.append(dict(r, tflops=flop / r["total_ms"] / 1e9, kernel_tflops=flop / r["kernel_ms"] / 1e9, B=1, H=40,
                    N=75600, D=128, inputs="structured (bench/draft.py)", run="session5_call5"))
keys = {(r["shape"], r["recipe"]) for r in new}
superseded = [r for r in d["rows"] if (r["shape"], r["recipe"]) in keys]
d["rows"] = [r for r in d["rows"] if (r["shape"], r["recipe"]) not in keys] + new
for r in e2e:
    d["e2e"]["rows"].append(dict(r, run="session5_call4"))
d["session5"] = {
    "what": "fewer instructions per score in the MXFP4 and INT4 P̃ paths, the MX and INT4 pre-passes in Triton "
            "tile passes, the draft route by topk; rows (shape, recipe) re-measured here replace the older ones",
    "date": "2026-11-29",
    "commands": {
        "call1": "bash results/scripts/s5_gpu1.sh (tests; results/breakdown-h200-session5.json)",
        "call2": "bash results/scripts/s5_gpu2.sh (results/bench-kernels-h200-session5-call2.json, draft-h200-session5-call2.json)",
        "call3": "bash results/scripts/s5_gpu3.sh (results/bench-kernels-h200-session5-call3.json)",
        "call4": "bash results/scripts/s5_gpu4.sh (results/bench-kernels-h200-session5.json, e2e-h200-session5.json)",
        "call5": "bash results/scripts/s5_gpu5.sh (results/draft-h200-session5.json, bench-hunyuan-h200-session5.json)",
    },
    "baselines": k4["baselines"] + hy["baselines"] + [dict(b, run="session5_call5") for b in dr["baselines"]],
    "draft_pair16": json.load(open("results/draft-h200-session5.json"))[1]["rows"],
    "superseded_rows": superseded,
}
json.dump(d, open(path, "w"), indent=1)
print(len(new), "rows in,", len(superseded), "superseded")
