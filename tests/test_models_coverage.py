"""sage2-int8 and mxattention through `use_recipe` on every video transformer class the installed diffusers exports
(tiny random-weight instances, CPU): the hooks count every attention call of the forward (counted independently
from torch's SDPA calls), quantize the self/joint ones and keep cross-attention in 16 bit (the recipes' default
policy), each quantized call equals the recipe's float64 reference engine on the same Q/K/V within the CPU path's
stated tolerance, and after removal the forward is bit-identical to the untouched model."""

import warnings

import pytest
import torch

pytest.importorskip("diffusers")

import lowbit_video.models.attention_hook as attention_hook  # noqa: E402
from lowbit_video.attention import attend  # noqa: E402
from lowbit_video.models import coverage  # noqa: E402
from lowbit_video.models.injection import use_recipe  # noqa: E402
from lowbit_video.models.steps import StepTracker  # noqa: E402
from lowbit_video.models.tiny_video_cases import CASES, build, video_transformer_classes  # noqa: E402
from model_helpers import every_call  # noqa: E402

CLASSES = video_transformer_classes()

# Classes a quantized recipe cannot take, and why (what the hooks must then do: leave every call to diffusers).
LEFT_OUT = {
    "Kandinsky6SRTransformer3DModel": "sparse self-attention through flex attention (a BlockMask per head)",
    "SanaVideoTransformer3DModel": "linear self-attention (no softmax); only cross-attention is softmax attention",
}


def test_the_rule_finds_the_video_transformers_and_each_has_a_tiny_case():
    # every exported <Name>Transformer3DModel; a class a later diffusers adds shows up here without a case
    assert len(CLASSES) >= 31 and "WanTransformer3DModel" in CLASSES and "CogVideoXTransformer3DModel" in CLASSES
    assert all(name.endswith("Transformer3DModel") for name in CLASSES)
    assert sorted(set(CLASSES) - set(CASES)) == []


@pytest.fixture(scope="module")
def rows():
    cache = {}

    def get(name):
        if name not in cache:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                cache[name] = coverage.check_class(name)
        return cache[name]

    return get


@pytest.mark.parametrize("name", CLASSES)
def test_counts_match_the_forwards_calls_and_removal_is_exact(name, rows):
    row = rows(name)
    assert row["error"] is None, row.get("traceback")
    for recipe in coverage.RECIPES:
        r = row["recipes"][recipe]
        assert r["restored"] and r["finite"], recipe
        if name in LEFT_OUT:
            assert r["quantized"] == 0 and not r["changed"], recipe  # diffusers' kernel on every call
            assert coverage.why_not(row, recipe)
            continue
        calls = row["calls"]
        assert coverage.row_ok(row, recipe), (recipe, r, calls)
        assert r["by_type"].get("cross", {}).get("high", 0) == calls["cross"]
        assert r["quantized"] + r["fallback"] == calls["self"] and r["quantized"] > 0


def test_supported_on_every_class_but_the_left_out(rows):
    assert len(LEFT_OUT) == 2  # 29 of diffusers 0.42.1's 31 classes
    for recipe in coverage.RECIPES:
        assert sum(coverage.row_ok(rows(n), recipe) for n in CLASSES) >= len(CLASSES) - len(LEFT_OUT)


def _close_to_engine(out: torch.Tensor, ref: torch.Tensor, v: torch.Tensor) -> None:
    """The CPU path's stated tolerance against the engine (attention/cpu_path.py; tests/test_attention_cpu_path.py):
    float32 rounding, plus rare single-step flips of a quantized P element. A flip moves one weight of one output
    row by one grid step (at most 1/8 of the weight: E4M3's 3 mantissa bits), so at most 1 % of the rows (or one
    row, on the small calls here) may leave the rounding bound, by at most max|v| / 8."""
    err = (out.double() - ref.double()).abs()
    vmax = v.double().abs().max()
    assert float((out.double() - ref.double()).norm() / ref.double().norm()) <= 1e-3
    rows_off = (err > 1e-5 * vmax).flatten(0, -2).any(dim=-1)
    assert int(rows_off.sum()) <= max(1, rows_off.numel() // 100)
    assert float(err.max()) <= vmax / 8


@pytest.mark.parametrize("recipe", coverage.RECIPES)
@pytest.mark.parametrize("name", [n for n in CLASSES if n not in LEFT_OUT])
def test_quantized_calls_equal_the_reference_engine(name, recipe, monkeypatch):
    seen = []

    def recording(q, k, v, rec, **kw):
        out = attend(q, k, v, rec, **kw)
        seen.append((q, k, v, kw, out))
        return out

    monkeypatch.setattr(attention_hook, "attend", recording)
    model, inputs = build(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.no_grad(), use_recipe(model, recipe, tracker=StepTracker()) as handle:
            model(**inputs)
    assert len(seen) >= handle.calls["quantized"] > 0  # a padded batch row is its own call
    for q, k, v, kw, out in seen:
        ref = attend(q, k, v, recipe, backend="reference", **kw)
        _close_to_engine(out, ref, v)


def test_draft_recipe_on_packed_tokens_takes_the_grid_from_the_call():
    # LTX-Video takes packed tokens; the facts' grid arguments (num_frames, height, width) give the 2 x 8 x 8 grid
    # the draft recipe lays its 64-token blocks out by
    from diffusers import LTXVideoTransformer3DModel

    recipe = every_call("draftattention2")
    torch.manual_seed(0)
    model = LTXVideoTransformer3DModel(in_channels=8, out_channels=8, num_attention_heads=2, attention_head_dim=64,
                                       cross_attention_dim=128, num_layers=1, caption_channels=16).eval()
    g = torch.Generator().manual_seed(1)
    inputs = dict(hidden_states=torch.randn(1, 128, 8, generator=g), encoder_hidden_states=torch.randn(1, 7, 16,
                  generator=g), timestep=torch.tensor([500]), encoder_attention_mask=torch.ones(1, 7), num_frames=2,
                  height=8, width=8, return_dict=False)
    with torch.no_grad():
        ref = model(**inputs)[0]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with use_recipe(model, recipe, tracker=StepTracker()) as handle:
                out = model(**inputs)[0]
                assert handle.context.grid == (2, 8, 8)
    assert handle.calls["quantized"] == 1 and handle.calls["high"] == 1  # self drafted, cross 16-bit
    assert torch.isfinite(out).all() and not torch.equal(out, ref)


# (class, its tiny case's inputs changed (a dict of inputs, or a function of the latent), the video token grid worked out by hand from that latent and the
# class's patch sizes, the self/joint calls of one forward)
DRAFTED = [
    # channels-last (B, F, H, W, C) latent 1 x 2 x 8 x 8 x 4, patch (1, 2, 2); one call per visual block (the text
    # block's self-attention sees no video and stays in diffusers' kernel)
    ("Kandinsky5Transformer3DModel", None, (2, 4, 4), 2),
    # with its audio track (5 audio tokens): the audio self-attention and the attention between audio and video keep
    # diffusers' kernel, each visual block's video self-attention is drafted
    ("Kandinsky6Transformer3DModel", {"audio_hidden_states": torch.randn(1, 5, 4, generator=torch.Generator().manual_seed(2))}, (2, 4, 4), 2),
    # (B, C, F, H, W) 1 x 16 x 1 x 8 x 8, patch (1, 2, 2), text after the grid
    ("JoyImageEditTransformer3DModel", None, (1, 4, 4), 2),
    # the multi-item form its pipeline passes: (B, N, C, T, H, W) 1 x 2 x 16 x 1 x 8 x 8, the two items as frames
    ("JoyImageEditTransformer3DModel", lambda hs: torch.stack([hs, hs.flip(-1)], dim=1), (2, 4, 4), 2),
    # (B, C, F, H, W) 1 x 4 x 2 x 8 x 8, patch (1, 1, 1), the (padded) text after the grid; one dual-stream and one
    # single-stream block
    ("MotifVideoTransformer3DModel", None, (2, 8, 8), 2),
]


@pytest.mark.parametrize("name,change,grid,calls", DRAFTED)
def test_draft_recipe_lays_out_the_grid_of_each_drafted_family(name, change, grid, calls):
    model, inputs = build(name)
    if isinstance(change, dict):
        inputs = dict(inputs, **change)
    elif change is not None:
        inputs = dict(inputs, hidden_states=change(inputs["hidden_states"]))
    with torch.no_grad():
        ref = model(**inputs)[0]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with use_recipe(model, every_call("draftattention2"), tracker=StepTracker()) as handle:
                out = model(**inputs)[0]
                assert handle.context.grid == grid
    assert handle.calls["quantized"] == calls and handle.calls["fallback"] == 0
    assert torch.isfinite(out).all() and not torch.equal(out, ref)


def test_draft_recipe_without_grid_facts_is_a_one_line_error(monkeypatch):
    from lowbit_video.errors import UserError
    from lowbit_video.models import families

    model, _ = build("AnyFlowFARTransformer3DModel")  # chunk-causal attention over earlier chunks and a KV cache
    with pytest.raises(UserError) as e:
        with use_recipe(model, "draftattention2", tracker=StepTracker()):
            pass
    msg = str(e.value)
    assert "\n" not in msg and "AnyFlowFARTransformer3DModel" in msg and "KV cache" in msg
    monkeypatch.delitem(families.FACTS, "Kandinsky5Transformer3DModel")  # a class the table has no row for
    model, _ = build("Kandinsky5Transformer3DModel")
    with pytest.raises(UserError) as e:
        with use_recipe(model, "draftattention2", tracker=StepTracker()):
            pass
    msg = str(e.value)
    assert "\n" not in msg and "patch sizes and token layout of Kandinsky5Transformer3DModel" in msg
    assert "not in the facts table" in msg


def test_models_families_lists_every_class_and_what_draft_recipes_need():
    import json

    from typer.testing import CliRunner

    from lowbit_video.cli import app

    res = CliRunner().invoke(app, ["models", "--families", "--json"])
    assert res.exit_code == 0, res.stderr
    by = {r["class"]: r for r in json.loads(res.stdout)["families"]}
    assert sorted(by) == CLASSES
    assert by["HunyuanVideoTransformer3DModel"]["text"] == "after" and by["WanTransformer3DModel"]["draft"] == "yes"
    assert by["Kandinsky5Transformer3DModel"]["draft"] == "yes"
    assert by["AnyFlowFARTransformer3DModel"] == dict(by["AnyFlowFARTransformer3DModel"], family="AnyFlow-FAR",
                                                      recipes="every non-draft recipe")
    assert by["AnyFlowFARTransformer3DModel"]["draft"].startswith("no: ") and "KV cache" in by[
        "AnyFlowFARTransformer3DModel"]["draft"]
