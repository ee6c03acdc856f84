"""Folds session 6's device run (bash results/scripts/s6_gpu1.sh) into results/kernels-h200.json: the
wan-720p rows it re-measured replace the older ones (kept under session6.superseded_rows), the 480p e2e rows
are added, and the Gluon probe and the draft sweep are recorded. Usage: python3 results/scripts/s6_update_json.py"""

import json

path = "results/kernels-h200.json"
d = json.load(open(path))
bk = json.load(open("results/bench-kernels-h200-session6.json"))
e2e = json.load(open("results/e2e480-h200-session6.json"))
probe = json.load(open("results/gluon-probe-h200-session6.json"))
sweep = json.load(open("results/draft-sweep-h200-session6.json"))

new = [dict(r, run="session6_call1") for r in bk["rows"]]
for r in sweep["rows"]:
    flop = 4.0 * 40 * 75600 ** 2 * 128
    new.append(dict(r, tflops=flop / r["total_ms"] / 1e9, kernel_tflops=flop / r["kernel_ms"] / 1e9, B=1, H=40,
                    N=75600, D=128, inputs="structured (bench/draft.py)", run="session6_call1"))
keys = {(r["shape"], r["recipe"]) for r in new}
superseded = [r for r in d["rows"] if (r["shape"], r["recipe"]) in keys]
d["rows"] = [r for r in d["rows"] if (r["shape"], r["recipe"]) not in keys] + new
for r in e2e:
    d["e2e"]["rows"].append(dict(r, run="session6_call1"))
d["session6"] = {
    "what": "stale rows re-measured (rotateattention-interleaved/-full at wan-720p, 480p e2e, the draft "
            "error-latency sweep on the session-5 kernel) and a Gluon probe of plain FP8 attention with TMA and "
            "explicitly asynchronous wgmma",
    "date": "2026-11-29",
    "command": "bash results/scripts/s6_gpu1.sh (results/gluon-probe-h200-session6.json, "
               "bench-kernels-h200-session6.json, e2e480-h200-session6.json, draft-sweep-h200-session6.json)",
    "baselines": bk["baselines"] + [dict(b, run="session6_call1") for b in sweep["baselines"]],
    "gluon_probe": probe,
    "draft_sweep": sweep["sweep"],
    "draft_equal_time": sweep["equal_time"],
    "superseded_rows": superseded,
}
json.dump(d, open(path, "w"), indent=1)
print(len(new), "rows in,", len(superseded), "superseded")
