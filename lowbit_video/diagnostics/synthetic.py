"""Synthetic attention inputs.

Gaussian: Q, K, V i.i.d. N(0, 1). With outliers: what video-DiT Q/K look like after 3D RoPE — a
heavy-tailed spread of per-channel scales, a few channels an order of magnitude larger than the rest,
a large per-channel offset on K (the common component K smoothing removes), and rotary position
embedding over a (frames, height, width) token grid with Wan's t/h/w split of head_dim.
"""

from __future__ import annotations

import math

import torch

from ..errors import UserError

from ..transforms.rope import rope_segments

FRAME_SIDE = 16  # tokens per frame edge for the synthetic (t, h, w) grid


def grid_positions(seq: int) -> torch.Tensor:
    """(seq, 3) integer (t, h, w) positions, row-major over frames of FRAME_SIDE x FRAME_SIDE."""
    idx = torch.arange(seq)
    per_frame = FRAME_SIDE * FRAME_SIDE
    return torch.stack([idx // per_frame, (idx % per_frame) // FRAME_SIDE, idx % FRAME_SIDE], dim=-1)


def apply_rope_3d(x: torch.Tensor, positions: torch.Tensor, theta: float = 10000.0) -> torch.Tensor:
    """Rotate adjacent channel pairs (2i, 2i+1) of each t/h/w segment by position x frequency."""
    out = x.clone()
    start = 0
    for axis, size in enumerate(rope_segments(x.shape[-1])):
        freqs = theta ** (-torch.arange(0, size, 2, dtype=torch.float64, device=positions.device) / size)
        angle = positions[:, axis : axis + 1].to(torch.float64) * freqs  # (seq, size/2)
        cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
        even, odd = x[..., start : start + size : 2], x[..., start + 1 : start + size : 2]
        out[..., start : start + size : 2] = even * cos - odd * sin
        out[..., start + 1 : start + size : 2] = even * sin + odd * cos
        start += size
    return out


def synthetic_qkv(
    *,
    seq: int,
    heads: int,
    head_dim: int,
    kv_seq: int | None = None,
    batch: int = 1,
    seed: int = 0,
    outliers: bool = False,
    dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q, k, v) in BHND layout, deterministic in `seed`."""
    if outliers and (head_dim % 2 or head_dim < 6):
        raise UserError(f"--outliers applies 3D RoPE to channel pairs: head_dim must be even and >= 6, got {head_dim}")
    kv_seq = seq if kv_seq is None else kv_seq
    g = torch.Generator().manual_seed(seed)

    def normal(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    q, k, v = normal(batch, heads, seq, head_dim), normal(batch, heads, kv_seq, head_dim), normal(batch, heads, kv_seq, head_dim)
    if outliers:
        # Per-(head, channel) log-normal scales shared by Q and K, plus ~3% outlier channels at 10x.
        chan = torch.exp(0.5 * normal(1, heads, 1, head_dim))
        n_out = max(1, round(0.03 * head_dim))
        for h in range(heads):
            idx = torch.randperm(head_dim, generator=g)[:n_out]
            chan[0, h, 0, idx] *= 10.0
        q = q * chan
        k = k * chan + 2.0 * normal(1, heads, 1, head_dim) * chan  # shared per-channel offset on K
        # Both see the same channel pattern before RoPE; position rotation spreads it per token.
        q = apply_rope_3d(q, grid_positions(seq))
        k = apply_rope_3d(k, grid_positions(kv_seq))
        v_chan = torch.ones(1, heads, 1, head_dim, dtype=torch.float64)
        for h in range(heads):
            v_chan[0, h, 0, torch.randperm(head_dim, generator=g)[:n_out]] = 5.0
        v = v * v_chan
        # Keep the logit scale comparable to the Gaussian case (softmax temperature ~ 1/sqrt(D) per
        # unit-variance channel): normalize by the mean channel energy, not by the outliers.
        norm = math.sqrt(float((chan**2).mean()))
        q, k = q / norm, k / norm
    return q.to(dtype), k.to(dtype), v.to(dtype)
