"""`generate --model-path DIR --video FILE` on video-to-video pipeline folders (tiny random-weight folders of the real
classes, models/tiny_pipelines.py): the clip is diffusers' own call with that video and has its frames, the video
names the runs, and the mistakes around it are one line."""

import hashlib
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("diffusers")
pytest.importorskip("transformers")

from PIL import Image  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from lowbit_video.cli import app  # noqa: E402
from lowbit_video.models.tiny_pipelines import save_tiny_pipeline  # noqa: E402
from lowbit_video.video_io import write_frames_npz, write_mp4  # noqa: E402

PROMPT = "a red circle moving right"
runner = CliRunner()
CASES = {"cogvideox-v2v": "CogVideoXVideoToVideoPipeline", "wan-v2v": "WanVideoToVideoPipeline",
         "ltx-condition": "LTXConditionPipeline"}
# LTX-Video's condition pipeline takes a frame count beside the video (which conditions the clip from frame 0)
TAKES_FRAMES = {"ltx-condition"}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("v2v")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        folders = {name: save_tiny_pipeline(name, root / name) for name in CASES}
        folders["ltx-i2v"] = save_tiny_pipeline("ltx-i2v", root / "ltx-i2v")  # an image-to-video one
    rng = np.random.default_rng(0)
    frames = (rng.random((9, 32, 32, 3)) * 255).astype(np.uint8)
    videos = {"clip": root / "clip.npz", "ten": root / "ten.npz", "movie": root / "movie.mp4"}
    write_frames_npz(frames, videos["clip"])
    write_frames_npz(np.concatenate([frames, frames[:1]]), videos["ten"])
    write_mp4(frames, videos["movie"])
    return folders, videos, frames


def _generate(folder, out, *extra, recipes=("fp16", "sage2-int8")):
    args = ["generate", "--model-path", str(folder), *[a for r in recipes for a in ("--recipe", r)], "--steps", "2",
            "--prompt", PROMPT, "--seeds", "1", "--out", str(out), "--height", "32", "--width", "32", *extra, "--json"]
    return runner.invoke(app, args)


def _one_error_line(res):
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    assert res.exit_code == 2 and errors == lines[-1:] and "Traceback" not in res.stderr, res.stderr
    return errors[0]


@pytest.mark.parametrize("name", list(CASES))
def test_a_video_to_video_folder_generates_diffusers_clip_of_the_video(world, tmp_path, name):
    folders, videos, frames = world
    given_frames = ["--frames", "9"] if name in TAKES_FRAMES else []
    res = _generate(folders[name], tmp_path / "runs", "--video", str(videos["clip"]), *given_frames)
    assert res.exit_code == 0, res.stderr
    runs = {r["recipe"]: Path(r["dir"]) for r in json.loads(res.stdout)["runs"]}
    digest = hashlib.sha256(videos["clip"].read_bytes()).hexdigest()
    model = f"{CASES[name].removesuffix('Pipeline').lower()}-clip-{digest[:10]}"
    assert {d.relative_to(tmp_path / "runs").parts[0] for d in runs.values()} == {model}
    metas = {r: json.loads((d / "meta.json").read_text()) for r, d in runs.items()}
    assert metas["fp16"]["model"]["describe"]["video"] == {"path": str(videos["clip"].resolve()), "sha256": digest}
    assert metas["fp16"]["size"]["frames"] == 9  # the video's, or as given

    # fp16 is diffusers' own call with that video (bfloat16, the seed's CPU generator), up to the 8-bit rounding
    import diffusers

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        extra = {}
        if name.startswith("wan"):  # Wan's VAE in float32, as its examples load it
            extra["vae"] = diffusers.AutoencoderKLWan.from_pretrained(str(folders[name]), subfolder="vae",
                                                                      torch_dtype=torch.float32)
        pipe = getattr(diffusers, CASES[name]).from_pretrained(str(folders[name]), torch_dtype=torch.bfloat16,
                                                               **extra)
        pipe.set_progress_bar_config(disable=True)
        with torch.no_grad():
            plain = pipe(prompt=PROMPT, video=[Image.fromarray(f) for f in frames], height=32, width=32,
                         num_inference_steps=2, guidance_scale=metas["fp16"]["guidance"],
                         generator=torch.Generator("cpu").manual_seed(1), output_type="np",
                         **({"num_frames": 9} if name in TAKES_FRAMES else {})).frames
    plain = np.clip(np.asarray(plain, np.float32)[0], 0, 1)
    ours = np.load(runs["fp16"] / "frames.npz")["frames"]
    assert ours.shape == plain.shape == (9, 32, 32, 3)
    assert np.abs(ours.astype(np.int16) - np.round(plain * 255).astype(np.int16)).max() <= 1

    calls = metas["sage2-int8"]["attention_calls"]
    assert calls["quantized"] > 0 and calls["fallback"] == 0 and calls["engine"] == 0
    assert not np.array_equal(np.load(runs["sage2-int8"] / "frames.npz")["frames"], ours)


def test_an_mp4_conditions_the_run_as_its_decoded_frames(world, tmp_path):
    folders, videos, _ = world
    res = _generate(folders["cogvideox-v2v"], tmp_path / "runs", "--video", str(videos["movie"]), recipes=("fp16",))
    assert res.exit_code == 0, res.stderr
    run = Path(json.loads(res.stdout)["runs"][0]["dir"])
    meta = json.loads((run / "meta.json").read_text())
    assert meta["size"]["frames"] == 9 and meta["model"]["describe"]["video"]["path"] == str(videos["movie"])


@pytest.mark.parametrize("case, needle", [
    ("no-video", "CogVideoXVideoToVideoPipeline needs video besides the prompt (a video-to-video pipeline: "
                 "generate --video FILE)"),
    ("image-to-video", "LTXImageToVideoPipeline takes no video (an image-to-video pipeline); leave --video out"),
    ("frames", "CogVideoXVideoToVideoPipeline takes its frames from the video (9); leave --frames out"),
    ("ten-frames", "CogVideoXVideoToVideoPipeline takes the video's frames, which must be 4k + 1; the video has 10"),
    ("both", "--image and --video: a pipeline is conditioned on one of them"),
    ("named-model", "--video conditions a video-to-video pipeline folder: pass --model-path DIR without --model"),
    ("not-a-video", "--video"),
])
def test_video_mistakes_are_one_line_and_write_nothing(world, tmp_path, case, needle):
    folders, videos, _ = world
    junk = tmp_path / "junk.mp4"
    junk.write_text("not a video")
    cog = folders["cogvideox-v2v"]
    args = {"no-video": (cog,),
            "image-to-video": (folders["ltx-i2v"], "--video", str(videos["clip"])),
            "frames": (cog, "--video", str(videos["clip"]), "--frames", "13"),
            "ten-frames": (cog, "--video", str(videos["ten"])),
            "both": (cog, "--video", str(videos["clip"]), "--image", str(junk)),
            "named-model": (cog, "--model", "wan2.1-t2v-1.3b", "--video", str(videos["clip"])),
            "not-a-video": (cog, "--video", str(junk))}[case]
    res = _generate(args[0], tmp_path / "runs", *args[1:], recipes=("fp16",))
    line = _one_error_line(res)
    assert needle in line
    if case == "not-a-video":
        assert "not a video ffmpeg can read" in line
    assert not (tmp_path / "runs").exists()
