"""Turn a recipe's per-operand quantization settings into fake-quantize functions.

Every function maps a float64 tensor in BHND layout to a tensor of the same shape whose values lie
on the format's grid (quantize -> dequantize, exactly). With `fast=True` the same settings pick the
formats' in-dtype kernels (formats/fast.py): bit-identical on float64 input, and usable on float32
(the CPU path's softmax tiles) with the exactness stated there. The block axis is fixed per operand:
Q and K along head_dim (-1), V along tokens (-2, so each channel has its own scales), and the
softmax tile P̃ (B, H, q_tokens, keys) along keys (-1, per row).
"""

from __future__ import annotations

import functools
from typing import Callable

import torch

from ..formats import fast as fast_formats
from ..formats import fp8, intq, mxfp4, nvfp4
from ..recipes import OperandQuant

Quantizer = Callable[[torch.Tensor], torch.Tensor]

OPERAND_AXIS = {"q": -1, "k": -1, "v": -2, "p": -1}
E4M3_MAX, E2M1_MAX = 448.0, 6.0


def identity(x: torch.Tensor) -> torch.Tensor:
    return x


def build_quantizer(operand: str, op: OperandQuant, *, fast: bool = False, inplace: bool = False) -> Quantizer:
    """The fake quantizer for `operand` ("q", "k", "v" or "p") under settings `op`; `fast` picks the
    in-dtype kernels of formats/fast.py over the exact float64 format functions, and `inplace` lets
    them overwrite their input (fast only)."""
    if not op.enabled:
        return identity
    axis = OPERAND_AXIS[operand]
    kernels = _EXACT if not fast else tuple(functools.partial(f, inplace=inplace) for f in _FAST)

    if op.granularity == "per_token_group":
        # One scale per `group` tokens x all channels: flattening (tokens, head_dim) row-major makes
        # such a group a contiguous run of group*head_dim elements along one axis.
        inner = _element_quantizer(op, kernels, axis=-1, block_of=lambda x: op.group * x.shape[-1])

        def per_token_group(x: torch.Tensor) -> torch.Tensor:
            return inner(x.flatten(-2)).reshape(x.shape)

        return per_token_group

    if op.granularity == "per_thread":
        return _per_thread(_element_quantizer(op, kernels, axis=-1, block_of=lambda x: None), op.group)

    if op.granularity == "block":
        return _element_quantizer(op, kernels, axis=axis, block_of=lambda x: op.block_size)
    # per_token / per_channel / per_row: one scale over the whole operand axis.
    return _element_quantizer(op, kernels, axis=axis, block_of=lambda x: None)


def _per_thread(inner: Quantizer, block: int) -> Quantizer:
    """SageAttention2's per-thread key groups: within each `block` keys (the last block may be short), the keys
    n with the same (n mod 8) div 2 share one scale, 4 groups of block/4 keys. On Hopper these are the keys whose
    logits one thread holds in a 64×`block` wgmma accumulator (columns 8j + 2t and 8j + 2t + 1 for lane t of a
    quad), so a kernel applies the key scale once per thread and row instead of once per logit. Each group is
    gathered into one row (zero keys padding the last block leave its maxima as they are), quantized per row,
    and scattered back."""

    def per_thread(x: torch.Tensor) -> torch.Tensor:
        n, d = x.shape[-2:]
        pad = -n % block
        xp = torch.nn.functional.pad(x, (0, 0, 0, pad)) if pad else x
        lead = xp.shape[:-2]
        nb = xp.shape[-2] // block
        # (..., block index, j = n mod block div 8, t = n mod 8 div 2, e = n mod 2, d) -> groups (block, t)
        g = xp.reshape(*lead, nb, block // 8, 4, 2, d).transpose(-4, -3)
        out = inner(g.reshape(*lead, nb * 4, block // 4 * d))
        out = out.reshape(*lead, nb, 4, block // 8, 2, d).transpose(-4, -3).reshape(*lead, nb * block, d)
        return out[..., :n, :]

    return per_thread


# (mxfp4, nvfp4, int, fp8) fake quantizers with the format modules' signatures.
_EXACT = (mxfp4.fake_quantize, nvfp4.fake_quantize, intq.fake_quantize, fp8.fake_quantize)
_FAST = (fast_formats.fake_mxfp4, fast_formats.fake_nvfp4, fast_formats.fake_int, fast_formats.fake_fp8)


def _element_quantizer(op: OperandQuant, kernels, *, axis: int, block_of) -> Quantizer:
    fake_mxfp4, fake_nvfp4, fake_int, fake_fp8 = kernels
    fmt = op.format
    if fmt == "mxfp4":
        return lambda x: fake_mxfp4(x, rule=op.rule, q=op.qmax, block=32, axis=axis)
    if fmt == "nvfp4":
        return lambda x: fake_nvfp4(x, block=16, axis=axis, outer_scale=_nvfp4_outer(x, op, axis))
    if fmt in ("int8", "int4"):
        bits = 8 if fmt == "int8" else 4
        return lambda x: fake_int(x, bits=bits, block=block_of(x), axis=axis, scheme=op.scheme)
    if fmt == "fp8_e4m3":
        static = op.static_scale or None
        return lambda x: fake_fp8(x, fmt="e4m3", block=block_of(x), axis=axis, scale=static)
    raise ValueError(f"unknown format {fmt!r}")


TINY_ROWMAX = 2.0 ** -100


def _nvfp4_outer(x: torch.Tensor, op: OperandQuant, axis: int):
    """NVFP4's second-level FP32 scale: per tensor, none, or per row (SageAttention3's two-level P̃:
    rowmax/(448·6) first, so the E4M3 block scales use their whole range)."""
    if op.outer_scale != "row":
        return op.outer_scale
    rowmax = x.abs().amax(dim=axis, keepdim=True).to(torch.float64)  # the same scale from float32 tiles
    # A row whose maximum is <= 2^-100 (P̃ weights below 2^-100 of the running maximum) gets s_o = 1,
    # so its E4M3 block scales round to 0 and the row quantizes to zero: rowmax/(448·6) would
    # underflow float32 for the smallest such rows. The Triton kernel uses the same threshold.
    return torch.where(rowmax > TINY_ROWMAX, rowmax / (E4M3_MAX * E2M1_MAX), torch.ones_like(rowmax))
