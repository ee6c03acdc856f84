"""OFP8 E4M3FN values: bias 7, max 448, min normal 2**-6, min subnormal 2**-9, no Inf (0x7F/0xFF are NaN).

Rounding uses torch's float32 -> float8_e4m3fn cast (round to nearest even) with two guards: out-of-range values
are clamped to ±448 first (the cast does not saturate), and wider inputs are first rounded to float32 *to odd*
so the two-step float64 -> float32 -> E4M3 rounding equals one exact rounding.
"""

from __future__ import annotations

import torch

MAX = 448.0
MIN_NORMAL = 2.0**-6
MIN_SUBNORMAL = 2.0**-9


def round_to_e4m3(x: torch.Tensor) -> torch.Tensor:
    """Round to the nearest E4M3FN value, ties to even mantissa, saturating to ±448. Returns x's float dtype.

    Every E4M3 value is exact in float16, bfloat16, float32 and float64, so the result is exact in x's dtype.
    """
    x64 = x.to(torch.float64).clamp(-MAX, MAX)
    r = _float32_round_to_odd(x64).to(torch.float8_e4m3fn)
    out_dtype = x.dtype if x.is_floating_point() else torch.float32
    return r.to(out_dtype)


def encode(values: torch.Tensor) -> torch.Tensor:
    """E4M3 values (already on the grid) -> uint8 bit patterns."""
    v32 = values.to(torch.float32)
    f8 = v32.to(torch.float8_e4m3fn)
    if not bool((f8.to(torch.float32) == v32).all()):
        raise ValueError("values are not exact E4M3 values (round them with round_to_e4m3 first)")
    return f8.view(torch.uint8)


def decode(data: torch.Tensor) -> torch.Tensor:
    """uint8 bit patterns -> float32 values."""
    if data.dtype != torch.uint8:
        raise TypeError("E4M3 bytes must be uint8")
    return data.view(torch.float8_e4m3fn).to(torch.float32)


def _float32_round_to_odd(x64: torch.Tensor) -> torch.Tensor:
    """float64 -> float32 rounded to odd: truncate toward zero, then set the last bit if anything was dropped.

    Rounding to odd keeps "exactly on" apart from "just above/below" a coarser midpoint, so a later
    round-to-nearest-even onto a format with at least 2 fewer significand bits (E4M3 has 20 fewer) is exact.
    A plain float32 cast could land a value just above an E4M3 midpoint on the midpoint, which then ties down.
    """
    f = x64.to(torch.float32)
    overshoot = f.to(torch.float64).abs() > x64.abs()
    trunc = torch.where(overshoot, torch.nextafter(f, torch.zeros_like(f)), f)
    inexact = (trunc.to(torch.float64) != x64).to(torch.int32)
    return (trunc.view(torch.int32) | inexact).view(torch.float32)
