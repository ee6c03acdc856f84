"""3D rotary position embedding (RoPE) as video DiTs use it, and folding a pair rotation into its tables.

head_dim is split into temporal / height / width segments D = D_t + D_h + D_w; inside each segment,
adjacent channels (2i, 2i+1) form a plane rotated by position x frequency (Wan's complex
multiplication over ``reshape(..., -1, 2)``). In row-vector form, token x at position p becomes
x M(p) with M(p) block-diagonal in 2x2 blocks

    M_i = [[ cos θ_i,  sin θ_i],
           [-sin θ_i,  cos θ_i]]     (x'_2i = x_2i cos − x_2i+1 sin,  x'_2i+1 = x_2i sin + x_2i+1 cos).

RotateAttention's Interleaved Rotation R = diag(R_i) has the same 2x2 block structure on the same
pairs, so x M(p) R = x F(p) with F_i(p) = M_i(p) R_i: one 2x2 table entry per (token, pair), applied
by the same element-wise kernel as RoPE. That is why that rotation costs nothing at run time. (The
Half Rotation pairs channel i with i + D_j/2, across RoPE planes, so it cannot be folded this way.)
A 2x2 orthogonal R_i with det −1 (the normalized H2 is one) is a reflection, so F_i is not a plain
(cos, sin) rotation: the fold stores the full 2x2 block, four tables instead of two.
"""

from __future__ import annotations

from typing import Sequence

import torch

from ..errors import ShapeError


def rope_segments(head_dim: int) -> tuple[int, int, int]:
    """Wan's split of head_dim into t/h/w rotary segments (128 -> 44/42/42).

    Wan (``WanTransformer3DModel`` rope): c = head_dim / 2 complex frequencies split as
    [c − 2(c // 3), c // 3, c // 3], i.e. channels [D − 4(D // 6), 2(D // 6), 2(D // 6)].
    """
    hw = 2 * (head_dim // 6)
    return head_dim - 2 * hw, hw, hw


def resolve_segments(head_dim: int, segments: Sequence[int] | None = None) -> tuple[int, ...]:
    """The RoPE segment sizes to use: `segments` if given and non-empty, else Wan's split of head_dim.

    Every segment must be a positive even number (RoPE rotates channel pairs) and they must add up to
    head_dim; otherwise a ShapeError (a user error: the recipe or the model adapter passed a split that
    does not fit these tensors).
    """
    segs = tuple(int(s) for s in segments) if segments else rope_segments(head_dim)
    if any(s <= 0 or s % 2 for s in segs):
        raise ShapeError(f"RoPE segments {list(segs)} must be positive even channel counts")
    if sum(segs) != head_dim:
        raise ShapeError(f"RoPE segments {list(segs)} add up to {sum(segs)}, not head_dim {head_dim}")
    return segs


def rope_angles(positions: torch.Tensor, segments: Sequence[int], theta: float = 10000.0) -> torch.Tensor:
    """(N, D/2) float64 rotation angles θ_i(p): segment j's pair k turns by p_j · theta^(−2k / D_j).

    `positions` is (N, len(segments)) integer coordinates, e.g. (t, h, w) per token.
    """
    if positions.dim() != 2 or positions.shape[-1] != len(segments):
        raise ShapeError(f"positions must be (tokens, {len(segments)}), got {tuple(positions.shape)}")
    parts = []
    for axis, size in enumerate(segments):
        freqs = theta ** (-torch.arange(0, size, 2, dtype=torch.float64) / size)
        parts.append(positions[:, axis : axis + 1].to(torch.float64) * freqs)
    return torch.cat(parts, dim=-1)


def apply_rope(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """x M(p) along the last dim: pairs (2i, 2i+1) rotated by angles (N, D/2); x is (..., N, D)."""
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


def rope_blocks(angles: torch.Tensor) -> torch.Tensor:
    """The 2x2 blocks M_i(p) = [[cos, sin], [−sin, cos]] of RoPE in row-vector form, (N, D/2, 2, 2)."""
    cos, sin = angles.cos(), angles.sin()
    return torch.stack((torch.stack((cos, sin), -1), torch.stack((-sin, cos), -1)), -2)


def fold_pair_rotation(angles: torch.Tensor, blocks: torch.Tensor) -> torch.Tensor:
    """Folded RoPE tables F_i(p) = M_i(p) R_i, (N, D/2, 2, 2) float64.

    `blocks` (D/2, 2, 2) are the 2x2 blocks R_i of a rotation acting on the RoPE pairs (2i, 2i+1) in
    row-vector form (x' = x R), e.g. ``interleaved_rotation(D).blocks``.
    """
    if blocks.shape != angles.shape[-1:] + (2, 2):
        raise ShapeError(f"blocks must be ({angles.shape[-1]}, 2, 2) for these angles, got {tuple(blocks.shape)}")
    return rope_blocks(angles) @ blocks.to(torch.float64)


def apply_folded_rope(x: torch.Tensor, tables: torch.Tensor) -> torch.Tensor:
    """x F(p): each pair [x_2i, x_2i+1] times its 2x2 table entry; the element-wise RoPE kernel with
    four tables (x'_2i = x_2i F00 + x_2i+1 F10, x'_2i+1 = x_2i F01 + x_2i+1 F11)."""
    t = tables.to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    out_even = even * t[..., 0, 0] + odd * t[..., 1, 0]
    out_odd = even * t[..., 0, 1] + odd * t[..., 1, 1]
    return torch.stack((out_even, out_odd), dim=-1).flatten(-2)
