"""`lowbit-video profile` on a tiny random-weight Wan2.1 checkpoint folder (the path a full-size checkpoint takes):
profile values against the reference engine on captured Q/K/V, the PSNR budget met by the clips `generate` makes
with the written recipe, and the recipe's round trip through `recipes validate`."""

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

pytest.importorskip("diffusers")
pytest.importorskip("transformers")

from lowbit_video.attention import attend  # noqa: E402
from lowbit_video.cli import app  # noqa: E402
from lowbit_video.metrics.paired import psnr  # noqa: E402
from lowbit_video.models.capture import load_capture  # noqa: E402
from lowbit_video.models.tiny_checkpoints import save_tiny_wan  # noqa: E402
from lowbit_video.video_io import read_frames_npz  # noqa: E402

runner = CliRunner()
PROMPT = "a red circle moving left"
SIZE = ["--height", "32", "--width", "32", "--frames", "9", "--steps", "2"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return save_tiny_wan(tmp_path_factory.mktemp("wan") / "wan21")


def _invoke(*args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.stderr
    return json.loads(res.stdout)


def _model(folder):
    return ["--model", "wan2.1-t2v-1.3b", "--model-path", str(folder)]


def test_wan_profile_equals_the_reference_engine_on_captured_qkv(folder, tmp_path):
    # guidance 1: no unconditional forward, so each cell is the one conditional call per seed that is captured
    prof = _invoke("profile", *_model(folder), "--recipe", "mxattention", "--prompt", PROMPT, *SIZE,
                   "--seeds", "0", "1", "--guidance", "1", "--out", str(tmp_path / "p"))
    assert prof["num_blocks"] == 2 and prof["num_steps"] == 2 and prof["attention_types"] == ["self"]
    _invoke("generate", *_model(folder), "--recipe", "fp16", "--prompt", PROMPT, *SIZE, "--seeds", "0", "1",
            "--guidance", "1",
            "--out", str(tmp_path / "runs"), "--capture-qkv", str(tmp_path / "cap"))
    cells = {(c["block"], c["step"]): c for c in prof["cells"]}
    by_cell: dict = {}
    for index in (tmp_path / "cap").rglob("index.json"):
        for e in json.loads(index.read_text())["entries"]:
            t = load_capture(index.parent / e["file"])
            eng = attend(t["q"], t["k"], t["v"], "mxattention", layout="BNHD", backend="reference").double()
            den = attend(t["q"], t["k"], t["v"], "fp16", layout="BNHD").double()
            rel = float((eng - den).norm() / den.norm())
            by_cell.setdefault((e["block"], e["step"]), []).append(rel)
    assert set(by_cell) == set(cells) and len(by_cell) == 4
    for key, rels in by_cell.items():
        assert len(rels) == cells[key]["calls"] == 2  # seeds 0 and 1
        assert abs(np.mean(rels) - cells[key]["rel_l2_mean"]) < 1e-4
        assert abs(max(rels) - cells[key]["rel_l2_max"]) < 1e-4


def test_wan_psnr_budget_is_met_by_the_clips_generate_makes(folder, tmp_path):
    target = 45.0
    prof = _invoke("profile", *_model(folder), "--recipe", "mxattention", "--prompt", PROMPT, *SIZE, "--seeds", "0",
                   "--out", str(tmp_path / "p"), "--budget", f"psnr={target}", "--search-evals", "3")
    policy = prof["policy"]
    path = Path(policy["file"])
    assert _invoke("recipes", "validate", str(path))["valid"]
    result = _invoke("generate", *_model(folder), "--recipe", "fp16", str(path), "--prompt", PROMPT, *SIZE,
                     "--seeds", "0", "--out", str(tmp_path / "runs"))
    runs = {(r["recipe"], r["seed"]): Path(r["dir"]) for r in result["runs"]}
    scores = [psnr(read_frames_npz(runs[(policy["recipe"], s)] / "frames.npz"),
                   read_frames_npz(runs[("fp16", s)] / "frames.npz")) for s in (0,)]
    assert np.mean(scores) >= target
    kept = len(policy["high_precision_calls"])
    tried = {t["kept"]: t["psnr"] for t in policy["trials"]}
    if kept in tried:  # the search scored exactly these clips
        assert abs(tried[kept] - np.mean(scores)) < 1e-9
    # every trial that kept fewer of the most sensitive cells and was scored missed the target
    assert all(v < target for k, v in tried.items() if k < kept)
