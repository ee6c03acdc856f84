"""Black-box checks of the `lowbit-video` command, run as a user would (a real process)."""

import json
import subprocess
import sys

import pytest
import torch
from safetensors.torch import save_file

NINE = {"fp16", "mxfp4-ocp", "mxfp4-tfs", "mxattention", "mxattention-no-uos", "mxattention-no-pnq-uos",
        "nvfp4", "sage-nvfp4", "sage2-int8"}


def cli(*args, check=True):
    res = subprocess.run([sys.executable, "-m", "lowbit_video", *args], capture_output=True, text=True)
    if check:
        assert res.returncode == 0, res.stderr
    return res


def cli_json(*args):
    res = cli(*args, "--json")
    return json.loads(res.stdout)  # exactly one JSON object on stdout, nothing else


def assert_one_line_error(res):
    assert res.returncode != 0
    assert "Traceback" not in res.stderr
    lines = [l for l in res.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr


def test_help_lists_the_commands():
    text = cli("--help").stdout
    for command in ("generate", "evaluate", "compare", "ablate", "recipes", "diagnose"):
        assert command in text


def test_recipes_json_lists_the_nine():
    data = cli_json("recipes")
    rows = data["recipes"]
    assert NINE <= {r["name"] for r in rows}
    assert all(r["description"] and r["file"].endswith(".toml") for r in rows)


def test_recipes_validate(tmp_path, repo):
    ok = cli("recipes", "validate", str(repo / "recipes" / "mxattention.toml"))
    assert "ok" in ok.stdout
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "bad"\n[attention]\nkind = "quantized"\n[attention.q]\nformat = "mxfp4"\nrull = "ocp"\n')
    res = cli("recipes", "validate", str(bad), check=False)
    assert_one_line_error(res)
    assert "attention.q.rull" in res.stderr and str(bad) in res.stderr


def test_diagnose_uos_reproduces_the_paper():
    data = cli_json("diagnose", "uos")
    assert abs(data["argmin_q"] - 7.25) <= 0.01  # paper: Q_max = 29/4
    assert abs(data["ocp_overflow_probability"] - 0.1927) <= 0.001  # paper: ≈ 19.27%


def test_diagnose_attention_pnq_rowsums_and_direct_mismatch():
    mx = cli_json("diagnose", "attention", "--recipe", "mxattention")
    assert {"recipe", "rel_l2", "cosine", "rowsum_dev_mean", "rowsum_dev_max"} <= set(mx)
    assert mx["recipe"] == "mxattention" and mx["rowsum_dev_max"] <= 1e-5
    ocp = cli_json("diagnose", "attention", "--recipe", "mxfp4-ocp")
    assert ocp["rowsum_dev_mean"] > 1e-3


@pytest.mark.slow
def test_outlier_ordering_matches_the_paper():
    # MXAttention paper Table 3 ordering of attention fidelity: Full < w/o UOS, and Full < OCP MXFP4.
    data = cli_json("diagnose", "attention", "--outliers", "--seq", "2048",
                    "-r", "mxattention", "-r", "mxattention-no-uos", "-r", "mxfp4-ocp")
    err = {r["recipe"]: r["rel_l2"] for r in data["results"]}
    assert err["mxattention"] < err["mxattention-no-uos"]
    assert err["mxattention"] < err["mxfp4-ocp"]


def test_unknown_recipe_is_a_one_line_error():
    res = cli("diagnose", "attention", "--recipe", "mxattenion", check=False)
    assert_one_line_error(res)
    assert "unknown recipe" in res.stderr


def test_head_dim_not_multiple_of_32_for_mx_recipe():
    res = cli("diagnose", "attention", "--recipe", "mxattention", "--head-dim", "48", "--seq", "64", check=False)
    assert_one_line_error(res)
    assert "head_dim 48" in res.stderr


def test_malformed_recipe_file_in_diagnose(tmp_path):
    bad = tmp_path / "broken.toml"
    bad.write_text("name = \n")
    assert_one_line_error(cli("diagnose", "attention", "--recipe", str(bad), check=False))


@pytest.mark.parametrize("poison", [float("nan"), float("inf")])
def test_non_finite_tensors_are_a_one_line_error(tmp_path, poison):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 64, 64, generator=g) for _ in range(3))
    k[0, 0, 5, 5] = poison
    path = tmp_path / "qkv.safetensors"
    save_file({"q": q, "k": k, "v": v}, str(path))
    res = cli("diagnose", "attention", "--recipe", "mxattention", "--tensors", str(path), check=False)
    assert_one_line_error(res)
    assert "NaN or Inf" in res.stderr


def test_tensors_file_round_trip(tmp_path):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 32, 2, 64, generator=g) for _ in range(3))  # BNHD, as diffusers passes them
    path = tmp_path / "qkv.safetensors"
    save_file({"q": q, "k": k, "v": v}, str(path))
    data = cli_json("diagnose", "attention", "-r", "mxattention", "--tensors", str(path), "--layout", "BNHD")
    assert data["inputs"]["shape_q"] == [1, 2, 32, 64]
    assert 0 < data["rel_l2"] < 0.5


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message; this machine has a GPU")
@pytest.mark.parametrize("args", [("bench", "kernels", "--shapes", "small"), ("bench", "e2e", "--random-weights"),
                                  ("bench", "draft")])
def test_bench_without_a_gpu_is_one_line(args):
    assert_one_line_error(cli(*args, check=False))


@pytest.mark.parametrize("args, named", [
    (("kernels", "--shapes", "short", "--shapes", "wan-1080p"), "unknown shape(s) ['wan-1080p']"),
    (("kernels", "--recipes", "sage3-int8"), "unknown recipe 'sage3-int8'"),
    (("draft", "--recipes", "draftattention9"), "unknown recipe 'draftattention9'"),
    (("e2e", "--random-weights", "--resolution", "1080p"), "unknown resolution(s) ['1080p']"),
    (("e2e", "--random-weights", "--recipe", "mxfp5"), "unknown recipe 'mxfp5'"),
    (("models", "--tiny", "--recipe", "mxfp5"), "unknown recipe 'mxfp5'"),
])
def test_bench_names_a_misspelt_shape_or_recipe_before_looking_for_a_gpu(args, named):
    """A typo is reported as a typo on any machine, not as a missing GPU (and, on one, before any timing)."""
    from typer.testing import CliRunner

    from lowbit_video.cli import app

    res = CliRunner().invoke(app, ["bench", *args])
    assert res.exit_code == 2 and res.stderr.startswith(f"error: {named}"), res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "GPU" not in res.stderr


def test_help_shows_no_type_after_flags_and_int_seeds():
    import os

    env = {**os.environ, "COLUMNS": "200"}
    for cmd in ("generate", "ablate", "evaluate"):
        text = subprocess.run([sys.executable, "-m", "lowbit_video", cmd, "--help"], capture_output=True, text=True,
                              env=env).stdout
        assert "--json" in text and "<bool>" not in text, cmd
        seeds = [l for l in text.splitlines() if "--seeds" in l]
        assert all("<list[str]>" not in l for l in seeds), seeds


def test_ablate_seeds_are_shown_as_integers():
    import os

    text = subprocess.run([sys.executable, "-m", "lowbit_video", "ablate", "--help"], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "200"}).stdout
    assert "<list[int]>" in next(l for l in text.splitlines() if "--seeds" in l)


@pytest.mark.parametrize("text, msg", [
    ('name = "x"\n[attention]\nkind = "quantized"\n[attention.p]\nformat = "mxfp4"\nqmax = 1e-300\n',
     "attention.p.qmax: must be in the open interval (3, 12)"),
    ('name = "x"\nbogus = ' + "[" * 5000 + "]" * 5000 + "\n", "nested more than 64 deep"),
    ('name = "fp16"\n[attention]\nkind = "quantized"\n[attention.q]\nformat = "int8"\n', "'fp16' is kept for the unquantized"),
])
def test_recipe_files_that_mean_nothing_are_one_line_errors(tmp_path, text, msg):
    path = tmp_path / "r.toml"
    path.write_text(text)
    for args in (("recipes", "validate", str(path)), ("diagnose", "attention", "--recipe", str(path), "--seq", "64")):
        res = cli(*args, check=False)
        assert res.returncode == 2, args
        assert_one_line_error(res)
        assert msg in res.stderr, (args, res.stderr)


def test_diagnose_titles_say_what_the_inputs_are():
    text = cli("diagnose", "attention", "--recipe", "fp16", "--seq", "64").stdout
    assert "synthetic gaussian, seed 0" in text and "{'" not in text


def test_models_json_lists_the_prompt_vocabulary():
    from lowbit_video.models.tiny_shapes.grammar import BACKGROUNDS, COLORS, MOTIONS, SHAPES

    tiny = next(m for m in cli_json("models")["models"] if m["name"] == "tiny-shapes")
    vocab = tiny["prompt_vocabulary"]
    assert (vocab["colors"], vocab["shapes"], vocab["motions"], vocab["backgrounds"]) == (
        list(COLORS), list(SHAPES), list(MOTIONS), list(BACKGROUNDS))
    assert vocab["grammar"] == ["a <color> <shape> <motion> [and a <color> <shape> <motion>] on a <background> background"]


def test_unwritable_outputs_are_one_line_errors_before_any_work(tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    for args, option in ((("compare", str(tmp_path / "no-runs"), "--out", "/proc/lowbit-compare.md"), "--out"),
                         (("compare", str(tmp_path / "no-runs"), "--plots", str(a_file)), "--plots"),
                         (("ablate", "table3", "--out", str(a_file)), "--out"),
                         (("generate", "--out", str(a_file / "runs")), "--out")):
        res = cli(*args, check=False)
        assert res.returncode == 2, args
        assert_one_line_error(res)
        assert res.stderr.startswith(f"error: {option} "), (args, res.stderr)
        assert "loaded" not in res.stderr


def test_recipes_schema_states_every_range():
    from lowbit_video.recipes import SCHEMA

    fields = cli_json("recipes", "schema")["fields"]
    assert fields == SCHEMA and "(3, 12)" in fields["attention.<op>.qmax"]
    assert "attention.<op>.qmax" in cli("recipes", "schema").stdout
