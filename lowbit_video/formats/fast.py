"""The block formats' fake quantizers computed in the input's own dtype, for the CPU attention path.

Same grids, scale rules and rounding as ``mxfp4`` / ``nvfp4`` / ``intq`` / ``fp8.fake_quantize``, and
the per-block scales come from the same exact functions (``mxfp4.shared_exponent``,
``e4m3.round_to_e4m3``, ``float32_scale``) on the small per-block tensors. What differs is the
per-element work: no float64 copy, no NaN check (callers check their inputs once), a few in-place
passes, and E2M1 rounding by a magic-number add instead of frexp and powers of two:

    (c + M) − M,  M = 1.5 · 2^(p−m) · f     (p = 23 for float32, 52 for float64; m mantissa bits)

rounds c to a multiple of f / 2^m with round-to-nearest-even, as the float addition does (c + M
stays in M's binade, whose spacing is f / 2^m, and M / (f / 2^m) is even). With f the power of two
at or below |c|, but at least the format's smallest normal (E2M1: the block's unit; the subnormal
step is the same f / 2^m there), f / 2^m is exactly the format's spacing in c's binade: E2M1 with
m = 1, E4M3 (FP8) with m = 3. Ties to even multiples of the spacing are ties to even mantissas.

Exactness. For float64 input every function returns the bit pattern of the exact format function
(zeros may differ in sign). For float32 input:
  * MXFP4: the same values (power-of-two scales: the whole computation is exact) while the block
    scale 2^e lies in [2^-127, 2^100];
  * NVFP4, INT8/INT4, FP8: the quotient x / scale is rounded to float32 before it is rounded to the
    grid, so an element whose exact quotient lies within 2^-24 (relative) of a rounding boundary can
    land one grid step away from the exact result; the dequantized value code · scale is a float32
    product (relative error <= 2^-24).
With ``inplace=True`` a kernel may overwrite x (the CPU path's softmax tiles, which are not needed
afterwards); the default leaves x alone.
"""

from __future__ import annotations

import math

import torch

from . import e4m3, e8m0, mxfp4
from ._blocks import BlockLayout, float32_scale, from_blocks, make_layout, to_blocks
from .intq import code_range
from .fp8 import _static_scale
from .nvfp4 import _outer_per_block, _resolve_outer_scale

_EXPONENT_MASK = {torch.float32: (torch.int32, 0x7F800000), torch.float64: (torch.int64, 0x7FF0000000000000)}
_SIGNIFICAND_BITS = {torch.float32: 23, torch.float64: 52}
E2M1_MAX, E2M1_MANTISSA = 6.0, 1
E4M3_MANTISSA, E4M3_MIN_NORMAL = 3, 2.0**-6


def _check_dtype(x: torch.Tensor) -> None:
    if x.dtype not in _SIGNIFICAND_BITS:
        raise TypeError(f"fast quantizers take float32 or float64 tensors, got {x.dtype}")


def _blocked(x: torch.Tensor, axis: int, block: int | None, inplace: bool) -> tuple[torch.Tensor, BlockLayout]:
    """x in the blocked layout (*other_dims, n_blocks, block), as a tensor the kernel may overwrite:
    a view of x itself when `inplace` and the axis is last with no padding, otherwise a copy."""
    layout = make_layout(x.shape, axis, block)
    if layout.axis == x.dim() - 1 and layout.pad == 0:
        blocks = x.unflatten(-1, (layout.n_blocks, layout.block))
        return (blocks if inplace else blocks.clone()), layout
    return to_blocks(x, layout), layout  # to_blocks pads, i.e. copies


def _unblocked(blocks: torch.Tensor, layout: BlockLayout) -> torch.Tensor:
    if layout.axis == len(layout.shape) - 1 and layout.pad == 0:
        return blocks.flatten(-2)
    return from_blocks(blocks, layout)


def _amax(blocks: torch.Tensor) -> torch.Tensor:
    # amax and amin separately: much faster than aminmax over short rows on the CPU
    return torch.maximum(blocks.amax(dim=-1), blocks.amin(dim=-1).neg_())


def round_minifloat_(c: torch.Tensor, min_normal, mantissa_bits: int) -> torch.Tensor:
    """Round ``c`` in place to a float grid with ``mantissa_bits`` explicit mantissa bits whose normal
    binades start at ``min_normal`` (a power of two: a float, or a tensor broadcastable to c), with
    subnormal spacing min_normal / 2^mantissa_bits, ties to even (the module docstring's magic add).
    No saturation: clamp c to the grid's range first."""
    int_dtype, mask = _EXPONENT_MASK[c.dtype]
    floor = torch.bitwise_and(c.view(int_dtype), mask).view(c.dtype)  # 2^floor(log2|c|); 0 for 0
    if isinstance(min_normal, torch.Tensor):
        torch.maximum(floor, min_normal, out=floor)
    else:
        floor.clamp_(min=min_normal)
    magic = floor.mul_(1.5 * 2.0 ** (_SIGNIFICAND_BITS[c.dtype] - mantissa_bits))
    return c.add_(magic).sub_(magic)


def round_e4m3_(y: torch.Tensor) -> torch.Tensor:
    """``e4m3.round_to_e4m3`` in place, in y's dtype: one RNE onto E4M3FN, saturating at ±448."""
    return round_minifloat_(y.clamp_(-e4m3.MAX, e4m3.MAX), E4M3_MIN_NORMAL, E4M3_MANTISSA)


def mx_unit(amax: torch.Tensor, *, rule: str, q: float) -> torch.Tensor:
    """The MXFP4 block scale 2^e of block maxima `amax`, in amax's dtype. float64: through
    ``mxfp4.shared_exponent`` (exact). float32 (the CPU path's P̃ tiles): the same rule from the float
    bits, without float64 passes; the same exponent wherever amax >= 2^-120 or amax == 0 (smaller
    maxima have subnormal float32 bits; their blocks get 2^-127 or the exact rule's value)."""
    if amax.dtype != torch.float32:
        return e8m0.pow2(mxfp4.shared_exponent(amax, rule=rule, q=q)).to(amax.dtype)
    if rule not in mxfp4.RULES:
        raise ValueError(f"unknown MX scale rule {rule!r}; expected one of {mxfp4.RULES}")
    floor_log2 = (amax.view(torch.int32) >> 23) - 127  # exact for normal amax
    if rule == "ocp":
        e = floor_log2 - mxfp4.E2M1_EMAX
    else:
        clip = mxfp4.TFS_Q if rule == "tfs" else mxfp4._check_q(q)
        # as shared_exponent: e = d or d + 1, d = floor(log2 amax) - floor(log2 clip); clip · 2^d exact
        d = (floor_log2 - (math.frexp(clip)[1] - 1)).clamp_(-126, 126)
        e = d + (amax > ((d + 127) << 23).view(torch.float32) * clip)
    e = e.masked_fill_(amax == 0, 0).clamp_(e8m0.EMIN + 1, e8m0.EMAX)
    if bool((e > 100).any()):
        raise ValueError("float32 MXFP4 block scale above 2^100 (use float64)")
    return ((e + 127) << 23).view(torch.float32)


def fake_mxfp4(x: torch.Tensor, *, rule: str = "uos", q: float = mxfp4.DEFAULT_Q, block: int | None = 32,
               axis: int = -1, inplace: bool = False) -> torch.Tensor:
    """``mxfp4.fake_quantize`` in x's dtype; `inplace` may overwrite x (and returns it where it can)."""
    _check_dtype(x)
    blocks, layout = _blocked(x, axis, block, inplace)
    unit = mx_unit(_amax(blocks), rule=rule, q=q).unsqueeze(-1)
    # x / unit is exact (a power of two), so the grid is E2M1 itself, with scalar bounds
    blocks.div_(unit).clamp_(-E2M1_MAX, E2M1_MAX)  # saturation at ±6
    return _unblocked(round_minifloat_(blocks, 1.0, E2M1_MANTISSA).mul_(unit), layout)


def fake_nvfp4(x: torch.Tensor, *, block: int | None = 16, axis: int = -1, outer_scale="tensor",
               inplace: bool = False) -> torch.Tensor:
    """``nvfp4.fake_quantize`` in x's dtype (outer scale "tensor", "none" or a tensor, as there)."""
    _check_dtype(x)
    blocks, layout = _blocked(x, axis, block, inplace)
    # The outer scale as nvfp4 resolves it; for "tensor" from x's amax alone (exact in any dtype).
    by_tensor = isinstance(outer_scale, str) and outer_scale == "tensor" and x.numel() > 0
    amax = x.abs().amax().to(torch.float64) if by_tensor else x.new_zeros((), dtype=torch.float64)
    s_o = _outer_per_block(_resolve_outer_scale(amax, outer_scale, layout), layout)
    block_scales = round_e4m3_(_amax(blocks).to(torch.float64) / (6.0 * s_o))  # one rounding of the exact quotient
    step = (block_scales * s_o).to(x.dtype).unsqueeze(-1)  # float64: exact; float32: rounded once
    empty = step == 0  # block scale rounded to 0: every element quantizes to 0 (x / 1, times 0)
    blocks.div_(torch.where(empty, torch.ones_like(step), step)).clamp_(-E2M1_MAX, E2M1_MAX)
    return _unblocked(round_minifloat_(blocks, 1.0, E2M1_MANTISSA).mul_(step), layout)


def fake_int(x: torch.Tensor, *, bits: int = 8, block: int | None = None, axis: int = -1,
             scheme: str = "symmetric", inplace: bool = False) -> torch.Tensor:
    """``intq.fake_quantize`` in x's dtype."""
    _check_dtype(x)
    qmin, qmax = code_range(bits)
    blocks, layout = _blocked(x, axis, block, inplace)
    lo, hi = blocks.amin(dim=-1), blocks.amax(dim=-1)
    if scheme == "symmetric":
        scale = float32_scale(torch.maximum(hi, -lo).to(torch.float64) / qmax).to(x.dtype).unsqueeze(-1)
        return _unblocked(blocks.div_(scale).round_().clamp_(-qmax, qmax).mul_(scale), layout)
    if scheme != "affine":
        raise ValueError(f"scheme must be 'symmetric' or 'affine', got {scheme!r}")
    lo64, hi64 = lo.to(torch.float64).clamp(max=0.0), hi.to(torch.float64).clamp(min=0.0)
    scale64 = float32_scale((hi64 - lo64) / (qmax - qmin)).to(torch.float64)
    zero_point = (qmin - torch.round(lo64 / scale64)).to(x.dtype).unsqueeze(-1)
    scale = scale64.to(x.dtype).unsqueeze(-1)
    codes = blocks.div_(scale).round_().add_(zero_point).clamp_(qmin, qmax)
    return _unblocked(codes.sub_(zero_point).mul_(scale), layout)


def fake_fp8(x: torch.Tensor, *, fmt: str = "e4m3", block: int | None = None, axis: int = -1,
             scale: float | None = None, inplace: bool = False) -> torch.Tensor:
    """``fp8.fake_quantize`` (E4M3) in x's dtype."""
    _check_dtype(x)
    if fmt != "e4m3":
        raise ValueError(f"fmt must be 'e4m3', got {fmt!r}")
    blocks, layout = _blocked(x, axis, block, inplace)
    if scale is None:
        s = float32_scale(_amax(blocks).to(torch.float64) / e4m3.MAX).to(x.dtype).unsqueeze(-1)
    else:
        s = torch.tensor(_static_scale(scale), dtype=x.dtype, device=x.device)
    return _unblocked(round_e4m3_(blocks.div_(s)).mul_(s), layout)
