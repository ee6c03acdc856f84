"""`load_model("tiny-shapes")` and its generate: tiny_shapes.sample() with recipe processors."""

import json
import warnings

import numpy as np
import pytest
import torch

pytest.importorskip("diffusers")

from lowbit_video.errors import UserError  # noqa: E402
from lowbit_video.models.capture import CaptureSpec, load_capture  # noqa: E402
from lowbit_video.models.injection import recipe_hooks  # noqa: E402
from lowbit_video.models.registry import load_model  # noqa: E402
from model_helpers import every_call  # noqa: E402
from lowbit_video.models.tiny_shapes.model import WEIGHTS_DIR, TinyShapesModel, tiny_test_config  # noqa: E402
from lowbit_video.models.tiny_shapes.sample import sample  # noqa: E402

PROMPTS = ["a red circle moving left on a black background", "a blue square moving up on a white background"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    # A random-init model of the tiny test config, saved and loaded like the shipped weights.
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("tiny") / "model"
    TinyShapesModel(tiny_test_config()).save(folder)
    return load_model("tiny-shapes", path=str(folder))


def test_loads_a_folder_and_takes_its_settings(tiny):
    assert tiny.info.name == "tiny-shapes"
    assert (tiny.info.default_frames, tiny.info.default_height) == (4, 16)
    d = tiny.describe()
    json.dumps(d)
    assert d["num_blocks"] == 1 and d["transformers"]["transformer"]["attention_head_dim"] == 64


def test_fp16_generate_is_bit_identical_to_sample(tiny):
    ours = tiny.generate(PROMPTS, [0, 1], recipe="fp16", steps=3, guidance=2.0)
    plain = sample(tiny.model, PROMPTS, [0, 1], steps=3, guidance=2.0)
    assert ours.shape == (2, 4, 16, 16, 3) and np.array_equal(ours, plain)
    assert not recipe_hooks(tiny.model.transformer)


def test_quantized_recipe_changes_output_and_steps_tracked_under_batched_cfg(tiny):
    progress = []
    ref = tiny.generate(PROMPTS, [0, 1], recipe="fp16", steps=3, guidance=2.0)
    out = tiny.generate(PROMPTS, [0, 1], recipe="mxattention", steps=3, guidance=2.0,
                        progress=lambda i, n: progress.append((i, n)))
    assert not np.array_equal(out, ref) and np.abs(out - ref).max() < 0.5
    s = tiny.last_run
    # one batched forward per step (cond + uncond rows together), 1 block: one quantized self call per step
    assert {k: v["quantized"] for k, v in s["by_step"].items()} == {"0": 1, "1": 1, "2": 1}
    assert progress == [(1, 3), (2, 3), (3, 3)]


def test_draft_recipe_gets_the_token_grid(tiny):
    out = tiny.generate(PROMPTS[:1], [0], recipe=every_call("draftattention2"), steps=2)
    assert np.isfinite(out).all() and tiny.last_run["quantized"] == 2


def test_capture_splits_cfg_rows_by_prompt(tiny, tmp_path):
    tiny.generate(PROMPTS, [0, 1], recipe="fp16", steps=2, guidance=2.0,
                  capture=CaptureSpec(tmp_path, steps={1}, branches=("cond", "uncond")))
    names = sorted(e["file"] for e in json.loads((tmp_path / "index.json").read_text())["entries"])
    assert names == ["block000_step001_prompt000.safetensors", "block000_step001_prompt000_uncond.safetensors",
                     "block000_step001_prompt001.safetensors", "block000_step001_prompt001_uncond.safetensors"]
    q = load_capture(tmp_path / names[0])["q"]
    assert q.shape == (1, 4 * 8 * 8, 2, 64)


def test_wrong_size_and_bad_prompt_are_user_errors(tiny):
    with pytest.raises(UserError, match="tiny-shapes generates 4 frames of 16x16 only"):
        tiny.generate(PROMPTS[:1], [0], recipe="fp16", frames=8)
    with pytest.raises(UserError) as e:
        tiny.generate(["a cat on the moon"], [0], recipe="fp16", steps=1)
    assert str(e.value).startswith("tiny-shapes:") and "\n" not in str(e.value)


def test_folder_errors(tmp_path):
    with pytest.raises(UserError, match="no such directory"):
        load_model("tiny-shapes", path=str(tmp_path / "missing"))
    with pytest.raises(UserError, match="not a tiny-shapes model folder"):
        load_model("tiny-shapes", path=str(tmp_path))


@pytest.mark.skipif(not (WEIGHTS_DIR / "model.safetensors").is_file(), reason="shipped weights not present yet")
def test_shipped_weights_load():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = load_model("tiny-shapes")
    assert m.path == str(WEIGHTS_DIR) and m.describe()["num_blocks"] >= 1
