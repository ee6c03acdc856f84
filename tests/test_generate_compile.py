"""`lowbit-video generate --compile` with the shipped tiny-shapes model on the CPU, with torch.compile's default
backend (Inductor: what users get; a warm compile cache makes it a few seconds, a cold one about half a minute).

One compiled grid runs fp16 then sage2-int8 on one loaded model, so the second recipe's blocks are compiled after
the first's: its frames must be its own recipe's, not a graph of fp16 run again. Both are compared with an eager
grid of the same runs. One denoising step keeps it small; the frames compared are the lossless uint8 ones."""

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

pytest.importorskip("lowbit_video.models.registry", reason="model registry not available")

from lowbit_video import video_io  # noqa: E402
from lowbit_video.cli import app  # noqa: E402

PROMPT = "a red circle moving right on a black background"
RECIPES = ("fp16", "sage2-int8")


def _grid(out, *extra):
    args = ["generate", *[a for r in RECIPES for a in ("--recipe", r)], "--prompt", PROMPT, "--seeds", "0",
            "--steps", "1", "--out", str(out), *extra, "--json"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.stderr
    runs = {}
    for run in json.loads(res.stdout)["runs"]:
        d = Path(run["dir"])
        runs[run["recipe"]] = (json.loads((d / "meta.json").read_text()),
                               video_io.read_frames_npz(d / "frames.npz").astype(np.int16))
    return runs


@pytest.fixture(scope="module")
def grids(tmp_path_factory):
    import torch._dynamo

    eager = _grid(tmp_path_factory.mktemp("eager"))
    # One graph a block's code may hold (dynamo's limit is 8; a fullgraph block past it fails): each recipe is one
    # graph here (one forward a step, one policy decision), so the grid passes only if a recipe's graphs are
    # dropped before the next recipe is traced, as a grid of more than 8 recipes needs.
    with torch._dynamo.config.patch(recompile_limit=1):
        compiled = _grid(tmp_path_factory.mktemp("compiled"), "--compile")
    return eager, compiled


def test_meta_says_compiled(grids):
    eager, compiled = grids
    for recipe in RECIPES:
        meta = compiled[recipe][0]
        # the shipped model's 6 Wan blocks, each compiled whole by Inductor
        assert meta["compile"] == {"scope": "repeated blocks", "fullgraph": True, "backend": "inductor", "blocks": 6,
                                   "classes": ["WanTransformerBlock"]}
        assert meta["request"]["compiled"] is True
        # compiled calls go uncounted; the step the policy planned to quantize is known (sage2-int8: all, fp16: none)
        assert meta["attention_calls"] == {"counted": False, "num_steps": 1,
                                           "planned_quantized_steps": [0] if recipe == "sage2-int8" else []}
        assert eager[recipe][0]["compile"] is None and eager[recipe][0]["request"]["compiled"] is False
        # eager, the calls are counted: sage2-int8 quantizes the self-attention call of each of the 6 blocks
        assert eager[recipe][0]["attention_calls"]["quantized"] == (6 if recipe == "sage2-int8" else 0)


def test_compiled_fp16_equals_eager_within_one_level(grids):
    # No quantization: Inductor's fused float32 kernels only round differently (~1e-6 of a value), far below a
    # uint8 level (1/255), so a pixel can move only where it sits at a rounding boundary, and by one level.
    eager, compiled = grids
    assert np.abs(compiled["fp16"][1] - eager["fp16"][1]).max() <= 1


def test_compiled_sage2_int8_runs_its_own_recipe_after_fp16(grids):
    eager, compiled = grids
    frames, own, fp16 = compiled["sage2-int8"][1], eager["sage2-int8"][1], eager["fp16"][1]
    recipe_error = np.abs(own - fp16)
    assert recipe_error.mean() > 0  # the recipe changes the frames at all (else nothing below could tell)
    # A graph of fp16 reused would give fp16's frames. Compiled, the recipe quantizes inputs that differ from eager's
    # in the last float bits: an int8 rounding at a boundary can flip, so frames may move, but by less than the
    # recipe's own quantization moves them, and they stay nearer to the recipe's eager frames than to fp16's.
    assert np.abs(frames - own).max() <= recipe_error.max()
    assert np.abs(frames - own).mean() < np.abs(frames - fp16).mean()


def test_a_failing_compilation_is_one_line_naming_the_recipe(tmp_path, monkeypatch):
    from lowbit_video.models import regional_compile

    def broken_backend(graph, example_inputs):
        raise RuntimeError("no code for this graph")

    monkeypatch.setattr(regional_compile, "BACKEND", broken_backend)
    res = CliRunner().invoke(app, ["generate", "--recipe", "fp16", "--prompt", PROMPT, "--steps", "1", "--out",
                                   str(tmp_path / "out"), "--compile"])
    assert res.exit_code == 2
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in res.stderr
    assert errors[0].startswith("error: --compile: torch.compile of the transformer blocks failed under recipe fp16 "
                                "(BackendCompilerFailed: ")
    assert errors[0].endswith("; run without --compile") and not (tmp_path / "out").exists()
