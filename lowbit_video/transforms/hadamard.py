"""Normalized Hadamard rotations for the head dimension.

A fixed orthogonal rotation R applied to both Q and K leaves QKᵀ unchanged in exact arithmetic
((QR)(KR)ᵀ = QRRᵀKᵀ = QKᵀ) while spreading per-channel outliers across channels, which shrinks the
block maxima that power-of-two block scales must cover.
"""

from __future__ import annotations

import functools

import torch


def largest_power_of_two_divisor(n: int) -> int:
    return n & -n


@functools.lru_cache(maxsize=32)
def _sylvester(n: int) -> torch.Tensor:
    """Unnormalized ±1 Sylvester Hadamard matrix of order n (a power of two), in float64."""
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h


def hadamard_matrix(n: int, *, dtype: torch.dtype = torch.float64, device=None) -> torch.Tensor:
    """The normalized (orthogonal) Hadamard matrix of order n.

    n a power of two: the Sylvester matrix / sqrt(n). Otherwise a block-diagonal matrix whose blocks
    are Hadamard matrices of the largest power of two dividing n (e.g. 96 -> three 32x32 blocks), so
    any head_dim gets an orthogonal rotation that mixes channels within aligned groups.
    """
    if n <= 0:
        raise ValueError(f"Hadamard order must be positive, got {n}")
    b = largest_power_of_two_divisor(n)
    block = _sylvester(b) / b**0.5
    h = torch.block_diag(*([block] * (n // b))) if b != n else block
    return h.to(dtype=dtype, device=device)


def rotate(x: torch.Tensor, matrix: torch.Tensor | None = None) -> torch.Tensor:
    """x @ H along the last dimension, computed in x's dtype (use float64 x for the exact oracle)."""
    if matrix is None:
        matrix = hadamard_matrix(x.shape[-1], dtype=x.dtype, device=x.device)
    return x @ matrix.to(dtype=x.dtype, device=x.device)
