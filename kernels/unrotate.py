"""Undo the INT4 recipes' V Hadamard on an attention output: out = x · H / sqrt(D), H the ±1 Sylvester matrix.

The Triton kernel does this in its epilogue (a 3xTF32 MMA); the Gluon kernel writes fp32 and this pass follows it.
H is exact in TF32, so two TF32 MMAs suffice: x = x_hi + x_lo with x_hi = x's top 11 significant bits (exact in
TF32) and x_lo the exact remainder, which the MMA keeps to TF32's 11 bits: within 2^-21 of |x|, what 3xTF32
keeps. (Triton's 3xTF32 splits H too and, at 128 rows, ran out of shared memory; a bf16 split is exact on the
GPU but the CPU interpreter's bf16 MMA is not usable.)
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from . import _launcher

ROWS = 64  # rows per MMA (with 2 stages: 104 KB of shared memory at D = 128, two programs per SM)
TILES = 16  # row tiles per program: H (64 KB at D = 128) is read once per program, not once per tile


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
        x_hi = (x.to(tl.int32, bitcast=True) & -8192).to(tl.float32, bitcast=True)  # mantissa's low 13 bits cleared
        out = (tl.dot(x_hi, hv, input_precision="tf32") + tl.dot(x - x_hi, hv, input_precision="tf32")) * scale
        tl.store(o_base + rows[:, None] * so_n + cols[None, :], out.to(O.dtype.element_ty), mask=inb)


def unrotate(x: torch.Tensor, hv: torch.Tensor, out: torch.Tensor, so, run=_launcher.launch) -> torch.Tensor:
    """x (B, H, N, D) fp32 contiguous, hv (D, D) ±1 fp32 contiguous; writes x·hv/sqrt(D) into `out` (strides so =
    (b, h, n, d), d contiguous) in out's dtype by one launch through `run` and returns out."""
    B, H, N, D = x.shape
    if not x.is_contiguous() or not hv.is_contiguous() or so[3] != 1:
        raise ValueError("unrotate: x and hv contiguous, out's head_dim contiguous")
    run(_unrotate_kernel, (triton.cdiv(N, ROWS * TILES), B * H), x, hv, out, so[0], so[1], so[2], H, N,
        1.0 / math.sqrt(D), D=D, ROWS=ROWS, TILES=TILES, num_warps=4, num_stages=2)
    return out
