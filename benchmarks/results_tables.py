"""Markdown tables of results/kernels-h200.md and results/e2e-h200.md from the JSON their bench commands print.

`lowbit-video bench kernels --json` prints one object (rows per shape and recipe, baselines per shape);
`lowbit-video bench e2e --json` prints a list of rows (per model, resolution and recipe, the cuDNN forward first).
This script lays them out as the results pages do: one row per recipe, one column pair (ms, × cuDNN) per shape or
model and resolution; for kernels also the calls issued back to back (where the run timed them) and the pre-pass /
kernel split at one shape.

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


def kernels_table(info: dict) -> str:
    """Every recipe at every shape: total ms and the ratio to SDPA cuDNN of the same run."""
    shapes = _ordered([b["shape"] for b in info["baselines"]] + [r["shape"] for r in info["rows"]])
    cudnn = {b["shape"]: b["ms"] for b in info["baselines"] if b["backend"] == "sdpa-cudnn"}
    head = "| recipe | kernel | " + " | ".join(f"{s} ms | × cuDNN" for s in shapes) + " |"
    lines = [head, "|---|---|" + "---|---|" * len(shapes)]
    for backend in _ordered(b["backend"] for b in info["baselines"]):
        cells = []
        for s in shapes:
            b = next((b for b in info["baselines"] if b["shape"] == s and b["backend"] == backend), None)
            cells += ["—", "—"] if b is None else [f"{b['ms']:.2f}", f"{cudnn[s] / b['ms']:.2f}×" if s in cudnn else "—"]
        lines.append(f"| {BASELINE_NAMES.get(backend, backend)} | | " + " | ".join(cells) + " |")
    for recipe in _ordered(r["recipe"] for r in info["rows"]):
        cells, kernel = [], ""
        for s in shapes:
            r = next((r for r in info["rows"] if r["shape"] == s and r["recipe"] == recipe), None)
            if r is None:
                cells += ["—", "—"]
                continue
            kernel = r.get("kernel") or kernel
            ratio = r.get("ratio_cudnn")
            cells += [f"{r['total_ms']:.2f}", "—" if ratio is None else f"{ratio:.2f}×"]
        lines.append(f"| `{recipe}` | {kernel} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def queued_table(info: dict) -> str:
    """The same calls issued back to back (`queued_ms`, as inside a model step), at the shapes the run timed that
    way: ms and the ratio to cuDNN timed the same way ("" when no row has it)."""
    rows = [r for r in info["rows"] if r.get("queued_ms") is not None]
    if not rows:
        return ""
    shapes = _ordered(r["shape"] for r in rows)
    cudnn = {b["shape"]: b["queued_ms"] for b in info["baselines"]
             if b["backend"] == "sdpa-cudnn" and b.get("queued_ms") is not None}
    lines = ["| recipe, queued | " + " | ".join(f"{s} ms | × cuDNN" for s in shapes) + " |",
             "|---|" + "---|---|" * len(shapes)]
    lines.append("| SDPA cuDNN bf16 | " + " | ".join(
        f"{cudnn[s]:.2f} | 1.00×" if s in cudnn else "— | —" for s in shapes) + " |")
    for recipe in _ordered(r["recipe"] for r in rows):
        cells = []
        for s in shapes:
            r = next((r for r in rows if r["shape"] == s and r["recipe"] == recipe), None)
            ratio = None if r is None else r.get("ratio_cudnn_queued")
            cells += ["—", "—"] if r is None else [f"{r['queued_ms']:.2f}", "—" if ratio is None else f"{ratio:.2f}×"]
        lines.append(f"| `{recipe}` | " + " | ".join(cells) + " |")
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
        text = ("\n\n".join(t for t in (kernels_table(data), queued_table(data), split_table(data, args.split_shape)) if t)
                if args.kind == "kernels" else e2e_table(data))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        print(f"error: {args.json}: not a readable `bench {args.kind} --json` output ({type(exc).__name__}: {exc})",
              file=sys.stderr)
        return 2
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
