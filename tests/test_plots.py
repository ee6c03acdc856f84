"""Plots of a comparison: metric bars per model and frame grids (FP16 beside each recipe)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from lowbit_video import runstore
from lowbit_video.compare import collect
from lowbit_video.errors import UserError
from lowbit_video.plots import plot_frame_grid, plot_metric_bars, select_pairs, write_plots

from test_compare import MODEL, P1, P2, cli, standard_grid


@pytest.fixture
def grid(tmp_path: Path) -> Path:
    return standard_grid(tmp_path / "runs")


def _png(path: Path) -> Image.Image:
    assert path.is_file() and path.stat().st_size > 5_000
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    im = Image.open(path)
    im.verify()
    im = Image.open(path)
    assert im.format == "PNG"
    return im


def test_metric_bars_png(grid: Path, tmp_path: Path):
    comp = collect([grid])
    p = plot_metric_bars(comp, MODEL, tmp_path / "p" / "bars.png")
    im = _png(p)
    # 9 metric panels -> a 4-column grid of 3 rows: wider than 800 px and taller than 500 px
    assert im.width > 800 and im.height > 500
    assert not [x for x in p.parent.iterdir() if runstore.is_temp(x)]


def test_metric_bars_start_at_zero(grid: Path, tmp_path: Path, monkeypatch):
    from lowbit_video import plots

    seen = []
    real = plots._save
    monkeypatch.setattr(plots, "_save", lambda fig, path, dpi=100: (seen.extend(
        (ax.get_title(), ax.get_ylim()) for ax in fig.axes if ax.axison), real(fig, path, dpi))[1])
    plot_metric_bars(collect([grid]), MODEL, tmp_path / "bars.png")
    assert len(seen) >= 4
    for title, (bottom, top) in seen:  # every metric of the grid is positive: each axis from exactly 0
        assert bottom == 0.0 and top > 0, title


def test_frame_grid_rows_and_columns(grid: Path, tmp_path: Path):
    comp = collect([grid])
    p = plot_frame_grid(comp, MODEL, P1, 0, tmp_path / "grid.png", frames=4)
    im = _png(p)
    # 3 rows (fp16 + 2 recipes) of 4 frames: wider than tall
    assert im.width > im.height > 200
    wide = plot_frame_grid(comp, MODEL, P1, 0, tmp_path / "grid8.png", frames=8)
    assert _png(wide).width > im.width * 1.5


def test_frame_grid_shows_the_exact_frames(grid: Path, tmp_path: Path):
    """The first frame of the fp16 run, as drawn, has the colours of frames.npz (nearest upscale)."""
    comp = collect([grid])
    from lowbit_video.generate import load_run_frames

    frames, source = load_run_frames(runstore.run_dir(grid, MODEL, "fp16", P1, 0))
    assert source == "frames.npz"
    im = np.asarray(_png(plot_frame_grid(comp, MODEL, P1, 0, tmp_path / "g.png", frames=2)).convert("RGB"))
    drawn = {tuple(c) for c in im.reshape(-1, 3)}
    first = {tuple(c) for c in frames[0].reshape(-1, 3)}
    assert len(first & drawn) > 0.9 * len(first)


def test_write_plots_default_and_picked_pairs(grid: Path, tmp_path: Path):
    comp = collect([grid])
    written = write_plots(comp, tmp_path / "plots", count=1)
    names = sorted(p.name for p in written)
    assert len(names) == 2 and f"{MODEL}-metrics.png" in names
    for p in written:
        _png(p)
    mc = comp.models[0]
    assert select_pairs(mc, ["red circle:0"]) == [(P1, 0)]
    assert select_pairs(mc, [runstore.prompt_slug(P2)]) == [(P2, 0)]
    assert len(select_pairs(mc, None, count=5)) == 2
    with pytest.raises(UserError, match="--grid"):
        select_pairs(mc, ["purple hexagon"])


def test_cli_plots(grid: Path, tmp_path: Path):
    d = tmp_path / "plots"
    p = cli("compare", str(grid), "--json", "--plots", str(d), "--grid", "blue square", "--grid-frames", "3")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert sorted(Path(x).name for x in doc["plots"]) == sorted(x.name for x in d.iterdir())
    assert len(doc["plots"]) == 2 and any("blue-square" in x for x in doc["plots"])
    for x in doc["plots"]:
        _png(Path(x))
