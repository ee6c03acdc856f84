"""Tabulate the speed of `lowbit-video generate` runs: per recipe, wall time per clip, transformer
time per denoising step and its ratio to fp16, peak GPU memory, and the attention-call accounting.

    python benchmarks/generate_report.py RUNS [--json]

Reads every complete run's meta.json under RUNS (written by `generate`: timings and
attention_calls). Per recipe it takes the run of its last seed, so a seed generated first absorbs
the one-time costs (kernel compilation, allocator warm-up) and the figures are those of a warm
process; the per-step time is the median over that run's denoising steps. Ratios are to the fp16
runs of the same model in the same folder.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from lowbit_video import runstore


def rows(root: str | Path) -> list[dict]:
    """One row per (model, recipe): the figures of its last-seed run."""
    last: dict[tuple[str, str], dict] = {}
    for run in runstore.find_runs([root]):
        meta = runstore.read_meta(run) or {}
        model = (meta.get("model") or {}).get("name")
        recipe = (meta.get("recipe") or {}).get("name")
        t = meta.get("timings") or {}
        if not model or not recipe or not t.get("transformer_s_per_step"):
            continue
        key = (model, recipe)
        if key not in last or meta.get("seed", 0) >= last[key]["seed"]:
            calls = meta.get("attention_calls") or {}
            last[key] = {"model": model, "recipe": recipe, "seed": meta.get("seed"),
                         "size": meta.get("size"), "steps": meta.get("steps"),
                         "clip_s": t.get("sample_s"), "step_s": statistics.median(t["transformer_s_per_step"]),
                         "peak_memory_gib": t.get("peak_memory_gib"),
                         "calls": {k: calls.get(k) for k in ("quantized", "high", "fallback", "engine")
                                   if k in calls}}
    out = sorted(last.values(), key=lambda r: (r["model"], r["recipe"] != "fp16", r["recipe"]))
    for r in out:
        base = last.get((r["model"], "fp16"))
        r["x_fp16"] = round(base["step_s"] / r["step_s"], 3) if base else None
    return out


def markdown(table: list[dict]) -> str:
    lines = ["| model | recipe | clip (s) | transformer per step (s) | step speed vs fp16 | peak memory (GiB) "
             "| attention calls: quantized / 16-bit / fallback |", "|---|---|---|---|---|---|---|"]
    for r in table:
        c = r["calls"]
        calls = " / ".join(str(c.get(k, 0)) for k in ("quantized", "high", "fallback"))
        ratio = "" if r["x_fp16"] is None else f"{r['x_fp16']:.3f}×"
        lines.append(f"| {r['model']} | {r['recipe']} | {r['clip_s']:.1f} | {r['step_s']:.3f} | {ratio} | "
                     f"{r['peak_memory_gib']} | {calls} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("runs", help="folder of generate runs")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    a = ap.parse_args(argv)
    if not Path(a.runs).is_dir():
        print(f"error: {a.runs} is not a folder", file=sys.stderr)
        return 2
    table = rows(a.runs)
    print(json.dumps(table, indent=1) if a.json else markdown(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
