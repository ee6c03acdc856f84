"""Attention under a recipe: one entry point, `attend`, over the reference engine (any device) and,
where a kernel supports the recipe and device, the fast kernels."""

from .api import attend, check_finite
from ..draft.layout import VideoGeometry
from .reference import AttentionDiagnostics, exact_attention, reference_attention

__all__ = ["attend", "check_finite", "VideoGeometry", "AttentionDiagnostics", "exact_attention", "reference_attention"]
