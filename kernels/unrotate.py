"""Undo the INT4 recipes' V Hadamard on an attention output: out = x · H / sqrt(D), H the ±1 Sylvester matrix.

The Triton kernel does this in its epilogue; the Gluon kernel writes fp32 and this pass follows it. The product
is a 3xTF32 MMA, as in that epilogue (fp32-level accuracy: H is exact in TF32, x is split into two TF32 parts).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

ROWS = 64


@triton.jit
def _unrotate_kernel(X, HV, O, so_b, so_h, so_n, H, N, scale, D: tl.constexpr, ROWS: tl.constexpr):
    """One (row tile, b·h): X (B·H, N, D) fp32 contiguous -> O (strides so_*, head_dim contiguous)."""
    pid_t = tl.program_id(0)
    bh = tl.program_id(1)
    rows = pid_t * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, D)
    inb = (rows < N)[:, None]
    x = tl.load(X + bh.to(tl.int64) * N * D + rows[:, None] * D + cols[None, :], mask=inb, other=0.0)
    hv = tl.load(HV + tl.arange(0, D)[:, None] * D + cols[None, :])
    out = tl.dot(x, hv, input_precision="tf32x3") * scale
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    tl.store(O + b * so_b + h * so_h + rows[:, None] * so_n + cols[None, :], out.to(O.dtype.element_ty), mask=inb)


def unrotate(x: torch.Tensor, hv: torch.Tensor, out: torch.Tensor, so) -> torch.Tensor:
    """x (B, H, N, D) fp32 contiguous, hv (D, D) ±1 fp32; writes x·hv/sqrt(D) into `out` (strides so = (b, h, n,
    d), d contiguous) in out's dtype and returns out."""
    B, H, N, D = x.shape
    if not x.is_contiguous() or so[3] != 1:
        raise ValueError("unrotate: x contiguous and out's head_dim contiguous")
    _unrotate_kernel[(triton.cdiv(N, ROWS), B * H)](x, hv.contiguous(), out, so[0], so[1], so[2], H, N,
                                                      1.0 / math.sqrt(D), D=D, ROWS=ROWS, num_warps=4)
    return out
