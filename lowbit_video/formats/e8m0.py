"""E8M0 scale bytes (OCP MX v1.0 §5.4.1): byte ``b`` encodes ``2**(b - 127)``.

Valid bytes are 0..254 (exponents -127..127); 0xFF is NaN and is never produced here. There is no zero and no
Inf, so an all-zero block gets exponent 0 (scale 1) from the quantizers rather than a special byte.
"""

from __future__ import annotations

import torch

BIAS = 127
EMIN, EMAX = -127, 127
NAN_BYTE = 0xFF


def pow2(exponents) -> torch.Tensor:
    """Exactly ``2.0**e`` in float64, built from the IEEE bit pattern.

    ``torch.pow``/``ldexp`` promote integer exponents through the default float dtype (float32), where
    2**-127 is subnormal and 2**128 overflows; composing the bits has no rounding at all.
    """
    e = torch.as_tensor(exponents).to(torch.int64)
    if bool(((e < -1022) | (e > 1023)).any()):
        raise ValueError("exponent outside the float64 normal range [-1022, 1023]")
    return ((e + 1023) << 52).view(torch.float64)


def encode(exponents) -> torch.Tensor:
    """Integer exponents in [-127, 127] -> E8M0 bytes (uint8)."""
    e = torch.as_tensor(exponents)
    if e.is_floating_point():
        raise TypeError("E8M0 exponents must be integers")
    e = e.to(torch.int64)
    if bool(((e < EMIN) | (e > EMAX)).any()):
        raise ValueError(f"E8M0 exponent outside [{EMIN}, {EMAX}]")
    return (e + BIAS).to(torch.uint8)


def decode(data: torch.Tensor) -> torch.Tensor:
    """E8M0 bytes (uint8) -> int32 exponents. Raises on the NaN byte 0xFF."""
    if data.dtype != torch.uint8:
        raise TypeError("E8M0 bytes must be uint8")
    if bool((data == NAN_BYTE).any()):
        raise ValueError("E8M0 byte 0xFF is NaN")
    return data.to(torch.int32) - BIAS
