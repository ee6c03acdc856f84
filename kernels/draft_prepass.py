"""DraftAttention2's fused operand pre-pass: one read of Q, K and V per region block gives the packed
16-bit copy, the INT8 / FP8 and NVFP4 operands of the low-bit phases, and (Q, K) the pooled draft
descriptors (mean and max per region) — the seed's "fused operand preparation" (§C).

Exact against the reference engine (lowbit_video/attention/draft_exec.py `prepare_operands`,
lowbit_video/draft/scores.py `pool_regions`), which is what tests/test_kernels_draft.py checks bit for bit:
- INT8 Q/K, one scale per region block (block × head_dim values): s = fl32(amax / 127) from an fp64
  quotient (Triton's fp32 `/` is not correctly rounded), codes RNE(x / s) clamped to ±127.
- FP8 V, one scale per channel over all video tokens: s = fl32(amax / 448) (computed in torch, fp64),
  codes E4M3_RNE(v / s).
- NVFP4 Q/K along head_dim and V along (packed) tokens, blocks of 16, outer scale per (batch, head)
  s_o = fl32(amax / 2688): s_b = E4M3_RNE(amax_b / (6·s_o)), elements E2M1_RNE(x / (s_b·s_o)). Stored as
  E2M1·s_b in fp16 (exact: ≤ 6 significant bits, multiples of 2^−10 up to 2688).
- Every code and block scale without a division per element, in fp32 (kernels/_rounding.py): a candidate from an
  fp32 quotient and the signs of (midpoint · scale − x), one FMA each, which are the exact ones. Scales below
  2^-100 are brought into that path's range with x by 2^100 first (exact).
- Pooling: the sum of a region's real tokens in fp64 (exact for 16-bit inputs whose exponents span
  < 2^45, so the order of summation does not matter) over the real-token count; the max over real tokens.
Padding slots are zero in every operand, as in the engine.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._rounding import (EMULATE_FMA, e4m3_exact32, each_in_fp32_range, in_fp32_range, nvfp4_rows_exact,
                        rne_int_exact32)


@triton.jit
def _load_region(X, GATHER, sx_b, sx_h, sx_n, sx_d, H, PREFIX, pid_r, pid_bh,
                 D: tl.constexpr, BLOCK: tl.constexpr):
    b = pid_bh // H
    h = pid_bh % H
    slots = pid_r * BLOCK + tl.arange(0, BLOCK)
    tok = tl.load(GATHER + slots)
    real = tok >= 0
    cols = tl.arange(0, D)
    x = tl.load(X + b.to(tl.int64) * sx_b + h * sx_h + (PREFIX + tok)[:, None].to(tl.int64) * sx_n
                + cols[None, :] * sx_d, mask=real[:, None], other=0.0)
    return x, real, slots, cols


@triton.jit
def _draft_qk_kernel(X, GATHER, S4, X16, X8, S8, X4, PSUM, PMAX, sx_b, sx_h, sx_n, sx_d, H, PREFIX, R,
                     D: tl.constexpr, BLOCK: tl.constexpr, EMULATE_FMA: tl.constexpr):
    """One (region block, b·h): packed 16-bit copy, INT8 per block, NVFP4 along head_dim, pooled sum/max."""
    pid_r = tl.program_id(0)
    pid_bh = tl.program_id(1)
    x, real, slots, cols = _load_region(X, GATHER, sx_b, sx_h, sx_n, sx_d, H, PREFIX, pid_r, pid_bh, D, BLOCK)
    out = pid_bh.to(tl.int64) * (R * BLOCK * D) + slots[:, None] * D + cols[None, :]
    tl.store(X16 + out, x)
    xf = x.to(tl.float32)  # exact: 16-bit inputs
    # pooled draft descriptors (padding never enters a sum or a maximum): the sum here, the mean's division by
    # the real-token count in torch afterwards (in here each thread would divide every column it holds a replica of)
    pool = pid_bh.to(tl.int64) * (R * D) + pid_r * D + cols
    tl.store(PSUM + pool, tl.sum(xf.to(tl.float64), axis=0))
    tl.store(PMAX + pool, tl.max(tl.where(real[:, None], xf, float("-inf")), axis=0).to(tl.float64))
    # INT8, one scale per region block (|x| <= 127·s to an ulp: the codes need no clamp)
    s8 = (tl.max(tl.max(tl.abs(xf), axis=1), axis=0).to(tl.float64) / 127.0).to(tl.float32)
    s8 = tl.where(s8 > 0, s8, 1.0)
    x8, sq = in_fp32_range(xf, s8)
    tl.store(X8 + out, rne_int_exact32(x8, sq, EMULATE_FMA).to(tl.int8))
    tl.store(S8 + pid_bh * R + pid_r, s8)
    # NVFP4 along head_dim (the E2M1·s_b values do not depend on the range scaling)
    x4, so = in_fp32_range(xf, tl.load(S4 + pid_bh))
    tl.store(X4 + out, nvfp4_rows_exact(x4, so, BLOCK, D, EMULATE_FMA).to(tl.float16))


@triton.jit
def _draft_v_kernel(X, GATHER, VS8, S4, V16, V8T, V4T, sx_b, sx_h, sx_n, sx_d, H, PREFIX, R,
                    D: tl.constexpr, BLOCK: tl.constexpr, EMULATE_FMA: tl.constexpr):
    """One (region block, b·h) of V: packed 16-bit copy; FP8 per channel (E4M3 codes as bytes into V8T) and
    NVFP4 along tokens, transposed."""
    pid_r = tl.program_id(0)
    pid_bh = tl.program_id(1)
    x, real, slots, cols = _load_region(X, GATHER, sx_b, sx_h, sx_n, sx_d, H, PREFIX, pid_r, pid_bh, D, BLOCK)
    base = pid_bh.to(tl.int64) * (R * BLOCK * D)
    tl.store(V16 + base + slots[:, None] * D + cols[None, :], x)
    xt = tl.trans(x.to(tl.float32))  # (D, BLOCK): channels as rows, tokens along the 16-blocks
    outt = base + cols[:, None] * (R * BLOCK) + slots[None, :]
    x8, sv = each_in_fp32_range(xt, tl.load(VS8 + pid_bh * D + cols)[:, None])
    tl.store(V8T + outt, e4m3_exact32(x8, sv, EMULATE_FMA).to(tl.uint8))
    x4, so = in_fp32_range(xt, tl.load(S4 + pid_bh))
    tl.store(V4T + outt, nvfp4_rows_exact(x4, so, D, BLOCK, EMULATE_FMA).to(tl.float16))


def _bhnd(t: torch.Tensor, layout: str):
    """(B, H, N, D) and the BHND strides of t."""
    if layout == "BNHD":
        B, N, H, D = t.shape
        return (B, H, N, D), (t.stride(0), t.stride(2), t.stride(1), t.stride(3))
    return tuple(t.shape), tuple(t.stride())


def _scale_f32(amax64: torch.Tensor, divisor: float) -> torch.Tensor:
    """fl32(amax / divisor) from an fp64 quotient; 0 (all-zero data) -> 1, as formats._blocks.float32_scale."""
    s = (amax64 / divisor).to(torch.float32)
    return torch.where(s > 0, s, torch.ones_like(s))


def draft_prepass(q, k, v, layout: str, gather: torch.Tensor, counts: torch.Tensor, block: int, prefix: int,
                  num_warps: int = 8):
    """Packed operands of every phase plus the pooled descriptors, for the packed layout's `gather` (S,) (each
    slot's video token, −1 for padding) and `counts` (R,) (real tokens per region block), on q's device.

    Returns a dict: q16/k16/v16 (B·H, S, D) in the input dtype; q8/k8 int8 (B·H, S, D), qs8 / ks8 (B·H, R)
    their block scales; v8t E4M3 (B·H, D, S), vs8 (B·H, D); q4/k4 (B·H, S, D),
    v4t (B·H, D, S) fp16 E2M1·s_b; s4 (B·H, 3) fp32 outer scales of Q, K, V; q_mean/q_max/k_mean/k_max
    (B, H, R, D) fp64. S = regions · block."""
    (B, H, N, D), sq = _bhnd(q, layout)
    sk, sv = _bhnd(k, layout)[1], _bhnd(v, layout)[1]
    dev = q.device
    regions = counts.numel()
    S = regions * block
    BH = B * H
    gather32 = gather.to(device=dev, dtype=torch.int32)

    def video(t):  # (B, H, Nv, D) view of the video tokens
        t = t.transpose(1, 2) if layout == "BNHD" else t
        return t[:, :, prefix:, :]

    # per-(batch, head) NVFP4 outer scales and V's per-channel FP8 scales
    # (max |x| as the infinity norm: one read of each tensor, no |x| copy; exact, a maximum of 16-bit values; V's
    # per-(batch, head) maximum from its per-channel ones)
    def amax(t, dim):
        return torch.linalg.vector_norm(video(t), ord=float("inf"), dim=dim).to(torch.float64)

    v_ch = amax(v, -2)  # (B, H, D)
    s4 = torch.stack([_scale_f32(a, 2688.0).reshape(BH) for a in (amax(q, (-2, -1)), amax(k, (-2, -1)),
                                                                  v_ch.amax(dim=-1))], dim=-1).contiguous()
    vs8 = _scale_f32(v_ch, 448.0).reshape(BH, D).contiguous()

    out = {"s4": s4, "vs8": vs8}
    grid = (regions, BH)
    for name, x, st in (("q", q, sq), ("k", k, sk)):
        x16 = torch.empty((BH, S, D), device=dev, dtype=x.dtype)
        x8 = torch.empty((BH, S, D), device=dev, dtype=torch.int8)
        s8 = torch.empty((BH, regions), device=dev, dtype=torch.float32)
        x4 = torch.empty((BH, S, D), device=dev, dtype=torch.float16)
        psum = torch.empty((B, H, regions, D), device=dev, dtype=torch.float64)
        pmax = torch.empty((B, H, regions, D), device=dev, dtype=torch.float64)
        _draft_qk_kernel[grid](x, gather32, s4[:, 0 if name == "q" else 1].contiguous(), x16, x8, s8, x4,
                               psum, pmax, *st, H, prefix, regions, D=D, BLOCK=block, EMULATE_FMA=EMULATE_FMA,
                               num_warps=num_warps)
        out.update({f"{name}16": x16, f"{name}8": x8, f"{name}s8": s8, f"{name}4": x4,
                    f"{name}_mean": psum.div_(counts.view(regions, 1)), f"{name}_max": pmax})
    v16 = torch.empty((BH, S, D), device=dev, dtype=v.dtype)
    v8t = torch.empty((BH, D, S), device=dev, dtype=torch.float8_e4m3fn)
    v4t = torch.empty((BH, D, S), device=dev, dtype=torch.float16)
    _draft_v_kernel[grid](v, gather32, vs8, s4[:, 2].contiguous(), v16, v8t.view(torch.uint8), v4t, *sv, H, prefix,
                          regions, D=D, BLOCK=block, EMULATE_FMA=EMULATE_FMA, num_warps=num_warps)
    out.update(v16=v16, v8t=v8t, v4t=v4t)
    return out
