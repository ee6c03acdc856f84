"""FP8 E4M3 with a float32 scale per block (``block=None``: one scale over the whole axis, per token).

scale = amax / 448 per block (all-zero block: 1), or one static ``scale`` for every block (e.g. 1/448 for softmax
tiles in [0, 1]); codes = round_to_e4m3(x / scale) (RNE, saturating at ±448), value = code * scale.
The float32 scale is the one used, so dequantization reproduces the quantizer's grid exactly.

Layout as in ``_blocks``: ``codes`` (*other_dims, n_blocks, block), ``scales`` (*other_dims, n_blocks).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import torch

from . import e4m3
from ._blocks import BlockLayout, check_input, expect_tensor, float32_scale, from_blocks, make_layout, to_blocks

FORMATS = ("e4m3",)


@dataclass(frozen=True, eq=False)
class FP8Tensor:
    codes: torch.Tensor  # torch.float8_e4m3fn, (*other_dims, n_blocks, block)
    scales: torch.Tensor  # float32, (*other_dims, n_blocks)
    fmt: str
    shape: tuple[int, ...]
    axis: int
    block: int | None
    dtype: torch.dtype

    def __post_init__(self):
        layout = self.layout
        expect_tensor(self.codes, torch.float8_e4m3fn, layout.blocked_shape, "codes")
        expect_tensor(self.scales, torch.float32, layout.scale_shape, "scales")

    @property
    def layout(self) -> BlockLayout:
        return make_layout(self.shape, self.axis, self.block)

    def dequantize(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """``code * scale`` in the original shape and dtype (or ``dtype``); exact in float64."""
        values = self.codes.to(torch.float64) * self.scales.to(torch.float64).unsqueeze(-1)
        return from_blocks(values, self.layout).to(dtype or self.dtype)

    def pack(self) -> PackedFP8:
        return PackedFP8(self.codes.view(torch.uint8), self.scales, self.fmt, self.shape, self.axis, self.block,
                         self.dtype)


@dataclass(frozen=True, eq=False)
class PackedFP8:
    """Storage form: ``data`` uint8 (the E4M3 bit patterns), ``scales`` float32."""

    data: torch.Tensor
    scales: torch.Tensor
    fmt: str
    shape: tuple[int, ...]
    axis: int
    block: int | None
    dtype: torch.dtype

    def unpack(self) -> FP8Tensor:
        return FP8Tensor(self.data.view(torch.float8_e4m3fn), self.scales, self.fmt, self.shape, self.axis,
                         self.block, self.dtype)


def unpack(packed: PackedFP8) -> FP8Tensor:
    return packed.unpack()


def quantize(
    x: torch.Tensor, *, fmt: str = "e4m3", block: int | None = None, axis: int = -1, scale: float | None = None
) -> FP8Tensor:
    """Quantize ``x`` to FP8 ``fmt`` with a dynamic per-block scale, or the static ``scale`` if given."""
    check_input(x)
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {FORMATS}, got {fmt!r}")
    layout = make_layout(x.shape, axis, block)
    blocks = to_blocks(x.to(torch.float64), layout)
    if scale is None:
        scales = float32_scale(blocks.abs().amax(dim=-1) / e4m3.MAX)
    else:
        scales = torch.full(layout.scale_shape, _static_scale(scale), dtype=torch.float32, device=x.device)
    # One float64 division, then one exact rounding onto E4M3; the cast to float8 is then exact.
    codes = e4m3.round_to_e4m3(blocks / scales.to(torch.float64).unsqueeze(-1)).to(torch.float8_e4m3fn)
    return FP8Tensor(codes, scales, fmt, layout.shape, layout.axis, block, x.dtype)


def fake_quantize(
    x: torch.Tensor, *, fmt: str = "e4m3", block: int | None = None, axis: int = -1, scale: float | None = None
) -> torch.Tensor:
    """``quantize(x, ...).dequantize()``: x's shape and dtype, values on the FP8 grid."""
    return quantize(x, fmt=fmt, block=block, axis=axis, scale=scale).dequantize()


def _static_scale(scale: float) -> float:
    """The static scale as the float32 value that is stored and used."""
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(f"scale must be a float, got {type(scale).__name__}")
    s32 = float(torch.tensor(float(scale), dtype=torch.float32))
    if not (0 < s32 < math.inf):
        raise ValueError(f"scale must be finite and positive in float32, got {scale!r}")
    return s32
