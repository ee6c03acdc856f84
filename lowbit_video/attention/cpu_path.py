"""The CPU path for quantized dense recipes: the engine's numbers, vectorised over heads, query rows
and key tiles, in float32 where that is exact or rounds at the float32 unit.

The engine (reference.py) walks the key tiles of every query row with the online-softmax recurrence.
Each tile's P̃_j = exp(S_j − m_j) is taken against the running maximum m_j = max(tile maxima 0..j),
and P̃_j's quantization depends on that m_j. All m_j follow from the tile maxima by a cumulative
maximum, so every tile of a chunk of query rows is computed at once:

    S     = Q̂ K̂ᵀ · scale (+ ΔS)                one matmul over all keys, tiles as views of it
    m_j   = cummax_j(rowmax S_j);  P̃_j = exp(S_j − m_j);  P̂_j = Q_P(P̃_j)    (the engine's P̃ and P̂)
    w_j   = exp(m_j − m_last)                   the product of the engine's rescale factors α
    ℓ     = Σ_j w_j rowsum(P̂_j or P̃_j);  O = Σ_j w_j P̂_j V̂_j / ℓ   (one matmul of w ⊙ P̂ with V̂)

What is shared with the engine: the transforms and the Q/K/V quantizers (`prepare_operands`, in
float64 with the bit-identical fast kernels, so Q̂, K̂, V̂ are the engine's values), and the P̃
quantizer settings (`build_quantizer`, fast kernels on float32 tiles).

Where float32 rounds (unit u = 2^-24), the rest is exact:
  * Q̂, K̂, V̂ to float32: exact for MXFP4 (E2M1 codes times powers of two); relative <= u for
    INT8/INT4/NVFP4/FP8 values (a code times a 24-bit float32 scale needs more than 24 bits).
  * S: the float32 matmul, |δS| <= (D + 2)·u · Σ_d |q̂_d k̂_d| · scale (ΔS likewise over its D terms).
  * P̃ = exp(S − m): float32 exp (about 1 ulp) of an argument with the error of S; relative error of
    P̃ is about |δS| + 2u. P̂: MXFP4's power-of-two steps are exact; NVFP4/INT/FP8 round x / scale to
    float32 first (formats/fast.py). An element of P̃ whose engine value lies within that relative
    error of a rounding boundary of its format can land one grid step away: rare (about 1e-6 of the
    elements on the shipped model's shapes) and bounded by one step.
  * w_j, ℓ, the P̂ V̂ matmul and the division: float32, relative about (N_k + T)·u worst case.
Ties in the engine's float64 recurrence (its α products) differ from w_j by float64 roundoff only.
"""

from __future__ import annotations

import math
from typing import Iterator, Sequence

import torch
import torch.nn.functional as F

from ..recipes import AttentionSpec
from .quantizers import build_quantizer
from .reference import prepare_operands

# Query rows per chunk are chosen so a chunk's score tile holds about this many elements per head:
# small enough that the dozen passes over it stay in the CPU caches (4 heads: 4 MB), large enough to
# amortise the calls. Per head, so a head's numbers do not depend on how many heads share the call.
CHUNK_ELEMENTS_PER_HEAD = 1 << 18


def cpu_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    spec: AttentionSpec,
    *,
    scale: float | None = None,
    rope_segments: Sequence[int] | None = None,
    chunk_elements: int = CHUNK_ELEMENTS_PER_HEAD,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of BHND tensors under the dense quantized recipe `spec`. Returns (output float64
    in V's basis, log-sum-exp float32 (B, H, Nq)), the engine's numbers within the rounding above."""
    ops = prepare_operands(q, k, v, spec, scale=scale, rope_segments=rope_segments, fast=True)
    lead = ops.q_hat.shape[:-2]
    nq, nk, dv = ops.q_hat.shape[-2], ops.k_hat.shape[-2], ops.v_hat.shape[-1]
    tile = spec.tile_k
    tiles = -(-nk // tile)
    pad = tiles * tile - nk

    def keys_last(x: torch.Tensor) -> torch.Tensor:  # (BH, N, D) float32 -> (BH, D, T·tile), zero-padded keys
        return F.pad(x.to(torch.float32).flatten(0, -3), (0, 0, 0, pad)).transpose(-1, -2).contiguous()

    q32 = ops.q_hat.to(torch.float32).flatten(0, -3)
    k_t = keys_last(ops.k_hat)
    v32 = F.pad(ops.v_hat.to(torch.float32).flatten(0, -3), (0, 0, 0, pad))
    delta = None
    if ops.q_mean is not None:  # ΔS = q_mean Kᵀ · scale, one row per smoothing group
        group = spec.smooth_q_group
        means = ops.q_mean[..., ::group, :].to(torch.float32).flatten(0, -3)  # (BH, G, D)
        delta = torch.matmul(means, keys_last(ops.k)).mul_(ops.scale)
    quant_p = build_quantizer("p", spec.p, fast=True, inplace=True)
    pnq = spec.placement == "pnq"

    bh = q32.shape[0]
    out = torch.empty((bh, nq, dv), dtype=torch.float32, device=q32.device)
    lse = torch.empty((bh, nq), dtype=torch.float32, device=q32.device)
    rows = max(1, chunk_elements // (tiles * tile))
    for r0, r1, g in _row_chunks(nq, rows, spec.smooth_q_group if delta is not None else None):
        s = torch.matmul(q32[:, r0:r1], k_t)
        s.mul_(ops.scale)
        if delta is not None:
            s.add_(delta[:, g:g + 1])
        if pad:
            s[..., nk:] = -math.inf
        s = s.unflatten(-1, (tiles, tile))  # (BH, R, T, tile)
        running = torch.cummax(s.amax(dim=-1), dim=-1).values  # m_j, (BH, R, T)
        p = s.sub_(running.unsqueeze(-1)).exp_()  # P̃_j, in place of S
        p_sums = None if pnq else p.sum(dim=-1)
        p_hat = quant_p(p)  # overwrites P̃
        m_last = running[..., -1:]
        w = torch.exp(running - m_last)
        if pnq:
            p_sums = p_hat.sum(dim=-1)
        ell = (p_sums * w).sum(dim=-1, keepdim=True)
        weighted = p_hat.mul_(w.unsqueeze(-1))  # P̃ is no longer needed: in place even when P̂ is P̃
        out[:, r0:r1] = torch.matmul(weighted.flatten(-2), v32).div_(ell)
        lse[:, r0:r1] = (m_last + torch.log(ell)).squeeze(-1)

    out64 = ops.unrotate(out.to(torch.float64).unflatten(0, lead))
    return out64, ops.shift_lse(lse.unflatten(0, lead))


def _row_chunks(n: int, rows: int, group: int | None) -> Iterator[tuple[int, int, int]]:
    """(start, stop, smoothing group index) of query-row chunks of at most `rows`, never crossing a
    Q-smoothing group boundary (a chunk then adds one ΔS row to all its rows)."""
    if group is None:
        for r0 in range(0, n, rows):
            yield r0, min(n, r0 + rows), 0
        return
    for g0 in range(0, n, group):
        g1 = min(n, g0 + group)
        for r0 in range(g0, g1, rows):
            yield r0, min(g1, r0 + rows), g0 // group
