"""`generate --model-path DIR --video FILE` on video-to-video pipeline folders (tiny random-weight folders of the real
classes, models/tiny_pipelines.py): the clip is diffusers' own call with that video and has its frames, the video
names the runs, and the mistakes around it are one line."""

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("diffusers")
pytest.importorskip("transformers")

from conditioned_helpers import (check_fp16_is_diffusers_and_quantized_differs, conditioned_runs,  # noqa: E402
                                 diffusers_clip, generate, one_error_line, save_folders)
from PIL import Image  # noqa: E402

from lowbit_video.video_io import write_frames_npz, write_mp4  # noqa: E402
CASES = {"cogvideox-v2v": "CogVideoXVideoToVideoPipeline", "wan-v2v": "WanVideoToVideoPipeline",
         "ltx-condition": "LTXConditionPipeline", "wan-vace": "WanVACEPipeline"}
# LTX-Video's condition pipeline and Wan VACE take a frame count beside the video
TAKES_FRAMES = {"ltx-condition", "wan-vace"}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("v2v")
    folders = save_folders(root, [*CASES, "ltx-i2v"])  # ltx-i2v: an image-to-video one
    rng = np.random.default_rng(0)
    frames = (rng.random((9, 32, 32, 3)) * 255).astype(np.uint8)
    videos = {"clip": root / "clip.npz", "ten": root / "ten.npz", "movie": root / "movie.mp4"}
    write_frames_npz(frames, videos["clip"])
    write_frames_npz(np.concatenate([frames, frames[:1]]), videos["ten"])
    write_mp4(frames, videos["movie"])
    return folders, videos, frames


def _generate(folder, out, *extra, recipes=("fp16", "sage2-int8")):
    return generate(folder, out, "--height", "32", "--width", "32", *extra, recipes=recipes)


@pytest.mark.parametrize("name", list(CASES))
def test_a_video_to_video_folder_generates_diffusers_clip_of_the_video(world, tmp_path, name):
    folders, videos, frames = world
    given_frames = ["--frames", "9"] if name in TAKES_FRAMES else []
    res = _generate(folders[name], tmp_path / "runs", "--video", str(videos["clip"]), *given_frames)
    runs, metas = conditioned_runs(res, tmp_path / "runs", CASES[name], "video", videos["clip"])
    assert metas["fp16"]["size"]["frames"] == 9  # the video's, or as given
    # fp16 is diffusers' own call with that video's frames, up to the 8-bit rounding
    plain = diffusers_clip(CASES[name], folders[name], video=[Image.fromarray(f) for f in frames], height=32,
                           width=32, guidance_scale=metas["fp16"]["guidance"],
                           **({"num_frames": 9} if name in TAKES_FRAMES else {}))
    check_fp16_is_diffusers_and_quantized_differs(runs, metas, plain, (9, 32, 32, 3))


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
    ("image-on-video-to-video", "CogVideoXVideoToVideoPipeline takes no image (a video-to-video pipeline); leave "
                                "--image out"),
    ("named-model", "--video conditions a video-to-video pipeline folder: pass --model-path DIR without --model"),
    ("not-a-video", "--video"),
])
def test_video_mistakes_are_one_line_and_write_nothing(world, tmp_path, case, needle):
    folders, videos, _ = world
    junk = tmp_path / "junk.mp4"
    junk.write_text("not a video")
    image = tmp_path / "frame.png"
    Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(image)
    cog = folders["cogvideox-v2v"]
    args = {"no-video": (cog,),
            "image-to-video": (folders["ltx-i2v"], "--video", str(videos["clip"])),
            "frames": (cog, "--video", str(videos["clip"]), "--frames", "13"),
            "ten-frames": (cog, "--video", str(videos["ten"])),
            "both": (cog, "--video", str(videos["clip"]), "--image", str(junk)),
            "image-on-video-to-video": (cog, "--image", str(image)),
            "named-model": (cog, "--model", "wan2.1-t2v-1.3b", "--video", str(videos["clip"])),
            "not-a-video": (cog, "--video", str(junk))}[case]
    res = _generate(args[0], tmp_path / "runs", *args[1:], recipes=("fp16",))
    line = one_error_line(res)
    assert needle in line
    if case == "not-a-video":
        assert "not a video ffmpeg can read" in line
    assert not (tmp_path / "runs").exists()
