"""`diagnose outliers`: RotateAttention's channel-wise incoherence Ψ of Q and K, per RoPE segment,
before and after each Q/K rotation.

Definition (RotateAttention, Sec. "RoPE-Aware Rotation"): Ψ(X) = max_i |X_{i,:} − E[X]| for
X ∈ {Q, K}, i.e. the largest absolute entry of X once its mean is removed. We read E[X] as the
per-channel mean over tokens (per batch element and head): that is the paper's "channel smoothing"
(Q − E[Q], SageAttention's K smoothing), it commutes with any rotation shared by all tokens
((X − E[X]) R = XR − E[XR]), and so Ψ before and after a rotation compares the same smoothed tensor.
Ψ is not normalized: an orthogonal rotation preserves every token's norm, so a smaller Ψ means the
same energy with a smaller peak, i.e. a smaller per-token INT4 scale for the same signal.

Per segment, Ψ is taken over the output channels of that segment (t/h/w). The interleaved and half
rotations never move energy across segments; the full Hadamard does, so its per-segment figures are
those of the channel positions only. The overall `psi` is max(Ψ(Q), Ψ(K)); both are reported too.

`token_incoherence` adds the classic dimensionless measure for comparison: per token, max over
channels of |x_c| divided by the RMS over channels (after the same mean removal), averaged over
tokens (Q and K pooled). It is what per-token INT4 error scales with: error² ∝ (max/RMS)² per token.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from ..errors import ShapeError
from ..transforms.rope import resolve_segments
from ..transforms.rotations import qk_rotation

# The paper's names; "full" is the recipe schema's "hadamard".
ROTATIONS = {"none": "none", "interleaved": "interleaved", "half": "half", "full": "hadamard"}


def psi(x: torch.Tensor, channels: slice = slice(None)) -> float:
    """Ψ(x): max |x − mean over tokens| over tokens and the given channels (x is (..., N, D))."""
    centred = x - x.mean(dim=-2, keepdim=True)
    return float(centred[..., channels].abs().amax())


def token_incoherence(x: torch.Tensor) -> torch.Tensor:
    """Per token max_c |x_c| / RMS_c(x) after removing the per-channel token mean, shape (..., N)."""
    centred = x - x.mean(dim=-2, keepdim=True)
    rms = centred.pow(2).mean(dim=-1).sqrt()
    peak = centred.abs().amax(dim=-1)
    return torch.where(rms > 0, peak / rms, torch.ones_like(rms))


def segment_names(n: int) -> list[str]:
    return ["t", "h", "w"] if n == 3 else [f"s{i}" for i in range(n)]


def outlier_report(q: torch.Tensor, k: torch.Tensor, segments: Sequence[int] | None = None) -> dict[str, Any]:
    """Ψ of Q and K (BHND) for every rotation, overall and per RoPE segment (default: Wan's split)."""
    if q.dim() != 4 or k.dim() != 4:
        raise ShapeError(f"q and k must be 4-D (BHND), got {tuple(q.shape)} and {tuple(k.shape)}")
    if q.shape[-1] != k.shape[-1]:
        raise ShapeError(f"q and k head_dim differ: {q.shape[-1]} vs {k.shape[-1]}")
    for name, t in (("q", q), ("k", k)):
        if not t.is_floating_point() or not bool(torch.isfinite(t).all()):
            raise ShapeError(f"{name} must be a finite floating-point tensor")
    head_dim = q.shape[-1]
    segs = resolve_segments(head_dim, segments)
    names = segment_names(len(segs))
    bounds, start = [], 0
    for size in segs:
        bounds.append(slice(start, start + size))
        start += size

    q64, k64 = q.to(torch.float64), k.to(torch.float64)
    result: dict[str, Any] = {
        "psi": {}, "q": {}, "k": {}, "segments": {n: {} for n in names}, "token_incoherence": {},
    }
    for label, kind in ROTATIONS.items():
        rot = qk_rotation(kind, head_dim, segs)
        qr, kr = rot.apply(q64), rot.apply(k64)
        result["q"][label], result["k"][label] = psi(qr), psi(kr)
        result["psi"][label] = max(result["q"][label], result["k"][label])
        for n, sl in zip(names, bounds):
            result["segments"][n][label] = max(psi(qr, sl), psi(kr, sl))
        pooled = torch.cat((token_incoherence(qr).flatten(), token_incoherence(kr).flatten()))
        result["token_incoherence"][label] = float(pooled.mean())
    none = result["psi"]["none"]
    result["reduction_vs_none"] = {lab: (none / v if v > 0 else None) for lab, v in result["psi"].items()}
    result["rope_segments"] = dict(zip(names, segs))
    return result
