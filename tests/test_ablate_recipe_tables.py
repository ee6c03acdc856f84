"""rotate-table and draft-pooling: their recipes, row sets, checks, the negative control, Figure 5's claims."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from lowbit_video.ablate import AblateOptions, load_study, run_study
from lowbit_video.ablate.operator import budget_claims, evenly_spaced, modelled_cost
from lowbit_video.ablate.recipe_table import check_rows, pooling_flags, rotate_flags
from lowbit_video.ablate.studies import study_from_dict
from lowbit_video.attention import exact_attention
from lowbit_video.attention.reference import reference_attention
from lowbit_video.diagnostics.synthetic import synthetic_qkv
from lowbit_video.errors import RecipeError, UserError
from lowbit_video.generate import recipe_key
from lowbit_video.metrics.paired import mse
from lowbit_video.recipes import AttentionSpec, load_recipe, read_with_includes, recipe_from_dict
from lowbit_video.transforms import qk_transforms

ROOT = Path(__file__).resolve().parent.parent

# Each new recipe and the one field (one setting) it changes in the recipe it includes.
NEW_RECIPES = {
    "int4-rectified": ("int4-baseline", {"attention.p.scheme"}),
    "rotateattention-none": ("rotateattention-half", {"attention.rotation"}),
    "rotateattention-half-unconstrained": ("rotateattention-half", {"attention.rotation_sigma"}),
    "draftattention-sparse16-avgpool": ("draftattention-sparse16", {"attention.draft.maxpool_weight"}),
    "draftattention-mixed816": ("draftattention2", {"attention.draft.int8", "attention.draft.nvfp4"}),
    "draftattention-mixed816-avgpool": ("draftattention-mixed816", {"attention.draft.maxpool_weight"}),
    "draftattention2-avgpool": ("draftattention2", {"attention.draft.maxpool_weight"}),
}


def _flat(d, prefix=""):
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


@pytest.mark.parametrize("name", sorted(NEW_RECIPES))
def test_new_recipes_validate_and_change_one_setting_of_what_they_include(name):
    base, changed = NEW_RECIPES[name]
    path = ROOT / "recipes" / f"{name}.toml"
    assert read_with_includes(path).get("name") == name
    new, old = load_recipe(name), load_recipe(base)
    a, b = _flat(new.to_dict()), _flat(old.to_dict())
    diff = {k for k in a if a[k] != b[k]} - {"name", "description", "source", "paper"}
    assert diff == changed


def test_rotate_table_rows_are_pinned():
    p = load_study("rotate-table").params
    assert [(r.config, r.recipe, r.optim_p, r.rotation, r.v_hadamard, r.orthogonal) for r in p.rows] == [
        ("INT4 (SageAttn baseline)", "int4-baseline", False, "none", False, True),
        ("INT4 Optim-P, W/O", "int4-rectified", True, "none", False, True),
        ("INT4 Optim-P, W/O, V Hadamard", "rotateattention-none", True, "none", True, True),
        ("Half", "rotateattention-half", True, "half", True, True),
        ("Interleave", "rotateattention-interleaved", True, "interleaved", True, True),
        ("Full", "rotateattention-full", True, "full", True, True),
        ("Half, unconstrained (σ = 2)", "rotateattention-half-unconstrained", True, "half", True, False),
    ]
    assert p.metrics == ("cosine", "mse", "ssim", "psnr", "adherence") and p.baseline == "fp16"
    assert len(check_rows(load_study("rotate-table"))) == 7


def test_draft_pooling_rows_are_pinned():
    s = load_study("draft-pooling")
    p = s.params
    assert [(r.config, r.recipe, r.precision, r.pooling) for r in p.rows] == [
        ("16-bit, Avg", "draftattention-sparse16-avgpool", "16", "avg"),
        ("16-bit, Avg + Max", "draftattention-sparse16", "16", "avg+max"),
        ("8/16-bit, Avg", "draftattention-mixed816-avgpool", "8/16", "avg"),
        ("8/16-bit, Avg + Max", "draftattention-mixed816", "8/16", "avg+max"),
        ("4/8/16-bit, Avg", "draftattention2-avgpool", "4/8/16", "avg"),
        ("4/8/16-bit, Avg + Max", "draftattention2", "4/8/16", "avg+max"),
    ]
    assert len(check_rows(s)) == 6
    assert [x.label for x in p.budget.series] == ["16-bit", "8-bit", "4-bit", "8/16-bit", "4/8/16-bit"]
    assert [x.single for x in p.budget.series] == [True, True, True, False, False]


def test_recipe_flags_read_the_recipes():
    assert rotate_flags(load_recipe("int4-baseline")) == {"optim_p": False, "rotation": "none", "v_hadamard": False,
                                                         "orthogonal": True}
    assert rotate_flags(load_recipe("rotateattention-full"))["rotation"] == "full"
    assert not rotate_flags(load_recipe("rotateattention-half-unconstrained"))["orthogonal"]
    assert pooling_flags(load_recipe("draftattention2")) == {"precision": "4/8/16", "pooling": "avg+max"}
    assert pooling_flags(load_recipe("draftattention-sparse16-avgpool")) == {"precision": "16", "pooling": "avg"}


def _study_dict(name):
    return read_with_includes(ROOT / "recipes" / "ablations" / f"{name}.toml")


def test_a_row_flag_that_contradicts_its_recipe_is_refused():
    d = _study_dict("rotate-table")
    d["rotate"]["rows"][3]["rotation"] = "interleaved"  # the Half row's recipe rotates by halves
    with pytest.raises(UserError, match="rotation = 'interleaved' but recipe rotateattention-half has rotation = 'half'"):
        check_rows(study_from_dict(d, source="x.toml"))
    d = _study_dict("draft-pooling")
    d["pooling"]["rows"][0]["pooling"] = "avg+max"
    with pytest.raises(UserError, match="pooling = 'avg\\+max' but recipe draftattention-sparse16-avgpool"):
        check_rows(study_from_dict(d, source="x.toml"))


def test_draft_rows_must_share_the_budget(tmp_path, monkeypatch):
    d = _study_dict("draft-pooling")
    d["pooling"]["rows"][0]["recipe"] = "draftattention-sparse16"
    d["pooling"]["rows"][0]["pooling"] = "avg+max"
    d["pooling"]["rows"][1]["recipe"] = "draftattention-sparse16-avgpool"
    d["pooling"]["rows"][1]["pooling"] = "avg"
    check_rows(study_from_dict(d, source="x.toml"))  # swapped rows: still one budget
    (tmp_path / "mixed-other-split.toml").write_text(
        f'include = "{ROOT / "recipes" / "draftattention-mixed816-avgpool.toml"}"\n'
        'name = "mixed-other-split"\n[attention.draft]\nfp16 = 0.3\nint8 = 0.7\n')
    monkeypatch.setenv("LOWBIT_VIDEO_RECIPES", str(tmp_path))
    d["pooling"]["rows"][2]["recipe"] = "mixed-other-split"  # an 8/16-bit row with another split
    with pytest.raises(UserError, match="split the retained pairs differently"):
        check_rows(study_from_dict(d, source="x.toml"))
    (tmp_path / "other-sparsity.toml").write_text(
        f'include = "{ROOT / "recipes" / "draftattention-mixed816-avgpool.toml"}"\n'
        'name = "other-sparsity"\n[attention.draft]\nsparsity = 0.5\n')
    d["pooling"]["rows"][2]["recipe"] = "other-sparsity"
    with pytest.raises(UserError, match="differ in sparsity or block"):
        check_rows(study_from_dict(d, source="x.toml"))


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["rotate"]["claims"][0].update(better="nope"), "is not a row's config"),
    (lambda d: d["rotate"]["synthetic"].update(seq=300), "multiple of 256"),
    (lambda d: d["rotate"].update(budget={}), "unknown key"),
    (lambda d: d["rotate"]["rows"][0].pop("orthogonal"), "orthogonal: missing"),
])
def test_bad_rotate_study_files_are_one_line_errors(edit, message):
    d = _study_dict("rotate-table")
    edit(d)
    with pytest.raises(UserError, match=message):
        study_from_dict(d, source="x.toml")


def test_budget_needs_single_and_mixed_series():
    d = _study_dict("draft-pooling")
    d["pooling"]["budget"]["series"] = [s for s in d["pooling"]["budget"]["series"] if "16" not in s["label"] or s["label"] == "16-bit"]
    with pytest.raises(UserError, match="single-precision and mixed series"):
        study_from_dict(d, source="x.toml")


# ------------------------------------------------------------------------------------ negative control


def test_the_unconstrained_rotation_is_not_orthogonal_but_keeps_scores_exact():
    rq, rk = qk_transforms("half", 64, (24, 20, 20), sigma=2.0)
    mq, mk = rq.matrix(), rk.matrix()
    eye = torch.eye(64, dtype=torch.float64)
    assert (mq @ mq.T - eye).abs().max() > 1.0  # singular values 2 and 1/2: far from orthogonal
    assert torch.linalg.svdvals(mq).max() == pytest.approx(2.0) and torch.linalg.svdvals(mq).min() == pytest.approx(0.5)
    assert torch.allclose(mq @ mk.T, eye, rtol=0, atol=1e-14)  # (QR)(K R^-T)^T = Q K^T
    ro, ro_k = qk_transforms("half", 64, (24, 20, 20))
    assert ro is ro_k and torch.allclose(ro.matrix() @ ro.matrix().T, eye, rtol=0, atol=1e-14)


def test_unquantized_unconstrained_rotation_is_exact_attention():
    q, k, v = synthetic_qkv(seq=256, heads=2, head_dim=128, seed=1, outliers=True, dtype=torch.float64)
    spec = AttentionSpec(kind="quantized", rotation="half", rotation_sigma=2.0)  # no operand quantized
    out, _ = reference_attention(q, k, v, spec)
    assert torch.allclose(out, exact_attention(q, k, v), rtol=0, atol=1e-12)


@pytest.mark.parametrize("seed", [0, 1])
def test_the_engine_reports_larger_error_for_the_unconstrained_rotation_on_outlier_inputs(seed):
    q, k, v = synthetic_qkv(seq=512, heads=2, head_dim=128, seed=seed, outliers=True)
    ref = exact_attention(q, k, v)
    err = {}
    for name in ("rotateattention-half", "rotateattention-half-unconstrained"):
        out, _ = reference_attention(q, k, v, load_recipe(name).attention)
        err[name] = float(torch.linalg.vector_norm(out - ref) / torch.linalg.vector_norm(ref))
    # measured 0.27 vs 0.53 at seq 1024 (seed 0): the control is clearly worse, not within noise
    assert err["rotateattention-half-unconstrained"] > 1.3 * err["rotateattention-half"]


def test_rotation_sigma_is_validated():
    att = {"kind": "quantized", "rotation": "half", "q": {"format": "int4"}}
    make = lambda **kw: recipe_from_dict({"name": "x", "attention": {**att, **kw}})
    assert make(rotation_sigma=2).attention.rotation_sigma == 2.0
    with pytest.raises(RecipeError, match="rotation_sigma: must be 1 .orthogonal. or.*got 0.0"):
        make(rotation_sigma=0.0)
    with pytest.raises(RecipeError, match="rotation_sigma: must be 1 .orthogonal. or.*rotation = 'hadamard'"):
        make(rotation="hadamard", rotation_sigma=2.0)


def test_recipe_key_leaves_later_fields_out_at_their_default():
    assert "rotation_sigma" not in recipe_key(load_recipe("rotateattention-half"))["attention"]
    assert recipe_key(load_recipe("rotateattention-half-unconstrained"))["attention"]["rotation_sigma"] == 2.0


# ------------------------------------------------------------------------------------ metrics and claims


def test_mse_is_on_the_0_255_scale():
    a = np.zeros((2, 8, 8, 3), dtype=np.uint8)
    b = a.copy()
    assert mse(a, b) == 0.0
    b[0, 0, 0, 0] = 10  # one channel of one pixel of frame 0, 10 levels: 100 / 192 on that frame, 0 on the other
    assert mse(b, a) == pytest.approx(100 / 192 / 2)


def test_modelled_cost_and_budget_claims_by_hand():
    from lowbit_video.recipes import DraftSpec

    assert modelled_cost(DraftSpec(sparsity=0.8, fp16=0.15, int8=0.25, nvfp4=0.6), {16: 1, 8: 0.5, 4: 0.25}) == \
        pytest.approx(0.2 * (0.15 + 0.125 + 0.15))

    def pt(series, single, sp, cost, err, eight=0.0):
        return {"series": series, "single": single, "sparsity": sp, "cost": cost, "rel_l2": err,
                "split": {"16": 1.0 - eight, "8": eight, "4": 0.0}}

    points = [pt("16", True, 0.5, 0.5, 0.30), pt("16", True, 0.8, 0.2, 0.50),
              pt("8", True, 0.0, 0.5, 0.10, 1.0), pt("8", True, 0.8, 0.1, 0.60, 1.0),
              pt("mix", False, 0.8, 0.15, 0.40), pt("mix", False, 0.5, 0.4, 0.08)]
    c = budget_claims(points)
    # budget 0.15: mixed 0.40 vs best single within 0.15 (8-bit s=0.8, 0.60): mixed wins;
    # budget 0.4: mixed 0.08 vs single within 0.4 (0.50, 0.60): mixed wins
    assert [(b["budget"], b["mixed_wins"]) for b in c["budgets"]] == [(0.15, True), (0.4, True)]
    assert c["budgets"][0]["single"]["rel_l2"] == 0.60 and c["mixed_wins"] == 2 and c["of"] == 2
    f = c["eight_bit_floor"]
    assert f["dense_8bit"]["rel_l2"] == 0.10 and f["mixed_below"]["rel_l2"] == 0.08


def test_verdicts():
    from lowbit_video.ablate.recipe_table import TIE, _compare, verdict

    assert _compare(2.0, 1.0, True) is True and _compare(2.0, 1.0, False) is False and _compare(1.0, 1.0, True) == TIE
    assert _compare(1.0, 1.004, False, 0.005) == TIE and _compare(1.0, 1.006, False, 0.005) is True
    assert _compare({"unavailable": "x"}, 1.0, True) is None
    assert verdict([True, True]) == "reproduced" and verdict([False, False]) == "not reproduced (reversed)"
    assert verdict([TIE, TIE]) == "no measurable difference" and verdict([None]) == "n/a"
    assert verdict([True, TIE]) == "reproduced (1 of 2 metrics, the rest tied)"
    assert verdict([True, False, TIE]) == "mixed (1 of 3 metrics)"


def test_evenly_spaced():
    assert evenly_spaced(list(range(10)), 0) == list(range(10))
    assert evenly_spaced(list(range(10)), 3) == [0, 4, 9] or evenly_spaced(list(range(10)), 3) == [0, 5, 9]
    assert evenly_spaced(list(range(10)), 1) == [0]


# ------------------------------------------------------------------------------------ end to end

# The real studies cut to two rows and one claim each, with small operator inputs (one captured block,
# 256-token synthetic inputs), run into one folder so that the FP16 runs and the captures are shared.
SMALL = {
    "rotate-table": """
[capture]
blocks = [2]
[rotate]
operator_samples = 1
[rotate.synthetic]
seq = 256
heads = 1
seeds = [0]
[[rotate.rows]]
config = "Half"
recipe = "rotateattention-half"
optim_p = true
rotation = "half"
v_hadamard = true
orthogonal = true
[[rotate.rows]]
config = "Half, unconstrained (σ = 2)"
recipe = "rotateattention-half-unconstrained"
optim_p = true
rotation = "half"
v_hadamard = true
orthogonal = false
[[rotate.claims]]
text = "A non-orthogonal rotation degrades results; an orthogonal one does not"
better = "Half"
worse = "Half, unconstrained (σ = 2)"
""",
    "draft-pooling": """
[capture]
blocks = [2]
[pooling]
operator_samples = 1
[pooling.synthetic]
seq = 256
heads = 1
seeds = [0]
[pooling.budget]
sparsities = [0.0, 0.5]
[[pooling.rows]]
config = "16-bit, Avg"
recipe = "draftattention-sparse16-avgpool"
precision = "16"
pooling = "avg"
[[pooling.rows]]
config = "16-bit, Avg + Max"
recipe = "draftattention-sparse16"
precision = "16"
pooling = "avg+max"
[[pooling.claims]]
text = "Adding max pooling to the draft improves 16-bit sparse attention at fixed sparsity"
better = "16-bit, Avg + Max"
worse = "16-bit, Avg"
""",
}


@pytest.fixture(scope="module")
def small_studies(tmp_path_factory):
    # At 2 steps every row's policy keeps all attention at 16 bit (both papers' fallbacks cover the
    # first steps), so generation is cheap and every row's video equals FP16's: the operator tables
    # carry the quantization. Real model, run store, metrics, captures and engine throughout.
    tmp = tmp_path_factory.mktemp("tables")
    prompts = tmp / "p.txt"
    prompts.write_text("a red circle moving right on a black background\n")
    opts = AblateOptions(prompts=str(prompts), seeds=[0], steps=2, out=str(tmp / "out"),
                         weights_dir=str(tmp / "no-weights"))
    results = {}
    for name, text in SMALL.items():
        path = tmp / f"{name}.toml"
        path.write_text(f'include = "{ROOT / "recipes" / "ablations" / (name + ".toml")}"\n' + text)
        results[name] = (load_study(str(path)), run_study(str(path), opts))
    return tmp, results


@pytest.mark.parametrize("name", ["rotate-table", "draft-pooling"])
def test_study_end_to_end_at_two_steps(small_studies, name):
    tmp, results = small_studies
    study, res = results[name]
    doc = json.loads((tmp / "out" / f"{study.name}.json").read_text())
    rows = study.params.rows
    assert [r["config"] for r in doc["rows"]] == [r.config for r in rows]
    for r in doc["rows"]:
        for m in ("cosine", "ssim", "psnr") + (("mse",) if name == "rotate-table" else ()):
            assert m in r
        assert r["cosine"] == pytest.approx(1.0) and (name != "rotate-table" or r["mse"] == 0.0)
    s = doc["operator"]["summary"]
    assert set(s) == {"captured", *(f"synthetic {x}" for x in study.params.synthetic.sources)}
    assert s["captured"]["n"] == 1 and 0 < s["captured"]["entropy"] <= 1
    for g in s.values():
        for r in rows:
            # 80 % skipped on the synthetic outliers inputs (no locality) loses more than the output's
            # norm (measured 1.02 here, 1.1-1.3 at 2048 tokens); the quantized INT4 rows stay below 1
            assert 0 < g["recipes"][r.recipe]["rel_l2"] < (2 if name == "draft-pooling" else 1)
    assert len(doc["claims"]) == 1
    # every row's video is FP16's here: no claim can be decided on the videos
    assert doc["claims"][0]["levels"]["videos"]["verdict"] == "no measurable difference"
    if name == "draft-pooling":
        pts = doc["budget"]["groups"]["captured"]["points"]
        assert len(pts) == 5 * 2 and {p["sparsity"] for p in pts} == {0.0, 0.5}
        dense16 = next(p for p in pts if p["series"] == "16-bit" and p["sparsity"] == 0.0)
        assert dense16["rel_l2"] < 1e-12 and dense16["cost"] == 1.0  # dense 16-bit is exact
    else:
        for g in s.values():
            ctl = g["recipes"]
            assert ctl["rotateattention-half-unconstrained"]["rel_l2"] > ctl["rotateattention-half"]["rel_l2"]
        assert all(lv["verdict"] == "reproduced" for k, lv in doc["claims"][0]["levels"].items() if k != "videos")
    md = (tmp / "out" / f"{study.name}.md").read_text()
    assert md.startswith("# ") and md.splitlines()[2].startswith("Command: `lowbit-video ablate")
    assert "## Operator level" in md and "The paper's rows" in md and "## The paper's claims, row by row" in md
    assert res["files"][0].endswith(f"{study.name}.md")
