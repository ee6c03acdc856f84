"""The exact engines and their CPU paths, by the dispatch table's `engine` name ("reference", "draft"), and the
NaN/Inf check every one of them runs first.

`attend` (api.py) calls them for diagnostics, log-sum-exp and forced backends; the custom op (custom_op.py) calls
them where no kernel takes a call. Each returns the engine's output (float64 for the engines, float32 for the CPU
paths) and what the engine measured: the engines their diagnostics, the CPU paths the log-sum-exp.
"""

from __future__ import annotations

import torch

from ..errors import NonFiniteInputError
from .reference import reference_attention


def check_finite(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """NonFiniteInputError (one line) when q, k or v holds a NaN or Inf. One pass over each tensor and, on CUDA, one
    host synchronisation: `attend` runs it only where it costs no sync of its own (api.py's docstring)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not bool(torch.isfinite(t).all()):
            raise NonFiniteInputError(f"attention input {name} contains NaN or Inf")


def _reference_engine(q, k, v, spec, *, scale, rope_segments, geometry, measure_errors):
    return reference_attention(q, k, v, spec, scale=scale, rope_segments=rope_segments, measure_errors=measure_errors)


def _draft_engine(q, k, v, spec, *, scale, rope_segments, geometry, measure_errors):
    from .draft import draft_attention

    return draft_attention(q, k, v, spec.draft, geometry, scale=scale)


# the exact engines, by the dispatch table's `engine` field: (output float64, diagnostics)
ENGINES = {"reference": _reference_engine, "draft": _draft_engine}


def _cpu_path(q, k, v, spec, *, scale, rope_segments, geometry):
    from .cpu_path import cpu_attention

    return cpu_attention(q, k, v, spec, scale=scale, rope_segments=rope_segments)


def _cpu_draft(q, k, v, spec, *, scale, rope_segments, geometry):
    from .draft_cpu import cpu_draft_attention

    return cpu_draft_attention(q, k, v, spec.draft, geometry, scale=scale)


# the CPU paths of the same engines: (output, LSE)
CPU_PATHS = {"reference": _cpu_path, "draft": _cpu_draft}

__all__ = ["CPU_PATHS", "ENGINES", "check_finite"]
