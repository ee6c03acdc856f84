"""`lowbit-video bench models --tiny`: the GPU benchmark's loop on the tiny CPU instances (what it runs, what it
reports, the markdown it writes); the GPU figures themselves come from the full-size run on a GPU."""

import json

import pytest

pytest.importorskip("diffusers")

from typer.testing import CliRunner  # noqa: E402

from lowbit_video.cli import app  # noqa: E402


def test_tiny_run_reports_every_model_and_recipe_with_the_hooks_counts(tmp_path):
    out = tmp_path / "models.md"
    res = CliRunner().invoke(app, ["bench", "models", "--tiny", "--reps", "1", "--model", "ltx-video", "--model",
                                   "cogvideox-5b", "--out", str(out), "--json"])
    assert res.exit_code == 0, res.stderr
    rows = json.loads(res.stdout)
    assert [(r["model"], r["recipe"]) for r in rows] == [
        (m, r) for m in ("ltx-video", "cogvideox-5b") for r in ("fp16", "sage2-int8", "mxattention")]
    by = {(r["model"], r["recipe"]): r for r in rows}
    # fp16: every call diffusers' own; the recipes: self-attention quantized, LTX's cross-attention 16-bit
    assert by["ltx-video", "fp16"]["attention_calls"] == {"quantized": 0, "high": 2, "fallback": 0, "engine": 0}
    assert by["ltx-video", "sage2-int8"]["attention_calls"] == {"quantized": 1, "high": 1, "fallback": 0,
                                                                 "engine": 0}
    assert by["cogvideox-5b", "mxattention"]["attention_calls"]["quantized"] == 1
    assert all(r["x_fp16"] == 1.0 for r in rows if r["recipe"] == "fp16")
    text = out.read_text()
    assert text.startswith("# Recipes on other video transformers") and "Command: `lowbit-video bench models" in text
    assert text.count("| ltx-video |") == 3 and "| cogvideox-5b | CogVideoXTransformer3DModel |" in text


def test_full_size_needs_random_weights_and_a_gpu():
    res = CliRunner().invoke(app, ["bench", "models"])
    assert res.exit_code == 2 and "--random-weights" in res.stderr
    res = CliRunner().invoke(app, ["bench", "models", "--tiny", "--model", "no-such"])
    assert res.exit_code == 2 and "no-such" in res.stderr
