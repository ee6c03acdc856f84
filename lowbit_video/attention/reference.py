"""The reference attention engine: exact, deterministic, readable; the oracle for every kernel.

It runs the FlashAttention-2 online-softmax recurrence of the MXAttention paper's Algorithm 1 over
key tiles, in float64, with pluggable quantizers for Q, K, V and the unnormalized exponential tile P̃:

    S_j   = Q̂ K̂_jᵀ · scale (+ ΔS_j from Q smoothing)
    m'    = max(m, rowmax S_j);  α = exp(m − m');  P̃_j = exp(S_j − m');  P̂_j = Q_P(P̃_j)
    ℓ     = α ℓ + rowsum(P̂_j if placement == "pnq" else P̃_j)
    Õ     = α Õ + P̂_j V̂_j
    O     = Õ / ℓ

With PNQ the same P̂ feeds ℓ and Õ, so the weights actually applied to V sum to one by
construction; with direct placement they sum to rowsum(P̂)/rowsum(P̃) instead. The engine tracks
that induced row sum as a diagnostic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import torch

from ..errors import refuse_autograd
from ..recipes import AttentionSpec
from ..transforms import hadamard_matrix, qk_transforms, smooth_k, smooth_q
from .quantizers import build_quantizer


@dataclass(frozen=True)
class AttentionDiagnostics:
    """What the engine saw. `row_sums`: (B, H, Nq) sums of the attention weights actually applied
    to V (1 exactly for PNQ). `quant_rel_l2`: relative L2 error of each quantized operand."""

    row_sums: torch.Tensor
    quant_rel_l2: dict[str, float] = field(default_factory=dict)
    # (B, H, Nq) float64 natural log of the softmax normalizer of the scores S = QKᵀ·scale as the
    # engine applied it: out = Σ_j w_j V_j with Σ_j w_j = exp(S_j - lse) summed over keys. Ring
    # attention merges partial outputs over key chunks with it (ring merge: weights exp(lse_c)).
    lse: torch.Tensor | None = None

    @property
    def rowsum_dev_mean(self) -> float:
        return float((self.row_sums - 1).abs().mean())

    @property
    def rowsum_dev_max(self) -> float:
        return float((self.row_sums - 1).abs().max())


def _rel_l2(approx: torch.Tensor, exact: torch.Tensor) -> float:
    denom = float(torch.linalg.vector_norm(exact))
    return float(torch.linalg.vector_norm(approx - exact)) / denom if denom > 0 else 0.0


@dataclass(frozen=True, eq=False)
class Operands:
    """Q̂, K̂, V̂ as the tiles read them (BHND), and what the recurrence adds around them: the smoothed
    full-precision K and Q's removed group means (for ΔS), the LSE shift of K smoothing and V's
    Hadamard rotation. Shared by the engine and the CPU path, so both see the same operands."""

    q_hat: torch.Tensor
    k_hat: torch.Tensor
    v_hat: torch.Tensor
    k: torch.Tensor  # transformed, unquantized K (the ΔS term multiplies it)
    q_mean: torch.Tensor | None  # Q's group means removed by smoothing, or None
    scale: float
    lse_shift: torch.Tensor | None  # (B, H, Nq, 1) q·mean(K)·scale, or None
    v_rotation: torch.Tensor | None  # the Hadamard applied to V, or None
    errors: dict[str, float]

    def unrotate(self, out: torch.Tensor) -> torch.Tensor:
        """The output in V's original basis (out · Hᵀ under rotate_v)."""
        return out if self.v_rotation is None else out @ self.v_rotation.T.to(out.dtype)

    def shift_lse(self, lse: torch.Tensor) -> torch.Tensor:
        """The LSE of the unsmoothed scores (K smoothing shifted every score of a row)."""
        return lse if self.lse_shift is None else lse + self.lse_shift.squeeze(-1).to(lse.dtype)


def prepare_operands(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    spec: AttentionSpec,
    *,
    scale: float | None = None,
    rope_segments: Sequence[int] | None = None,
    measure_errors: bool = False,
    fast: bool = False,
) -> Operands:
    """The recipe's transforms and Q/K/V quantizers on BHND tensors, in float64. `fast` uses the
    in-dtype quantizer kernels (bit-identical on float64, see formats/fast.py)."""
    q, k, v = (t.to(torch.float64) for t in (q, k, v))
    head_dim = q.shape[-1]
    scale = 1.0 / math.sqrt(head_dim) if scale is None else float(scale)

    # Transforms: QKᵀ-preserving rotation, then smoothing (SageAttention order: smooth the operand
    # that gets quantized). Mean subtraction commutes with a rotation shared by all tokens, so the
    # order is immaterial in exact arithmetic.
    if spec.rotation != "none":
        segments = rope_segments if rope_segments else spec.rope_segments
        # Q gets R, K gets R⁻ᵀ: the same R for an orthogonal rotation; rotation_sigma ≠ 1 is the
        # non-orthogonal negative control (QKᵀ still exact, the operands' ranges no longer kept).
        rot_q, rot_k = qk_transforms(spec.rotation, head_dim, segments, spec.rotation_sigma)
        q, k = rot_q.apply(q), rot_k.apply(k)
    v_rotation = None
    if spec.rotate_v:
        # V H before quantization, output · Hᵀ after: the same math as folding H into W_v and W_o.
        v_rotation = hadamard_matrix(v.shape[-1], dtype=torch.float64, device=v.device)
        v = v @ v_rotation
    lse_shift = None
    if spec.smooth_k:
        k, k_mean = smooth_k(k)  # softmax-invariant: every score in a row shifts by the same amount
        # ... by q·mean(k)·scale, which the LSE must add back (it is not invariant across key chunks).
        lse_shift = (q @ k_mean.transpose(-1, -2)) * scale
    q_mean = None
    if spec.smooth_q:
        q, q_mean = smooth_q(q, spec.smooth_q_group)

    quant = {name: build_quantizer(name, spec.operand(name), fast=fast) for name in ("q", "k", "v")}
    q_hat, k_hat, v_hat = quant["q"](q), quant["k"](k), quant["v"](v)
    errors = {}
    if measure_errors:
        errors = {name: _rel_l2(x_hat, x) for name, x_hat, x in (("q", q_hat, q), ("k", k_hat, k), ("v", v_hat, v))}
    return Operands(q_hat, k_hat, v_hat, k, q_mean, scale, lse_shift, v_rotation, errors)


def reference_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    spec: AttentionSpec,
    *,
    scale: float | None = None,
    rope_segments: Sequence[int] | None = None,
    measure_errors: bool = True,
) -> tuple[torch.Tensor, AttentionDiagnostics]:
    """Attention of BHND tensors under `spec`, computed in float64. Returns (output, diagnostics).

    `measure_errors=False` skips the per-operand error norms (extra full passes over every P̃ tile
    and a device sync each), which model integrations do not need; row sums are always tracked.

    `rope_segments` (t/h/w channel counts of the model's 3D RoPE) overrides the recipe's
    `rope_segments` for the "half" rotation; if both are empty, Wan's split of head_dim is used.

    Inference-only (the quantizers' rounding has no useful gradient): InferenceOnlyError where autograd records.
    """
    refuse_autograd("the reference engine", q, k, v)
    ops = prepare_operands(q, k, v, spec, scale=scale, rope_segments=rope_segments, measure_errors=measure_errors)
    q_hat, k_hat, v_hat, k, q_mean, scale = ops.q_hat, ops.k_hat, ops.v_hat, ops.k, ops.q_mean, ops.scale
    quant_p = build_quantizer("p", spec.p)
    errors = dict(ops.errors)

    shape = q_hat.shape[:-1] + (1,)
    m = torch.full(shape, -math.inf, dtype=torch.float64, device=q_hat.device)
    ell = torch.zeros(shape, dtype=torch.float64, device=q_hat.device)  # normalizer ℓ
    ell_applied = torch.zeros_like(ell)  # Σ P̂: mass actually applied to V
    acc = torch.zeros(q_hat.shape[:-1] + (v_hat.shape[-1],), dtype=torch.float64, device=q_hat.device)
    p_err2 = p_norm2 = 0.0
    pnq = spec.placement == "pnq"

    for start in range(0, k.shape[-2], spec.tile_k):
        stop = min(start + spec.tile_k, k.shape[-2])  # ragged last tile: its P̃ blocks are padded
        s = (q_hat @ k_hat[..., start:stop, :].transpose(-1, -2)) * scale
        if q_mean is not None:
            # ΔS: the part of Q removed by smoothing, against full-precision (smoothed) K.
            s = s + (q_mean @ k[..., start:stop, :].transpose(-1, -2)) * scale
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        alpha = torch.exp(m - m_new)
        p = torch.exp(s - m_new)
        p_hat = quant_p(p)
        ell = alpha * ell + (p_hat if pnq else p).sum(dim=-1, keepdim=True)
        ell_applied = alpha * ell_applied + p_hat.sum(dim=-1, keepdim=True)
        acc = alpha * acc + p_hat @ v_hat[..., start:stop, :]
        m = m_new
        if measure_errors:
            p_err2 += float(((p_hat - p) ** 2).sum())
            p_norm2 += float((p**2).sum())

    out = ops.unrotate(acc / ell)
    lse = ops.shift_lse((m + torch.log(ell)).squeeze(-1))
    if measure_errors:
        errors["p"] = math.sqrt(p_err2 / p_norm2) if p_norm2 > 0 else 0.0
    return out, AttentionDiagnostics(row_sums=(ell_applied / ell).squeeze(-1), quant_rel_l2=errors, lse=lse)


def exact_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float | None = None) -> torch.Tensor:
    """Plain softmax attention in float64 (BHND), materializing the score matrix: the ground truth."""
    q, k, v = (t.to(torch.float64) for t in (q, k, v))
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    weights = torch.softmax((q @ k.transpose(-1, -2)) * scale, dim=-1)
    return weights @ v
