"""Study files (recipes/ablations/*.toml): schema, validation, listing, and the CLI's one-line errors."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lowbit_video.ablate import list_studies, load_study
from lowbit_video.ablate.qmax_sweep import fmt_q
from lowbit_video.ablate.studies import study_from_dict
from lowbit_video.ablate.table3 import check_rows, recipe_flags
from lowbit_video.errors import UserError
from lowbit_video.recipes import load_recipe

CLI = [sys.executable, "-m", "lowbit_video"]


def test_the_five_studies_are_listed():
    names = {s.name: s.kind for s in list_studies()}
    assert names == {"table3": "table3", "qmax-sweep": "qmax-sweep", "rowsum": "rowsum",
                     "rotate-table": "rotate-table", "draft-pooling": "draft-pooling"}


def test_table3_has_the_papers_four_rows_in_order():
    s = load_study("table3")
    rows = [(r.config, r.recipe, r.hadamard, r.pnq, r.uos) for r in s.params.rows]
    assert rows == [
        ("Full", "mxattention", True, True, True),
        ("w/o UOS", "mxattention-no-uos", True, True, False),
        ("w/o PNQ and UOS", "mxattention-no-pnq-uos", True, False, False),
        ("OCP MXFP4", "mxfp4-ocp", False, False, False),
    ]
    assert s.params.baseline == "fp16"
    assert s.params.metrics[:6] == ("subject_consistency", "imaging_quality", "aesthetic_quality", "cosine", "ssim", "psnr")
    # the paper's Table 3 rows travel with the study (Wan2.2 Full, HunyuanVideo OCP)
    full = next(r for r in s.paper_rows if r["model"] == "Wan2.2" and r["config"] == "Full")
    assert (full["cosine"], full["ssim"], full["psnr"]) == (0.9329, 0.5519, 15.96)
    assert len(s.paper_rows) == 8


def test_table3_recipes_are_fully_4bit_and_flags_match():
    pairs = check_rows(load_study("table3"))
    for row, recipe in pairs:
        assert recipe.policy.high_precision_blocks == () and recipe.policy.high_precision_steps == ()
        assert recipe_flags(recipe) == {"hadamard": row.hadamard, "pnq": row.pnq, "uos": row.uos}
    # independent reading of the recipes
    m = load_recipe("mxattention").attention
    assert (m.rotation, m.placement, m.q.rule, m.p.qmax) == ("hadamard", "pnq", "uos", 7.25)
    assert load_recipe("mxfp4-ocp").attention.q.rule == "ocp"


def _recipes_dir(tmp_path, monkeypatch, policy: str) -> Path:
    d = tmp_path / "recipes"
    (d / "ablations").mkdir(parents=True)
    (d / "fallback-mx.toml").write_text(
        'name = "fallback-mx"\ndescription = "x"\ninclude = "%s"\n[attention]\nrotation = "hadamard"\nplacement = "pnq"\n%s'
        % ((Path(__file__).parent.parent / "recipes/base/mxattention.toml").as_posix(), policy))
    monkeypatch.setenv("LOWBIT_VIDEO_RECIPES", str(d))
    return d


def test_a_recipe_with_fallback_is_refused(tmp_path, monkeypatch):
    d = _recipes_dir(tmp_path, monkeypatch, "[policy]\nhigh_precision_blocks = [0]\nhigh_precision_steps = []\n")
    f = d / "ablations" / "t.toml"
    f.write_text('kind = "table3"\n[[table3.rows]]\nconfig = "Full"\nrecipe = "fallback-mx"\nhadamard = true\npnq = true\nuos = true\n')
    with pytest.raises(UserError, match=r"high-precision fallback \(blocks \[0\]"):
        check_rows(load_study(str(f)))


def test_a_flag_that_contradicts_the_recipe_is_refused(tmp_path, monkeypatch):
    d = _recipes_dir(tmp_path, monkeypatch, "[policy]\nhigh_precision_blocks = []\nhigh_precision_steps = []\n")
    f = d / "ablations" / "t.toml"
    f.write_text('kind = "table3"\n[[table3.rows]]\nconfig = "Full"\nrecipe = "fallback-mx"\nhadamard = true\npnq = false\nuos = true\n')
    with pytest.raises(UserError, match="says pnq = false but recipe fallback-mx has pnq = true"):
        check_rows(load_study(str(f)))


def test_qmax_grid_is_41_exact_decimals_and_bins_partition_it():
    s = load_study("qmax-sweep")
    grid = [fmt_q(h) for h in s.params.grid]
    assert len(grid) == 41
    assert grid[0] == "6.00" and grid[1] == "6.05" and grid[25] == "7.25" and grid[-1] == "8.00"
    assert grid == [f"{6 + i * 0.05:.2f}" for i in range(41)]
    labels = [next(b.label for b in s.params.bins if b.holds(h)) for h in s.params.grid]
    assert labels.count("7.20") == 1 and labels.count("7.25") == 1
    assert labels.count("<=7.15") == 24 and labels.count(">=7.30") == 15
    # include = "base/capture.toml" brought the capture settings and run defaults
    assert s.params.capture.recipe == "fp16" and s.params.capture.step == 0 and s.params.capture.blocks == ()
    assert s.run.prompts == "prompts/shapes.txt"
    assert s.params.rotation_recipe == "mxattention" and s.params.tensors == ("q", "k", "v")


@pytest.mark.parametrize("data, message", [
    ({"kind": "nope"}, "kind: 'nope' is not one of"),
    ({"kind": "table3", "colour": 1}, "colour: unknown key"),
    ({"kind": "qmax-sweep", "qmax": {"bins": ["<=7.15", "7.25", ">=7.30"]}}, "7.20 falls in 0 bins"),
    ({"kind": "qmax-sweep", "qmax": {"bins": ["<=7.25", "7.25", ">=7.30"]}}, "7.25 falls in 2 bins"),
    ({"kind": "qmax-sweep", "qmax": {"q_step": "0.03"}}, "multiple of q_step"),
    ({"kind": "qmax-sweep", "qmax": {"q_min": "6.001"}}, "not a multiple of 0.01"),
    ({"kind": "rowsum", "rowsum": {"rule": "ocp", "qmax": 7.0}}, "only the 'uos' rule takes a qmax"),
    ({"kind": "rowsum", "rowsum": {"rule": "uos", "qmax": 1e-300}}, "rowsum.qmax: must be in the open interval (3, 12)"),
    ({"kind": "qmax-sweep", "qmax": {"q_max": "12.00"}}, "qmax.q_max: must be in the open interval (3, 12)"),
    ({"kind": "table3", "table3": {"rows": [{"config": "A", "recipe": "no-such-recipe", "hadamard": True,
                                              "pnq": True, "uos": True}]}}, "unknown recipe 'no-such-recipe'"),
    ({"kind": "table3", "qmax": {}}, "qmax: does not apply to kind 'table3'"),
])
def test_bad_study_files_are_one_line_errors(data, message):
    with pytest.raises(UserError) as e:
        study_from_dict(data, source="x.toml", default_name="x")
    assert message in str(e.value) and str(e.value).startswith("x.toml: ") and "\n" not in str(e.value)


def test_cli_list_json_and_one_line_errors():
    res = subprocess.run([*CLI, "ablate", "--list", "--json"], capture_output=True, text=True, check=True)
    studies = json.loads(res.stdout)["studies"]
    assert [s["name"] for s in studies] == ["draft-pooling", "qmax-sweep", "rotate-table", "rowsum", "table3"]
    assert all(s["description"] and s["file"].endswith(f"{s['name']}.toml") for s in studies)
    for args, msg in ((["nope"], "error: unknown study 'nope'; known studies: draft-pooling, qmax-sweep, rotate-table, rowsum, table3"),
                      (["table3", "--seeds", "0", "x"], "error: --seeds: expected non-negative integers, got 'x'"),
                      (["table3", "--seeds", "-1"], "error: --seeds: seeds must be integers in [0, 2^63), got -1"),
                      ([], "error: name a study")):
        res = subprocess.run([*CLI, "ablate", *args], capture_output=True, text=True)
        assert res.returncode == 2, res.stderr
        assert res.stderr.strip().startswith(msg) and len(res.stderr.strip().splitlines()) == 1, res.stderr
        assert res.stdout == ""


def test_ablate_stops_the_progress_bars_of_its_runs():
    """generate's bars, started for the study's runs, stop with the study (no stale bars below the results)."""
    from lowbit_video.cli.ablate import _CliReporter

    rep = _CliReporter(quiet=False)
    runs = rep.generate_reporter()
    runs.planned([object(), object()], 2)
    closed = []
    real_close = runs.close
    runs.close = lambda: (closed.append(True), real_close())
    rep.close()
    assert closed == [True]


def test_ablate_stages_are_lines_without_a_terminal(capsys):
    from lowbit_video.cli.ablate import _CliReporter

    rep = _CliReporter(quiet=False)  # pytest's stderr is no terminal
    rep.stage("evaluating 15 runs", 1)
    rep.close()
    assert capsys.readouterr().err.strip().endswith("ablate: evaluating 15 runs")
