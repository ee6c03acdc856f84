"""`lowbit-video profile` on the shipped tiny-shapes model, and the pieces it is made of.

The profile's numbers are checked against an independent computation: Q/K/V captured to disk by `generate
--capture-qkv` from the same 16-bit generation, run through the float64 reference engine
(`attend(..., backend="reference")`) and compared by hand with the dense call. The profile runs the CPU path
(float32), which agrees with the engine to ~1e-6 relative L2 per output (results/cpu-speed.md), so a cell's
rel-L2 is compared within 1e-4 and its cosine within 1e-5."""

import json
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("lowbit_video.models.registry", reason="model registry not available")

from lowbit_video.attention import attend  # noqa: E402
from lowbit_video.cli import app  # noqa: E402
from lowbit_video.errors import UserError  # noqa: E402
from lowbit_video.profile.cells import Cell, Profile  # noqa: E402
from lowbit_video.profile.policy import cells_for_share, cells_over_error, parse_budget  # noqa: E402
from lowbit_video.profile.search import search_kept  # noqa: E402
from lowbit_video.recipes import recipe_from_dict  # noqa: E402

PROMPT = "a red circle moving right on a black background"
runner = CliRunner()


def _cells(values):
    """A profile of n blocks x 2 steps with the given (mean, max) rel-L2 per (block, step)."""
    cells = [Cell("self", b, s, 2, mean, mx, 1 - mean, 1 - mx) for (b, s), (mean, mx) in values.items()]
    return Profile("r", num_blocks=max(b for b, _ in values) + 1, num_steps=2, cells=cells)


# ------------------------------------------------------------------------------------------ budgets, by hand


def test_share_budget_keeps_the_most_sensitive_cells_rounding_up():
    p = _cells({(0, 0): (0.5, 0.6), (0, 1): (0.1, 0.2), (1, 0): (0.3, 0.9), (1, 1): (0.2, 0.25)})
    assert cells_for_share(p, 0.0) == []
    assert cells_for_share(p, 0.25) == [(0, 0)]
    assert cells_for_share(p, 0.3) == [(0, 0), (1, 0)]  # 1.2 cells -> 2: at least the share asked
    assert cells_for_share(p, 1.0) == [(0, 0), (1, 0), (1, 1), (0, 1)]


def test_error_budget_keeps_exactly_the_cells_whose_worst_call_exceeds_it():
    p = _cells({(0, 0): (0.5, 0.6), (0, 1): (0.1, 0.2), (1, 0): (0.3, 0.9), (1, 1): (0.2, 0.25)})
    assert set(cells_over_error(p, 0.3)) == {(0, 0), (1, 0)}
    assert set(cells_over_error(p, 0.22)) == {(0, 0), (1, 0), (1, 1)}
    assert cells_over_error(p, 1.0) == []


def test_psnr_search_returns_the_smallest_passing_count_of_a_monotone_curve():
    curve = lambda k: 20.0 + 2.0 * k  # PSNR 20 dB with nothing kept, +2 dB per kept cell
    kept, trials = search_kept(10, curve, 31.0, max_evals=10)
    assert kept == 6  # 20 + 2*6 = 32 >= 31, 20 + 2*5 = 30 < 31
    assert trials[0].kept == 0 and not trials[0].meets
    kept, trials = search_kept(10, curve, 15.0)
    assert kept == 0 and len(trials) == 1
    kept, trials = search_kept(10, curve, 31.0, max_evals=2)  # cut short: the smallest count known to pass
    assert kept == 10 or curve(kept) >= 31.0


@pytest.mark.parametrize("text, part", [("foo=1", "expected one of"), ("rel-l2", "expected one of"),
                                        ("psnr=abc", "not a number"), ("fp16-share=1.5", "[0, 1]"),
                                        ("rel-l2=-1", "positive"), ("psnr=nan", "finite")])
def test_bad_budgets_are_one_line_errors(text, part):
    with pytest.raises(UserError) as e:
        parse_budget(text)
    assert part in str(e.value) and "\n" not in str(e.value)


def test_high_precision_calls_in_the_policy():
    pol = recipe_from_dict({"name": "x", "attention": {"kind": "quantized", "q": {"format": "int8"}},
                            "policy": {"high_precision_calls": [[0, 1], [-1, -1]]}}).policy
    kept = {(b, s) for b in range(4) for s in range(5)
            if not pol.quantizes(block=b, step=s, num_steps=5, num_blocks=4)}
    assert kept == {(0, 1), (3, 4)}


@pytest.mark.parametrize("value", ["[1, 2]", "[[1]]", "[[1, 2, 3]]", '[["a", 1]]', "[[true, 1]]", "3"])
def test_malformed_high_precision_calls_name_the_key(value):
    from lowbit_video.errors import RecipeError

    data = tomllib.loads(f'name = "x"\n[policy]\nhigh_precision_calls = {value}\n')
    with pytest.raises(RecipeError, match="policy.high_precision_calls"):
        recipe_from_dict(data)


# --------------------------------------------------------------------------------- the command, end to end


def _profile_json(tmp_path, *args):
    res = runner.invoke(app, ["profile", "--prompt", PROMPT, "--seeds", "0", "--steps", "1", "--out", str(tmp_path),
                              *args, "--json"])
    assert res.exit_code == 0, res.stderr
    return json.loads(res.stdout)


@pytest.fixture(scope="module")
def rotate_profile(tmp_path_factory):
    out = tmp_path_factory.mktemp("profile")
    return out, _profile_json(out, "--recipe", "rotateattention-half", "--budget", "fp16-share=0.5")


def test_profile_values_equal_the_reference_engine_on_captured_qkv(rotate_profile, tmp_path):
    out, prof = rotate_profile
    res = runner.invoke(app, ["generate", "--recipe", "fp16", "--prompt", PROMPT, "--seeds", "0", "--steps", "1",
                              "--out", str(tmp_path / "runs"), "--capture-qkv", str(tmp_path / "cap"),
                              "--capture-blocks", "0", "--capture-blocks", "5", "--json"])
    assert res.exit_code == 0, res.stderr
    from lowbit_video.models.capture import load_capture

    files = sorted((tmp_path / "cap").rglob("block*_step*.safetensors"))
    index = json.loads(next((tmp_path / "cap").rglob("index.json")).read_text())
    by_file = {e["file"]: e for e in index["entries"]}
    assert len(files) == 2
    cells = {(c["block"], c["step"]): c for c in prof["cells"]}
    for f in files:
        entry = by_file[f.name]
        t = load_capture(f)
        q, k, v = t["q"], t["k"], t["v"]
        seg = tuple(entry["rope_segments"]) if entry["rope_segments"] else None
        engine = attend(q, k, v, "rotateattention-half", layout="BNHD", backend="reference", rope_segments=seg)
        dense = attend(q, k, v, "fp16", layout="BNHD")
        e, d = engine.double(), dense.double()
        rel = float((e - d).norm() / d.norm())
        cos = float((e * d).sum() / (e.norm() * d.norm()))
        cell = cells[(entry["block"], entry["step"])]
        assert cell["calls"] == 1 and cell["attention_type"] == "self"
        assert abs(cell["rel_l2_mean"] - rel) < 1e-4 and abs(cell["cosine_mean"] - cos) < 1e-5
        assert rel > 1e-3  # the recipe does change the call: the comparison is not of two zeros


def test_profile_covers_every_block_and_step_and_writes_its_files(rotate_profile):
    out, prof = rotate_profile
    assert prof["num_blocks"] == 6 and prof["num_steps"] == 1
    assert sorted((c["block"], c["step"]) for c in prof["cells"]) == [(b, 0) for b in range(6)]
    on_disk = json.loads((out / "profile.json").read_text())
    assert on_disk["cells"] == prof["cells"]
    assert (out / "heatmap.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_share_budget_recipe_keeps_the_top_cells_and_round_trips(rotate_profile, tmp_path):
    out, prof = rotate_profile
    policy = prof["policy"]
    kept = {tuple(c) for c in policy["high_precision_calls"]}
    assert len(kept) == 3  # half of the 6 cells
    errs = {(c["block"], c["step"]): c["rel_l2_mean"] for c in prof["cells"]}
    assert min(errs[c] for c in kept) >= max(errs[c] for c in errs if c not in kept)
    path = Path(policy["file"])
    res = runner.invoke(app, ["recipes", "validate", str(path), "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["valid"]
    assert 'include = "rotateattention-half.toml"' in path.read_text()
    # generate with it: the policy's kept calls run in 16 bit, the others quantized
    res = runner.invoke(app, ["generate", "--recipe", str(path), "--prompt", PROMPT, "--seeds", "0", "--steps", "1",
                              "--out", str(tmp_path / "runs"), "--json"])
    assert res.exit_code == 0, res.stderr
    meta = json.loads((Path(json.loads(res.stdout)["runs"][0]["dir"]) / "meta.json").read_text())
    calls = meta["attention_calls"]["by_type"]["self"]  # cross-attention stays 16-bit under every policy here
    assert calls["high"] == 3 and calls["quantized"] == 3
    assert policy["generate"].startswith("lowbit-video generate --model tiny-shapes --recipe fp16 ")


@pytest.mark.parametrize("args, part", [
    ([], "--recipe is required"),
    (["--recipe", "fp16"], "nothing to profile"),
    (["--recipe", "no-such-recipe"], "unknown recipe"),
    (["--recipe", "mxattention", "--budget", "speed=2"], "--budget"),
    (["--recipe", "mxattention", "--model", "no-such-model"], "unknown model"),
    (["--recipe", "mxattention", "--model", ""], "unknown model"),
    (["--recipe", "mxattention", "--search-evals", "0"], "--search-evals"),
    (["--recipe", "mxattention", "--seeds", "-1"], "--seeds"),
    (["--study", "--out", "x.txt"], ".md"),
])
def test_bad_input_is_one_line(args, part, tmp_path):
    argv = ["profile", "--prompt", PROMPT, "--steps", "1", *args]
    if "--out" not in args:
        argv += ["--out", str(tmp_path / "p")]
    res = runner.invoke(app, argv)
    assert res.exit_code == 2
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and part in lines[0], res.stderr
    assert not (tmp_path / "p" / "profile.json").exists()


def test_the_study_compares_each_profiled_policy_with_the_best_uniform_one_of_its_share():
    from lowbit_video.profile.study import against_uniform

    rows = [dict(policy="36 most sensitive cells", family="profiled", fp16_share=0.5, psnr=36.0),
            dict(policy="first 3 blocks", family="uniform", fp16_share=0.5, psnr=33.0),
            dict(policy="first 6 steps", family="uniform", fp16_share=0.5, psnr=39.0),
            dict(policy="10 most sensitive cells", family="profiled", fp16_share=0.139, psnr=30.0),
            dict(policy="the recipe's fixed policy", family="paper", fp16_share=0.5, psnr=50.0)]
    assert against_uniform(rows) == ("the profiled policy is at least as good at 0 of 1 shares (share 0.500: "
                                     "profiled 36.00 dB, best uniform first 6 steps 39.00 dB)")
    assert against_uniform(rows[3:]) == "no uniform policy has the share of a profiled one"
