"""Helpers of the sNN_update_json.py scripts: fold a session's device runs into results/kernels-h200.json."""


def replace_rows(d: dict, new: list) -> list:
    """Put `new` bench rows in d["rows"] in place of those of the same (shape, recipe); return the replaced ones."""
    keys = {(r["shape"], r["recipe"]) for r in new}
    assert len(keys) == len(new), "one row per (shape, recipe)"
    superseded = [r for r in d["rows"] if (r["shape"], r["recipe"]) in keys]
    d["rows"] = [r for r in d["rows"] if (r["shape"], r["recipe"]) not in keys] + new
    return superseded


def replace_e2e(d: dict, rows: list, run: str) -> list:
    """Fold `bench e2e` rows (with their sdpa-cudnn baselines) into d["e2e"] in place of the same (model,
    resolution, recipe), the replaced ones appended to d["e2e_history"]["rows"]; return the new rows."""
    base = {r["resolution"]: r["ms"] for r in rows if r["recipe"] == "sdpa-cudnn"}
    new = [dict(r, run=run, model="wan2.1-t2v-14b", ratio_cudnn=r["x_cudnn"], cudnn_ms=base[r["resolution"]])
           for r in rows if r["recipe"] != "sdpa-cudnn"]
    replaced = {(r["model"], r["resolution"], r["recipe"]) for r in new}
    d["e2e_history"]["rows"] += [r for r in d["e2e"] if (r["model"], r["resolution"], r["recipe"]) in replaced]
    d["e2e"] = sorted([r for r in d["e2e"] if (r["model"], r["resolution"], r["recipe"]) not in replaced] + new,
                      key=lambda r: (r["resolution"], -r["ratio_cudnn"]))
    return new


def run(c: dict, what: str | None = None) -> dict:
    """A bench run's rows and baselines (and what it was)."""
    out = {"rows": c["rows"], "baselines": c["baselines"]}
    return dict(out, what=what) if what else out
