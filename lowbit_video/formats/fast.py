"""The block formats' fake quantizers computed in the input's own dtype, for the CPU attention path.

Same grids, scale rules and rounding as ``mxfp4`` / ``nvfp4`` / ``intq`` / ``fp8.fake_quantize``, and
the per-block scales come from the same exact functions (``mxfp4.shared_exponent``,
``e4m3.round_to_e4m3``, ``float32_scale``) on the small per-block tensors. What differs is the
per-element work: no float64 copy, no NaN check (callers check their inputs once), a few in-place
passes, and E2M1 rounding by a magic-number add instead of frexp and powers of two:

    (c + M) − M,  M = 1.5 · 2^(p−1) · f     (p = 23 for float32, 52 for float64)

rounds c to a multiple of f / 2 with round-to-nearest-even, as the float addition does (c + M stays
in M's binade, whose spacing is f / 2, and M / (f / 2) is even). With f the power of two at or below
|c|, but at least the block's unit (the E2M1 subnormal step is half the unit), f / 2 is exactly the
E2M1 spacing of c's binade: one mantissa bit.

Exactness. For float64 input every function returns the bit pattern of the exact format function
(zeros may differ in sign). For float32 input:
  * MXFP4: the same values (power-of-two scales: the whole computation is exact) while the block
    scale 2^e lies in [2^-127, 2^100];
  * NVFP4, INT8/INT4, FP8: the quotient x / scale is rounded to float32 before it is rounded to the
    grid, so an element whose exact quotient lies within 2^-24 (relative) of a rounding boundary can
    land one grid step away from the exact result; the dequantized value code · scale is a float32
    product (relative error <= 2^-24).
"""

from __future__ import annotations

import torch

from . import e4m3, e8m0, mxfp4
from ._blocks import BlockLayout, float32_scale, from_blocks, make_layout, to_blocks
from .intq import code_range
from .fp8 import _static_scale
from .nvfp4 import _outer_per_block, _resolve_outer_scale

_EXPONENT_MASK = {torch.float32: (torch.int32, 0x7F800000), torch.float64: (torch.int64, 0x7FF0000000000000)}
_MAGIC = {torch.float32: 1.5 * 2.0**22, torch.float64: 1.5 * 2.0**51}
E2M1_MAX = 6.0


def _check_dtype(x: torch.Tensor) -> None:
    if x.dtype not in _MAGIC:
        raise TypeError(f"fast quantizers take float32 or float64 tensors, got {x.dtype}")


def _blocked(x: torch.Tensor, axis: int, block: int | None) -> tuple[torch.Tensor, BlockLayout]:
    """x in the blocked layout (*other_dims, n_blocks, block): a view when the axis is last and no
    padding is needed (the common case), otherwise the zero-padded copy of ``to_blocks``."""
    layout = make_layout(x.shape, axis, block)
    if layout.axis == x.dim() - 1 and layout.pad == 0:
        return x.unflatten(-1, (layout.n_blocks, layout.block)), layout
    return to_blocks(x, layout), layout


def _unblocked(blocks: torch.Tensor, layout: BlockLayout) -> torch.Tensor:
    if layout.axis == len(layout.shape) - 1 and layout.pad == 0:
        return blocks.flatten(-2)
    return from_blocks(blocks, layout)


def _amax(blocks: torch.Tensor) -> torch.Tensor:
    lo, hi = torch.aminmax(blocks, dim=-1)
    return torch.maximum(hi, -lo)


def round_e2m1_(c: torch.Tensor, unit: torch.Tensor) -> torch.Tensor:
    """Round ``c`` (already within ±6·unit) in place onto the E2M1 grid times ``unit`` (a power of
    two, broadcastable), ties to even: the magic-number add of the module docstring."""
    int_dtype, mask = _EXPONENT_MASK[c.dtype]
    floor = torch.bitwise_and(c.view(int_dtype), mask).view(c.dtype)  # 2^floor(log2|c|); 0 for 0
    magic = torch.maximum(floor, unit).mul_(_MAGIC[c.dtype])
    return c.add_(magic).sub_(magic)


def fake_mxfp4(x: torch.Tensor, *, rule: str = "uos", q: float = mxfp4.DEFAULT_Q, block: int | None = 32,
               axis: int = -1) -> torch.Tensor:
    """``mxfp4.fake_quantize`` in x's dtype."""
    _check_dtype(x)
    blocks, layout = _blocked(x, axis, block)
    exps = mxfp4.shared_exponent(_amax(blocks), rule=rule, q=q)
    unit = e8m0.pow2(exps).to(x.dtype).unsqueeze(-1)
    if x.dtype == torch.float32 and bool((exps > 100).any()):
        raise ValueError("float32 MXFP4 block scale above 2^100 (use float64)")
    bound = unit * E2M1_MAX
    c = torch.clamp(blocks, min=-bound, max=bound)  # saturation at ±6 (a new tensor: x is left alone)
    return _unblocked(round_e2m1_(c, unit), layout)


def fake_nvfp4(x: torch.Tensor, *, block: int | None = 16, axis: int = -1, outer_scale="tensor") -> torch.Tensor:
    """``nvfp4.fake_quantize`` in x's dtype (outer scale "tensor", "none" or a tensor, as there)."""
    _check_dtype(x)
    blocks, layout = _blocked(x, axis, block)
    # The outer scale as nvfp4 resolves it; for "tensor" from x's amax alone (exact in any dtype).
    by_tensor = isinstance(outer_scale, str) and outer_scale == "tensor" and x.numel() > 0
    amax = x.abs().amax().to(torch.float64) if by_tensor else x.new_zeros((), dtype=torch.float64)
    s_o = _outer_per_block(_resolve_outer_scale(amax, outer_scale, layout), layout)
    block_scales = e4m3.round_to_e4m3(_amax(blocks).to(torch.float64) / (6.0 * s_o))
    step = (block_scales * s_o).to(x.dtype).unsqueeze(-1)  # float64: exact; float32: rounded once
    empty = step == 0  # block scale rounded to 0: every element quantizes to 0
    y = torch.div(blocks, torch.where(empty, torch.ones_like(step), step))
    y.clamp_(-E2M1_MAX, E2M1_MAX)
    return _unblocked(round_e2m1_(y, torch.ones((), dtype=x.dtype, device=x.device)).mul_(step), layout)


def fake_int(x: torch.Tensor, *, bits: int = 8, block: int | None = None, axis: int = -1,
             scheme: str = "symmetric") -> torch.Tensor:
    """``intq.fake_quantize`` in x's dtype."""
    _check_dtype(x)
    qmin, qmax = code_range(bits)
    blocks, layout = _blocked(x, axis, block)
    lo, hi = torch.aminmax(blocks, dim=-1)
    if scheme == "symmetric":
        scale = float32_scale(torch.maximum(hi, -lo).to(torch.float64) / qmax).to(x.dtype).unsqueeze(-1)
        codes = torch.div(blocks, scale).round_().clamp_(-qmax, qmax)
        return _unblocked(codes.mul_(scale), layout)
    if scheme != "affine":
        raise ValueError(f"scheme must be 'symmetric' or 'affine', got {scheme!r}")
    lo64, hi64 = lo.to(torch.float64).clamp(max=0.0), hi.to(torch.float64).clamp(min=0.0)
    scale64 = float32_scale((hi64 - lo64) / (qmax - qmin)).to(torch.float64)
    zero_point = (qmin - torch.round(lo64 / scale64)).to(x.dtype).unsqueeze(-1)
    scale = scale64.to(x.dtype).unsqueeze(-1)
    codes = torch.div(blocks, scale).round_().add_(zero_point).clamp_(qmin, qmax)
    return _unblocked(codes.sub_(zero_point).mul_(scale), layout)


def fake_fp8(x: torch.Tensor, *, fmt: str = "e4m3", block: int | None = None, axis: int = -1,
             scale: float | None = None) -> torch.Tensor:
    """``fp8.fake_quantize`` (E4M3) in x's dtype."""
    _check_dtype(x)
    if fmt != "e4m3":
        raise ValueError(f"fmt must be 'e4m3', got {fmt!r}")
    blocks, layout = _blocked(x, axis, block)
    if scale is None:
        s = float32_scale(_amax(blocks).to(torch.float64) / e4m3.MAX).to(x.dtype).unsqueeze(-1)
    else:
        s = torch.tensor(_static_scale(scale), dtype=x.dtype, device=x.device)
    y = torch.div(blocks, s)
    if x.dtype == torch.float32:
        # One rounding: float32 -> E4M3 is a single RNE cast (no double rounding from float32).
        codes = y.clamp_(-e4m3.MAX, e4m3.MAX).to(torch.float8_e4m3fn).to(torch.float32)
    else:
        codes = e4m3.round_to_e4m3(y)
    return _unblocked(codes.mul_(s), layout)
