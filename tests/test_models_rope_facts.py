"""The facts table's RoPE splits against the models' own rotary embeddings.

The recipes that rotate Q and K inside each RoPE segment (rotateattention-half) need, per head, the contiguous
channel runs that rotate with the frame index, the row and the column (families.rope_segments). Probe: every
query projection of a tiny random-weight instance returns one vector for every token, so the query an attention
call sees differs between tokens only by its position's rotation; a channel belongs to the axes of the video grid
along which it varies. The runs of head 0's channels must be the facts' split, channel for channel. Families whose
facts say NO_SPLIT must show no such runs, and the rules for RoPE that pipelines build (CogVideoX, Allegro) are
checked on diffusers' own table functions. Then rotateattention-half, every call quantized, on every class with
softmax self-attention: each call gets the split where it describes the call's heads, the recipe's default where
the call's heads have another size.
"""

import itertools
import warnings

import pytest
import torch

pytest.importorskip("diffusers")

import lowbit_video.models.attention_hook as attention_hook  # noqa: E402
from lowbit_video.models import families  # noqa: E402
from lowbit_video.models.injection import use_recipe  # noqa: E402
from lowbit_video.models.steps import StepTracker  # noqa: E402
from lowbit_video.attention import attend  # noqa: E402
from lowbit_video.models.tiny_video_cases import build, video_transformer_classes  # noqa: E402
from model_helpers import every_call  # noqa: E402

# the query projections of diffusers' attention modules (fused QKV included: K and V constant too, which the probe
# does not read)
QUERY_PROJECTIONS = ("to_q", "to_query", "img_attn_qkv", "to_qkv")


def _runs(labels):
    return [(axis, len(list(group))) for axis, group in itertools.groupby(labels)]


def _channel_axes(q: torch.Tensor, grid, video_first: bool) -> list[str]:
    """For q (B, N, H, D) of one call: the grid axes ("t", "h", "w", combined, or "-") each channel of head 0
    varies along, over the call's video tokens."""
    f, h, w = grid
    n = f * h * w
    video = q[0, :n, 0] if video_first else q[0, -n:, 0]
    x = video.double().reshape(f, h, w, -1)
    tol = 1e-5 * float(x.abs().max())
    labels = []
    for c in range(x.shape[-1]):
        xc = x[..., c]
        axes = "".join(name for dim, name in enumerate("thw") if float((xc - xc.mean(dim, keepdim=True)).abs().max()) > tol)
        labels.append(axes or "-")
    return labels


def _probe(name, inputs_update=None):
    """(model, grid, channel axes of head 0) from the first quantized self-attention call of one forward."""
    model, inputs = build(name)
    inputs.update(inputs_update or {})
    gen = torch.Generator().manual_seed(7)
    handles = []
    for site in families.attention_sites(model):
        for child_name, child in site.module.named_children():
            if child_name in QUERY_PROJECTIONS and isinstance(child, torch.nn.Linear):
                const = torch.randn(child.out_features, generator=gen) + 2.0
                handles.append(child.register_forward_hook(
                    lambda mod, args, out, const=const: const.to(out.dtype).expand(out.shape).clone()))
    seen = []
    real = attention_hook.attend

    def recording(q, k, v, recipe, **kw):
        seen.append(q.detach().clone())
        return real(q, k, v, recipe, **kw)

    attention_hook.attend = recording
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with torch.no_grad(), use_recipe(model, "sage2-int8", tracker=StepTracker()) as handle:
                model(**inputs)
                grid = handle.context.grid
    finally:
        attention_hook.attend = real
        for h in handles:
            h.remove()
    assert seen and grid is not None, name
    text = families.text_position(model)
    return model, grid, _channel_axes(seen[0], grid, video_first=text != "before")


# classes whose tiny forward applies its RoPE to self-attention, with input changes that give every axis at least two
# positions (and Kandinsky's positions far enough apart that its lowest frequencies show in fp32)
ROPE_CLASSES = {
    "WanTransformer3DModel": None,
    "WanVACETransformer3DModel": None,
    "WanAnimateTransformer3DModel": None,
    "ChronoEditTransformer3DModel": None,
    "AnyFlowTransformer3DModel": None,
    "SkyReelsV2Transformer3DModel": None,
    "HeliosTransformer3DModel": None,
    "HunyuanVideoTransformer3DModel": None,
    "HunyuanVideo15Transformer3DModel": None,
    "MotifVideoTransformer3DModel": None,
    "EasyAnimateTransformer3DModel": None,
    "JoyImageEditTransformer3DModel": lambda: dict(hidden_states=torch.randn(1, 16, 2, 8, 8,
                                                                             generator=torch.Generator().manual_seed(3))),
    "Kandinsky6Transformer3DModel": None,
    "Kandinsky5Transformer3DModel": lambda: dict(visual_rope_pos=[torch.tensor([0, 100]), torch.arange(0, 160, 40),
                                                                  torch.arange(0, 160, 40)]),
}


@pytest.mark.parametrize("name", sorted(ROPE_CLASSES))
def test_rope_facts_are_the_channel_runs_of_the_models_rotary_embedding(name):
    update = ROPE_CLASSES[name]
    model, grid, labels = _probe(name, update() if update else None)
    assert min(grid) >= 2, grid  # every axis seen at two positions at least
    runs = _runs(labels)
    segments = families.rope_segments(model)
    assert segments is not None
    assert [axis for axis, _ in runs] == ["t", "h", "w"], runs
    assert tuple(n for _, n in runs) == segments


@pytest.mark.parametrize("name", ["LTXVideoTransformer3DModel", "LTX2VideoTransformer3DModel",
                                  "MochiTransformer3DModel", "CosmosTransformer3DModel"])
def test_no_split_families_rotate_no_contiguous_axis_runs(name):
    # LTX interleaves the axes pair by pair over the model width, Mochi's learned frequencies mix them in every
    # pair, Cosmos rotates each half of the head: no t | h | w runs for a recipe to pair inside
    model, grid, labels = _probe(name)
    assert families.FACTS[name].rope == families.NO_SPLIT and families.rope_segments(model) is None
    runs = _runs(labels)
    assert any(axes != "-" for axes, _ in runs)  # the probe sees a rotation
    assert [axis for axis, _ in runs if axis != "-"] != ["t", "h", "w"], runs


def test_pipeline_built_rope_rules_match_diffusers_tables():
    # CogVideoX / ConsisID / EasyAnimate and Allegro build their tables with these diffusers functions; each table
    # column belongs to one axis: the runs of axes over head_dim are the rules' splits
    from diffusers.models.embeddings import get_3d_rotary_pos_embed, get_3d_rotary_pos_embed_allegro

    grid = (3, 4, 5)

    def runs_of(cos, d):  # cos (T·H·W, d)
        x = cos.double().reshape(*grid, d)
        labels = ["".join(name for dim, name in enumerate("thw")
                          if float((x[..., c] - x[..., c].mean(dim, keepdim=True)).abs().max()) > 1e-9) or "-"
                  for c in range(d)]
        return _runs(labels)

    for d in (64, 128):
        cos, _ = get_3d_rotary_pos_embed(d, ((0, 0), grid[1:]), grid[1:], grid[0], use_real=True)
        assert runs_of(cos, d) == list(zip("thw", families.COGVIDEOX_SPLIT.split(d)))
    for d in (96, 192):  # Allegro: each third of the head its own axis (its tables: one per axis)
        (ct, _), (ch, _), (cw, _), *_ = get_3d_rotary_pos_embed_allegro(d, ((0, 0), grid[1:]), grid[1:], grid[0])
        assert ct.shape[-1] + ch.shape[-1] + cw.shape[-1] == d
        assert (ct.shape[-1], ch.shape[-1], cw.shape[-1]) == families.THIRDS.split(d)


# no softmax self-attention to quantize (tests/test_models_coverage.py LEFT_OUT)
NOTHING_TO_ROTATE = {"Kandinsky6SRTransformer3DModel", "SanaVideoTransformer3DModel"}


@pytest.mark.parametrize("name", sorted(set(video_transformer_classes()) - NOTHING_TO_ROTATE))
def test_rotateattention_half_takes_each_calls_split(name, monkeypatch):
    # the RoPE split goes to the calls whose head size it describes; calls with heads of another size (SANA-WM's
    # camera attention, audio tracks) take the recipe's default instead of failing
    passed = []

    def recording(q, k, v, recipe, **kw):
        passed.append((q.shape[-1], kw.get("rope_segments")))
        return attend(q, k, v, recipe, **kw)

    monkeypatch.setattr(attention_hook, "attend", recording)
    model, inputs = build(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.no_grad(), use_recipe(model, every_call("rotateattention-half"), tracker=StepTracker()) as handle:
            out = model(**inputs)[0]
    assert handle.calls["quantized"] > 0 and handle.calls["fallback"] == 0
    assert all(torch.isfinite(o).all() for o in (out if isinstance(out, list) else [out]))  # (a list per sample)
    segments = families.rope_segments(model)
    for head_dim, passed_segments in passed:
        assert passed_segments == (segments if segments and sum(segments) == head_dim else None)
