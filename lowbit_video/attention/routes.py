"""One attention call along the route the dispatch table chose for it (`kernels.dispatch.route`): the recipe's
kernel, torch SDPA (plain softmax), the float32 CPU path or the float64 engine. `attend` (api.py) and the recipe's
custom op (custom_op.py) both run their calls here, so that a path computes the same whichever of them takes it.

NaN/Inf: the CPU path, the engines and SDPA on CPU tensors check the inputs first (NonFiniteInputError); the CUDA
fast paths (the kernels, SDPA) do not (api.py's docstring says why).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..kernels import dispatch
from . import engines
from .engines import check_finite


def run_route(route: dispatch.Route, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, spec, *, scale=None,
              rope_segments=None, geometry=None, return_lse: bool = False, measure_errors: bool = False):
    """(out, diagnostics, lse) of BHND q, k, v along `route`: out in q's dtype; diagnostics the engine's (None on
    the other paths; with measure_errors the operand errors too); lse float32 (B, H, Nq) with return_lse, else
    None."""
    if route.path == "kernel":
        out = dispatch.run_kernel(spec, q, k, v, scale=scale, rope_segments=rope_segments, geometry=geometry,
                                  return_lse=return_lse)
        return (out[0], None, out[1]) if return_lse else (out, None, None)
    if route.path == "sdpa":
        if not q.is_cuda:
            check_finite(q, k, v)
        out = F.scaled_dot_product_attention(q, k, v, scale=scale)
        return out, None, dense_lse(q, k, scale=scale) if return_lse else None
    check_finite(q, k, v)
    if route.path == "cpu":
        out, lse = engines.CPU_PATHS[route.row.engine](q, k, v, spec, scale=scale, rope_segments=rope_segments,
                                                       geometry=geometry)
        return out.to(q.dtype), None, lse if return_lse else None
    out, diag = engines.ENGINES[route.row.engine](q, k, v, spec, scale=scale, rope_segments=rope_segments,
                                                  geometry=geometry, measure_errors=measure_errors)
    return out.to(q.dtype), diag, diag.lse.to(torch.float32) if return_lse else None


def dense_lse(q: torch.Tensor, k: torch.Tensor, *, scale: float | None = None,
              max_elements: int = 1 << 26) -> torch.Tensor:
    """logsumexp over keys of (q kᵀ)·scale in float32, BHND in, (B, H, Nq) out; query rows in chunks
    so at most `max_elements` scores exist at once (the full score matrix of a long video would not
    fit)."""
    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    kf = k.to(torch.float32).transpose(-1, -2)
    b, h, n, _ = q.shape
    rows = max(1, max_elements // max(1, b * h * k.shape[-2]))
    out = torch.empty((b, h, n), dtype=torch.float32, device=q.device)
    for start in range(0, n, rows):
        s = (q[..., start:start + rows, :].to(torch.float32) @ kf) * scale
        out[..., start:start + rows] = torch.logsumexp(s, dim=-1)
    return out


__all__ = ["dense_lse", "run_route"]
