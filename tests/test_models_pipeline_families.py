"""`generate --model-path DIR` on the text-to-video pipelines of the families without a named model: tiny
random-weight folders (models/tiny_pipelines.py) run through the command, each against diffusers' own pipeline
called on the same folder with the seed's CPU generator."""

import inspect
import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("diffusers")
pytest.importorskip("transformers")

from typer.testing import CliRunner  # noqa: E402

from lowbit_video.cli import app  # noqa: E402
from lowbit_video.models.tiny_pipelines import LATTE_FRAMES, TINY_PIPELINES, save_tiny_pipeline  # noqa: E402

PROMPT = "a red circle moving right"
runner = CliRunner()

# name -> (pipeline class, the size asked (None: the pipeline's defaults), the frame argument of its __call__, the
# arguments diffusers' pipeline needs beside them, the clip it returns (frames, height, width))
CASES = {
    "mochi": ("MochiPipeline", (7, 32, 32), "num_frames", {}, (7, 32, 32)),  # VAE 6x8x8: 6k + 1 frames
    # height, width, frames from the transformer config: sample 16 x 16 latents x 8, 6 latent frames x 4
    "allegro": ("AllegroPipeline", None, "num_frames", {}, (24, 128, 128)),
    "latte": ("LattePipeline", (LATTE_FRAMES, 32, 32), "video_length", {}, (LATTE_FRAMES, 32, 32)),
    "skyreels-v2": ("SkyReelsV2Pipeline", (9, 32, 32), "num_frames", {}, (9, 32, 32)),
    "skyreels-v2-df": ("SkyReelsV2DiffusionForcingPipeline", (9, 32, 32), "num_frames", {}, (9, 32, 32)),
    "helios": ("HeliosPipeline", (33, 32, 32), "num_frames", {}, (33, 32, 32)),  # one chunk of 33 frames
    # resolution binning off: it would render 32 x 32 at its 480p bin (624 x 624), which its own check refuses
    "sana-video": ("SanaVideoPipeline", (9, 32, 32), "frames", {"use_resolution_binning": False}, (9, 32, 32)),
    "motif-video": ("MotifVideoPipeline", (9, 32, 32), "num_frames", {}, (9, 32, 32)),
    # its encode_prompt iterates over the negative prompt under guidance: None fails there
    "easyanimate": ("EasyAnimatePipeline", (9, 32, 32), "num_frames", {"negative_prompt": ""}, (9, 32, 32)),
    "hunyuanvideo-1.5": ("HunyuanVideo15Pipeline", (9, 32, 32), "num_frames", {}, (9, 32, 32)),  # VAE 2x4x4
    "kandinsky5": ("Kandinsky5T2VPipeline", (5, 32, 32), "num_frames", {}, (5, 32, 32)),
    "ltx2": ("LTX2Pipeline", (9, 32, 32), "num_frames", {}, (9, 32, 32)),  # the video of its audio and video
}


def test_every_tiny_pipeline_has_a_case():
    assert set(CASES) == set(TINY_PIPELINES)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("families")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {name: save_tiny_pipeline(name, root / name) for name in CASES}


def _size_args(size):
    if size is None:
        return []
    frames, height, width = size
    return ["--frames", str(frames), "--height", str(height), "--width", str(width)]


def _generate(folder, out, size, *recipes):
    args = ["generate", "--model-path", str(folder), *[a for r in recipes for a in ("--recipe", r)], "--steps", "2",
            "--prompt", PROMPT, "--seeds", "3", "--out", str(out), *_size_args(size), "--json"]
    return runner.invoke(app, args)


def _plain(folder, klass, frames_arg, extra, size, guidance):
    """diffusers' pipeline on the folder in bfloat16 (the dtype generate loads the real models in), called as its
    documentation does, with the seed's CPU generator."""
    import diffusers

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipe = getattr(diffusers, klass).from_pretrained(str(folder), torch_dtype=torch.bfloat16)
        pipe.set_progress_bar_config(disable=True)
        if klass == "AllegroPipeline":
            pipe.vae.enable_tiling()  # its VAE decodes tiled only
        kwargs = dict(prompt=PROMPT, num_inference_steps=2, generator=torch.Generator("cpu").manual_seed(3),
                      output_type="np", **extra)
        if size is not None:
            kwargs.update({frames_arg: size[0], "height": size[1], "width": size[2]})
        if guidance is not None:
            kwargs["guidance_scale"] = guidance
        with torch.no_grad():
            frames = pipe(**kwargs).frames
    return np.clip(np.asarray(frames, np.float32)[0], 0, 1)


@pytest.mark.parametrize("name", list(CASES))
def test_a_family_folder_generates_the_pipelines_clip_and_quantizes_its_attention(folders, tmp_path, name):
    klass, size, frames_arg, extra, clip = CASES[name]
    res = _generate(folders[name], tmp_path / "runs", size, "fp16", "sage2-int8")
    assert res.exit_code == 0, res.stderr
    runs = {r["recipe"]: Path(r["dir"]) for r in json.loads(res.stdout)["runs"]}
    metas = {r: json.loads((d / "meta.json").read_text()) for r, d in runs.items()}
    frames = {r: np.load(d / "frames.npz")["frames"] for r, d in runs.items()}
    assert metas["fp16"]["model"]["pipeline"] == klass
    assert frames["fp16"].shape == (*clip, 3)
    assert [metas["fp16"]["size"][k] for k in ("frames", "height", "width")] == list(clip)

    # the fp16 run is diffusers' own pipeline call, up to the 8-bit rounding of the stored clip
    import diffusers

    takes_guidance = "guidance_scale" in inspect.signature(getattr(diffusers, klass).__call__).parameters
    guidance = metas["fp16"]["guidance"] if takes_guidance else None  # else its guider holds it
    plain = _plain(folders[name], klass, frames_arg, extra, size, guidance)
    assert plain.shape == frames["fp16"].shape
    assert np.abs(frames["fp16"].astype(np.int16) - np.round(plain * 255).astype(np.int16)).max() <= 1

    calls = metas["sage2-int8"]["attention_calls"]
    assert calls["fallback"] == 0 and calls["engine"] == 0 and set(calls["by_step"]) == {"0", "1"}
    assert metas["fp16"]["attention_calls"]["quantized"] == 0
    if name == "sana-video":
        # its self-attention is linear (no softmax to quantize) and the recipe keeps cross-attention in 16 bit:
        # nothing quantized, the clip is fp16's
        assert calls["quantized"] == 0 and set(calls["by_type"]) == {"cross"}
        assert np.array_equal(frames["sage2-int8"], frames["fp16"])
        return
    # the recipe ran: every self-/joint-attention call of both steps quantized, none left to the original kernel
    assert calls["quantized"] > 0
    assert all(v["high"] == 0 for t, v in calls["by_type"].items() if t != "cross")
    assert not np.array_equal(frames["sage2-int8"], frames["fp16"])


def _one_error_line(res):
    """The error line a mistake ends with (after the loading progress of a folder that loads), exit 2."""
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    assert res.exit_code == 2 and errors == lines[-1:] and "Traceback" not in res.stderr, res.stderr
    return errors[0]


@pytest.mark.parametrize("name, size, needle", [
    # Latte's temporal position embedding has the transformer config's video_length (4 here) positions
    ("latte", None, f"LattePipeline generates {LATTE_FRAMES} frames (transformer.config.video_length), got 16"),
    ("mochi", (9, 32, 32), "frames must be 6k + 1 (e.g. 19), got 9"),
    ("sana-video", (10, 32, 32), "frames must be 4k + 1"),
    ("ltx2", (10, 32, 32), "frames must be"),
    ("kandinsky5", (10, 32, 32), "frames must be 4k + 1"),
    ("easyanimate", (10, 32, 32), "frames must be"),
])
def test_a_frame_count_the_family_cannot_render_is_one_line_before_any_run(folders, tmp_path, name, size, needle):
    res = _generate(folders[name], tmp_path / "runs", size, "fp16")
    assert needle in _one_error_line(res)
    assert not (tmp_path / "runs").exists()


def test_a_clip_of_another_size_than_asked_is_one_line_and_files_nothing(folders, tmp_path):
    # Helios renders whole 33-frame chunks: 9 frames asked, 33 returned; no fact says so beforehand, so the check
    # of the pipeline's output catches it, and the run is not filed under 9 frames
    res = _generate(folders["helios"], tmp_path / "runs", (9, 32, 32), "fp16")
    assert "HeliosPipeline returned 33 frames of 32x32 for 9 of 32x32; pass --frames 33" in _one_error_line(res)
    assert not list((tmp_path / "runs").rglob("meta.json"))


def test_a_guider_component_needs_its_guider_config(folders, tmp_path):
    # Motif-Video's guider folder holds guider_config.json and no weights (a config object, not a model)
    d = tmp_path / "motif"
    shutil.copytree(folders["motif-video"], d)
    assert sorted(p.name for p in (d / "guider").iterdir()) == ["guider_config.json"]
    (d / "guider" / "guider_config.json").unlink()
    res = _generate(d, tmp_path / "runs", (9, 32, 32), "fp16")
    assert _one_error_line(res) == (f"error: {d / 'guider'}: no guider_config.json (component 'guider' named in "
                                    "model_index.json)")


def test_a_package_the_pipeline_needs_to_load_is_one_line(folders, tmp_path, monkeypatch):
    # Cosmos's pipelines build NVIDIA's safety checker at load and raise ImportError without its package
    import diffusers

    def needs_guardrail(*args, **kwargs):
        raise ImportError("`cosmos_guardrail` is not installed. Please install it to use the safety checker for "
                          "Cosmos: `pip install cosmos_guardrail`.")

    monkeypatch.setattr(diffusers.MochiPipeline, "from_pretrained", needs_guardrail)
    res = _generate(folders["mochi"], tmp_path / "runs", (7, 32, 32), "fp16")
    assert _one_error_line(res) == (f"error: {folders['mochi']}: cannot load mochi (`cosmos_guardrail` is not "
                                    "installed. Please install it to use the safety checker for Cosmos: "
                                    "`pip install cosmos_guardrail`.)")
    assert not (tmp_path / "runs").exists()
