"""Transforms applied to attention operands before quantization: rotations and smoothing."""

from .folding import fold_v_rotation
from .hadamard import hadamard_matrix, rotate
from .rope import resolve_segments, rope_segments
from .rotations import half_rotation, interleaved_rotation, qk_rotation, qk_transforms
from .smoothing import smooth_k, smooth_q

__all__ = [
    "fold_v_rotation",
    "hadamard_matrix",
    "half_rotation",
    "interleaved_rotation",
    "qk_rotation",
    "qk_transforms",
    "resolve_segments",
    "rope_segments",
    "rotate",
    "smooth_k",
    "smooth_q",
]
