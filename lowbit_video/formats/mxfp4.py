"""MXFP4 (OCP MX v1.0): blocks of E2M1 elements sharing one power-of-two E8M0 scale ``2**e``.

Layout (see ``_blocks``): the block axis is moved last, zero-padded to a multiple of ``block`` and split, so
``codes`` has shape ``(*other_dims, n_blocks, block)`` and ``scale_exponents`` has ``(*other_dims, n_blocks)``,
``other_dims`` being x's remaining dimensions in order. Element ``j`` of block ``b`` is original index
``b * block + j`` along the axis; indices at or beyond the axis length are padding (code 0).

Scale rules (numerics.md §4), with M = max|x| over the block:
  ``ocp``  e = floor(log2 M) - 2        (OCP §6.3; M / 2**e in [4, 8), clips [7, 8) to 6)
  ``tfs``  e = ceil(log2(M / 6))        (truncation-free; M / 2**e in (3, 6])
  ``uos``  e = ceil(log2(M / q))        (clipping boundary q, default 7.25; M / 2**e in (q/2, q])
An all-zero block gets e = 0 (scale 1); exponents are clamped to the E8M0 range [-127, 127].
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import torch

from . import e2m1, e8m0
from ._blocks import check_input, expect_tensor, from_blocks, make_layout, to_blocks

RULES = ("ocp", "tfs", "uos")
DEFAULT_Q = 7.25
TFS_Q = 6.0  # tfs is the ceil rule with the E2M1 maximum as boundary
E2M1_EMAX = 2  # floor(log2 6): the OCP rule maps the block max to the element's top binade


def shared_exponent(amax, *, rule: str = "uos", q: float = DEFAULT_Q) -> torch.Tensor:
    """Exact shared exponent (int32, amax's shape) for block maxima ``amax`` >= 0 under ``rule``.

    ``q`` is used by ``uos`` only (any finite q > 0). No float log2 is evaluated: floor(log2 M) comes from the
    exponent field via frexp, and the ceil rules are settled by exact comparisons (numerics.md §9.2).
    """
    if rule not in RULES:
        raise ValueError(f"unknown MX scale rule {rule!r}; expected one of {RULES}")
    m = torch.as_tensor(amax).to(torch.float64)
    if not bool(torch.isfinite(m).all()) or bool((m < 0).any()):
        raise ValueError("block maxima must be finite and non-negative")

    _, exp = torch.frexp(m)  # m = f * 2**exp with f in [0.5, 1)  =>  floor(log2 m) = exp - 1, exactly
    floor_log2 = exp.to(torch.int64) - 1
    if rule == "ocp":
        e = floor_log2 - E2M1_EMAX
    else:
        clip = TFS_Q if rule == "tfs" else _check_q(q)
        # ceil(log2(m / clip)) is d or d + 1 with d = floor(log2 m) - floor(log2 clip): the dropped fractional
        # parts each lie in [0, 1). The smallest e with m <= clip * 2**e decides; clip * 2**e is exact in float64.
        # Clamping d first keeps 2**d finite; results outside [-127, 127] are clamped below anyway.
        d = (floor_log2 - (math.frexp(clip)[1] - 1)).clamp(e8m0.EMIN - 1, e8m0.EMAX)
        e = d + (m > clip * e8m0.pow2(d)).to(torch.int64)
    e = torch.where(m == 0, torch.zeros_like(e), e)  # all-zero block: scale 1
    return e.clamp(e8m0.EMIN, e8m0.EMAX).to(torch.int32)


@dataclass(frozen=True, eq=False)
class MXFP4Tensor:
    """Quantized MXFP4 tensor in the blocked layout (see module docstring)."""

    codes: torch.Tensor  # uint8 E2M1 codes, (*other_dims, n_blocks, block)
    scale_exponents: torch.Tensor  # int32, (*other_dims, n_blocks); block scale = 2**e
    shape: tuple[int, ...]  # original shape
    axis: int  # blocked axis of the original tensor (non-negative)
    block: int | None  # None = one block over the whole axis
    dtype: torch.dtype  # original dtype
    rule: str
    q: float  # clipping boundary, used by rule "uos" only

    def __post_init__(self):
        layout = self.layout
        expect_tensor(self.codes, torch.uint8, layout.blocked_shape, "codes")
        expect_tensor(self.scale_exponents, torch.int32, layout.scale_shape, "scale_exponents")

    @property
    def layout(self):
        return make_layout(self.shape, self.axis, self.block)

    def dequantize(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """Values in the original shape and dtype (or ``dtype``); exact in float64 before the final cast.

        That cast is an ordinary one: a value rounded up past the dtype's largest finite value becomes inf
        (e.g. float16 65504 -> 65536 under tfs/uos; pass ``dtype=torch.float32`` to keep it).
        """
        scale = e8m0.pow2(self.scale_exponents).unsqueeze(-1)
        values = e2m1.decode(self.codes).to(torch.float64) * scale
        return from_blocks(values, self.layout).to(dtype or self.dtype)

    def pack(self) -> PackedMXFP4:
        return PackedMXFP4(
            data=e2m1.pack_nibbles(self.codes),
            scales=e8m0.encode(self.scale_exponents),
            shape=self.shape,
            axis=self.axis,
            block=self.block,
            dtype=self.dtype,
            rule=self.rule,
            q=self.q,
        )


@dataclass(frozen=True, eq=False)
class PackedMXFP4:
    """Storage form: ``data`` uint8, two E2M1 codes per byte along each block (element 2i in the low nibble),
    shape ``(*other_dims, n_blocks, ceil(block / 2))``; ``scales`` uint8 E8M0 bytes, ``(*other_dims, n_blocks)``."""

    data: torch.Tensor
    scales: torch.Tensor
    shape: tuple[int, ...]
    axis: int
    block: int | None
    dtype: torch.dtype
    rule: str
    q: float

    def unpack(self) -> MXFP4Tensor:
        layout = make_layout(self.shape, self.axis, self.block)
        return MXFP4Tensor(
            codes=e2m1.unpack_nibbles(self.data, layout.block),
            scale_exponents=e8m0.decode(self.scales),
            shape=self.shape,
            axis=self.axis,
            block=self.block,
            dtype=self.dtype,
            rule=self.rule,
            q=self.q,
        )


def unpack(packed: PackedMXFP4) -> MXFP4Tensor:
    return packed.unpack()


def quantize(
    x: torch.Tensor, *, rule: str = "uos", q: float = DEFAULT_Q, block: int | None = 32, axis: int = -1
) -> MXFP4Tensor:
    """Quantize ``x`` to MXFP4 with blocks of ``block`` elements along ``axis`` and the scale rule ``rule``."""
    check_input(x)
    layout = make_layout(x.shape, axis, block)
    blocks = to_blocks(x.to(torch.float64), layout)
    exps = shared_exponent(blocks.abs().amax(dim=-1), rule=rule, q=q)
    # Dividing by a power of two is exact in float64 (float32 inputs stay far from float64's range limits), so
    # the only rounding is the single RNE onto E2M1, with saturation at ±6.
    scaled = blocks / e8m0.pow2(exps).unsqueeze(-1)
    codes = e2m1.encode(e2m1.round_to_e2m1(scaled))
    return MXFP4Tensor(codes, exps, layout.shape, layout.axis, block, x.dtype, rule, q)


def fake_quantize(
    x: torch.Tensor, *, rule: str = "uos", q: float = DEFAULT_Q, block: int | None = 32, axis: int = -1
) -> torch.Tensor:
    """``quantize(x, ...).dequantize()``: x's shape and dtype, values on the MXFP4 grid.

    Computed without materializing codes (the reference engine calls this on every softmax tile):
    the same exponent and the same single RNE onto E2M1, times the same power of two, so the values
    are bit-identical to the quantize/dequantize round trip (tests/test_formats_mxfp4.py checks it).
    """
    check_input(x)
    layout = make_layout(x.shape, axis, block)
    blocks = to_blocks(x.to(torch.float64), layout)
    scale = e8m0.pow2(shared_exponent(blocks.abs().amax(dim=-1), rule=rule, q=q)).unsqueeze(-1)
    return from_blocks(e2m1.round_to_e2m1(blocks / scale) * scale, layout).to(x.dtype)


def _check_q(q: float) -> float:
    if isinstance(q, bool) or not isinstance(q, numbers.Real) or not (0 < q < math.inf):
        raise ValueError(f"q must be a finite positive number, got {q!r}")
    return float(q)
