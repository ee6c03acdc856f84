"""Wan2.x from a diffusers-format folder: tiny random-weight WanPipeline checkpoints saved to disk."""

import json
import warnings

import numpy as np
import pytest
import torch

pytest.importorskip("diffusers")
pytest.importorskip("transformers")

from lowbit_video.errors import UserError  # noqa: E402
from lowbit_video.models.base import cpu_noise  # noqa: E402
from lowbit_video.models.capture import CaptureSpec, load_capture  # noqa: E402
from lowbit_video.models.injection import recipe_hooks  # noqa: E402
from lowbit_video.models.registry import load_model  # noqa: E402
from lowbit_video.models.tiny_checkpoints import save_tiny_wan  # noqa: E402

SMALL = dict(steps=3, height=32, width=32, frames=9)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("wan")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {"wan21": save_tiny_wan(root / "wan21"), "wan22": save_tiny_wan(root / "wan22", two_experts=True),
                "ti2v": save_tiny_wan(root / "ti2v", ti2v=True)}


def _load(name, path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = load_model(name, path=str(path), dtype=torch.float32)
    m.max_sequence_length = 16  # the tiny text encoder
    return m


@pytest.fixture(scope="module")
def wan21(folders):
    return _load("wan2.1-t2v-1.3b", folders["wan21"])


@pytest.fixture(scope="module")
def wan22(folders):
    return _load("wan2.2-t2v-a14b", folders["wan22"])


def test_loads_from_folder_and_describes(wan21):
    d = wan21.describe()
    json.dumps(d)
    assert d["model"] == "wan2.1-t2v-1.3b" and d["pipeline"] == "WanPipeline"
    assert d["num_blocks"] == 2 and d["transformers"]["transformer"]["rope_segments"] == [12, 10, 10]
    assert d["components"]["transformer"] == "WanTransformer3DModel" and d["dtype"] == "float32"
    # a freshly loaded model has diffusers' own processors and no hooks (they are never saved)
    assert not recipe_hooks(wan21.pipe.transformer)


def test_generate_shape_range_and_processors_removed_after(wan21):
    v = wan21.generate(["a red circle", "a blue square"], [0, 1], recipe="fp16", **SMALL)
    assert v.shape == (2, 9, 32, 32, 3) and v.dtype == np.float32
    assert 0.0 <= v.min() and v.max() <= 1.0
    assert not recipe_hooks(wan21.pipe.transformer)


def test_fp16_recipe_is_bit_identical_to_the_plain_pipeline_with_the_same_noise(wan21):
    # the paired noise of seed 5: float32 normal from a CPU generator seeded 5, in the latent's shape
    # (16 channels, (9 - 1) / 4 + 1 latent frames, 32 / 8 pixels per side)
    ours = wan21.generate(["a red circle"], [5], recipe="fp16", guidance=5.0, **SMALL)
    plain = wan21.pipe(prompt="a red circle", height=32, width=32, num_frames=9, num_inference_steps=3,
                       guidance_scale=5.0, latents=cpu_noise((1, 16, 3, 4, 4), 5), output_type="np",
                       max_sequence_length=16).frames
    assert np.array_equal(ours, np.clip(plain, 0, 1))


def test_paired_noise_and_quantized_recipe_changes_output(wan21):
    a = wan21.generate(["a red circle"], [3], recipe="fp16", **SMALL)
    b = wan21.generate(["a red circle"], [3], recipe="fp16", **SMALL)
    q = wan21.generate(["a red circle"], [3], recipe="mxattention", **SMALL)
    other_seed = wan21.generate(["a red circle"], [4], recipe="fp16", **SMALL)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, q) and np.abs(a - q).max() < 0.5
    assert not np.array_equal(a, other_seed)


def test_step_tracker_under_cfg_counts_scheduler_steps(wan21):
    # 3 steps x (cond + uncond) x 2 blocks self-attention; every step is seen twice per block.
    progress = []
    wan21.generate(["a red circle"], [0], recipe="mxattention", guidance=5.0,
                   progress=lambda i, n: progress.append((i, n)), **SMALL)
    s = wan21.last_run
    assert s["num_steps"] == 3
    assert {k: v["quantized"] for k, v in s["by_step"].items()} == {"0": 4, "1": 4, "2": 4}
    assert all(v["high"] == 4 for v in s["by_step"].values())  # the cross-attention calls
    assert progress == [(1, 3), (2, 3), (3, 3)]


def test_high_precision_steps_follow_the_scheduler(wan21):
    import dataclasses

    from lowbit_video.recipes import PrecisionPolicy, load_recipe

    r = load_recipe("mxattention")
    r = dataclasses.replace(r, policy=PrecisionPolicy(high_precision_steps=(0, -1)))
    wan21.generate(["a red circle"], [0], recipe=r, guidance=5.0, **SMALL)
    by = wan21.last_run["by_step"]
    assert [by[k]["quantized"] for k in ("0", "1", "2")] == [0, 4, 0]


def test_two_experts_both_get_processors_and_one_step_numbering(wan22):
    # UniPC shift 3, 4 steps: timesteps >= 875 go to `transformer`, the rest to `transformer_2`.
    wan22.generate(["a red circle"], [0], recipe="mxattention", guidance=4.0, steps=4, height=32, width=32,
                   frames=9)
    s = wan22.last_run
    assert set(s["by_expert"]) == {"transformer", "transformer_2"}
    assert sorted(s["by_step"]) == ["0", "1", "2", "3"] and s["num_steps"] == 4
    assert all(v["quantized"] == 4 for v in s["by_step"].values())
    timesteps = wan22.pipe.scheduler.timesteps
    high = int((timesteps >= 875).sum())
    assert s["by_expert"]["transformer"]["quantized"] == 4 * high
    assert s["by_expert"]["transformer_2"]["quantized"] == 4 * (4 - high)
    for t in (wan22.pipe.transformer, wan22.pipe.transformer_2):
        assert not recipe_hooks(t)


def test_capture_writes_post_rope_qkv_and_index(wan21, tmp_path):
    spec = CaptureSpec(tmp_path / "cap", blocks={1}, steps={0, -1})
    wan21.generate(["a red circle", "a dog"], [0, 1], recipe="mxattention", guidance=5.0, capture=spec, **SMALL)
    index = json.loads((tmp_path / "cap" / "index.json").read_text())
    files = sorted(e["file"] for e in index["entries"])
    assert files == ["block001_step000_prompt000.safetensors", "block001_step000_prompt001.safetensors",
                     "block001_step002_prompt000.safetensors", "block001_step002_prompt001.safetensors"]
    e = index["entries"][0]
    assert e["prompt"] == "a red circle" and e["seed"] == 0 and e["branch"] == "cond" and e["grid"] == [3, 2, 2]
    assert e["quantized"] is True and e["model"] == "wan2.1-t2v-1.3b" and e["recipe"] == "mxattention"
    t = load_capture(tmp_path / "cap" / files[0])
    assert set(t) == {"q", "k", "v"} and t["q"].shape == (1, 12, 2, 32)
    assert not list((tmp_path / "cap").glob("*.tmp*"))


def test_capture_q_is_post_rope(wan21, tmp_path):
    # The captured Q must equal the projected, normed, RoPE'd query the processor computed:
    # check against an independent recomputation for block 0, step 0.
    tr = wan21.pipe.transformer
    grabbed = {}

    def hook(mod, args, kwargs):
        if "x" not in grabbed:
            grabbed["x"] = args[0].clone()
            grabbed["rope"] = args[3]

    h = tr.blocks[0].attn1.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        wan21.generate(["a red circle"], [0], recipe="fp16", guidance=1.0,
                       capture=CaptureSpec(tmp_path, blocks={0}, steps={0}), **SMALL)
    finally:
        h.remove()
    attn = tr.blocks[0].attn1
    with torch.no_grad():
        q = attn.norm_q(attn.to_q(grabbed["x"])).unflatten(2, (attn.heads, -1))
        cos, sin = grabbed["rope"]
        x1, x2 = q.unflatten(-1, (-1, 2)).unbind(-1)
        ref = torch.empty_like(q)
        ref[..., 0::2] = x1 * cos[..., 0::2] - x2 * sin[..., 1::2]
        ref[..., 1::2] = x1 * sin[..., 1::2] + x2 * cos[..., 0::2]
    got = load_capture(tmp_path / "block000_step000_prompt000.safetensors")["q"]
    assert torch.equal(got, ref.type_as(q))


def test_bad_settings_are_user_errors(wan21):
    with pytest.raises(UserError, match="frames must be 4k \\+ 1"):
        wan21.generate(["x"], [0], recipe="fp16", steps=1, height=32, width=32, frames=8)
    with pytest.raises(UserError, match="multiples of 16"):
        wan21.generate(["x"], [0], recipe="fp16", steps=1, height=40, width=32, frames=9)
    with pytest.raises(UserError, match="2 prompts but 1 seeds"):
        wan21.generate(["x", "y"], [0], recipe="fp16", **SMALL)


def test_a14b_folder_needs_two_experts_and_vice_versa(folders):
    with pytest.raises(UserError) as e:
        load_model("wan2.2-t2v-a14b", path=str(folders["wan21"]))
    assert "transformer_2" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(UserError, match="use --model wan2.2-t2v-a14b"):
        load_model("wan2.1-t2v-14b", path=str(folders["wan22"]))


def test_a_folder_of_another_wan_model_is_refused_naming_the_config(folders):
    # a Wan2.1-shaped folder (16 latent channels) would run as wan2.2-ti2v-5b and be filed under that name
    with pytest.raises(UserError) as e:
        load_model("wan2.2-ti2v-5b", path=str(folders["wan21"]))
    msg = str(e.value)
    assert "\n" not in msg and "not wan2.2-ti2v-5b's" in msg and "in_channels 16" in msg and "has 48" in msg
    with pytest.raises(UserError, match="in_channels 48, wan2.1-t2v-1.3b has 16"):
        load_model("wan2.1-t2v-1.3b", path=str(folders["ti2v"]))


def test_ti2v_5b_expand_timesteps_and_16x_vae(folders):
    m = _load("wan2.2-ti2v-5b", folders["ti2v"])
    kw = dict(steps=2, height=64, width=64, frames=9)
    shapes = []
    h = m.pipe.transformer.register_forward_pre_hook(lambda mod, args, kwargs: shapes.append(
        tuple(kwargs.get("hidden_states", args[0] if args else None).shape)), with_kwargs=True)
    try:
        ref = m.generate(["a red circle"], [0], recipe="fp16", **kw)
    finally:
        h.remove()
    assert set(shapes) == {(1, 48, 3, 4, 4)}  # 48 latent channels, 4x temporal and 16x spatial VAE
    out = m.generate(["a red circle"], [0], recipe="mxattention", **kw)
    assert ref.shape == (1, 9, 64, 64, 3) and not np.array_equal(ref, out)
    assert m.last_run["quantized"] == 2 * 2 * 2  # steps x (cond + uncond) x blocks
    with pytest.raises(UserError, match="multiples of 32"):
        m.generate(["x"], [0], recipe="fp16", steps=1, height=48, width=64, frames=9)


def test_transformer_time_is_binned_per_denoising_step(wan21):
    # 3 steps under CFG: two transformer forwards per step, each step's time is theirs summed.
    wan21.generate(["a red circle"], [0], recipe="fp16", guidance=5.0, **SMALL)
    t = wan21.last_timing
    assert t["transformer_forwards"] == 6
    assert len(t["transformer_s_per_step"]) == 3 and all(s > 0 for s in t["transformer_s_per_step"])
    assert t["transformer_s"] == pytest.approx(sum(t["transformer_s_per_step"]), abs=1e-3)
    assert "peak_memory_gib" not in t  # CPU: no allocator peak to report
    # the hooks are gone afterwards: a plain forward adds nothing
    assert not wan21.pipe.transformer._forward_hooks and not wan21.pipe.transformer._forward_pre_hooks


def test_generate_with_another_wan_models_folder_exits_2_and_files_nothing(folders, tmp_path):
    from typer.testing import CliRunner

    from lowbit_video.cli import app

    res = CliRunner().invoke(app, ["generate", "--model", "wan2.2-ti2v-5b", "--model-path", str(folders["wan21"]),
                                   "--steps", "1", "--out", str(tmp_path / "runs")])
    lines = [l for l in res.stderr.splitlines() if l.strip() and not l.startswith(("loaded ", "["))]
    assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: ")
    assert "not wan2.2-ti2v-5b's" in lines[0]
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").rglob("meta.json"))
