"""Exact rounding onto the low-bit grids inside Triton pre-passes, without a division per element.

A code is the RNE of the exact quotient x / s; it is found from an fp32 candidate (the quotient by a multiply
with 1/s, within one grid step of the answer) and the signs of (midpoint · s − x) for the grid midpoints next
to it, or against every midpoint of a short grid: one fp32 FMA each, whose exact product and single rounding
keep the sign and the zero of the exact difference. NVFP4's block scales are found the same way; the INT8 and
FP8 scales (one per row, block or channel) the callers round once from an fp64 quotient, as the reference does.

Shared by the operand pre-passes (prepass.py: sage2, the nvfp4 recipe; draft_prepass.py: DraftAttention2);
tested bit for bit against lowbit_video.formats through them.
"""

from __future__ import annotations

import os

import triton
import triton.language as tl

from ._core import e4m3_round


@triton.jit
def round_to_int(t):
    """(c, cf): RNE of fp32 t (|t| < 2^22) as int32 and as fp32, by adding 1.5·2^23 and reading the sum's low bits."""
    y = t + 12582912.0
    return y.to(tl.int32, bitcast=True) - 0x4B400000, y - 12582912.0


# Scales below this are brought into range first (x and s times 2^100, exact): above it 1/s is finite and the
# products (c ± ½)·s and the E4M3 midpoints times s are multiples of 2^-149 or coarser, so an FMA's single
# rounding keeps the sign and the zero of (midpoint − x)
SMALLEST_FP32_PATH_SCALE = tl.constexpr(2.0 ** -100)


@triton.jit
def in_fp32_range(x, s):
    """(x, s) times 2^100 where the scalar scale s is below SMALLEST_FP32_PATH_SCALE, else as they are: exact, and
    every quotient x / s unchanged."""
    if s < SMALLEST_FP32_PATH_SCALE:
        x = x * 2.0 ** 100
        s = s * 2.0 ** 100
    return x, s


@triton.jit
def each_in_fp32_range(x, s):
    """`in_fp32_range` for a scale per row or column, s broadcast to x ((ROWS, 1) or (1, COLS)): only the rows or
    columns whose scale is below the range are scaled."""
    if tl.min(s) < SMALLEST_FP32_PATH_SCALE:
        f = tl.where(s < SMALLEST_FP32_PATH_SCALE, 2.0 ** 100, 1.0)
        s = s * f
        x = x * f
    return x, s


# The CPU interpreter's tl.fma rounds twice (numpy's a * b + c in fp32); the exact-sign comparisons below then
# use fp64 there instead (the product exact in fp64, one rounding of the sum: the same sign and zero)
EMULATE_FMA = os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def fma_exact(a, b, c, EMULATE: tl.constexpr):
    """a·b + c with one rounding (the exact-sign comparisons' primitive); in fp64 under the interpreter."""
    if EMULATE:
        return (a.to(tl.float64) * b.to(tl.float64) + c.to(tl.float64)).to(tl.float32)
    else:
        return tl.fma(a, b, c)


@triton.jit
def rne_int_exact32(xf, s, EMULATE_FMA: tl.constexpr):
    """RNE(x / s) as int32 for x exact in fp32 (16-bit or fp32 inputs), |x| <= 127.5·s, and an fp32 scale s
    (>= SMALLEST_FP32_PATH_SCALE) broadcast to x (one per row, per column or per tile), without fp64: the candidate
    c from the fp32 quotient (within one of the answer, and within ±127 since the exact quotient's RNE is), then the
    signs of (c ± ½)·s − x, each one FMA (exact product, one rounding: the sign and the zero are the exact
    difference's, a nonzero multiple of 2^-149 never rounding to 0; an exact 0 is +0). Read as int32 bits, d <= 0
    ⇔ bits(d) <= 0 and d < 0 ⇔ bits(d) < 0, so the round-half-even corrections are one integer compare each. The
    codes of prepass.py's `_fix_by_fp64_midpoints` without its fp64 products and compares (fp64 runs at half
    rate); equal to the RNE of a float64 quotient of fp32 x and s, which never rounds onto a midpoint that the
    exact quotient is not on."""
    c, cf = round_to_int(xf * (1.0 / s))
    above = fma_exact(cf + 0.5, s, -xf, EMULATE_FMA).to(tl.int32, bitcast=True)  # < 0 (<= 0 for odd c): round up
    below = fma_exact(cf - 0.5, s, -xf, EMULATE_FMA).to(tl.int32, bitcast=True)  # > 0 (>= 0 for odd c): round down
    odd = c & 1
    return c + (above < odd).to(tl.int32) - (below > -odd).to(tl.int32)


@triton.jit
def e4m3_code(e):
    """The magnitude code of an E4M3 grid value e >= 0 (fp32), from its fp32 bits; a subnormal's (e < 2^-6, the
    integer e·2^9 < 8) by the magic-number add, one FMA, rather than a conversion instruction."""
    bits = e.to(tl.int32, bitcast=True)
    sub = (e * 512.0 + 12582912.0).to(tl.int32, bitcast=True) - 0x4B400000
    return tl.where(e >= 0.015625, (((bits >> 23) - 120) << 3) | ((bits >> 20) & 7), sub)


@triton.jit
def _e4m3_rne_step(e, a, f, s, EMULATE_FMA: tl.constexpr):
    """(up, down, half, low_half): whether the E4M3 RNE of a / (f·s) (a >= 0, f a small exact constant) lies one
    grid value above the candidate e or below it (else it is e), from the signs of (m·f)·s − a for the midpoints m
    next to e, one FMA each (m·f exact: m has at most 5 significant bits; exact product, one rounding, so the sign
    and the zero are the exact difference's), read as int32 bits as in `rne_int_exact32`; ties to the even code.
    The midpoints come from e's bits: half a step 2^(E − 4) above, and below too unless e is a
    power of two above 2^-6 (then the step below is half as wide); steps of 2^-9 on the subnormals."""
    bits = e.to(tl.int32, bitcast=True)
    half = tl.maximum(bits & 0x7F800000, (-6 + 127) << 23).to(tl.float32, bitcast=True) * 0.0625  # 2^(max(E,-6)-4)
    low_half = tl.where(((bits & 0x007FFFFF) == 0) & (e > 0.015625), half * 0.5, half)
    above = fma_exact((e + half) * f, s, -a, EMULATE_FMA).to(tl.int32, bitcast=True)  # < 0 (<= 0, odd code): up
    below = fma_exact((e - low_half) * f, s, -a, EMULATE_FMA).to(tl.int32, bitcast=True)  # > 0 (>= 0, odd): down
    odd = e4m3_code(e) & 1
    return above < odd, (below > -odd) & (e > 0), half, low_half


@triton.jit
def _e4m3_grid(t, EMULATE: tl.constexpr):
    """t >= 0 rounded onto the E4M3 grid (RNE, saturating at 448), as fp32: the hardware conversion
    (cvt.rn.satfinite.e4m3x2.f32) and back, or under the interpreter, whose fp8 cast rounds ties away from zero and
    some values wrongly, `e4m3_round`."""
    if EMULATE:
        return e4m3_round(t)
    else:
        return t.to(tl.float8e4nv).to(tl.float32)


@triton.jit
def e4m3_exact32(xf, s, EMULATE_FMA: tl.constexpr):
    """The E4M3 code (int32 byte) of RNE(x / s), saturating at ±448, for x exact in fp32 (16-bit or fp32 V) and an
    fp32 scale s (>= SMALLEST_FP32_PATH_SCALE) per channel, broadcast to x, without fp64 and without a division
    per element. q = |x| · (1/s) is within 5·2^-24 of |x| / s (the reciprocal's 2 ulp, div.full, and the
    product's rounding), so the bounds q·(1 ∓ 2^-20) enclose it and lie 2^-19 apart: both round to one grid
    value, which is the answer (RNE is monotone), or to two neighbours with the one midpoint between them inside
    the bounds (E4M3's steps are at least 2^-4 of the value, 2^-9 on the subnormals; below 2^-10 both bounds
    round to 0, fp32 subnormal q included), and then the sign of midpoint·s − |x| decides, one FMA
    (`rne_int_exact32`'s exact sign; ties to the even code). An exact quotient on a midpoint, common for bf16 V
    whose scale has few significant bits, takes the same path. The codes come from the values' fp32 bits
    (`e4m3_code`), not from a bitcast of the fp8 tensor: Triton 3.6 builds that bitcast's registers partly from
    undefined ones at these layouts (wrong codes on the GPU)."""
    a = tl.abs(xf)
    q = a * (1.0 / s)
    vlo = _e4m3_grid(q * (1.0 - 2.0 ** -20), EMULATE_FMA)
    vhi = _e4m3_grid(q * (1.0 + 2.0 ** -20), EMULATE_FMA)
    clo = e4m3_code(vlo)
    # (vlo + vhi)·(s/2): the midpoint times s, the sum exact (neighbours on the grid) and s/2 too (s >= 2^-100)
    above = fma_exact(vlo + vhi, s * 0.5, -a, EMULATE_FMA).to(tl.int32, bitcast=True)  # < 0 (<= 0, odd clo): up
    k = clo + ((vhi > vlo) & (above < (clo & 1))).to(tl.int32)  # vhi's code is clo + 1 where they differ
    return tl.where(xf < 0, k | 0x80, k)


@triton.jit
def nvfp4_block_scale(amax, so, EMULATE_FMA: tl.constexpr):
    """s_b = E4M3_RNE(amax / (6·so)) (fp32 values on the grid, saturating at 448) for block maxima amax >= 0
    and an fp32 outer scale so (>= SMALLEST_FP32_PATH_SCALE), as formats.nvfp4 computes it from the fp64
    quotient (which no fp64 rounding moves onto an E4M3 midpoint: the gap is at least 2^-33 relative), without
    a division: the candidate from an fp32 quotient (within one step), then `_e4m3_rne_step` with f = 6."""
    e = e4m3_round(tl.minimum(amax * (1.0 / (6.0 * so)), 448.0))
    up, down, half, low_half = _e4m3_rne_step(e, amax, 6.0, so, EMULATE_FMA)
    return tl.where(up & (e < 448.0), e + 2.0 * half, tl.where(down, e - 2.0 * low_half, e))


@triton.jit
def _below(sb, m: tl.constexpr, so, na, TIE_UP: tl.constexpr, EMULATE_FMA: tl.constexpr):
    """1 where the midpoint m·s_b·so lies below |x| (= −na), or on it when a tie rounds up; else 0 (int32). The
    difference (m·s_b)·so − |x| read as int32 bits: d < 0 ⇔ bits < 0, d <= 0 ⇔ bits <= 0 (an exact 0 is +0)."""
    d = fma_exact((sb * m)[:, :, None], so, na, EMULATE_FMA).to(tl.int32, bitcast=True)
    if TIE_UP:
        return (d <= 0).to(tl.int32)
    else:
        return (d < 0).to(tl.int32)


@triton.jit
def nvfp4_rows_exact(x, so, ROWS: tl.constexpr, COLS: tl.constexpr, EMULATE_FMA: tl.constexpr):
    """E2M1·s_b (fp32, exact) of x (ROWS, COLS) (values exact in fp32: 16-bit or fp32 inputs) in blocks of 16
    along COLS, outer scale so (fp32 scalar, at least SMALLEST_FP32_PATH_SCALE: callers bring a smaller one and
    x into range by 2^100); bit-exact against formats.nvfp4. Per block s_b (`nvfp4_block_scale`); per
    element no division: RNE(|x| / (s_b·so)) onto E2M1 is the number of grid midpoints m below
    |x| in units of s_b·so (m = 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5; ties at 0.75, 1.75 and 3.5 go up, to the
    even neighbour, the others down). Each compare is the sign of (m·s_b)·so − |x|, one FMA: m·s_b is exact in
    fp32 (≤ 3 + 4 significant bits), the FMA's product exact, and the difference a multiple of 2^-149 (m·s_b ≥
    2^-11, so ≥ 2^-100), so its single rounding keeps the sign and the zero."""
    xb = tl.reshape(x, (ROWS, COLS // 16, 16))
    a = tl.abs(xb)
    sb = nvfp4_block_scale(tl.max(a, axis=2), so, EMULATE_FMA)
    na = -a
    n = _below(sb, 0.25, so, na, False, EMULATE_FMA) + _below(sb, 0.75, so, na, True, EMULATE_FMA)
    n += _below(sb, 1.25, so, na, False, EMULATE_FMA) + _below(sb, 1.75, so, na, True, EMULATE_FMA)
    n += _below(sb, 2.5, so, na, False, EMULATE_FMA) + _below(sb, 3.5, so, na, True, EMULATE_FMA)
    n += _below(sb, 5.0, so, na, False, EMULATE_FMA)
    e = tl.where(n <= 4, n.to(tl.float32) * 0.5, tl.where(n == 5, 3.0, tl.where(n == 6, 4.0, 6.0)))
    e = tl.where(sb[:, :, None] > 0, e, 0.0)  # a block scale that rounds to 0: all-zero block
    val = e * sb[:, :, None]
    return tl.reshape(tl.where(xb < 0, -val, val), (ROWS, COLS))
