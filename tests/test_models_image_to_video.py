"""`generate --model-path DIR --image FILE` on image-to-video pipeline folders (tiny random-weight folders of the real
classes, models/tiny_pipelines.py): the clip is diffusers' own call with that image, the image names the runs, and
the mistakes around it are one line."""

import hashlib
import json
import shlex
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("diffusers")
pytest.importorskip("transformers")

from conditioned_helpers import (PROMPT, check_fp16_is_diffusers_and_quantized_differs,  # noqa: E402
                                 conditioned_runs, diffusers_clip, generate, one_error_line, runner,
                                 save_folders)
from PIL import Image  # noqa: E402

from lowbit_video.cli import app  # noqa: E402

SIZE = ["--height", "32", "--width", "32", "--frames", "9"]
CASES = {"ltx-i2v": "LTXImageToVideoPipeline", "wan2.2-ti2v-i2v": "WanImageToVideoPipeline",
         "cogvideox-i2v": "CogVideoXImageToVideoPipeline", "wan2.1-i2v": "WanImageToVideoPipeline",
         "skyreels-v2-i2v": "SkyReelsV2ImageToVideoPipeline", "ltx-condition": "LTXConditionPipeline",
         "hunyuanvideo-1.5-i2v": "HunyuanVideo15ImageToVideoPipeline"}
# HunyuanVideo-1.5's pipeline takes no height or width: it sizes the clip from the image (32 x 32) and its
# transformer's target size (16), to 16 x 16
SIZED_BY_IMAGE = {"hunyuanvideo-1.5-i2v": (16, 16)}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("i2v")
    folders = save_folders(root, [*CASES, "mochi"])  # mochi: a text-to-video one
    rng = np.random.default_rng(0)
    images = {}
    for stem in ("cat", "dog"):
        images[stem] = root / f"{stem}.png"
        Image.fromarray((rng.random((32, 32, 3)) * 255).astype(np.uint8)).save(images[stem])
    return folders, images


@pytest.mark.parametrize("name", list(CASES))
def test_an_image_to_video_folder_generates_diffusers_clip_of_the_image(world, tmp_path, name):
    folders, images = world
    size = SIZE if name not in SIZED_BY_IMAGE else ["--frames", "9"]
    height, width = SIZED_BY_IMAGE.get(name, (32, 32))
    res = generate(folders[name], tmp_path / "runs", *size, "--image", str(images["cat"]))
    runs, metas = conditioned_runs(res, tmp_path / "runs", CASES[name], "image", images["cat"])
    # fp16 is diffusers' own call with that image, up to the 8-bit rounding
    sized = {"height": 32, "width": 32} if name not in SIZED_BY_IMAGE else {}
    guidance = {"guidance_scale": metas["fp16"]["guidance"]} if name != "hunyuanvideo-1.5-i2v" else {}
    plain = diffusers_clip(CASES[name], folders[name], image=Image.open(images["cat"]).convert("RGB"), num_frames=9,
                           **sized, **guidance)
    check_fp16_is_diffusers_and_quantized_differs(runs, metas, plain, (9, height, width, 3))


def test_another_image_is_another_run_and_the_same_image_resumes(world, tmp_path):
    folders, images = world
    out = tmp_path / "runs"
    first = generate(folders["ltx-i2v"], out, *SIZE, "--image", str(images["cat"]), recipes=("fp16",))
    again = generate(folders["ltx-i2v"], out, *SIZE, "--image", str(images["cat"]), recipes=("fp16",))
    other = generate(folders["ltx-i2v"], out, *SIZE, "--image", str(images["dog"]), recipes=("fp16",))
    assert first.exit_code == again.exit_code == other.exit_code == 0
    assert (json.loads(again.stdout)["generated"], json.loads(again.stdout)["skipped"]) == (0, 1)
    assert json.loads(other.stdout)["generated"] == 1
    dirs = [json.loads(r.stdout)["runs"][0]["dir"] for r in (first, other)]
    assert dirs[0] != dirs[1]
    frames = [np.load(Path(d) / "frames.npz")["frames"] for d in dirs]
    assert not np.array_equal(*frames)


@pytest.mark.parametrize("case, needle", [
    ("no-image", "LTXImageToVideoPipeline needs image besides the prompt (an image-to-video pipeline: generate --image FILE)"),
    ("text-to-video", "MochiPipeline takes no image (a text-to-video pipeline); leave --image out"),
    ("named-model", "--image conditions an image-to-video pipeline folder: pass --model-path DIR without --model"),
    ("missing", "nothing.png: no such file"),
    ("not-an-image", "not an image PIL can read"),
    ("size-of-image", "HunyuanVideo15ImageToVideoPipeline takes its size from the image (16x16); leave --height and "
                      "--width out"),
])
def test_image_mistakes_are_one_line_and_write_nothing(world, tmp_path, case, needle):
    folders, images = world
    junk = tmp_path / "junk.png"
    junk.write_text("not a picture")
    args = {"no-image": (folders["ltx-i2v"],),
            "text-to-video": (folders["mochi"], "--image", str(images["cat"])),
            "named-model": (folders["ltx-i2v"], "--model", "wan2.1-t2v-1.3b", "--image", str(images["cat"])),
            "missing": (folders["ltx-i2v"], "--image", str(tmp_path / "nothing.png")),
            "not-an-image": (folders["ltx-i2v"], "--image", str(junk)),
            "size-of-image": (folders["hunyuanvideo-1.5-i2v"], "--image", str(images["cat"]))}[case]
    res = generate(args[0], tmp_path / "runs", *SIZE, *args[1:], recipes=("fp16",))
    assert needle in one_error_line(res)
    assert not (tmp_path / "runs").exists()


def test_profile_of_an_image_to_video_folder_writes_a_policy_generate_runs_with_the_image(world, tmp_path):
    folders, images = world
    res = runner.invoke(app, ["profile", "--model-path", str(folders["ltx-i2v"]), "--image", str(images["cat"]),
                              "--recipe", "sage2-int8", "--prompt", PROMPT, "--seeds", "1", "--steps", "2", *SIZE,
                              "--out", str(tmp_path / "p"), "--budget", "fp16-share=0.5", "--json"])
    assert res.exit_code == 0, res.stderr
    prof = json.loads(res.stdout)
    assert prof["num_steps"] == 2 and all(c["calls"] > 0 for c in prof["cells"])
    command = shlex.split(prof["policy"]["generate"])
    assert command[command.index("--image") + 1] == str(images["cat"])
    ran = runner.invoke(app, [*command[1:], "--out", str(tmp_path / "runs"), "--json"])
    assert ran.exit_code == 0, ran.stderr
    models = {Path(r["dir"]).relative_to(tmp_path / "runs").parts[0] for r in json.loads(ran.stdout)["runs"]}
    digest = hashlib.sha256(images["cat"].read_bytes()).hexdigest()
    assert models == {f"ltximagetovideo-cat-{digest[:10]}"}


def test_a_study_runs_on_an_image_to_video_folder_conditioned_on_the_image(world, tmp_path):
    """ablate --model-path DIR --image FILE (no --model): every run of the study is the folder's pipeline
    conditioned on the image, filed under its name, and the study's command says so."""
    from lowbit_video.ablate import AblateOptions, run_study

    folders, images = world
    prompts = tmp_path / "prompts.txt"
    prompts.write_text(PROMPT + "\n")
    res = run_study("table3", AblateOptions(model_path=str(folders["ltx-i2v"]), image=str(images["cat"]),
                                            prompts=str(prompts), seeds=[0], steps=2, out=str(tmp_path / "out"),
                                            height=32, width=32, frames=9, device="cpu"))
    digest = hashlib.sha256(images["cat"].read_bytes()).hexdigest()
    model = f"ltximagetovideo-cat-{digest[:10]}"
    assert res["model"] == model and res["generated"] == 5
    metas = [json.loads(p.read_text()) for p in (tmp_path / "out" / model).rglob("meta.json")]
    assert len(metas) == 5 and {m["recipe"]["name"] for m in metas} >= {"fp16", "mxattention"}
    assert all(m["model"]["describe"]["image"]["sha256"] == digest for m in metas)
    command = (tmp_path / "out" / "table3.md").read_text().split("Command: `", 1)[1].split("`", 1)[0]
    words = shlex.split(command)
    assert words[:3] == ["lowbit-video", "ablate", "table3"] and "--model" not in words
    assert words[words.index("--model-path") + 1] == str(folders["ltx-i2v"])
    assert words[words.index("--image") + 1] == str(images["cat"])
    rows = {row["config"]: row for row in res["rows"]}
    assert rows["Full"]["psnr"] < 99  # the quantized clips differ from the fp16 one


def test_a_study_with_image_and_a_named_model_is_one_line(world, tmp_path):
    folders, images = world
    res = runner.invoke(app, ["ablate", "table3", "--model", "wan2.1-t2v-1.3b", "--model-path",
                              str(folders["ltx-i2v"]), "--image", str(images["cat"]), "--out", str(tmp_path / "o")])
    assert "--image conditions an image-to-video pipeline folder" in one_error_line(res)
    assert not (tmp_path / "o").exists()
