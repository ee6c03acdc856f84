"""RotateAttention in the reference engine: rotations are exact, the V Hadamard is the fold's math,
the P̃ quantizers are the paper's formulas, and the recipes carry the paper's settings."""

import dataclasses
import math

import pytest
import torch

from lowbit_video.attention import attend, exact_attention, reference_attention
from lowbit_video.attention.quantizers import build_quantizer
from lowbit_video.diagnostics.attention_report import attention_report
from lowbit_video.diagnostics.synthetic import synthetic_qkv
from lowbit_video.errors import ShapeError
from lowbit_video.formats import intq
from lowbit_video.recipes import AttentionSpec, load_recipe
from lowbit_video.transforms import half_rotation
from lowbit_video.transforms.hadamard import hadamard_matrix

RECIPES = ["rotateattention-half", "rotateattention-interleaved", "rotateattention-full", "int4-baseline"]


def qkv(nq=70, nk=300, d=128, seed=0, outliers=False):
    return synthetic_qkv(seq=nq, kv_seq=nk, heads=2, head_dim=d, seed=seed, outliers=outliers, dtype=torch.float64)


def p_tiles(seed=0, seq=512, tile=128):
    """Real unnormalized softmax tiles P̃ = exp(S − rowmax S) of video-like Q/K, one per key tile."""
    q, k, _ = qkv(nq=seq, nk=seq, seed=seed, outliers=True)
    s = q @ k.mT / math.sqrt(q.shape[-1])
    return [torch.exp(t - t.amax(-1, keepdim=True)) for t in s.split(tile, dim=-1)]


# ----------------------------------------------------------------------------------- exactness


@pytest.mark.parametrize("rotation", ["interleaved", "half", "hadamard"])
def test_rotations_and_v_hadamard_alone_are_exact(rotation):
    q, k, v = qkv(outliers=True)
    spec = AttentionSpec(rotation=rotation, rotate_v=True, smooth_k=True, smooth_q=True, smooth_q_group=32, tile_k=64)
    out, _ = reference_attention(q, k, v, spec)
    assert torch.allclose(out, exact_attention(q, k, v), rtol=0, atol=1e-11)


def test_engine_v_hadamard_is_the_weight_fold():
    # rotate_v: quantize V·H, multiply the output by Hᵀ. A model with H folded into W_v / W_o feeds
    # V·H to an engine without rotate_v and applies Hᵀ in W_o': the same numbers.
    q, k, v = qkv(nq=40, nk=200)
    spec = load_recipe("rotateattention-half").attention
    h = hadamard_matrix(128)
    engine, _ = reference_attention(q, k, v, spec)
    folded, _ = reference_attention(q, k, v @ h, dataclasses.replace(spec, rotate_v=False))
    assert torch.allclose(engine, folded @ h.T, rtol=0, atol=1e-13)


def test_half_rotation_in_the_engine_is_the_transform_with_the_given_segments():
    q, k, v = qkv(nq=40, nk=200, outliers=True)
    spec = load_recipe("rotateattention-half").attention
    r = half_rotation(128, (16, 56, 56)).matrix()  # HunyuanVideo's split, passed by an adapter
    by_kwarg = attend(q, k, v, "rotateattention-half", rope_segments=(16, 56, 56), backend="reference")
    by_hand, _ = reference_attention(q @ r, k @ r, v, dataclasses.replace(spec, rotation="none"))
    assert torch.allclose(by_kwarg, by_hand, rtol=0, atol=1e-13)
    default = attend(q, k, v, "rotateattention-half", backend="reference")
    assert torch.equal(default, attend(q, k, v, "rotateattention-half", rope_segments=[44, 42, 42], backend="reference"))
    assert not torch.equal(default, by_kwarg)
    # the kwarg overrides a recipe's own split
    odd = dataclasses.replace(spec, rope_segments=(40, 44, 44))
    assert torch.equal(reference_attention(q, k, v, odd, rope_segments=(16, 56, 56))[0], by_kwarg)


def test_bad_segments_are_shape_errors():
    q, k, v = qkv(nq=8, nk=16)
    with pytest.raises(ShapeError, match="add up to"):
        attend(q, k, v, "rotateattention-half", rope_segments=(44, 42, 40))


# ----------------------------------------------------------------------------------------- P̃


def test_range_rectified_p_is_the_papers_formula_with_16_levels():
    # Paper: P̃ = ⌊P / max(P) · 15⌉ − 8 ∈ [−8, 7], per row of each tile.
    codes = []
    for p in p_tiles():
        t = intq.quantize(p, bits=4, block=None, axis=-1, scheme="affine")
        c = t.codes.reshape(p.shape).to(torch.float64)
        assert torch.equal(c, torch.round(p / p.amax(-1, keepdim=True) * 15) - 8)
        assert torch.equal(t.zero_points, torch.full_like(t.zero_points, -8))
        assert torch.equal(t.scales, (p.amax(-1, keepdim=True) / 15).to(torch.float32).reshape(t.scales.shape))
        codes.append(c)
    assert sorted(torch.cat([c.flatten() for c in codes]).unique().tolist()) == list(range(-8, 8))


def test_symmetric_p_uses_only_8_levels():
    # Paper: ⌊P / max(P) · 7⌉ ∈ [0, 7]: the negative half of INT4 is wasted.
    codes = []
    for p in p_tiles():
        c = intq.quantize(p, bits=4, block=None, axis=-1, scheme="symmetric").codes.reshape(p.shape).to(torch.float64)
        assert torch.equal(c, torch.round(p / p.amax(-1, keepdim=True) * 7))
        codes.append(c)
    assert sorted(torch.cat([c.flatten() for c in codes]).unique().tolist()) == list(range(8))


@pytest.mark.parametrize("name, levels", [("rotateattention-half", 16), ("int4-baseline", 8)])
def test_recipe_p_quantizer_values(name, levels):
    # Dequantized P̂ = max/(levels − 1) · k for k = 0 … levels − 1 (per row, float32-rounded scale).
    op = load_recipe(name).attention.p
    p = p_tiles(seed=1)[0]
    p_hat = build_quantizer("p", op)(p)
    step = (p.amax(-1, keepdim=True) / (levels - 1)).to(torch.float32).to(torch.float64)
    k = p_hat / step
    assert torch.allclose(k, k.round(), rtol=0, atol=1e-9)
    assert sorted(k.round().unique().tolist()) == list(range(levels))


# ---------------------------------------------------------------------------------------- recipes


@pytest.mark.parametrize("name, rotation, rotate_v, p_scheme", [
    ("rotateattention-half", "half", True, "affine"),
    ("rotateattention-interleaved", "interleaved", True, "affine"),
    ("rotateattention-full", "hadamard", True, "affine"),
    ("int4-baseline", "none", False, "symmetric"),
])
def test_recipes_carry_the_papers_settings(name, rotation, rotate_v, p_scheme):
    r = load_recipe(name)
    a = r.attention
    assert (a.rotation, a.rotate_v, a.p.scheme, a.rope_segments) == (rotation, rotate_v, p_scheme, ())
    assert a.smooth_k and a.smooth_q
    assert {(a.operand(o).format, a.operand(o).scheme) for o in "qkv"} == {("int4", "symmetric")}
    assert (a.q.granularity, a.k.granularity, a.v.granularity, a.p.granularity) == ("per_token", "per_token", "per_channel", "per_row")
    # FP16 on the first and last 2 steps and blocks: paper, Wan2.2-T2V (40 blocks): 81% in INT4.
    pol = r.policy
    n = 40
    share = sum(pol.quantizes(block=b, step=s, num_steps=n, num_blocks=n) for b in range(n) for s in range(n)) / n**2
    assert share == pytest.approx(0.81, abs=1e-12)


@pytest.mark.parametrize("name", RECIPES)
def test_recipes_run_and_return_input_dtype(name):
    q, k, v = (t.to(torch.float32) for t in qkv(nq=40, nk=100))
    out = attend(q, k, v, name)
    assert out.dtype == torch.float32 and out.shape == q.shape
    ref = exact_attention(q, k, v)
    rel = float(torch.linalg.vector_norm(out - ref) / torch.linalg.vector_norm(ref))
    assert 1e-3 < rel < 0.6, rel


def _rel_l2(name, seq):
    q, k, v = synthetic_qkv(seq=seq, heads=2, head_dim=128, seed=0, outliers=True)  # diagnose attention --outliers
    return attention_report(q, k, v, load_recipe(name))["rel_l2"]


def test_half_beats_the_int4_baseline_on_outlier_inputs():
    assert _rel_l2("rotateattention-half", 1024) < _rel_l2("int4-baseline", 1024)


def test_half_beats_the_int4_baseline_on_outlier_inputs_at_2048():
    assert _rel_l2("rotateattention-half", 2048) < _rel_l2("int4-baseline", 2048)
