"""VBench's standard prompt suite: `generate --prompts vbench[:<dimension>]`, the suite entry in each
run's meta, and `evaluate` scoring a suite-only dimension in VBench's standard mode (tiny random Wan
runs; random CLIP weights under the real file name, as in test_vbench.py: structure, not values)."""

import importlib.util
import json
import math
import sys
import warnings
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from lowbit_video import vbench_suite  # noqa: E402
from lowbit_video.errors import UserError  # noqa: E402
from lowbit_video.generate import GenerateConfig, generate, resolve  # noqa: E402

HAVE_VBENCH = all(importlib.util.find_spec(m) is not None for m in ("vbench", "decord", "cv2"))
pytestmark = pytest.mark.skipif(not HAVE_VBENCH, reason="VBench stack not installed (scripts/install-vbench.sh)")

ALL_DIMENSIONS = {"subject_consistency", "background_consistency", "temporal_flickering", "motion_smoothness",
                  "dynamic_degree", "aesthetic_quality", "imaging_quality", "human_action", "temporal_style",
                  "overall_consistency", "object_class", "multiple_objects", "color", "spatial_relationship",
                  "scene", "appearance_style"}
WAN_SMALL = dict(steps=1, height=32, width=32, frames=9, guidance=1.0)


def _vbench_file():
    return json.loads((Path(importlib.util.find_spec("vbench").origin).parent / "VBench_full_info.json").read_text())


@pytest.fixture(scope="module")
def wan_folder(tmp_path_factory):
    from lowbit_video.models.tiny_checkpoints import save_tiny_wan

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return save_tiny_wan(tmp_path_factory.mktemp("wan") / "wan21")


# ------------------------------------------------------------------------------------- the suite


def test_a_dimension_gives_vbench_own_prompts_for_it_in_its_order():
    raw = _vbench_file()
    expected = list(dict.fromkeys(e["prompt_en"] for e in raw if "color" in e["dimension"]))
    got = vbench_suite.suite_prompts("vbench:color")
    assert [p.prompt for p in got] == expected and len(expected) == 85
    assert all("color" in p.dimensions and "color" in p.auxiliary_info for p in got)
    assert [p.prompt for p in vbench_suite.suite_prompts("vbench:color", limit=3)] == expected[:3]


def test_whole_suite_is_every_prompt_once_and_a_small_limit_reaches_every_dimension():
    raw = _vbench_file()
    every = vbench_suite.suite_prompts("vbench")
    assert [p.prompt for p in every] == list(dict.fromkeys(e["prompt_en"] for e in raw))
    # a prompt listed under several entries carries all their dimensions
    scene = next(p for p in every if p.prompt == "alley")
    assert set(scene.dimensions) == {"scene", "background_consistency"}
    few = vbench_suite.suite_prompts("vbench", limit=16)
    assert len(few) == 16 and len({p.prompt for p in few}) == 16
    assert {d for p in few for d in p.dimensions} == ALL_DIMENSIONS


def test_bad_suite_requests_are_one_line_user_errors():
    with pytest.raises(UserError, match="no dimension 'colour'.*color"):
        vbench_suite.suite_prompts("vbench:colour")
    with pytest.raises(UserError, match="--prompt-limit must be positive"):
        vbench_suite.suite_prompts("vbench", limit=0)
    assert vbench_suite.is_suite("vbench") and vbench_suite.is_suite("vbench:scene")
    assert not vbench_suite.is_suite("prompts/vbench.txt") and not vbench_suite.is_suite(None)


# ------------------------------------------------------------------------------------- generate


def test_generate_resolves_suite_prompts_with_their_entries(wan_folder, tmp_path):
    cfg = GenerateConfig(model="wan2.1-t2v-1.3b", model_path=str(wan_folder), prompts_file="vbench:scene",
                         prompt_limit=2, out=tmp_path)
    res = resolve(cfg)
    assert res.prompts == ["alley", "amusement park"]
    assert res.suite["alley"] == {"suite": "VBench_full_info.json", "prompt_en": "alley",
                                  "dimension": ["scene", "background_consistency"],
                                  "auxiliary_info": {"scene": {"scene": {"scene": "alley"}}}}
    # a prompts file is cut by --prompt-limit too, and carries no suite entry
    plain = tmp_path / "p.txt"
    plain.write_text("a cat\na dog\na bird\n")
    res = resolve(GenerateConfig(model="wan2.1-t2v-1.3b", model_path=str(wan_folder), prompts_file=str(plain),
                                 prompt_limit=2, out=tmp_path))
    assert res.prompts == ["a cat", "a dog"] and res.suite == {}


def test_tiny_shapes_refuses_the_suite_with_one_line(tmp_path):
    with pytest.raises(UserError, match="outside tiny-shapes' prompt grammar") as e:
        resolve(GenerateConfig(prompts_file="vbench:color", out=tmp_path))
    assert "\n" not in str(e.value)


@pytest.mark.slow
def test_suite_run_is_scored_in_vbench_standard_mode(wan_folder, tmp_path):
    import vbench_fixtures as fx

    from lowbit_video import runstore
    from lowbit_video.evaluate import evaluate_runs
    from lowbit_video.metrics import vbench as vb

    out = tmp_path / "runs"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        generate(GenerateConfig(model="wan2.1-t2v-1.3b", model_path=str(wan_folder), prompts_file="vbench:appearance_style",
                                prompt_limit=1, out=out, **WAN_SMALL))
        generate(GenerateConfig(model="wan2.1-t2v-1.3b", model_path=str(wan_folder), prompts=["a cat in the rain"],
                                out=out, **WAN_SMALL))
    runs = {runstore.read_meta(d)["prompt"]: d for d in runstore.find_runs([out])}
    suite_prompt = "A beautiful coastal beach in spring, waves lapping on sand, Van Gogh style"
    suite_run, free_run = runs[suite_prompt], runs["a cat in the rain"]
    meta = runstore.read_meta(suite_run)
    assert meta["vbench"]["dimension"] == ["appearance_style"]
    assert meta["vbench"]["auxiliary_info"] == {"appearance_style": {"appearance_style": "Van Gogh style"}}
    assert runstore.read_meta(free_run)["vbench"] is None

    # the real worker in vbench_standard mode, random CLIP ViT-B/32 under its real name (hash not checked)
    root = tmp_path / "weights"
    fx._in_subprocess(["write_random_clip_b32"], root)
    videos = [vb.VBenchVideo("suite", suite_run / "video.mp4", suite_prompt, suite=meta["vbench"]),
              vb.VBenchVideo("free", free_run / "video.mp4", "a cat in the rain")]
    res = vb.score_videos(videos, ["appearance_style"], root, allow_unverified_weights=True)
    value = res["suite"]["appearance_style"]
    assert isinstance(value, float) and math.isfinite(value), value  # CLIP logit / 100 of random weights
    assert "vbench:appearance_style" in res["free"]["appearance_style"]["unavailable"]

    # evaluate (no test override): the free-text run is told why, the suite run gets the weights check
    results = {r["run"]["prompt"]: r for r in evaluate_runs([out], metrics=["appearance_style", "color"],
                                                            weights_dir=str(root))}
    free, suite = results["a cat in the rain"]["metrics"], results[suite_prompt]["metrics"]
    assert "not from VBench's suite" in free["appearance_style"]["unavailable"]
    assert "ViT-B-32.pt" in suite["appearance_style"]["unavailable"]  # the random file fails the manifest hash
    assert "unavailable" in suite["color"]


def test_ablate_passes_the_suite_limit_and_checkpoint_to_its_runs(wan_folder, tmp_path):
    from lowbit_video.ablate.common import AblateOptions, command
    from lowbit_video.ablate.common import resolve as resolve_study
    from lowbit_video.ablate.studies import load_study

    study = load_study("table3")
    r = resolve_study(study, AblateOptions(model="wan2.1-t2v-1.3b", model_path=str(wan_folder),
                                           prompts="vbench:scene", prompt_limit=2, out=str(tmp_path)))
    res = resolve(r.generate_config(recipes=["fp16"], out=tmp_path))
    assert res.prompts == ["alley", "amusement park"] and set(res.suite) == set(res.prompts)
    line = command(study, r)
    assert f"--model-path {wan_folder}" in line and "--prompts vbench:scene --prompt-limit 2" in line


def test_cli_generate_takes_the_suite_and_a_limit(wan_folder, tmp_path):
    from typer.testing import CliRunner

    from lowbit_video import runstore
    from lowbit_video.cli import app

    base = ["generate", "--model", "wan2.1-t2v-1.3b", "--model-path", str(wan_folder), "--steps", "1",
            "--height", "32", "--width", "32", "--frames", "9", "--guidance", "1", "--out", str(tmp_path)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = CliRunner().invoke(app, [*base, "--prompts", "vbench:color", "--prompt-limit", "1", "--json"])
    assert res.exit_code == 0, res.output
    (run,) = runstore.find_runs([tmp_path])
    meta = runstore.read_meta(run)
    assert meta["prompt"] == "a red bicycle" and meta["vbench"]["auxiliary_info"] == {"color": {"color": "red"}}
    bad = CliRunner().invoke(app, [*base, "--prompts", "vbench:colour"])
    assert bad.exit_code == 2 and "no dimension 'colour'" in bad.output
