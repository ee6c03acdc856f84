"""FP4 E2M1 elements (OCP MX v1.0 §5.3.3): values {0, ±0.5, ±1, ±1.5, ±2, ±3, ±4, ±6}, no Inf/NaN.

Codes are 4-bit: bits 0-2 index the magnitude (0000 = 0, 0001 = 0.5, ..., 0111 = 6), bit 3 is the sign.
Two codes share a byte: element 2i in bits 0-3, element 2i+1 in bits 4-7 (torchao ``pack_uint4``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .e8m0 import pow2

MAX = 6.0
MAGNITUDES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)  # index = code & 0b0111
SIGN_BIT = 0b1000

_MAGNITUDES = torch.tensor(MAGNITUDES, dtype=torch.float64)
# Decode table for all 16 codes; 0b1000 is -0.0.
_DECODE = torch.cat((_MAGNITUDES, -_MAGNITUDES)).to(torch.float32)


def round_to_e2m1(x: torch.Tensor) -> torch.Tensor:
    """Round to the nearest E2M1 value, ties to even mantissa, saturating to ±6. Returns x's float dtype.

    Ties: 0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4 (numerics.md §3).
    """
    x64 = x.to(torch.float64)
    a = x64.abs().clamp(max=MAX)  # saturation: everything at or beyond 6 maps to 6
    # The grid spacing is 0.5 below 2 (the subnormal 0.5 included), 1 on [2, 4), 2 on [4, 6]. floor(log2 a) is
    # read exactly from frexp (a = m * 2**E, m in [0.5, 1)), and a / step is exact as step is a power of two.
    _, exp = torch.frexp(a)
    step = pow2((exp.to(torch.int64) - 1).clamp(0, 2) - 1)
    r = torch.round(a / step) * step  # torch.round rounds half to even; an even multiple = even mantissa
    out_dtype = x.dtype if x.is_floating_point() else torch.float32
    return torch.copysign(r, x64).to(out_dtype)


def encode(values: torch.Tensor) -> torch.Tensor:
    """E2M1 values (already on the grid) -> uint8 codes 0..15. Zero, including -0.0, encodes as 0."""
    v = values.to(torch.float64)
    mag = v.abs().contiguous()  # searchsorted wants contiguous input
    grid = _MAGNITUDES.to(mag.device)  # inputs may live on any device
    idx = torch.searchsorted(grid, mag).clamp(max=len(MAGNITUDES) - 1)
    if not bool((grid[idx] == mag).all()):
        raise ValueError("values are not on the E2M1 grid (round them with round_to_e2m1 first)")
    sign = (v < 0).to(torch.int64) * SIGN_BIT  # -0.0 is not < 0, so every zero gets the one code 0
    return (idx | sign).to(torch.uint8)


def decode(codes: torch.Tensor) -> torch.Tensor:
    """uint8 codes 0..15 -> float32 values."""
    _check_codes(codes)
    return _DECODE.to(codes.device)[codes.to(torch.int64)]


def pack_nibbles(codes: torch.Tensor) -> torch.Tensor:
    """Pack 4-bit codes two per byte along the last axis (element 2i low nibble, 2i+1 high nibble).

    An odd length is padded with a zero nibble, so the last axis becomes ``ceil(n / 2)`` bytes.
    """
    _check_codes(codes)
    if codes.shape[-1] % 2:
        codes = F.pad(codes, (0, 1))
    return codes[..., 0::2] | (codes[..., 1::2] << 4)


def unpack_nibbles(packed: torch.Tensor, length: int) -> torch.Tensor:
    """Inverse of :func:`pack_nibbles`: ``length`` codes along the last axis (drops a padding nibble)."""
    if packed.dtype != torch.uint8:
        raise TypeError("packed nibbles must be uint8")
    n_bytes = packed.shape[-1]
    if not 2 * n_bytes - 1 <= length <= 2 * n_bytes and not (length == 0 and n_bytes == 0):
        raise ValueError(f"length {length} does not fit {n_bytes} packed bytes")
    nibbles = torch.stack((packed & 0x0F, packed >> 4), dim=-1).flatten(-2)
    return nibbles[..., :length]


def _check_codes(codes: torch.Tensor) -> None:
    if codes.dtype != torch.uint8:
        raise TypeError("4-bit codes must be uint8")
    if codes.numel() and int(codes.max()) > 0x0F:
        raise ValueError("4-bit codes must lie in 0..15")
