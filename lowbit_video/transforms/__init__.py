"""Transforms applied to attention operands before quantization: rotations and smoothing."""

from .hadamard import hadamard_matrix, rotate
from .smoothing import smooth_k, smooth_q

__all__ = ["hadamard_matrix", "rotate", "smooth_k", "smooth_q"]
