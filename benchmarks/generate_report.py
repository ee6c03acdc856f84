"""Tabulate the speed of `lowbit-video generate` runs: per recipe, wall time per clip, transformer
time per denoising step and its ratio to fp16, peak GPU memory, and the attention-call accounting.

    python benchmarks/generate_report.py RUNS [--json]

Reads every complete run's meta.json under RUNS (written by `generate`: timings and
attention_calls). Per recipe it takes the run of its last seed. Two step times:
* quantized step: the median over the steps whose attention the recipe quantized (its precision
  policy keeps some steps in 16 bit: a recipe's speed-up is measured on the others);
* mean step: the mean over the steps, the policy included (what a clip of that many steps gets),
  leaving out the first step and the first quantized step: they absorb one-time costs (kernel
  compilation, cuDNN and allocator warm-up), paid once per process, not per clip.
Ratios are fp16's time over the recipe's, fp16 from the same model in the same folder, compiled when
the recipe's runs were (`generate --compile`: meta.json's `compile`; such rows read "<recipe> (compiled)").
Compiled blocks do not count their attention calls: a compiled run's quantized steps are those its
policy planned to quantize (attention_calls.planned_quantized_steps), and its calls column says so.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from lowbit_video import runstore


def rows(root: str | Path) -> list[dict]:
    """One row per (model, recipe, compiled or not): the figures of its last-seed run."""
    last: dict[tuple[str, str, bool], dict] = {}
    for run in runstore.find_runs([root]):
        meta = runstore.read_meta(run) or {}
        model = (meta.get("model") or {}).get("name")
        recipe = (meta.get("recipe") or {}).get("name")
        t = meta.get("timings") or {}
        if not model or not recipe or not t.get("transformer_s_per_step"):
            continue
        compiled = bool(meta.get("compile"))
        key = (model, recipe, compiled)
        if key not in last or meta.get("seed", 0) >= last[key]["seed"]:
            calls = meta.get("attention_calls") or {}
            per_step = t["transformer_s_per_step"]
            counted = calls.get("counted", True)
            if counted:
                by_step = calls.get("by_step") or {}
                is_quantized = [bool((by_step.get(str(i)) or {}).get("quantized")) for i in range(len(per_step))]
            else:
                planned = set(calls.get("planned_quantized_steps") or ())
                is_quantized = [i in planned for i in range(len(per_step))]
            quantized = [s for s, q in zip(per_step, is_quantized) if q]
            warm_up = {0, is_quantized.index(True)} if any(is_quantized) else {0}
            warm = [s for i, s in enumerate(per_step) if i not in warm_up]
            last[key] = {"model": model, "recipe": recipe, "compiled": compiled, "seed": meta.get("seed"),
                         "size": meta.get("size"), "steps": len(per_step), "quantized_steps": len(quantized),
                         "clip_s": t.get("sample_s"),
                         "quantized_step_s": statistics.median(quantized) if quantized else None,
                         "mean_step_s": statistics.fmean(warm or per_step), "step_s": per_step,
                         "peak_memory_gib": t.get("peak_memory_gib"),
                         "calls": {k: calls.get(k) for k in ("quantized", "high", "fallback", "engine")
                                   if k in calls} if counted else None}
    out = sorted(last.values(), key=lambda r: (r["model"], r["compiled"], r["recipe"] != "fp16", r["recipe"]))
    for r in out:
        base = last.get((r["model"], "fp16", r["compiled"]))
        fp16_step = base["mean_step_s"] if base else None  # fp16 has no policy: every warm step costs the same
        r["x_fp16_quantized_step"] = (round(fp16_step / r["quantized_step_s"], 3)
                                      if fp16_step and r["quantized_step_s"] else None)
        r["x_fp16_mean_step"] = round(base["mean_step_s"] / r["mean_step_s"], 3) if base else None
    return out



def markdown(table: list[dict]) -> str:
    def x(v):
        return "" if v is None else f"{v:.3f}×"

    def sec(v, digits=3):
        return "" if v is None else f"{v:.{digits}f}"

    lines = ["| model | recipe | steps (quantized) | clip (s) | quantized step (s) | × fp16 | mean step (s) | × fp16 "
             "| peak memory (GiB) | attention calls: quantized (of them on the engine) / 16-bit / fallback |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in table:
        c = r["calls"]
        calls = ("not counted (compiled)" if c is None else
                 f"{c.get('quantized', 0)} ({c.get('engine', 0)}) / {c.get('high', 0)} / {c.get('fallback', 0)}")
        recipe = f"{r['recipe']} (compiled)" if r["compiled"] else r["recipe"]
        lines.append(f"| {r['model']} | {recipe} | {r['steps']} ({r['quantized_steps']}) | {sec(r['clip_s'], 1)} "
                     f"| {sec(r['quantized_step_s'])} | {x(r['x_fp16_quantized_step'])} | {sec(r['mean_step_s'])} "
                     f"| {x(r['x_fp16_mean_step'])} | {r['peak_memory_gib']} | {calls} |")
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
