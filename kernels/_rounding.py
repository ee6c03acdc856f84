"""Exact rounding onto the low-bit grids inside Triton pre-passes, in fp64 where it matters.

Shared by the NVFP4 pre-pass of the nvfp4 recipe (prepass.py) and DraftAttention2's fused pre-pass
(draft_prepass.py); tested bit for bit against lowbit_video.formats through both.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _grid_round_f64(a, lo_exp: tl.constexpr, shift: tl.constexpr):
    """RNE of a >= 0 (fp64) onto a floating-point grid whose step at a is 2^(max(E, lo_exp) − shift),
    E = floor(log2 a): one add-and-subtract of C = 2^(max(E, lo_exp) − shift + 52), whose ulp is that step
    and whose significand is even (ties go to the even grid point)."""
    e = ((a.to(tl.int64, bitcast=True) >> 52) & 0x7FF) - 1023
    c = ((tl.maximum(e, lo_exp) - shift + 52 + 1023) << 52).to(tl.float64, bitcast=True)
    return (a + c) - c


@triton.jit
def e4m3_rne_f64(t):
    """|t| RNE onto E4M3 (step 2^(E−3), subnormal step 2^−9), saturating at 448; sign kept."""
    r = tl.minimum(_grid_round_f64(tl.abs(t), -6, 3), 448.0)
    return tl.where(t < 0, -r, r)


@triton.jit
def e2m1_rne_f64(t):
    """|t| RNE onto E2M1 {0, .5, 1, 1.5, 2, 3, 4, 6} (step 2^(max(E, 0) − 1)), saturating at 6; sign kept."""
    r = tl.minimum(_grid_round_f64(tl.abs(t), 0, 1), 6.0)
    return tl.where(t < 0, -r, r)


@triton.jit
def nvfp4_rows_exact(x, so, ROWS: tl.constexpr, COLS: tl.constexpr):
    """E2M1·s_b (fp32, exact) of x (ROWS, COLS) (16-bit or fp32 values) in blocks of 16 along COLS, outer
    scale so (fp64 scalar); bit-exact against formats.nvfp4 for inputs of at most 24 significant bits (an
    fp64 input could sit within 2^-53 of a midpoint, where the reference's rounded quotient may tie). Per block, s_b from one fp64 quotient rounded once onto E4M3; per element no
    division: RNE(|x| / step) onto E2M1 is the number of grid midpoints m·step below |x| (m = 0.25, 0.75,
    1.25, 1.75, 2.5, 3.5, 5; ties at 0.75, 1.75 and 3.5 go up, to the even neighbour, the others down),
    each m·step exact in fp64 (≤ 3 + 4 + 24 significant bits) and compared exactly with |x|."""
    xb = tl.reshape(x, (ROWS, COLS // 16, 16))
    amax = tl.max(tl.abs(xb), axis=2).to(tl.float64)
    sb = e4m3_rne_f64(amax / (6.0 * so))
    st = (sb * so)[:, :, None]
    a = tl.abs(xb).to(tl.float64)
    n = ((a > 0.25 * st).to(tl.int32) + (a >= 0.75 * st).to(tl.int32) + (a > 1.25 * st).to(tl.int32)
         + (a >= 1.75 * st).to(tl.int32) + (a > 2.5 * st).to(tl.int32) + (a >= 3.5 * st).to(tl.int32)
         + (a > 5.0 * st).to(tl.int32))
    e = tl.where(n <= 4, n.to(tl.float32) * 0.5, tl.where(n == 5, 3.0, tl.where(n == 6, 4.0, 6.0)))
    e = tl.where(sb[:, :, None] > 0, e, 0.0)  # a block scale that rounds to 0: all-zero block
    val = e * sb.to(tl.float32)[:, :, None]
    return tl.reshape(tl.where(xb < 0, -val, val), (ROWS, COLS))
