"""RotateAttention's RoPE-aware orthogonal rotations of Q and K (and the full Hadamard, for comparison).

Both Q and K are quantized, so the rotation must be orthogonal: (QR)(KR)ᵀ = QKᵀ needs R Rᵀ = I, and
any singular value σ ≠ 1 would shrink one operand's outliers only by inflating the other's by 1/σ
(the paper's SVD argument). All rotations here act on row vectors, x ↦ x R, along head_dim:

- ``interleaved``: R = diag(R_i), 2x2 blocks on adjacent pairs (2i, 2i+1), initialised as the
  normalized H2 = [[1, 1], [1, −1]] / √2. Same block structure as RoPE, so it folds into the RoPE
  tables (``transforms.rope.fold_pair_rotation``): zero run-time cost.
- ``half``: inside each RoPE segment j (size D_j) a permutation Π_j couples channel i with i + D_j/2
  into the adjacent pair (2i, 2i+1) of the segment, then the same 2x2 blocks: x Π R. RoPE outliers
  concentrate in one half of each segment, so each outlier channel is averaged with a quiet one.
- ``hadamard`` (the paper's "full"): the D x D normalized Hadamard matrix, mixing every channel.

A pair rotation with pairs (a_k, b_k) and blocks R_k writes output channels (2k, 2k+1) as
[x_a, x_b] R_k, computed element-wise (two multiply-adds per output, exact as the matrix product).

The negative control (`qk_transforms(..., sigma=σ)`, σ ≠ 1): each block becomes H2 · diag(σ, 1/σ),
no longer orthogonal, and K is transformed by R⁻ᵀ instead of R so that (QR)(KR⁻ᵀ)ᵀ = QKᵀ still
holds exactly. Q's first output channel of every pair is scaled by σ and its second by 1/σ, K's the
other way round: the asymmetric scaling that, by the paper's SVD argument, inflates the quantization
error of whichever operand is shrunk relative to its outliers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence, Union

import torch

from ..errors import ShapeError
from .hadamard import hadamard_matrix
from .rope import resolve_segments

ROTATIONS = ("none", "interleaved", "half", "hadamard")


def h2_blocks(n: int, sigma: float = 1.0) -> torch.Tensor:
    """(n, 2, 2) copies of the normalized 2x2 Hadamard matrix [[1, 1], [1, −1]] / √2 (float64),
    times diag(σ, 1/σ): singular values σ and 1/σ (orthogonal only at σ = 1)."""
    h2 = torch.tensor([[1.0, 1.0], [1.0, -1.0]], dtype=torch.float64) / math.sqrt(2.0)
    if sigma != 1.0:
        h2 = h2 @ torch.diag(torch.tensor([sigma, 1.0 / sigma], dtype=torch.float64))
    return h2.expand(n, 2, 2).clone()


@dataclass(frozen=True, eq=False)
class PairRotation:
    """x ↦ x Π R: output pair k = [x_first[k], x_second[k]] @ blocks[k], written to channels (2k, 2k+1)."""

    first: torch.Tensor  # (D/2,) int64 input channel of each pair's first member
    second: torch.Tensor  # (D/2,) int64 input channel of each pair's second member
    blocks: torch.Tensor  # (D/2, 2, 2) float64, each block orthogonal

    @property
    def dim(self) -> int:
        return 2 * self.first.numel()

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.dim:
            raise ShapeError(f"rotation is for head_dim {self.dim}, got a tensor with last dim {x.shape[-1]}")
        dev = x.device
        b = self.blocks.to(dtype=x.dtype, device=dev)
        a, c = x[..., self.first.to(dev)], x[..., self.second.to(dev)]
        out_even = a * b[:, 0, 0] + c * b[:, 1, 0]
        out_odd = a * b[:, 0, 1] + c * b[:, 1, 1]
        return torch.stack((out_even, out_odd), dim=-1).flatten(-2)

    def inverse_transpose(self) -> "PairRotation":
        """x ↦ x Π R⁻ᵀ (each block inverted and transposed): what K gets when Q gets a non-orthogonal
        R, since Π R (Π R⁻ᵀ)ᵀ = Π R R⁻¹ Πᵀ = I."""
        return PairRotation(self.first, self.second, torch.linalg.inv(self.blocks.to(torch.float64)).mT.contiguous())

    def matrix(self) -> torch.Tensor:
        """The dense D x D matrix Π R (float64), so that apply(x) == x @ matrix()."""
        m = torch.zeros(self.dim, self.dim, dtype=torch.float64)
        k = torch.arange(self.dim // 2)
        for row, inputs in ((0, self.first), (1, self.second)):
            m[inputs, 2 * k] = self.blocks[:, row, 0].to(torch.float64)
            m[inputs, 2 * k + 1] = self.blocks[:, row, 1].to(torch.float64)
        return m


@dataclass(frozen=True, eq=False)
class DenseRotation:
    """x ↦ x @ matrix (the full Hadamard; the identity for "none")."""

    matrix_: torch.Tensor

    @property
    def dim(self) -> int:
        return self.matrix_.shape[0]

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.dim:
            raise ShapeError(f"rotation is for head_dim {self.dim}, got a tensor with last dim {x.shape[-1]}")
        return x @ self.matrix_.to(dtype=x.dtype, device=x.device)

    def matrix(self) -> torch.Tensor:
        return self.matrix_.to(torch.float64)


Rotation = Union[PairRotation, DenseRotation]


def _check_even(head_dim: int) -> None:
    if head_dim <= 0 or head_dim % 2:
        raise ShapeError(f"pair rotations need an even head_dim, got {head_dim}")


def interleaved_rotation(head_dim: int, blocks: torch.Tensor | None = None, sigma: float = 1.0) -> PairRotation:
    """2x2 blocks on adjacent pairs (2i, 2i+1); blocks default to the normalized H2 (· diag(σ, 1/σ))."""
    _check_even(head_dim)
    k = torch.arange(head_dim // 2)
    return PairRotation(2 * k, 2 * k + 1, h2_blocks(head_dim // 2, sigma) if blocks is None else blocks)


def half_rotation(head_dim: int, segments: Sequence[int] | None = None, blocks: torch.Tensor | None = None,
                  sigma: float = 1.0) -> PairRotation:
    """Within each RoPE segment (default: Wan's split of head_dim), pair channel i with i + D_j/2 and
    rotate each pair by a 2x2 block (default the normalized H2). Pair k of segment j (start s_j) lands
    on channels s_j + 2k, s_j + 2k + 1, so the rotation never leaves its segment."""
    _check_even(head_dim)
    segs = resolve_segments(head_dim, segments)
    first, second, start = [], [], 0
    for size in segs:
        half = size // 2
        first.append(torch.arange(start, start + half))
        second.append(torch.arange(start + half, start + size))
        start += size
    return PairRotation(torch.cat(first), torch.cat(second), h2_blocks(head_dim // 2, sigma) if blocks is None else blocks)


def qk_rotation(kind: str, head_dim: int, segments: Sequence[int] | None = None) -> Rotation:
    """The recipe's Q/K rotation by name: none | interleaved | half | hadamard (the paper's "full").

    `segments` is only read by "half" (empty or None: Wan's split of head_dim)."""
    if kind == "none":
        return DenseRotation(torch.eye(head_dim, dtype=torch.float64))
    if kind == "interleaved":
        return interleaved_rotation(head_dim)
    if kind == "half":
        return half_rotation(head_dim, segments)
    if kind in ("hadamard", "full"):
        return DenseRotation(hadamard_matrix(head_dim))
    raise ValueError(f"unknown rotation {kind!r}; expected one of {', '.join(ROTATIONS)}")


def qk_transforms(kind: str, head_dim: int, segments: Sequence[int] | None = None,
                  sigma: float = 1.0) -> tuple[Rotation, Rotation]:
    """(transform of Q, transform of K) whose product keeps QKᵀ: the recipe's rotation for both when
    σ = 1; for σ ≠ 1 (pair rotations only) the blocks H2 · diag(σ, 1/σ) on Q and their inverse
    transpose on K (the negative control: exact in exact arithmetic, not orthogonal)."""
    if sigma == 1.0:
        rot = qk_rotation(kind, head_dim, segments)
        return rot, rot
    if kind == "interleaved":
        rot = interleaved_rotation(head_dim, sigma=sigma)
    elif kind == "half":
        rot = half_rotation(head_dim, segments, sigma=sigma)
    else:
        raise ValueError(f"a non-orthogonal rotation (sigma {sigma}) needs a pair rotation (interleaved, half), got {kind!r}")
    return rot, rot.inverse_transpose()
