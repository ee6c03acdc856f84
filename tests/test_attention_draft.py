"""DraftAttention2 execution against exact softmax attention and materialized formulas.

The engine runs NVFP4, INT8/FP8 and 16-bit phases over one online-softmax state, ℓ from the
pre-conversion P̃ (seed §B.3), prefix (text) tokens dense at 16 bit, output normalised once.
"""

import math

import pytest
import torch

from lowbit_video.attention import attend, exact_attention
from lowbit_video.attention.draft import VideoGeometry
from lowbit_video.diagnostics.synthetic import synthetic_qkv
from lowbit_video.errors import ShapeError
from lowbit_video.formats import fp8, intq, nvfp4
from lowbit_video.recipes import load_recipe, recipe_from_dict


def draft_recipe(**draft):
    return recipe_from_dict({"name": "t", "attention": {"kind": "draft", "draft": draft}})


def qkv(geometry, b=1, h=2, d=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(b, h, geometry.tokens, d, generator=g, dtype=torch.float64) for _ in range(3))


def rel(a, b):
    return float(torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b))


@pytest.mark.parametrize("geometry, block", [
    (VideoGeometry(2, 8, 16), 64),
    (VideoGeometry(3, 6, 11, prefix=5), 64),  # padded region blocks and text tokens
    (VideoGeometry(2, 16, 16, prefix=7), 128),
])
def test_no_skipping_all_16bit_is_dense_attention(geometry, block):
    q, k, v = qkv(geometry)
    recipe = draft_recipe(block=block, maxpool_weight=0.5, sparsity=0.0, fp16=1.0)
    out, diag = attend(q, k, v, recipe, geometry=geometry, return_diagnostics=True)
    assert torch.allclose(out, exact_attention(q, k, v), rtol=0, atol=1e-13)
    assert torch.allclose(diag.row_sums, torch.ones_like(diag.row_sums), atol=1e-14)
    assert diag.route.summary()["skip_fraction"] == 0.0


def test_sparse16_is_masked_softmax_and_prefix_stays_dense():
    # Materialized formula: video query i attends to every prefix key plus the video keys of the
    # region pairs its head kept; prefix queries attend to everything. Skipping 90% of the pairs
    # must not touch the prefix rows or drop a prefix key.
    geometry = VideoGeometry(2, 8, 16, prefix=6)
    q, k, v = qkv(geometry, seed=3)
    out, diag = attend(q, k, v, draft_recipe(sparsity=0.9), geometry=geometry, return_diagnostics=True)
    route = diag.route
    layout, p = route.layout, geometry.prefix
    region = torch.empty(geometry.video_tokens, dtype=torch.long)
    region[layout.gather[layout.gather >= 0]] = (layout.gather >= 0).nonzero().squeeze(-1) // layout.block
    kept = route.codes[:, :, region][:, :, :, region] != 0  # (B, H, video, video)
    mask = torch.ones(1, 2, geometry.tokens, geometry.tokens, dtype=torch.bool)
    mask[:, :, p:, p:] = kept
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    expected = torch.softmax(s.masked_fill(~mask, -math.inf), dim=-1) @ v
    assert torch.allclose(out, expected, rtol=0, atol=1e-13)
    assert torch.allclose(out[:, :, :p], exact_attention(q, k, v)[:, :, :p], rtol=0, atol=1e-13)
    assert route.summary()["skip_fraction"] > 0.85


def test_8bit_phase_matches_the_seeds_placement_on_one_tile():
    # One region (8 x 8 frame, B = 64) at 8 bit collapses the recurrence to one tile:
    # O = FP8(P̃) FP8(V) / rowsum(P̃), P̃ = exp(S − rowmax S), S = INT8(Q) INT8(K)ᵀ·scale, with one
    # INT8 scale per 64-token block, FP8 V per channel and FP8 P̃ at the static scale 1/448.
    geometry = VideoGeometry(1, 8, 8)
    q, k, v = qkv(geometry, d=32, seed=5)
    out, diag = attend(q, k, v, draft_recipe(sparsity=0.0, int8=1.0), geometry=geometry, return_diagnostics=True)
    perm = diag.route.layout.gather  # the packed order of the 64 tokens
    qp, kp, vp = (t[:, :, perm] for t in (q, k, v))
    int8_block = lambda x: intq.fake_quantize(x.flatten(-2), bits=8, block=None, axis=-1).reshape(x.shape)
    s = int8_block(qp) @ int8_block(kp).transpose(-1, -2) / math.sqrt(32)
    p = torch.exp(s - s.amax(dim=-1, keepdim=True))
    o = fp8.fake_quantize(p, block=None, axis=-1, scale=1 / 448) @ fp8.fake_quantize(vp, block=None, axis=-2)
    expected = torch.empty_like(o)
    expected[:, :, perm] = o / p.sum(dim=-1, keepdim=True)
    assert torch.allclose(out, expected, rtol=0, atol=1e-13)


def test_4bit_phase_matches_nvfp4_on_one_tile():
    geometry = VideoGeometry(1, 8, 8)
    q, k, v = qkv(geometry, d=32, seed=6)
    out, diag = attend(q, k, v, draft_recipe(sparsity=0.0, nvfp4=1.0), geometry=geometry, return_diagnostics=True)
    perm = diag.route.layout.gather
    qp, kp, vp = (t[:, :, perm] for t in (q, k, v))

    def nv(x, axis):  # NVFP4 16-blocks, FP32 outer scale amax / (448·6) per (batch, head)
        outer = x.abs().amax(dim=(-2, -1), keepdim=True) / (448 * 6)
        return nvfp4.fake_quantize(x, block=16, axis=axis, outer_scale=outer)

    s = nv(qp, -1) @ nv(kp, -1).transpose(-1, -2) / math.sqrt(32)
    p = torch.exp(s - s.amax(dim=-1, keepdim=True))
    o = nvfp4.fake_quantize(p, block=16, axis=-1, outer_scale="none") @ nv(vp, -2)
    expected = torch.empty_like(o)
    expected[:, :, perm] = o / p.sum(dim=-1, keepdim=True)
    assert torch.allclose(out, expected, rtol=0, atol=1e-13)


def test_realised_budget_is_within_one_block_per_head():
    geometry = VideoGeometry(2, 16, 16)
    q, k, v = synthetic_qkv(seq=geometry.tokens, heads=2, head_dim=64, batch=2, outliers=True, dtype=torch.float64)
    spec = load_recipe("draftattention2").attention.draft
    _, diag = attend(q, k, v, "draftattention2", geometry=geometry, return_diagnostics=True)
    codes, pairs = diag.route.codes, diag.route.pairs_per_head
    budget = {16: (1 - spec.sparsity) * spec.fp16, 8: (1 - spec.sparsity) * spec.int8,
              4: (1 - spec.sparsity) * spec.nvfp4, 0: spec.sparsity}
    for code, share in budget.items():
        per_head = (codes == code).sum(dim=(-1, -2)).double() / pairs  # (B, H)
        assert bool(((per_head - share).abs() <= 1 / pairs + 1e-12).all()), (code, per_head, share)


@pytest.mark.parametrize("recipe", ["draftattention-sparse16", pytest.param("draftattention2", marks=pytest.mark.slow)])
def test_more_skipping_increases_error(recipe):
    # Sanity, not a tuned claim: on video-like synthetic Q/K (3D RoPE, outliers) dropping more of
    # the draft-ranked pairs loses more of the attention mass.
    geometry = VideoGeometry(4, 16, 16)
    q, k, v = synthetic_qkv(seq=geometry.tokens, heads=2, head_dim=64, outliers=True, dtype=torch.float64)
    ref = exact_attention(q, k, v)
    base = load_recipe(recipe).attention.draft
    shares = {"fp16": base.fp16, "int8": base.int8, "nvfp4": base.nvfp4}
    errors = [rel(attend(q, k, v, draft_recipe(sparsity=s, maxpool_weight=0.5, **shares), geometry=geometry), ref)
              for s in (0.0, 0.5, 0.75, 0.9)]
    assert errors == sorted(errors), errors
    assert errors[-1] > 1.5 * errors[1]


def test_batch_elements_and_layouts():
    geometry = VideoGeometry(2, 8, 8, prefix=3)
    q, k, v = qkv(geometry, b=2, d=32, seed=2)
    both = attend(q, k, v, "draftattention2", geometry=geometry)
    one = attend(q[1:], k[1:], v[1:], "draftattention2", geometry=geometry)
    assert torch.allclose(both[1:], one, rtol=0, atol=1e-13)  # independent up to BLAS batching roundoff
    bnhd = attend(*(t.transpose(1, 2) for t in (q, k, v)), "draftattention2", layout="BNHD", geometry=geometry)
    assert torch.equal(bnhd.transpose(1, 2), both)
    half = attend(q.float(), k.float(), v.float(), "draftattention2", geometry=geometry)
    assert half.dtype == torch.float32 and half.shape == q.shape


def test_draft_recipes_need_a_matching_geometry():
    geometry = VideoGeometry(1, 8, 8)
    q, k, v = qkv(geometry, d=32)
    with pytest.raises(ShapeError, match="geometry"):
        attend(q, k, v, "draftattention2")
    with pytest.raises(ShapeError, match="72 tokens.*got 64"):
        attend(q, k, v, "draftattention2", geometry=VideoGeometry(1, 8, 9))
    q24, k24, v24 = qkv(geometry, d=24)
    with pytest.raises(ShapeError, match="multiple of 16"):
        attend(q24, k24, v24, "draftattention2", geometry=geometry)
    attend(q24, k24, v24, "draftattention-sparse16", geometry=geometry)  # 16 bit only: any head_dim
