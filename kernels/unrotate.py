"""Undo the INT4 recipes' V Hadamard on an attention output: out = x · H / sqrt(D), H the ±1 Sylvester matrix.

The Triton kernel does this in its epilogue; the Gluon kernel writes fp32 and this pass follows it. The product
is a 3xTF32 MMA, as in that epilogue (fp32-level accuracy: H is exact in TF32, x is split into two TF32 parts).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

ROWS = 128  # rows per MMA
TILES = 8  # row tiles per program: H (64 KB at D = 128) is read once per program, not once per tile


@triton.jit
def _unrotate_kernel(X, HV, O, so_b, so_h, so_n, H, N, scale, D: tl.constexpr, ROWS: tl.constexpr,
                     TILES: tl.constexpr):
    """TILES row tiles of one b·h: X (B·H, N, D) fp32 contiguous -> O (strides so_*, head_dim contiguous)."""
    pid_t = tl.program_id(0)
    bh = tl.program_id(1)
    cols = tl.arange(0, D)
    hv = tl.load(HV + tl.arange(0, D)[:, None] * D + cols[None, :])
    x_base = X + bh.to(tl.int64) * N * D
    o_base = O + (bh // H).to(tl.int64) * so_b + (bh % H).to(tl.int64) * so_h
    for t in range(TILES):
        rows = (pid_t * TILES + t) * ROWS + tl.arange(0, ROWS)
        inb = (rows < N)[:, None]
        x = tl.load(x_base + rows[:, None] * D + cols[None, :], mask=inb, other=0.0)
        out = tl.dot(x, hv, input_precision="tf32x3") * scale
        tl.store(o_base + rows[:, None] * so_n + cols[None, :], out.to(O.dtype.element_ty), mask=inb)


def unrotate(x: torch.Tensor, hv: torch.Tensor, out: torch.Tensor, so) -> torch.Tensor:
    """x (B, H, N, D) fp32 contiguous, hv (D, D) ±1 fp32; writes x·hv/sqrt(D) into `out` (strides so = (b, h, n,
    d), d contiguous) in out's dtype and returns out."""
    B, H, N, D = x.shape
    if not x.is_contiguous() or so[3] != 1:
        raise ValueError("unrotate: x contiguous and out's head_dim contiguous")
    _unrotate_kernel[(triton.cdiv(N, ROWS * TILES), B * H)](x, hv.contiguous(), out, so[0], so[1], so[2], H, N,
                                                              1.0 / math.sqrt(D), D=D, ROWS=ROWS, TILES=TILES,
                                                              num_warps=8)
    return out
