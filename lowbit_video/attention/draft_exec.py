"""Execution: the precision phases of DraftAttention2 over one shared online-softmax state, in float64.

The seed's kernel (§3.3, §C.4) runs every retained block of a query row through precision-specific
phases — NVFP4, then INT8, then FP16 (anemoi executes them in that order) — that extend *one*
online-softmax state (row max m, normaliser ℓ, numerator Õ), rescaling ℓ and Õ together whenever m
grows, and divides Õ by ℓ once at the end. Here, for each phase and each key block c, the query rows
whose region pair (a, c) was allocated that precision take one step:

    S    = Q̂ K̂_cᵀ · scale                     (other rows: −∞, i.e. no update)
    m'   = max(m, rowmax S);  α = exp(m − m');  P̃ = exp(S − m');  P̂ = Q_P(P̃)
    ℓ    = α ℓ + rowsum(P̃)                     (pre-conversion weights, §B.3)
    Õ    = α Õ + P̂ V̂_c
    O    = Õ / ℓ                                (0 for a row that kept no key at all)

Operands are prepared once for the whole sequence (§C "fused operand preparation"), one copy per
precision, with the existing exact formats:

* 16 bit: unquantized (§B.1: "leaves the 16-bit path unquantized").
* 8 bit (§C.3: "INT8 for QKᵀ and FP8 for probability–value multiplication"): Q and K INT8
  symmetric with one scale per packed region block (block x head_dim values, the per-block Q/K
  scales of anemoi's INT8 preparation and SageAttention2); V FP8 E4M3 with one scale per channel
  (over all video tokens); P̃ FP8 E4M3 with the static scale 1/448 (P̃ <= 1).
* 4 bit (§C.3: "NVFP4 uses E2M1 values with E4M3 local scales"): NVFP4 blocks of 16 — Q and K
  along head_dim, V along tokens per channel, P̃ along keys — with an FP32 outer scale per (batch,
  head) for Q, K, V (amax / (448·6)) and none for P̃ (P̃ <= 1, as the project's nvfp4 recipe).

Padding slots are zero in every operand (so they move no scale) and are masked out as keys.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import torch

from ..formats import fast as fast_formats
from ..formats import fp8, intq, nvfp4
from ..draft.alloc import SKIP
from ..draft.layout import PackedLayout

PHASES = (4, 8, 16)  # execution order of the precision phases
P_FP8_SCALE = 1.0 / 448.0
NVFP4_BLOCK = 16


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


@dataclass(frozen=True, eq=False)
class PhaseOperands:
    """Q, K, V as one precision's phase reads them, and how that phase quantizes P̃."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    p: Callable[[torch.Tensor], torch.Tensor] = _identity
    errors: dict[str, float] = field(default_factory=dict)


def _rel_l2(approx: torch.Tensor, exact: torch.Tensor) -> float:
    denom = float(torch.linalg.vector_norm(exact))
    return float(torch.linalg.vector_norm(approx - exact)) / denom if denom > 0 else 0.0


def _int8_per_block(x: torch.Tensor, block: int, fake_int) -> torch.Tensor:
    """INT8 with one scale per `block` consecutive tokens x all channels (a packed region block)."""
    grouped = x.unflatten(-2, (x.shape[-2] // block, block)).flatten(-2)  # (..., R, block * D)
    return fake_int(grouped, bits=8, block=None, axis=-1).unflatten(-1, (block, x.shape[-1])).flatten(-3, -2)


def _nvfp4_per_head(x: torch.Tensor, axis: int, fake_nvfp4) -> torch.Tensor:
    """NVFP4 16-blocks along `axis` with the FP32 outer scale amax / (448·6) of each (batch, head)."""
    amax = x.abs().amax(dim=(-2, -1), keepdim=True)
    outer = torch.where(amax > 0, amax / nvfp4.TENSOR_SCALE_DIVISOR, torch.ones_like(amax))
    return fake_nvfp4(x, block=NVFP4_BLOCK, axis=axis, outer_scale=outer)


def prepare_operands(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block: int, precisions, *,
                     fast: bool = False) -> dict[int, PhaseOperands]:
    """Each requested precision's copy of the packed operands (see the module docstring). `fast`
    uses the in-dtype kernels of formats/fast.py (bit-identical on these float64 operands); its P̃
    quantizers overwrite their input (the CPU path's float32 tiles)."""
    if fast:
        fake_int, fake_fp8, fake_nvfp4 = fast_formats.fake_int, fast_formats.fake_fp8, fast_formats.fake_nvfp4
        p_fp8 = lambda p: fast_formats.fake_fp8(p, block=None, axis=-1, scale=P_FP8_SCALE, inplace=True)
        p_nvfp4 = lambda p: fast_formats.fake_nvfp4(p, block=NVFP4_BLOCK, axis=-1, outer_scale="none", inplace=True)
    else:
        fake_int, fake_fp8, fake_nvfp4 = intq.fake_quantize, fp8.fake_quantize, nvfp4.fake_quantize
        p_fp8 = lambda p: fp8.fake_quantize(p, block=None, axis=-1, scale=P_FP8_SCALE)
        p_nvfp4 = lambda p: nvfp4.fake_quantize(p, block=NVFP4_BLOCK, axis=-1, outer_scale="none")
    ops: dict[int, PhaseOperands] = {}
    for precision in precisions:
        if precision == 16:
            ops[16] = PhaseOperands(q, k, v)
        elif precision == 8:
            q8, k8 = _int8_per_block(q, block, fake_int), _int8_per_block(k, block, fake_int)
            v8 = fake_fp8(v, block=None, axis=-2)
            errors = {"q_int8": _rel_l2(q8, q), "k_int8": _rel_l2(k8, k), "v_fp8": _rel_l2(v8, v)}
            ops[8] = PhaseOperands(q8, k8, v8, p_fp8, errors)
        elif precision == 4:
            q4, k4, v4 = (_nvfp4_per_head(x, axis, fake_nvfp4) for x, axis in ((q, -1), (k, -1), (v, -2)))
            errors = {"q_nvfp4": _rel_l2(q4, q), "k_nvfp4": _rel_l2(k4, k), "v_nvfp4": _rel_l2(v4, v)}
            ops[4] = PhaseOperands(q4, k4, v4, p_nvfp4, errors)
        else:
            raise ValueError(f"unknown precision {precision!r}")
    return ops


class OnlineSoftmax:
    """The state the phases share, per query row: row max m, normaliser ℓ (pre-conversion P̃),
    Σ P̂ (the mass actually applied to V, for the row-sum diagnostic) and the numerator Õ.
    Rows are held as (B, H, R, block) so a step can touch only the query regions it concerns."""

    def __init__(self, rows_shape: tuple[int, ...], dv: int, dtype: torch.dtype, device: torch.device):
        self.m = torch.full(rows_shape + (1,), -math.inf, dtype=dtype, device=device)
        self.ell = torch.zeros(rows_shape + (1,), dtype=dtype, device=device)
        self.ell_applied = torch.zeros_like(self.ell)
        self.acc = torch.zeros(rows_shape + (dv,), dtype=dtype, device=device)
        self.p_err2: dict[int, float] = {}
        self.p_norm2: dict[int, float] = {}

    def step(self, sel: torch.Tensor, s: torch.Tensor, active: torch.Tensor, v: torch.Tensor, quant_p, precision: int) -> None:
        """Fold the score tile `s` (B, H, len(sel), block, keys) of query regions `sel` into the
        state; entries where `active` is False are not attention edges (those rows do not move)."""
        m, ell, ell_applied, acc = (t[:, :, sel] for t in (self.m, self.ell, self.ell_applied, self.acc))
        s = s.masked_fill(~active, -math.inf)
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        m_ref = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))  # rows with nothing yet
        alpha = torch.exp(m - m_ref)
        p = torch.exp(s - m_ref)  # exactly 0 off the active edges
        p_hat = quant_p(p)
        self.ell[:, :, sel] = alpha * ell + p.sum(dim=-1, keepdim=True)
        self.ell_applied[:, :, sel] = alpha * ell_applied + p_hat.sum(dim=-1, keepdim=True)
        self.acc[:, :, sel] = alpha * acc + p_hat @ v.unsqueeze(2)
        self.m[:, :, sel] = m_new
        self.p_err2[precision] = self.p_err2.get(precision, 0.0) + float(((p_hat - p) ** 2).sum())
        self.p_norm2[precision] = self.p_norm2.get(precision, 0.0) + float((p**2).sum())

    def output(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(O, row sums of the applied weights, LSE) as (B, H, R·block, ·), normalised once; rows that
        kept nothing give 0 (LSE −inf). LSE = m + log ℓ: the normaliser O was divided by."""
        kept = self.ell > 0
        denom = torch.where(kept, self.ell, torch.ones_like(self.ell))
        out = torch.where(kept, self.acc / denom, torch.zeros_like(self.acc))
        row_sums = torch.where(kept, self.ell_applied / denom, torch.zeros_like(self.ell))
        lse = torch.where(kept, self.m + torch.log(denom), torch.full_like(self.m, -math.inf))
        return out.flatten(2, 3), row_sums.squeeze(-1).flatten(2, 3), lse.squeeze(-1).flatten(2, 3)


def run_phases(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    codes: torch.Tensor,
    layout: PackedLayout,
    *,
    scale: float,
    prefix_k: torch.Tensor,
    prefix_v: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict[str, float]]:
    """Attention of packed video queries q (B, H, R·block, D) over packed video keys k, v under the
    precision `codes` (B, H, R, R), plus every prefix key at 16 bit (outside the budget, §C.1).

    Returns the packed output, the row sums of the applied weights, the rows' LSE, and operand errors.
    """
    block, regions = layout.block, layout.regions
    in_use = [p for p in PHASES if bool((codes == p).any())]
    ops = prepare_operands(q, k, v, block, set(in_use) | {16})
    state = OnlineSoftmax(tuple(q.shape[:-2]) + (regions, block), v.shape[-1], q.dtype, q.device)
    key_valid = layout.valid.to(q.device)

    for precision in PHASES:
        op = ops.get(precision)
        for c in range(regions if precision in in_use else 0):
            rows = codes[..., :, c] == precision  # (B, H, R): query regions that run pair (a, c) here
            sel = rows.flatten(0, -2).any(dim=0).nonzero().squeeze(-1)  # ... in some batch element / head
            if sel.numel() == 0:
                continue
            active = rows[:, :, sel, None, None] & key_valid[c]  # (B, H, len(sel), block, block)
            keys = slice(c * block, (c + 1) * block)
            q_sel = op.q.unflatten(-2, (regions, block))[:, :, sel]
            s = (q_sel @ op.k[..., keys, :].transpose(-1, -2).unsqueeze(2)) * scale
            state.step(sel, s, active, op.v[..., keys, :], op.p, precision)
    if prefix_k.shape[-2]:
        # Prefix keys: dense, 16 bit, for every video query (after the video blocks of the 16-bit phase).
        everyone = torch.arange(regions, device=q.device)
        s = (q.unflatten(-2, (regions, block)) @ prefix_k.transpose(-1, -2).unsqueeze(2)) * scale
        state.step(everyone, s, torch.ones_like(s, dtype=torch.bool), prefix_v, _identity, 16)

    out, row_sums, lse = state.output()
    errors: dict[str, float] = {}
    for precision in in_use:
        errors.update(ops[precision].errors)
        if precision != 16:
            name = "p_fp8" if precision == 8 else "p_nvfp4"
            norm2 = state.p_norm2.get(precision, 0.0)
            errors[name] = math.sqrt(state.p_err2[precision] / norm2) if norm2 > 0 else 0.0
    return out, row_sums, lse, errors


def empty_query_regions(codes: torch.Tensor) -> torch.Tensor:
    """(B, H, R) bool: query regions that kept no video key block (all pairs in their row skipped)."""
    return (codes == SKIP).all(dim=-1)
