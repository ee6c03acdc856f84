"""`generate --model-path DIR` for pipeline folders of families without a named model: tiny random-weight
CogVideoX and LTX-Video checkpoints on disk (models/tiny_checkpoints.py), run through the command."""

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("diffusers")
pytest.importorskip("transformers")

from typer.testing import CliRunner  # noqa: E402

from lowbit_video.cli import app  # noqa: E402
from lowbit_video.errors import UserError  # noqa: E402
from lowbit_video.models.pipeline import call_defaults, slug  # noqa: E402
from lowbit_video.models.registry import folder_info, load_model  # noqa: E402
from lowbit_video.models.tiny_checkpoints import save_tiny_cogvideox, save_tiny_ltx  # noqa: E402

PROMPT = "a red circle moving right"
runner = CliRunner()


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("pipelines")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {"cogvideox": save_tiny_cogvideox(root / "cogvideox"), "ltx": save_tiny_ltx(root / "ltx")}


def _generate(folder, out, *extra):
    res = runner.invoke(app, ["generate", "--model-path", str(folder), "--recipe", "fp16", "--recipe", "sage2-int8",
                              "--steps", "2", "--prompt", PROMPT, "--out", str(out), *extra, "--json"])
    assert res.exit_code == 0, res.stderr
    return json.loads(res.stdout)


def _metas(result):
    return {r["recipe"]: json.loads((Path(r["dir"]) / "meta.json").read_text()) for r in result["runs"]}


def _frames(meta_dir):
    return np.load(Path(meta_dir) / "frames.npz")["frames"]


def test_slugs_name_run_folders_after_the_pipeline_class():
    assert [slug(c) for c in ("CogVideoXPipeline", "LTXPipeline", "HunyuanVideo15Pipeline", "WanPipeline")] == [
        "cogvideox", "ltx", "hunyuanvideo15", "wan"]


def test_folder_info_takes_the_pipeline_call_defaults(folders):
    # CogVideoXPipeline.__call__: height, width, num_frames None (computed from the transformer config at call
    # time), 50 steps, guidance 6; LTXPipeline.__call__: 512 x 704, 161 frames, 50 steps, guidance 3.
    cog, ltx = folder_info(str(folders["cogvideox"])), folder_info(str(folders["ltx"]))
    assert (cog.name, cog.family) == ("cogvideox", "CogVideoX")
    assert (cog.default_steps, cog.default_guidance, cog.default_height, cog.default_width, cog.default_frames) == (
        50, 6.0, None, None, None)
    assert (ltx.name, ltx.family) == ("ltx", "LTX-Video")
    assert (ltx.default_steps, ltx.default_guidance, ltx.default_height, ltx.default_width, ltx.default_frames) == (
        50, 3.0, 512, 704, 161)


def test_cogvideox_folder_runs_with_the_sizes_its_config_gives(folders, tmp_path):
    # sample_height = sample_width = 4 latent pixels x the VAE's 8 = 32 pixels; sample_frames = 9
    result = _generate(folders["cogvideox"], tmp_path)
    assert result["generated"] == 2 and {r["model"] for r in result["runs"]} == {"cogvideox"}
    metas = _metas(result)
    for recipe, meta in metas.items():
        assert meta["model"]["pipeline"] == "CogVideoXPipeline" and meta["model"]["family"] == "CogVideoX"
        assert meta["model"]["name"] == "cogvideox" and meta["model"]["path"] == str(folders["cogvideox"].resolve())
        assert (meta["steps"], meta["guidance"], meta["size"]) == (2, 6.0, {"height": 32, "width": 32, "frames": 9})
        assert meta["frames_shape"] == [9, 32, 32, 3]
        assert meta["request"]["steps"] == 2 and meta["request"]["height"] == 32
    # CFG batches the conditional and unconditional rows into one forward: 2 steps x 2 joint-attention blocks
    assert metas["fp16"]["attention_calls"]["quantized"] == 0
    calls = metas["sage2-int8"]["attention_calls"]
    assert calls["quantized"] == 2 * 2 and calls["fallback"] == 0
    assert set(calls["by_step"]) == {"0", "1"}
    fp16, q = (_frames(r["dir"]) for r in result["runs"])
    assert not np.array_equal(fp16, q)
    # the same command again: every run complete, skipped (the pipeline is loaded to know its sizes)
    again = _generate(folders["cogvideox"], tmp_path)
    assert (again["generated"], again["skipped"]) == (0, 2)


def test_ltx_folder_runs_with_cli_sizes_over_the_pipeline_defaults(folders, tmp_path):
    # LTXPipeline's own 512 x 704 x 161 is 41 x 128 x 176 latent tokens: too big for a CPU test
    result = _generate(folders["ltx"], tmp_path, "--height", "32", "--width", "32", "--frames", "9")
    assert result["generated"] == 2 and {r["model"] for r in result["runs"]} == {"ltx"}
    metas = _metas(result)
    for meta in metas.values():
        assert meta["model"]["pipeline"] == "LTXPipeline" and meta["model"]["family"] == "LTX-Video"
        assert (meta["steps"], meta["guidance"], meta["size"]) == (2, 3.0, {"height": 32, "width": 32, "frames": 9})
        assert meta["frames_shape"] == [9, 32, 32, 3]
    # self-attention quantized, cross-attention to the prompt in 16 bits (the recipe's policy): 2 steps x 2 blocks,
    # conditional and unconditional rows in one forward
    calls = metas["sage2-int8"]["attention_calls"]
    assert calls["quantized"] == 2 * 2 and calls["high"] == 2 * 2 and calls["fallback"] == 0
    assert metas["fp16"]["attention_calls"]["quantized"] == 0


def test_fp16_run_is_the_plain_pipeline_with_the_seeds_cpu_generator(folders):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = load_model(None, path=str(folders["ltx"]), dtype=torch.float32)
    kw = dict(steps=2, height=32, width=32, frames=9)
    ours = m.generate([PROMPT], [7], recipe="fp16", **kw)
    plain = m.pipe(prompt=PROMPT, height=32, width=32, num_frames=9, num_inference_steps=2, guidance_scale=3.0,
                   generator=torch.Generator().manual_seed(7), output_type="np").frames
    assert ours.shape == (1, 9, 32, 32, 3) and np.array_equal(ours, np.clip(np.asarray(plain, np.float32), 0, 1))
    assert not np.array_equal(ours, m.generate([PROMPT], [8], recipe="fp16", **kw))
    assert m.describe()["pipeline"] == "LTXPipeline"
    with pytest.raises(UserError, match="multiples of 4"):  # the tiny VAE's 4x spatial factor, patch 1
        m.generate([PROMPT], [0], recipe="fp16", steps=1, height=30, width=32, frames=9)
    with pytest.raises(UserError, match="frames must be 4k \\+ 1"):
        m.generate([PROMPT], [0], recipe="fp16", steps=1, height=32, width=32, frames=8)


def test_call_defaults_read_the_signature():
    from diffusers import CogVideoXPipeline, WanPipeline

    assert call_defaults(WanPipeline) == {"steps": 50, "guidance": 5.0, "height": 480, "width": 832, "frames": 81}
    assert call_defaults(CogVideoXPipeline)["height"] is None


@pytest.mark.parametrize("args, needle", [
    (["--model", "wan2.1-t2v-1.3b"], "describes a CogVideoXPipeline, expected WanPipeline for wan2.1-t2v-1.3b"),
    (["--model", "hunyuanvideo"], "expected HunyuanVideoPipeline"),
])
def test_a_named_model_with_another_familys_folder_is_one_line_exit_2(folders, tmp_path, args, needle):
    res = runner.invoke(app, ["generate", *args, "--model-path", str(folders["cogvideox"]), "--steps", "1",
                              "--out", str(tmp_path / "runs")])
    lines = [l for l in res.stderr.splitlines() if l.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0]
    assert not (tmp_path / "runs").exists()


def test_an_image_to_video_folder_is_refused_naming_the_input(folders, tmp_path):
    import shutil

    d = tmp_path / "i2v"
    shutil.copytree(folders["cogvideox"], d)
    index = json.loads((d / "model_index.json").read_text())
    (d / "model_index.json").write_text(json.dumps({**index, "_class_name": "CogVideoXImageToVideoPipeline"}))
    res = runner.invoke(app, ["generate", "--model-path", str(d), "--steps", "1", "--out", str(tmp_path / "runs")])
    lines = [l for l in res.stderr.splitlines() if l.strip()]
    assert res.exit_code == 2 and len(lines) == 1
    assert "CogVideoXImageToVideoPipeline needs image besides the prompt" in lines[0]


def test_hunyuanvideo15_sizes_and_guidance_come_from_its_components():
    # HunyuanVideo15Pipeline.__call__ leaves height and width at None (then its video processor picks the crop
    # of the transformer config's target_size closest to 16:9) and has no guidance_scale (its guider holds it).
    # target_size 640 at 16:9 is HunyuanVideo-1.5's 480p: 480 x 848.
    from diffusers import AutoencoderKLHunyuanVideo15, HunyuanVideo15Pipeline
    from diffusers.guiders import ClassifierFreeGuidance

    from lowbit_video.models.base import ModelInfo
    from lowbit_video.models.pipeline import DiffusersVideoModel
    from lowbit_video.models.tiny_video_cases import build

    transformer, _ = build("HunyuanVideo15Transformer3DModel")
    transformer.register_to_config(target_size=640)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        vae = AutoencoderKLHunyuanVideo15(block_out_channels=(8,) * 5, layers_per_block=1, latent_channels=4)
        pipe = HunyuanVideo15Pipeline(text_encoder=None, tokenizer=None, transformer=transformer, vae=vae,
                                      scheduler=None, text_encoder_2=None, tokenizer_2=None,
                                      guider=ClassifierFreeGuidance(guidance_scale=6.0))
    defaults = call_defaults(HunyuanVideo15Pipeline)
    info = ModelInfo("hunyuanvideo15", "HunyuanVideo-1.5", "test", "-", True, *(defaults[k] for k in (
        "steps", "guidance", "height", "width", "frames")))
    m = DiffusersVideoModel(pipe, info, device=torch.device("cpu"), dtype=torch.float32)
    s = m.resolve_settings()
    assert (s.steps, s.guidance, s.height, s.width, s.frames) == (50, 6.0, 480, 848, 121)
    assert "guidance_scale" not in m.call_kwargs("x", 0, s)
    assert m.resolve_settings(height=240, width=416).height == 240  # the options override
    with pytest.raises(UserError, match="takes its guidance from its guider"):
        m.resolve_settings(guidance=4.0)
