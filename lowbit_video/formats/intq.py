"""INT8 / INT4 with one float32 scale per block (``block=None``: one scale over the whole axis, per token).

``symmetric``: scale = amax / qmax (qmax = 127 or 7), codes = clamp(RNE(x / scale), -qmax, qmax).
``affine``:    lo = min(min x, 0), hi = max(max x, 0) (so 0 is exact), scale = (hi - lo) / (2**bits - 1),
               zero_point = qmin - RNE(lo / scale), codes = clamp(RNE(x / scale) + zero_point, qmin, qmax),
               value = scale * (code - zero_point). Non-negative data with max m at 4 bits: scale m / 15,
               zero_point -8, codes span [-8, 7] (RotateAttention's range-rectified P̃).
An all-zero block gets scale 1. Scales are rounded to float32 first and that float32 scale is the one used.

Layout as in ``_blocks``: ``codes`` (*other_dims, n_blocks, block), ``scales``/``zero_points`` (*other_dims, n_blocks).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import e2m1
from ._blocks import BlockLayout, check_input, expect_tensor, float32_scale, from_blocks, make_layout, to_blocks

BITS = (4, 8)
SCHEMES = ("symmetric", "affine")


def code_range(bits: int) -> tuple[int, int]:
    """Two's-complement range (qmin, qmax): (-8, 7) for 4 bits, (-128, 127) for 8 bits."""
    if bits not in BITS:
        raise ValueError(f"bits must be one of {BITS}, got {bits!r}")
    return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1


@dataclass(frozen=True, eq=False)
class IntTensor:
    codes: torch.Tensor  # int8, (*other_dims, n_blocks, block)
    scales: torch.Tensor  # float32, (*other_dims, n_blocks)
    zero_points: torch.Tensor | None  # int32, (*other_dims, n_blocks); None for symmetric
    bits: int
    scheme: str
    shape: tuple[int, ...]
    axis: int
    block: int | None
    dtype: torch.dtype

    def __post_init__(self):
        layout = self.layout
        expect_tensor(self.codes, torch.int8, layout.blocked_shape, "codes")
        expect_tensor(self.scales, torch.float32, layout.scale_shape, "scales")
        if (self.zero_points is None) != (self.scheme == "symmetric"):
            raise ValueError("zero_points must be given exactly for the affine scheme")
        if self.zero_points is not None:
            expect_tensor(self.zero_points, torch.int32, layout.scale_shape, "zero_points")

    @property
    def layout(self) -> BlockLayout:
        return make_layout(self.shape, self.axis, self.block)

    def dequantize(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """``scale * (code - zero_point)`` in the original shape and dtype (or ``dtype``); exact in float64."""
        q = self.codes.to(torch.float64)
        if self.zero_points is not None:
            q = q - self.zero_points.unsqueeze(-1)
        values = self.scales.to(torch.float64).unsqueeze(-1) * q
        return from_blocks(values, self.layout).to(dtype or self.dtype)

    def pack(self) -> PackedInt:
        if self.bits == 4:  # two's-complement nibbles, two per byte along each block, element 2i low
            data = e2m1.pack_nibbles((self.codes.to(torch.int16) & 0x0F).to(torch.uint8))
        else:
            data = self.codes.view(torch.uint8)
        return PackedInt(data, self.scales, self.zero_points, self.bits, self.scheme, self.shape, self.axis,
                         self.block, self.dtype)


@dataclass(frozen=True, eq=False)
class PackedInt:
    """Storage form: ``data`` uint8 (INT8: the int8 bytes; INT4: two nibbles per byte along each block,
    element 2i in the low nibble, ``ceil(block / 2)`` bytes per block), plus the float32 scales / int32 zero points."""

    data: torch.Tensor
    scales: torch.Tensor
    zero_points: torch.Tensor | None
    bits: int
    scheme: str
    shape: tuple[int, ...]
    axis: int
    block: int | None
    dtype: torch.dtype

    def unpack(self) -> IntTensor:
        if self.bits == 4:
            nibbles = e2m1.unpack_nibbles(self.data, make_layout(self.shape, self.axis, self.block).block)
            codes = ((nibbles.to(torch.int16) ^ 0x8) - 0x8).to(torch.int8)  # sign-extend bit 3
        else:
            codes = self.data.view(torch.int8)
        return IntTensor(codes, self.scales, self.zero_points, self.bits, self.scheme, self.shape, self.axis,
                         self.block, self.dtype)


def unpack(packed: PackedInt) -> IntTensor:
    return packed.unpack()


def quantize(
    x: torch.Tensor, *, bits: int = 8, block: int | None = None, axis: int = -1, scheme: str = "symmetric"
) -> IntTensor:
    """Quantize ``x`` to ``bits``-bit integers with one scale per block along ``axis`` (see module docstring)."""
    check_input(x)
    qmin, qmax = code_range(bits)
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")
    layout = make_layout(x.shape, axis, block)
    blocks = to_blocks(x.to(torch.float64), layout)

    if scheme == "symmetric":
        scales = float32_scale(blocks.abs().amax(dim=-1) / qmax)
        codes = torch.round(blocks / scales.to(torch.float64).unsqueeze(-1)).clamp(-qmax, qmax)
        zero_points = None
    else:
        lo = blocks.amin(dim=-1).clamp(max=0.0)  # widening the range to include 0 keeps 0 exact
        hi = blocks.amax(dim=-1).clamp(min=0.0)
        scales = float32_scale((hi - lo) / (qmax - qmin))
        s64 = scales.to(torch.float64)
        zp = qmin - torch.round(lo / s64)  # lo / scale in [-(2**bits - 1), 0], so zp lies in [qmin, qmax]
        codes = (torch.round(blocks / s64.unsqueeze(-1)) + zp.unsqueeze(-1)).clamp(qmin, qmax)
        zero_points = zp.to(torch.int32)
    return IntTensor(codes.to(torch.int8), scales, zero_points, bits, scheme, layout.shape, layout.axis, block,
                     x.dtype)


def fake_quantize(
    x: torch.Tensor, *, bits: int = 8, block: int | None = None, axis: int = -1, scheme: str = "symmetric"
) -> torch.Tensor:
    """``quantize(x, ...).dequantize()``: x's shape and dtype, values on the integer grid."""
    return quantize(x, bits=bits, block=block, axis=axis, scheme=scheme).dequantize()
