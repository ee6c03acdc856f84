"""`diagnose attention`: a recipe's output error against float64 softmax attention."""

from __future__ import annotations

import math
import time
from typing import Any

import torch

from ..attention import attend, exact_attention
from ..recipes import Recipe


def attention_report(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, recipe: Recipe, *, geometry=None, rope_segments=None
) -> dict[str, Any]:
    """Relative L2 error and cosine of the recipe's output vs exact attention, and the induced row
    sums |Σ_j w_ij − 1| of the weights the recipe actually applies to V (BHND inputs).

    `geometry` (a VideoGeometry) is the video token layout draft recipes need; their report adds
    the realised skip_fraction and precision_fractions next to the recipe's budget. `rope_segments`:
    the model's t/h/w RoPE split, for the "half" rotation (default: the recipe's, else Wan's)."""
    start = time.perf_counter()
    out, diag = attend(q, k, v, recipe, backend="reference", return_diagnostics=True, geometry=geometry,
                       rope_segments=rope_segments)
    seconds = time.perf_counter() - start
    ref = exact_attention(q, k, v)
    out64 = out.to(torch.float64)
    err = torch.linalg.vector_norm(out64 - ref) / torch.linalg.vector_norm(ref)
    cosine = torch.nn.functional.cosine_similarity(out64.flatten(), ref.flatten(), dim=0)
    route = getattr(diag, "route", None)  # DraftAttention2: what the router decided
    draft = route.summary() if route is not None else {}
    return {
        "recipe": recipe.name,
        "rel_l2": float(err),
        "cosine": float(cosine),
        "rowsum_dev_mean": diag.rowsum_dev_mean,
        "rowsum_dev_max": diag.rowsum_dev_max,
        "rowsum_mean": float(diag.row_sums.mean()),
        "operand_rel_l2": {name: _finite(e) for name, e in diag.quant_rel_l2.items()},
        **draft,
        "seconds": round(seconds, 3),
    }


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None
