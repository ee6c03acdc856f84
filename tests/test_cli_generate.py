"""`lowbit-video generate / models / adherence` end to end with the shipped tiny-shapes model.

Most calls run the Typer app in-process (CliRunner: the same code path as the command, without
paying the ~5 s torch + diffusers import per call); the acceptance's one-line error and the JSON
rerun also run as real processes. One denoising step keeps it fast (mxattention runs on the exact
reference engine: ~7 s a step on the CPU, FP16 ~0.5 s); the acceptance command itself, at the default
steps, is timed in results/demo-cpu.md."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

registry = pytest.importorskip("lowbit_video.models.registry", reason="model registry not available")

from lowbit_video.cli import app  # noqa: E402

PROMPT = "a red circle moving right on a black background"
STEPS = "1"
runner = CliRunner()


def invoke_json(*args):
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.stderr
    return json.loads(res.stdout)  # exactly one JSON object on stdout


def cli(*args):
    return subprocess.run([sys.executable, "-m", "lowbit_video", *args], capture_output=True, text=True)


def sha(run):
    return json.loads((Path(run["dir"]) / "meta.json").read_text())["frames_sha256"]


def grid_args(out, *recipes):
    rec = [a for r in recipes for a in ("--recipe", r)]
    return ("generate", *rec, "--prompt", PROMPT, "--seeds", "0", "--steps", STEPS, "--out", str(out))


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    out = tmp_path_factory.mktemp("D")
    return out, invoke_json(*grid_args(out, "fp16", "mxattention"))


def test_grid_writes_mp4_strip_and_meta_per_run(grid):
    out, first = grid
    assert (first["generated"], first["skipped"]) == (2, 0)
    for run in first["runs"]:
        d = Path(run["dir"])
        assert {p.name for p in d.iterdir()} == {"video.mp4", "frames.png", "frames.npz", "meta.json"}
        meta = json.loads((d / "meta.json").read_text())
        assert meta["recipe"]["name"] == run["recipe"] and meta["steps"] == int(STEPS) and meta["seed"] == 0
        assert meta["model"]["name"] == "tiny-shapes" and meta["model"]["describe"]["num_blocks"] == 6
        assert meta["versions"]["diffusers"] and meta["timings"]["sample_s"] > 0
        calls = meta["attention_calls"]  # the recipe really ran: mxattention quantizes, fp16 does not
        assert (calls["quantized"] > 0) == (run["recipe"] == "mxattention")
    fp16, mx = first["runs"]
    assert sha(fp16) != sha(mx)  # both exist, the recipe changes the frames


def test_same_command_again_does_nothing(grid):
    out, first = grid
    res = cli(*grid_args(out, "fp16", "mxattention"), "--json")  # a real process: stdout is one JSON object
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert (data["generated"], data["skipped"]) == (0, 2)
    assert [r["status"] for r in data["runs"]] == ["skipped", "skipped"]
    assert "Traceback" not in res.stderr
    text = cli(*grid_args(out, "fp16", "mxattention"))
    assert "2 runs already complete; nothing to do" in text.stdout and "2 of 2 runs already complete" in text.stderr


def test_fresh_directory_gives_identical_frames(grid, tmp_path):
    _, first = grid
    fresh = invoke_json(*grid_args(tmp_path, "fp16"))
    assert sha(fresh["runs"][0]) == sha(first["runs"][0])


def test_adherence_of_the_runs(grid):
    out, first = grid
    data = invoke_json("adherence", str(out))
    assert data["n"] == 2
    assert all(0.0 <= data[k] <= 1.0 for k in ("color_accuracy", "motion_accuracy", "shape_accuracy"))


def test_models_lists_where_weights_come_from():
    rows = invoke_json("models")["models"]
    by = {m["name"]: m for m in rows}
    assert {"tiny-shapes", "wan2.1-t2v-1.3b", "wan2.1-t2v-14b", "hunyuanvideo"} <= set(by)
    assert not by["tiny-shapes"]["needs_path"] and "shipped" in by["tiny-shapes"]["weights"]
    assert by["wan2.1-t2v-14b"]["needs_path"]
    text = runner.invoke(app, ["models"]).stdout
    assert "tiny-shapes" in text and "wan2.1-t2v-14b" in text
    flat = " ".join(text.split())  # the table wraps
    assert "any diffusers text-to-video pipeline folder also runs: --model-path DIR without --model" in flat
    assert "--model-path DIR without --model" in invoke_json("models")["pipeline_folders"]


@pytest.mark.parametrize("args,needle", [
    (["--model", "wan2.1-t2v-14b", "--model-path", "/nonexistent"], "/nonexistent"),
    (["--model", "wan2.1-t2v-14b"], "--model-path"),
    (["--model", "no-such-model"], "no-such-model"),
    (["--frames", "4"], "tiny-shapes generates 8 frames"),
])
def test_errors_are_one_line(tmp_path, args, needle):
    res = runner.invoke(app, ["generate", *args, "--steps", "1", "--out", str(tmp_path)])
    # progress ("loaded ...", and the timestamped lines stderr gets when it is no terminal) aside
    lines = [l for l in res.stderr.splitlines() if l.strip() and not l.startswith(("loaded ", "["))]
    assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], res.stderr


def test_missing_checkpoint_is_one_line_in_a_real_process(tmp_path):
    res = cli("generate", "--model", "wan2.1-t2v-14b", "--model-path", "/nonexistent", "--out", str(tmp_path))
    lines = [l for l in res.stderr.splitlines() if l.strip()]
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert len(lines) == 1 and lines[0].startswith("error: ") and "/nonexistent" in lines[0]
    assert not any(tmp_path.iterdir())
