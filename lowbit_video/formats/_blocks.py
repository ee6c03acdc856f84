"""Block layout shared by every block-scaled format, plus small input/scale checks.

A tensor is blocked along one axis: that axis is moved last, zero-padded to a multiple of the block size and
split, giving the *blocked layout* ``(*other_dims, n_blocks, block)``, where ``other_dims`` are the remaining
dimensions in their original order. Per-block quantities (scales, zero points) have shape
``(*other_dims, n_blocks)``.

Zero padding is neutral for every scale in this package: each is a function of max|x|, or of min(x) and max(x)
with the range widened to include 0, so a ragged last block gets exactly the scale of its real elements.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class BlockLayout:
    """Where the blocks of a tensor of ``shape`` lie: ``n_blocks`` blocks of ``block`` elements along ``axis``."""

    shape: tuple[int, ...]  # the original tensor shape
    axis: int  # the blocked axis, non-negative
    block: int  # elements per block (the whole axis for per-token granularity)
    n_blocks: int

    @property
    def length(self) -> int:
        return self.shape[self.axis]

    @property
    def pad(self) -> int:
        """Zeros appended to the blocked axis to fill the last block."""
        return self.n_blocks * self.block - self.length

    @property
    def outer_shape(self) -> tuple[int, ...]:
        return self.shape[: self.axis] + self.shape[self.axis + 1 :]

    @property
    def scale_shape(self) -> tuple[int, ...]:
        """Shape of per-block quantities: ``(*other_dims, n_blocks)``."""
        return self.outer_shape + (self.n_blocks,)

    @property
    def blocked_shape(self) -> tuple[int, ...]:
        return self.scale_shape + (self.block,)


def make_layout(shape, axis: int, block: int | None) -> BlockLayout:
    """Layout for blocking ``shape`` along ``axis``; ``block=None`` is one block over the whole axis."""
    shape = tuple(int(s) for s in shape)
    if not shape:
        raise ValueError("a 0-d tensor has no axis to block")
    if not -len(shape) <= axis < len(shape):
        raise ValueError(f"axis {axis} out of range for shape {shape}")
    axis %= len(shape)
    length = shape[axis]
    if block is None:
        block = max(length, 1)  # 1 keeps an empty axis well-defined (zero blocks)
    elif isinstance(block, bool) or not isinstance(block, int) or block < 1:
        raise ValueError(f"block must be a positive int or None, got {block!r}")
    return BlockLayout(shape, axis, block, -(-length // block))


def to_blocks(x: torch.Tensor, layout: BlockLayout) -> torch.Tensor:
    """``x`` in the blocked layout ``(*other_dims, n_blocks, block)``, the ragged last block padded with zeros."""
    if tuple(x.shape) != layout.shape:
        raise ValueError(f"tensor of shape {tuple(x.shape)} does not match layout shape {layout.shape}")
    padded = F.pad(x.movedim(layout.axis, -1), (0, layout.pad))
    return padded.reshape(layout.blocked_shape)


def from_blocks(blocks: torch.Tensor, layout: BlockLayout) -> torch.Tensor:
    """Exact inverse of :func:`to_blocks`: drop the padding and put the axis back."""
    flat = blocks.reshape(layout.outer_shape + (layout.n_blocks * layout.block,))
    return flat[..., : layout.length].movedim(-1, layout.axis).contiguous()


def check_input(x: torch.Tensor, name: str = "x") -> None:
    """Quantizers accept finite floating-point tensors only (a NaN/Inf would poison a whole block's scale)."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor")
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name} contains NaN or Inf")


def float32_scale(scale: torch.Tensor) -> torch.Tensor:
    """Round a float64 scale to the float32 that is stored (and then used, so dequantization is consistent).

    A scale of 0 (all-zero block, or a block so small its scale underflows float32) becomes 1: every element
    of such a block then rounds to code 0 (or to the zero point) and dequantizes to 0.
    """
    s = scale.to(torch.float32)
    if not bool(torch.isfinite(s).all()):
        raise ValueError("scale overflows float32 (input magnitude beyond the float32 range)")
    return torch.where(s > 0, s, torch.ones_like(s))


def expect_tensor(t: torch.Tensor, dtype: torch.dtype, shape: tuple[int, ...], name: str) -> None:
    """Consistency check for the fields of a quantized-tensor dataclass."""
    if not isinstance(t, torch.Tensor) or t.dtype != dtype or tuple(t.shape) != tuple(shape):
        got = f"{t.dtype} of shape {tuple(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__
        raise ValueError(f"{name} must be {dtype} of shape {tuple(shape)}, got {got}")
