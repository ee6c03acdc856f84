"""metrics.registry: one spec per metric, read by evaluate, compare and `lowbit-video metrics`.

The last test adds a metric the package does not have, as one spec, and follows it through evaluate
(computed, stored) and compare (column, label, arrow, decimals, best) -- the claim that a new metric
is one spec plus its function.
"""

from types import SimpleNamespace

import numpy as np
import pytest

from lowbit_video import compare, generate, runstore
from lowbit_video.errors import UserError
from lowbit_video.evaluate import evaluate_runs
from lowbit_video.metrics import registry, vbench


def test_each_metric_has_one_spec_and_a_way_to_be_scored():
    specs = registry.list_metrics()
    names = [m.name for m in specs]
    assert len(names) == len(set(names))
    for m in specs:
        assert m.kind in ("paired", "video", "vbench"), m.name
        # in-process kinds compute themselves; VBench dimensions are scored together by metrics.vbench
        assert (m.compute is None) == (m.kind == "vbench"), m.name
        assert m.label and m.decimals >= 0
        assert m.shown in ("always", "present", "scored", "applies")
    assert registry.vbench_dimensions() == vbench.VBENCH_DIMENSIONS
    assert registry.default_metrics() == tuple(names)
    with pytest.raises(UserError, match="unknown metric 'nope'"):
        registry.get_metric("nope")
    assert registry.find_metric("nope") is None


def test_listing_is_what_the_metrics_command_shows():
    lpips = registry.get_metric("lpips").listing()
    assert list(lpips) == ["name", "kind", "description", "weights", "requires", "higher_is_better", "models"]
    assert lpips["weights"] == ("lpips-alexnet",) and lpips["higher_is_better"] is False
    assert registry.get_metric("adherence").listing()["models"] == ("tiny-shapes",)
    # a VBench dimension needs VBench's own modules first, then its own
    assert registry.get_metric("aesthetic_quality").requires[:3] == ("vbench", "decord", "cv2")


def test_a_metric_applies_by_model_name_or_family():
    adherence = registry.get_metric("adherence")
    assert adherence.applies_to("tiny-shapes", None) and adherence.applies_to("my-shapes", "tiny-shapes")
    assert not adherence.applies_to("wan2.1-t2v-1.3b", "wan")
    assert registry.get_metric("psnr").applies_to("wan2.1-t2v-1.3b", "wan")


def _run(out, recipe, level):
    """A complete run whose 4 frames are every pixel `level` (uint8)."""
    frames = np.full((4, 16, 16, 3), level, dtype=np.uint8)
    d = runstore.run_dir(out, "wan-x", recipe, "a cat", 0)
    meta = {"format": "lowbit-video run", "format_version": 1, "model": {"name": "wan-x", "family": "wan"},
            "recipe": {"name": recipe}, "prompt": "a cat", "seed": 0, "steps": 2, "guidance": 1.0,
            "size": {"height": 16, "width": 16, "frames": 4}, "fps": 8}
    generate.write_run(SimpleNamespace(dir=d), frames, meta=meta)
    return d


def test_a_new_metric_is_one_spec(tmp_path, monkeypatch):
    def mean_abs_difference(frames, reference):
        return float(np.mean(np.abs(frames.astype(float) - reference.astype(float))))

    mae = registry.MetricSpec("mae", "paired", "mean absolute difference vs the baseline, 0-255 scale",
                              higher_is_better=False, compute=registry.against_baseline(mean_abs_difference),
                              label="MAE", decimals=3, column=305, shown="always")
    monkeypatch.setattr(registry, "_SPECS", (*registry._SPECS, mae))
    out = tmp_path / "runs"
    _run(out, "fp16", 100)
    far, near = _run(out, "far", 112), _run(out, "near", 103)
    evaluate_runs([out], metrics=["mae"], weights_dir=str(tmp_path / "w"))

    comp = compare.collect([out])
    mc = comp.model("wan-x")
    assert mc.columns[-1] == "mae"                      # rank 305: after LPIPS (304)
    assert mc.row("far").values["mae"] == 12.0 and mc.row("near").values["mae"] == 3.0   # |112-100|, |103-100|
    assert mc.best["mae"] == "near"                     # lower is better
    table = compare.render_markdown(comp)
    assert "| MAE ↓ |" in table and "| **3.000** |" in table and "| 12.000 |" in table
    assert mc.row("far").runs == [far.resolve()] and mc.row("near").runs == [near.resolve()]
    base_cell = table.split("\n| fp16 |")[1].split("\n")[0]
    assert base_cell.rstrip().endswith("| – | 1 |")      # paired: no value on the baseline row
