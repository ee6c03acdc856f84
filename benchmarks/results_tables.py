"""Markdown tables of results/kernels-h200.md and results/e2e-h200.md from the JSON their bench commands print.

`lowbit-video bench kernels --json` prints one object (rows per shape and recipe, baselines per shape);
`lowbit-video bench e2e --json` prints a list of rows (per model, resolution and recipe, the cuDNN forward first).
This script lays them out as the results pages do: one row per recipe, one column pair (ms, × cuDNN) per shape or
model and resolution; for kernels also the calls issued back to back and under sustained load (where the run timed
them), the SM clock under sustained load, and the pre-pass / kernel split at one shape; for e2e also the GPU time
of one forward by kind of kernel (where the run profiled it).

Examples:
    python benchmarks/results_tables.py kernels results/kernels-h200.json
    python benchmarks/results_tables.py kernels results/kernels-h200.json --split-shape wan14b-480p
    python benchmarks/results_tables.py e2e results/e2e-h200.json
"""

from __future__ import annotations

import argparse
import json
import sys

BASELINE_NAMES = {"sdpa-cudnn": "SDPA cuDNN bf16", "sdpa-flash": "SDPA flash bf16",
                  "sageattention-1.0.6": "sageattention 1.0.6"}


def _ordered(items):
    """The distinct items in first-seen order."""
    return list(dict.fromkeys(items))


# (baseline ms key, row ms key, row ratio key, first column's title) of each timing `bench kernels` reports: each
# call from an idle GPU, calls issued back to back ("queued"), and back to back once the GPU runs at the clock its
# power limit holds ("sustained")
TIMINGS = {"idle": ("ms", "total_ms", "ratio_cudnn", "recipe"),
           "queued": ("queued_ms", "queued_ms", "ratio_cudnn_queued", "recipe, queued"),
           "sustained": ("sustained_ms", "sustained_ms", "ratio_cudnn_sustained", "recipe, sustained")}


def kernels_table(info: dict, timing: str = "idle") -> str:
    """Every recipe at every shape the run timed this way: ms and the ratio to SDPA cuDNN timed the same way in the
    same run ("" when no row has the timing). The idle-start table also names the kernel that ran."""
    base_key, ms_key, ratio_key, title = TIMINGS[timing]
    rows = [r for r in info["rows"] if r.get(ms_key) is not None]
    if not rows:
        return ""
    baselines = [b for b in info["baselines"] if b.get(base_key) is not None]
    with_kernel = timing == "idle"
    shapes = _ordered([b["shape"] for b in baselines] + [r["shape"] for r in rows])
    cudnn = {b["shape"]: b[base_key] for b in baselines if b["backend"] == "sdpa-cudnn"}
    lines = [f"| {title} | " + ("kernel | " if with_kernel else "") + " | ".join(f"{s} ms | × cuDNN" for s in shapes)
             + " |", "|---|" + ("---|" if with_kernel else "") + "---|---|" * len(shapes)]
    for backend in _ordered(b["backend"] for b in baselines):
        cells = []
        for s in shapes:
            b = next((b for b in baselines if b["shape"] == s and b["backend"] == backend), None)
            cells += (["—", "—"] if b is None else
                      [f"{b[base_key]:.2f}", f"{cudnn[s] / b[base_key]:.2f}×" if s in cudnn else "—"])
        lines.append(f"| {BASELINE_NAMES.get(backend, backend)} | " + ("| " if with_kernel else "") + " | ".join(cells)
                     + " |")
    for recipe in _ordered(r["recipe"] for r in rows):
        cells, kernel = [], ""
        for s in shapes:
            r = next((r for r in rows if r["shape"] == s and r["recipe"] == recipe), None)
            if r is None:
                cells += ["—", "—"]
                continue
            kernel = r.get("kernel") or kernel
            ratio = r.get(ratio_key)
            cells += [f"{r[ms_key]:.2f}", "—" if ratio is None else f"{ratio:.2f}×"]
        lines.append(f"| `{recipe}` | " + (f"{kernel} | " if with_kernel else "") + " | ".join(cells) + " |")
    return "\n".join(lines)


def clock_table(info: dict) -> str:
    """The SM clock (MHz) at the end of each sustained timing, per backend or recipe and shape ("" when the run
    recorded none): what the power limit held under that load."""
    timed = [dict(b, recipe=BASELINE_NAMES.get(b["backend"], b["backend"])) for b in info["baselines"]
             if b.get("sustained_sm_mhz")] + [dict(r, recipe=f"`{r['recipe']}`") for r in info["rows"]
                                               if r.get("sustained_sm_mhz")]
    if not timed:
        return ""
    shapes = _ordered(r["shape"] for r in timed)
    lines = ["| SM clock under sustained load, MHz | " + " | ".join(shapes) + " |", "|---|" + "---|" * len(shapes)]
    for name in _ordered(r["recipe"] for r in timed):
        cells = [next((str(r["sustained_sm_mhz"]) for r in timed if r["recipe"] == name and r["shape"] == s), "—")
                 for s in shapes]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def split_table(info: dict, shape: str) -> str:
    """Pre-pass and kernel timed on their own at one shape (the draft recipes' pre-pass includes the route)."""
    lines = ["| recipe | pre-pass ms | kernel ms | kernel TFLOP/s | kernel alone × cuDNN |", "|---|---|---|---|---|"]
    cudnn = next((b["ms"] for b in info["baselines"] if b["shape"] == shape and b["backend"] == "sdpa-cudnn"), None)
    for r in info["rows"]:
        if r["shape"] != shape:
            continue
        alone = "—" if cudnn is None else f"{cudnn / r['kernel_ms']:.2f}×"
        lines.append(f"| `{r['recipe']}` | {r['prepass_ms']:.2f} | {r['kernel_ms']:.2f} | {r['kernel_tflops']:.0f} | "
                     f"{alone} |")
    return "\n".join(lines)


def e2e_table(rows: list) -> str:
    """Every recipe at every model and resolution: forward ms and the ratio to the all-cuDNN forward of the same
    run (rows without a model are the 14B's, the only model the command had before)."""
    col = lambda r: f"{r.get('model', 'wan2.1-t2v-14b')} {r['resolution']}"  # noqa: E731
    cols = _ordered(col(r) for r in rows)
    lines = ["| recipe | " + " | ".join(f"{c} ms | × cuDNN" for c in cols) + " |", "|---|" + "---|---|" * len(cols)]
    for recipe in _ordered(r["recipe"] for r in rows):
        cells = []
        for c in cols:
            r = next((r for r in rows if col(r) == c and r["recipe"] == recipe), None)
            cells += ["—", "—"] if r is None else [f"{r['ms']:.2f}", f"{r['x_cudnn']:.3f}"]
        name = "SDPA cuDNN bf16 (baseline)" if recipe == "sdpa-cudnn" else f"`{recipe}`"
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def e2e_breakdown_table(rows: list) -> str:
    """GPU time of one forward by kind of kernel (`bench e2e --breakdown`), one column per row that has it ("" when
    none has), with the span of that forward's GPU work and the time the GPU sat idle in it where a row has them."""
    rows = [r for r in rows if r.get("gpu_ms_by_kind")]
    if not rows:
        return ""
    # the kinds in the order of the row with the most of them (bench e2e writes them in one fixed order)
    kinds = _ordered(k for r in sorted(rows, key=lambda r: -len(r["gpu_ms_by_kind"])) for k in r["gpu_ms_by_kind"])
    name = lambda r: "SDPA cuDNN bf16" if r["recipe"] == "sdpa-cudnn" else f"`{r['recipe']}`"  # noqa: E731
    lines = ["| GPU ms of one forward | " + " | ".join(f"{name(r)} ({r['resolution']})" for r in rows) + " |",
             "|---|" + "---|" * len(rows)]
    for kind in kinds:
        lines.append(f"| {kind} | " + " | ".join(
            f"{r['gpu_ms_by_kind'][kind]['ms']:.2f}" if kind in r["gpu_ms_by_kind"] else "—" for r in rows) + " |")
    lines.append("| total (kernels) | " + " | ".join(
        f"{sum(k['ms'] for k in r['gpu_ms_by_kind'].values()):.2f}" for r in rows) + " |")
    if any("gpu_span_ms" in r for r in rows):
        cell = lambda r, key: f"{r[key]:.2f}" if key in r else "—"  # noqa: E731
        lines.append("| GPU work, first start to last end | " + " | ".join(cell(r, "gpu_span_ms") for r in rows) + " |")
        lines.append("| GPU idle within it | " + " | ".join(cell(r, "gpu_idle_ms") for r in rows) + " |")
    lines.append("| forward, CUDA events (median) | " + " | ".join(f"{r['ms']:.2f}" for r in rows) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kind", choices=("kernels", "e2e"), help="which command's JSON")
    ap.add_argument("json", help="the JSON file (`lowbit-video bench kernels --json` or `bench e2e --json` output)")
    ap.add_argument("--split-shape", default="wan14b-720p", help="kernels: the shape of the pre-pass / kernel table")
    args = ap.parse_args(argv)
    try:
        with open(args.json, encoding="utf-8") as f:
            data = json.load(f)
        if args.kind == "kernels":
            tables = (kernels_table(data), kernels_table(data, "queued"), kernels_table(data, "sustained"),
                      clock_table(data), split_table(data, args.split_shape))
            text = "\n\n".join(t for t in tables if t)
        else:
            text = "\n\n".join(t for t in (e2e_table(data), e2e_breakdown_table(data)) if t)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        print(f"error: {args.json}: not a readable `bench {args.kind} --json` output ({type(exc).__name__}: {exc})",
              file=sys.stderr)
        return 2
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
