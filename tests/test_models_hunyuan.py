"""HunyuanVideo from a diffusers-format folder: a tiny random-weight HunyuanVideoPipeline on disk."""

import json
import warnings

import numpy as np
import pytest
import torch

pytest.importorskip("diffusers")
pytest.importorskip("transformers")

from lowbit_video.models.base import cpu_noise  # noqa: E402
from model_helpers import every_call  # noqa: E402
from lowbit_video.models.capture import CaptureSpec, load_capture  # noqa: E402
from lowbit_video.models.injection import recipe_hooks  # noqa: E402
from lowbit_video.models.registry import load_model  # noqa: E402
from lowbit_video.models.tiny_checkpoints import save_tiny_hunyuan  # noqa: E402

SMALL = dict(steps=2, height=32, width=32, frames=9)


@pytest.fixture(scope="module")
def hy(tmp_path_factory):
    root = tmp_path_factory.mktemp("hy")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        save_tiny_hunyuan(root / "hy")
        m = load_model("hunyuanvideo", path=str(root / "hy"), dtype=torch.float32)
    # The tiny word-level tokenizer: no Llama chat template, 8 text tokens (prompts pad to 8).
    m.prompt_template = {"template": "{}", "crop_start": 0}
    m.max_sequence_length = 8
    return m


def test_loads_and_describes(hy):
    d = hy.describe()
    json.dumps(d)
    assert d["pipeline"] == "HunyuanVideoPipeline" and d["num_blocks"] == 2
    assert d["transformers"]["transformer"]["blocks"] == {"transformer_blocks": 1, "single_transformer_blocks": 1}
    assert d["max_sequence_length"] == 8
    assert d["transformers"]["transformer"]["rope_segments"] == [8, 12, 12]


def test_fp16_is_bit_identical_to_the_plain_pipeline(hy):
    # the paired noise of seed 2: float32 normal from a CPU generator seeded 2, in the latent's shape
    # (4 channels, (9 - 1) / 4 + 1 latent frames, 32 / 8 pixels per side)
    ours = hy.generate(["a red circle"], [2], recipe="fp16", **SMALL)
    plain = hy.pipe(prompt="a red circle", height=32, width=32, num_frames=9, num_inference_steps=2,
                    guidance_scale=hy.info.default_guidance, latents=cpu_noise((1, 4, 3, 4, 4), 2), output_type="np",
                    max_sequence_length=8, prompt_template=hy.prompt_template).frames
    assert np.array_equal(ours, np.clip(plain, 0, 1))


def test_quantized_and_draft_recipes_run_with_the_padding_mask(hy):
    # "<s> a red circle </s>" is 5 of 8 text tokens: the mask pads 3.
    ref = hy.generate(["a red circle"], [0], recipe="fp16", **SMALL)
    for name in ("mxattention", "draftattention2"):
        out = hy.generate(["a red circle"], [0], recipe=every_call(name), **SMALL)
        assert np.isfinite(out).all() and not np.array_equal(out, ref), name
        s = hy.last_run
        assert s["quantized"] == 2 * 2 and s["fallback"] == 0  # 2 steps x 2 joint blocks, one forward each
    assert not recipe_hooks(hy.pipe.transformer)


def test_capture_drops_text_padding(hy, tmp_path):
    hy.generate(["a red circle"], [0], recipe="fp16", capture=CaptureSpec(tmp_path, blocks={1}, steps={1}), **SMALL)
    index = json.loads((tmp_path / "index.json").read_text())
    (e,) = index["entries"]
    assert e["file"] == "block001_step001_prompt000.safetensors"
    assert e["video_tokens"] == 3 * 4 * 4 and e["text_tokens"] == 5 and e["attention_type"] == "joint"
    t = load_capture(tmp_path / e["file"])
    assert t["q"].shape == (1, 48 + 5, 2, 32) and t["k"].shape == t["v"].shape == t["q"].shape
