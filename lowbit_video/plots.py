"""PNG plots of a comparison (matplotlib, Agg backend; every file written atomically).

* `plot_metric_bars(comp, model, path)`: one panel per metric column that has a number, its y-axis
  from zero; one bar per quantized recipe (best one highlighted, 'n/a' where unavailable); per-video metrics (VBench,
  adherence) draw the baseline's value as a dashed reference line; paired metrics (Cosine, SSIM,
  PSNR, LPIPS) are measured against the baseline, so it has no bar or line there.
* `plot_frame_grid(comp, model, prompt, seed, path, frames=6)`: rows = the baseline then each recipe,
  columns = evenly spaced frames (exact frames from generate.load_run_frames), labelled with the
  recipe (and its PSNR for that video) and the frame index.
* `write_plots(comp, out_dir, picks=None, count=3, frames=6)`: both kinds for every model; returns
  the paths written: `<model>-metrics.png`, `<model>-<prompt-slug>-seed-<s>-frames.png`.
* `select_pairs(mc, picks, count)`: picks are "PROMPT[:SEED]" (PROMPT: the exact prompt, its slug,
  or a case-insensitive substring); default the first `count` baseline (prompt, seed) pairs.
"""

from __future__ import annotations

import io
import math
import os
from pathlib import Path
from typing import Sequence

import numpy as np

from . import runstore
from .compare import Comparison, ModelComparison, fmt_value, higher_is_better, is_number, is_paired, label
from .errors import UserError

BAR = "#8da0cb"
BEST = "#fc8d62"
BASE = "#444444"


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: str | os.PathLike, dpi: int = 100) -> Path:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    _plt().close(fig)
    runstore.atomic_write_bytes(path, buf.getvalue())
    return Path(path)


def plot_metric_bars(comp: Comparison, model: str, path: str | os.PathLike) -> Path:
    plt = _plt()
    mc = comp.model(model)
    base = mc.baseline_row
    cols = [c for c in mc.columns
            if any(is_number(r.values.get(c)) for r in mc.rows)
            or (base is not None and not is_paired(c) and is_number(base.values.get(c)))]
    recipes = [r.recipe for r in mc.rows]
    ncols = min(4, max(1, len(cols)))
    nrows = max(1, math.ceil(len(cols) / ncols))
    width = max(3.0, 0.55 * len(recipes) + 1.6)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, 3.3 * nrows), squeeze=False)
    for ax in axes.flat[len(cols):]:
        ax.axis("off")
    if not cols:
        axes[0][0].text(0.5, 0.5, "no metric has a value", ha="center", va="center")
    x = np.arange(len(recipes))
    for ax, c in zip(axes.flat, cols):
        vals = [r.values.get(c) for r in mc.rows]
        nums = [float(v) for v in vals if is_number(v)]
        ref = base.values.get(c) if (base is not None and not is_paired(c)) else None
        ref = float(ref) if is_number(ref) else None
        heights = [float(v) if is_number(v) else 0.0 for v in vals]
        colors = [BEST if mc.best.get(c) == rec else BAR for rec in recipes]
        ax.bar(x, heights, color=colors, width=0.7)
        # bars start at zero: a cut axis makes a 1 % difference look like a factor
        span = nums + ([ref] if ref is not None else []) + [0.0]
        lo, hi = min(span), max(span)
        pad = 0.12 * (hi - lo) or 0.05
        bottom = lo - pad if lo < 0 else 0.0
        ax.set_ylim(bottom, hi + pad)
        for xi, v in zip(x, vals):
            if is_number(v):
                ax.text(xi, float(v), fmt_value(c, v), ha="center", va="bottom", fontsize=7)
            else:
                ax.text(xi, bottom + (hi + pad - bottom) * 0.05, "n/a", ha="center", va="bottom", fontsize=8, color="gray")
        arrow = "↑" if higher_is_better(c) else "↓"
        title = f"{label(c)} {arrow}"
        if ref is not None:
            ax.axhline(ref, color=BASE, linestyle="--", linewidth=1)
            title += f"\n(dashed: {comp.baseline} {fmt_value(c, ref)})"
        elif is_paired(c):
            title += f"\n(against {comp.baseline})"
        ax.set_title(title, fontsize=9)
        ax.set_xlim(-0.9, max(len(recipes) - 1, 0) + 0.9)
        ax.set_xticks(x)
        ax.set_xticklabels(recipes, rotation=35, ha="right", fontsize=7)
        ax.tick_params(axis="y", labelsize=7)
    fig.suptitle(f"{mc.model}: metrics per recipe ({len(mc.pairs)} (prompt, seed) pairs; "
                 f"highlighted: best quantized)", fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


def select_pairs(mc: ModelComparison, picks: Sequence[str] | None = None, count: int = 3) -> list[tuple[str, int]]:
    pairs = list(mc.pairs)
    if not picks:
        return pairs[:max(0, count)]
    chosen: list[tuple[str, int]] = []
    for spec in picks:
        text, seed = spec, None
        if ":" in spec:
            head, tail = spec.rsplit(":", 1)
            try:
                text, seed = head, int(tail)
            except ValueError:
                pass
        t = text.strip().lower()
        hits = [(p, s) for p, s in pairs
                if (seed is None or s == seed) and (p == text or runstore.prompt_slug(p) == text or t in p.lower())]
        if not hits:
            some = "; ".join(f"{p}:{s}" for p, s in pairs[:3])
            raise UserError(f"--grid {spec!r} matches no (prompt, seed) of {mc.model} with a baseline run (e.g. {some})")
        chosen += [h for h in hits if h not in chosen]
    return chosen


def _frame_indices(t: int, k: int) -> list[int]:
    return sorted(set(int(round(i)) for i in np.linspace(0, t - 1, min(k, t))))


def plot_frame_grid(comp: Comparison, model: str, prompt: str, seed: int, path: str | os.PathLike,
                    frames: int = 6) -> Path:
    from .generate import load_run_frames

    plt = _plt()
    mc = comp.model(model)
    recipes = [comp.baseline] + [r.recipe for r in mc.rows]
    clips = []
    for rec in recipes:
        run = mc.runs.get((rec, prompt, seed))
        clip = None
        if run is not None:
            try:
                clip, _ = load_run_frames(run.dir)
            except (OSError, ValueError):
                clip = None
        lab = rec
        if run is not None and rec != comp.baseline:
            psnr = run.metric("psnr")
            if is_number(psnr):
                lab += f"\nPSNR {psnr:.2f}"
        clips.append((lab, clip))
    t = max((c.shape[0] for _, c in clips if c is not None), default=1)
    idx = _frame_indices(t, frames)
    cell = 1.5
    fig, axes = plt.subplots(len(clips), len(idx), figsize=(cell * len(idx) + 1.2, cell * len(clips) + 0.6),
                             squeeze=False)
    for r, (lab, clip) in enumerate(clips):
        for j, fi in enumerate(idx):
            ax = axes[r][j]
            ax.set_xticks([])
            ax.set_yticks([])
            for s in ax.spines.values():
                s.set_visible(False)
            if clip is not None and fi < clip.shape[0]:
                ax.imshow(clip[fi], interpolation="nearest")
            else:
                ax.text(0.5, 0.5, "no run" if clip is None else "–", ha="center", va="center",
                        fontsize=8, color="gray", transform=ax.transAxes)
            if r == 0:
                ax.set_title(f"frame {fi}", fontsize=8)
            if j == 0:
                ax.set_ylabel(lab, fontsize=8, rotation=0, ha="right", va="center")
    short = prompt if len(prompt) <= 70 else prompt[:69] + "…"
    fig.suptitle(f"{mc.model} · seed {seed} · {short}", fontsize=9)
    fig.tight_layout()
    return _save(fig, path)


def write_plots(comp: Comparison, out_dir: str | os.PathLike, picks: Sequence[str] | None = None,
                count: int = 3, frames: int = 6) -> list[Path]:
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"--plots {out_dir}: exists and is not a folder")
    written: list[Path] = []
    for mc in comp.models:
        stem = runstore.component(mc.model)
        written.append(plot_metric_bars(comp, mc.model, out_dir / f"{stem}-metrics.png"))
        for prompt, seed in select_pairs(mc, picks, count):
            name = f"{stem}-{runstore.prompt_slug(prompt)}-seed-{seed}-frames.png"
            written.append(plot_frame_grid(comp, mc.model, prompt, seed, out_dir / name, frames=frames))
    return written


__all__ = ["plot_frame_grid", "plot_metric_bars", "select_pairs", "write_plots"]
