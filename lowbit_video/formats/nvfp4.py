"""NVFP4: blocks of 16 E2M1 elements with an E4M3 block scale and an FP32 outer scale (two-level scaling).

With s_o the outer scale and amax_b the block's max|x|:
  s_b     = round_to_e4m3(amax_b / (6 * s_o))       (RNE, saturating at 448; 0 => the block is all zero codes)
  element = round_to_e2m1(x / (s_b * s_o))          (RNE, saturating at ±6)
``outer_scale``: "tensor" (s_o = amax(x) / (448 * 6) in float32, the NVFP4 per-tensor scale), "none" (s_o = 1,
the block scale alone, e.g. softmax tiles with values <= 1), or a tensor broadcastable to x with size 1 along the
block axis (e.g. SageAttention3's per-row rowmax / (448 * 6) for P̃); it is stored, and used, as float32.

Layout as in ``_blocks``: ``codes`` (*other_dims, n_blocks, block), ``block_scales`` (*other_dims, n_blocks).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import e2m1, e4m3
from ._blocks import BlockLayout, check_input, expect_tensor, float32_scale, from_blocks, make_layout, to_blocks

TENSOR_SCALE_DIVISOR = e4m3.MAX * e2m1.MAX  # 448 * 6: maps the tensor amax onto the top block scale


@dataclass(frozen=True, eq=False)
class NVFP4Tensor:
    codes: torch.Tensor  # uint8 E2M1 codes, (*other_dims, n_blocks, block)
    block_scales: torch.Tensor  # float32, exact E4M3 values, (*other_dims, n_blocks)
    outer_scale: torch.Tensor  # float32, 0-d or broadcastable to x with size 1 along the axis
    shape: tuple[int, ...]
    axis: int
    block: int | None
    dtype: torch.dtype

    def __post_init__(self):
        layout = self.layout
        expect_tensor(self.codes, torch.uint8, layout.blocked_shape, "codes")
        expect_tensor(self.block_scales, torch.float32, layout.scale_shape, "block_scales")

    @property
    def layout(self) -> BlockLayout:
        return make_layout(self.shape, self.axis, self.block)

    def dequantize(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """Values in the original shape and dtype (or ``dtype``); exact in float64 before the final cast."""
        layout = self.layout
        step = self.block_scales.to(torch.float64) * _outer_per_block(self.outer_scale, layout)
        values = e2m1.decode(self.codes).to(torch.float64) * step.unsqueeze(-1)
        return from_blocks(values, layout).to(dtype or self.dtype)

    def pack(self) -> PackedNVFP4:
        return PackedNVFP4(
            data=e2m1.pack_nibbles(self.codes),
            scales=e4m3.encode(self.block_scales),
            outer_scale=self.outer_scale,
            shape=self.shape,
            axis=self.axis,
            block=self.block,
            dtype=self.dtype,
        )


@dataclass(frozen=True, eq=False)
class PackedNVFP4:
    """Storage form: ``data`` uint8 with two E2M1 codes per byte along each block (element 2i in the low
    nibble), ``(*other_dims, n_blocks, ceil(block / 2))``; ``scales`` uint8 E4M3 bytes; ``outer_scale`` float32."""

    data: torch.Tensor
    scales: torch.Tensor
    outer_scale: torch.Tensor
    shape: tuple[int, ...]
    axis: int
    block: int | None
    dtype: torch.dtype

    def unpack(self) -> NVFP4Tensor:
        layout = make_layout(self.shape, self.axis, self.block)
        return NVFP4Tensor(
            codes=e2m1.unpack_nibbles(self.data, layout.block),
            block_scales=e4m3.decode(self.scales),
            outer_scale=self.outer_scale,
            shape=self.shape,
            axis=self.axis,
            block=self.block,
            dtype=self.dtype,
        )


def unpack(packed: PackedNVFP4) -> NVFP4Tensor:
    return packed.unpack()


def quantize(x: torch.Tensor, *, block: int | None = 16, axis: int = -1, outer_scale="tensor") -> NVFP4Tensor:
    """Quantize ``x`` to NVFP4 with blocks of ``block`` elements along ``axis`` (see module docstring)."""
    check_input(x)
    layout = make_layout(x.shape, axis, block)
    x64 = x.to(torch.float64)
    s_o = _resolve_outer_scale(x64, outer_scale, layout)
    s_o_blocks = _outer_per_block(s_o, layout)

    blocks = to_blocks(x64, layout)
    amax = blocks.abs().amax(dim=-1)
    # 6 * s_o is exact in float64, so this is one float64 division followed by one rounding onto E4M3.
    block_scales = e4m3.round_to_e4m3(amax / (6.0 * s_o_blocks))
    step = block_scales * s_o_blocks  # exact: a 4-bit times a 24-bit significand
    empty = (block_scales == 0).unsqueeze(-1)  # block scale rounded to 0: the block is all-zero codes
    scaled = blocks / torch.where(empty, 1.0, step.unsqueeze(-1))
    codes = torch.where(empty, 0, e2m1.encode(e2m1.round_to_e2m1(scaled)))
    return NVFP4Tensor(codes, block_scales.to(torch.float32), s_o, layout.shape, layout.axis, block, x.dtype)


def fake_quantize(x: torch.Tensor, *, block: int | None = 16, axis: int = -1, outer_scale="tensor") -> torch.Tensor:
    """``quantize(x, ...).dequantize()``: x's shape and dtype, values on the NVFP4 grid."""
    return quantize(x, block=block, axis=axis, outer_scale=outer_scale).dequantize()


def _resolve_outer_scale(x64: torch.Tensor, outer_scale, layout: BlockLayout) -> torch.Tensor:
    """The float32 outer scale that is stored and used."""
    if isinstance(outer_scale, str):
        if outer_scale == "none":
            return torch.tensor(1.0, dtype=torch.float32)
        if outer_scale == "tensor":
            amax = x64.abs().amax() if x64.numel() else x64.new_zeros(())
            return float32_scale(amax / TENSOR_SCALE_DIVISOR)  # all-zero tensor -> 1
        raise ValueError(f"outer_scale must be 'tensor', 'none' or a tensor, got {outer_scale!r}")
    s_o = torch.as_tensor(outer_scale).to(torch.float32)
    if not bool((torch.isfinite(s_o) & (s_o > 0)).all()):
        raise ValueError("outer_scale must be finite and positive (after rounding to float32)")
    _outer_per_block(s_o, layout)  # validates the shape
    return s_o


def _outer_per_block(s_o: torch.Tensor, layout: BlockLayout) -> torch.Tensor:
    """Outer scale as float64, broadcastable to the per-block shape (*other_dims, n_blocks)."""
    s = s_o.to(torch.float64)
    if s.dim() == 0:
        return s
    ndim = len(layout.shape)
    if s.dim() > ndim:
        raise ValueError(f"outer_scale of shape {tuple(s.shape)} has more dims than x {layout.shape}")
    s = s.reshape((1,) * (ndim - s.dim()) + tuple(s.shape))
    fits = s.shape[layout.axis] == 1 and all(a in (1, b) for a, b in zip(s.shape, layout.shape))
    if not fits:
        raise ValueError(
            f"outer_scale of shape {tuple(s_o.shape)} must broadcast to x {layout.shape} with size 1 along the axis"
        )
    return s.movedim(layout.axis, -1)  # (..., 1) lines up with the n_blocks axis of the per-block shape
