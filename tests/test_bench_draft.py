"""The CPU-side pieces of `lowbit-video bench draft`: the equal-time comparison and the plot (timings
themselves need the GPU; results/kernels-h200.md holds them)."""

from __future__ import annotations

import math

import pytest


def _row(series, sparsity, ms, err):
    split = {"16": 1.0, "8": 0.0, "4": 0.0} if series == "sparse16" else {"16": 0.15, "8": 0.25, "4": 0.6}
    return {"shape": "s", "series": series, "recipe": f"{series}@{sparsity}", "sparsity": sparsity,
            "split": split, "total_ms": ms, "rel_l2": err}


SWEEP = [_row("sparse16", 0.5, 100.0, 0.01), _row("sparse16", 0.8, 50.0, 0.04), _row("sparse16", 0.9, 25.0, 0.16),
         _row("mixed", 0.8, 70.71067811865476, 0.05), _row("mixed", 0.95, 10.0, 0.3)]


def test_equal_time_interpolates_sparse16_in_log_log():
    from lowbit_video.bench.draft import equal_time_comparison

    res = {r["mixed"]: r for r in equal_time_comparison(SWEEP, "s")}
    # 70.71 ms is the geometric mean of 50 and 100 ms: halfway in log time -> sqrt(0.04 * 0.01) = 0.02
    assert math.isclose(res["mixed@0.8"]["sparse16_rel_l2_at_equal_time"], 0.02, rel_tol=1e-12)
    assert res["mixed@0.8"]["mixed_rel_l2"] == 0.05
    assert res["mixed@0.95"]["sparse16_rel_l2_at_equal_time"] is None  # faster than every sparse-16 point


def test_sweep_specs_cover_the_three_series():
    from lowbit_video.bench.draft import SWEEP_SPARSITY, sweep_specs
    from lowbit_video.recipes import load_recipe

    base = load_recipe("draftattention2").attention.draft
    specs = sweep_specs(base)
    assert specs["sparse16@0.0"].fp16 == 1.0 and specs["sparse16@0.0"].sparsity == 0.0
    assert specs["int8@0.8"].int8 == 1.0 and specs["int8@0.8"].fp16 == 0.0
    assert specs["mixed@0.8"] == base  # the recipe itself is one point of the mixed series
    assert len(specs) == 2 * (len(SWEEP_SPARSITY) + 1) + len(SWEEP_SPARSITY)


def test_plot_sweep_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    from lowbit_video.bench.draft import plot_sweep

    path = tmp_path / "p.png"
    rows = [{"shape": "s", "recipe": "draftattention2", "total_ms": 60.0, "rel_l2": 0.06}]
    plot_sweep({"sweep": SWEEP, "rows": rows, "baselines": [{"shape": "s", "ms": 80.0}]}, "s", path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
