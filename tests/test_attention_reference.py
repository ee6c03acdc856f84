"""The reference attention engine against exact softmax attention and against an independent,
materialized single-tile formulation of the paper's PNQ / direct placements."""

import math

import pytest
import torch

from lowbit_video.attention import attend, exact_attention, reference_attention
from lowbit_video.errors import NonFiniteInputError, ShapeError
from lowbit_video.formats import mxfp4
from lowbit_video.recipes import AttentionSpec, OperandQuant

QUANTIZED = ["mxattention", "mxattention-no-uos", "mxattention-no-pnq-uos", "mxfp4-ocp", "mxfp4-tfs",
             "nvfp4", "sage-nvfp4", "sage2-int8"]


def qkv(b=1, h=2, nq=70, nk=300, d=64, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(b, h, n, d, generator=g, dtype=torch.float64).to(dtype) for n in (nq, nk, nk))


@pytest.mark.parametrize("nq, nk", [(1, 1), (70, 300), (33, 32), (128, 129), (5, 1000)])
def test_engine_without_quantizers_is_exact_softmax_attention(nq, nk):
    # Ragged last tiles, q_len != kv_len: the online recurrence must reproduce softmax exactly
    # (float64; 1e-12 covers summation-order differences only).
    q, k, v = qkv(nq=nq, nk=nk)
    out, diag = reference_attention(q, k, v, AttentionSpec())
    assert torch.allclose(out, exact_attention(q, k, v), rtol=0, atol=1e-12)
    assert torch.allclose(diag.row_sums, torch.ones_like(diag.row_sums), atol=1e-14)


def test_rotation_and_smoothing_alone_are_exact():
    # Hadamard and K smoothing are softmax-invariant; Q smoothing is exact with its ΔS correction.
    q, k, v = qkv(d=96)
    k = k + 3.0
    spec = AttentionSpec(rotation="hadamard", smooth_k=True, smooth_q=True, smooth_q_group=16, tile_k=64)
    out, _ = reference_attention(q, k, v, spec)
    assert torch.allclose(out, exact_attention(q, k, v), rtol=0, atol=1e-11)


def test_tile_size_does_not_matter_without_quantization():
    q, k, v = qkv()
    a, _ = reference_attention(q, k, v, AttentionSpec(tile_k=32))
    b, _ = reference_attention(q, k, v, AttentionSpec(tile_k=512))
    assert torch.allclose(a, b, rtol=0, atol=1e-13)


@pytest.mark.parametrize("placement", ["pnq", "direct"])
def test_single_tile_matches_materialized_formula(placement):
    # With one key tile the recurrence collapses to: P̃ = exp(S − rowmax S), P̂ = Q(P̃),
    # O = P̂ V̂ / Σ P̂ (PNQ) or P̂ V̂ / Σ P̃ (direct) — MXAttention paper Section 4.2.
    q, k, v = qkv(nq=20, nk=96, d=64)
    op = OperandQuant(format="mxfp4", rule="uos", qmax=7.25)
    spec = AttentionSpec(kind="quantized", placement=placement, tile_k=128, q=op, k=op, v=op, p=op)
    out, diag = reference_attention(q, k, v, spec)

    fq = lambda x, axis: mxfp4.fake_quantize(x, rule="uos", q=7.25, block=32, axis=axis)
    s = fq(q, -1) @ fq(k, -1).mT / math.sqrt(64)
    p = torch.exp(s - s.amax(-1, keepdim=True))
    p_hat = fq(p, -1)
    denom = p_hat.sum(-1, keepdim=True) if placement == "pnq" else p.sum(-1, keepdim=True)
    expected = p_hat @ fq(v, -2) / denom
    assert torch.allclose(out, expected, rtol=0, atol=1e-13)
    assert torch.allclose(diag.row_sums, (p_hat.sum(-1) / denom.squeeze(-1)), atol=1e-13)


def test_pnq_row_sums_are_one_and_direct_ones_are_not():
    q, k, v = qkv(nq=64, nk=512, d=64, seed=3)
    _, pnq = attend(q, k, v, "mxattention", return_diagnostics=True)
    _, direct = attend(q, k, v, "mxfp4-ocp", return_diagnostics=True)
    assert pnq.rowsum_dev_max <= 1e-12  # exactly one up to float64 division
    assert direct.rowsum_dev_mean > 1e-3


@pytest.mark.parametrize("recipe", QUANTIZED)
def test_quantized_recipes_are_close_but_not_equal_to_exact(recipe):
    q, k, v = qkv(nq=64, nk=256, d=64, seed=1)
    out = attend(q, k, v, recipe)
    ref = exact_attention(q, k, v)
    rel = float(torch.linalg.vector_norm(out - ref) / torch.linalg.vector_norm(ref))
    # 4-bit attention on Gaussian data: a few % to tens of % error, never zero, never garbage.
    assert 1e-4 < rel < 0.6, rel


@pytest.mark.parametrize("recipe", ["fp16", "mxattention"])
def test_deterministic(recipe):
    q, k, v = qkv(dtype=torch.float32)
    assert torch.equal(attend(q, k, v, recipe), attend(q, k, v, recipe))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("recipe", ["fp16", "mxattention", "sage2-int8"])
def test_returns_input_dtype_and_shape(dtype, recipe):
    q, k, v = qkv(nq=40, nk=100, dtype=dtype)
    out = attend(q, k, v, recipe)
    assert out.dtype == dtype and out.shape == q.shape


def test_bnhd_layout_matches_bhnd():
    q, k, v = qkv(nq=40, nk=100)
    bhnd = attend(q, k, v, "mxattention")
    bnhd = attend(*(t.transpose(1, 2) for t in (q, k, v)), "mxattention", layout="BNHD")
    assert torch.equal(bnhd.transpose(1, 2), bhnd)


def test_batch_elements_are_independent():
    # Per-operand scales are per block (MX) or per tensor slice; check a batch of two equals two runs.
    q, k, v = qkv(b=2, nq=40, nk=100)
    both = attend(q, k, v, "mxattention")
    one = attend(q[1:], k[1:], v[1:], "mxattention")
    assert torch.equal(both[1:], one)


def test_fp16_recipe_uses_sdpa_within_dtype_tolerance():
    q, k, v = qkv(nq=64, nk=300, dtype=torch.float16)
    out = attend(q, k, v, "fp16").double()
    ref = exact_attention(q, k, v)
    assert torch.allclose(out, ref, atol=2e-3)  # fp16 has an 11-bit significand


def test_nan_and_inf_inputs_are_rejected():
    q, k, v = qkv()
    k[0, 0, 3, 3] = float("nan")
    with pytest.raises(NonFiniteInputError, match="NaN or Inf"):
        attend(q, k, v, "mxattention")
    q2, k2, v2 = qkv()
    v2[0, 1, 0, 0] = float("inf")
    with pytest.raises(NonFiniteInputError):
        attend(q2, k2, v2, "fp16")


def test_mx_recipe_rejects_head_dim_not_multiple_of_32():
    q, k, v = qkv(d=48)
    with pytest.raises(ShapeError, match="multiple of 32"):
        attend(q, k, v, "mxattention")
    attend(q, k, v, "sage2-int8")  # per-token INT8 has no head_dim constraint


def test_shape_mismatches_are_user_errors():
    q, k, v = qkv()
    with pytest.raises(ShapeError):
        attend(q, k[..., :32], v, "fp16")
    with pytest.raises(ShapeError):
        attend(q, k, v[:, :, :10], "fp16")
    with pytest.raises(ShapeError):
        attend(q[0], k, v, "fp16")


@pytest.mark.gpu
@pytest.mark.parametrize("recipe", ["fp16"] + QUANTIZED)
def test_reference_engine_runs_on_cuda_and_matches_cpu(recipe):
    # Same float64 math on both devices; only reduction order may differ (cuBLAS vs CPU BLAS),
    # which can flip a rounding decision at a quantization boundary, hence a loose-but-small bound.
    q, k, v = qkv(nq=64, nk=256)
    cpu = attend(q, k, v, recipe, backend="reference")
    gpu = attend(q.cuda(), k.cuda(), v.cuda(), recipe, backend="reference")
    assert gpu.device.type == "cuda"
    assert float((cpu - gpu.cpu()).abs().max()) < 1e-3 * float(cpu.abs().max())


def test_sage_nvfp4_survives_p_tiles_far_below_the_running_max():
    # Found by the kernel work: a key tile whose P̃ row maximum is so small that rowmax/(448·6)
    # underflows float32 made the engine raise. Such a tile (scores ~-200 below the row's running
    # maximum, P̃ ~ e^-200 << 2^-100) must quantize to zero and leave the output finite.
    from lowbit_video.attention import attend

    d = 64
    q = torch.zeros(1, 1, 4, d, dtype=torch.float64)
    q[..., 0] = 1.0
    k = torch.zeros(1, 1, 256, d, dtype=torch.float64)
    k[..., :128, 0] = 2.0 * d ** 0.5               # first tile: scores q·k/sqrt(d) = 2, the row maximum
    k[..., 128:, 0] = -200.0 * d ** 0.5            # second tile: scores -200, P̃ = e^-202 there
    v = torch.randn(1, 1, 256, d, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    out = attend(q, k, v, "sage-nvfp4", backend="reference")
    assert torch.isfinite(out).all()
    dense = torch.softmax((q @ k.transpose(-1, -2)) * d ** -0.5, dim=-1) @ v
    # the far tile carries no weight in exact attention either; what remains is the recipe's error
    assert (out - dense).norm() / dense.norm() < 0.2
