"""The profile as a PNG: one panel per attention type, blocks down, denoising steps across, colour = mean rel-L2
of the calls of the cell (log scale, one colour scale for every panel; blank: no profiled call)."""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np

from .. import runstore
from .cells import Profile


def grid(profile: Profile, attention_type: str) -> np.ndarray:
    """(blocks, steps) mean rel-L2 of `attention_type`'s cells, NaN where there is none."""
    g = np.full((profile.num_blocks, profile.num_steps), np.nan)
    for c in profile.cells:
        if c.attention_type == attention_type and c.block < profile.num_blocks and c.step < profile.num_steps:
            g[c.block, c.step] = c.rel_l2_mean
    return g


def write_heatmap(profile: Profile, path: str | os.PathLike, *, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm

    kinds = profile.attention_types or ["self"]
    grids = [grid(profile, k) for k in kinds]
    values = np.concatenate([g[np.isfinite(g) & (g > 0)] for g in grids]) if grids else np.array([])
    norm = LogNorm(vmin=float(values.min()), vmax=float(max(values.max(), values.min() * 1.0001))) if values.size else None
    width = min(4 + 0.35 * profile.num_steps, 24)
    height = min(1.5 + 0.3 * profile.num_blocks, 14)
    fig, axes = plt.subplots(1, len(kinds), figsize=(width * len(kinds), height), squeeze=False)
    image = None
    for ax, kind, g in zip(axes[0], kinds, grids):
        image = ax.imshow(np.ma.masked_invalid(g), aspect="auto", cmap="viridis", norm=norm, origin="upper",
                          interpolation="nearest")
        ax.set_title(f"{kind} attention")
        ax.set_xlabel("denoising step")
        ax.set_ylabel("block")
        if profile.num_steps <= 30:  # integer ticks while they fit
            ax.set_xticks(range(profile.num_steps))
        if profile.num_blocks <= 30:
            ax.set_yticks(range(profile.num_blocks))
    if image is not None and norm is not None:
        fig.colorbar(image, ax=list(axes[0]), label="rel-L2 vs 16-bit (mean over calls)")
    fig.suptitle(title, y=1.04)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    runstore.atomic_write_bytes(path, buf.getvalue())
    return Path(path)


__all__ = ["grid", "write_heatmap"]
