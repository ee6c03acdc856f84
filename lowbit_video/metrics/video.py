"""Per-run metrics computed in-process from one run alone: tiny-shapes prompt adherence.

Why a per-run number: `lowbit-video adherence` reports accuracies over many runs; evaluate stores
one value per run so compare can average it like every other metric. The value is the mean of the
three booleans colour_ok, motion_ok and shape_ok of `tiny_shapes.adherence.score_clip` (so 1.0 =
everything detected as prompted, 0.0 = nothing); the detected attributes go to details.
"""

from __future__ import annotations

import numpy as np

ATTRIBUTES = ("color", "motion", "shape")


def adherence(frames: np.ndarray, prompt: str) -> tuple[float | dict, dict]:
    """(value, details) for one tiny-shapes clip; value is {"unavailable": reason} when not scorable."""
    from ..models.tiny_shapes.adherence import score_clip

    try:
        s = score_clip(frames, prompt)
    except ValueError as e:  # a prompt outside the tiny-shapes grammar, or unusable frames
        return {"unavailable": f"not scorable: {str(e).splitlines()[0]}"}, {}
    if s is None:
        return {"unavailable": "two-object prompt (adherence scores single-object prompts only)"}, {}
    details = {}
    for a in ATTRIBUTES:
        details[a] = {"detected": s.get(a), "ok": bool(s[f"{a}_ok"])}
    details["background"] = {"detected": s.get("background"), "ok": bool(s.get("background_ok"))}
    return float(np.mean([bool(s[f"{a}_ok"]) for a in ATTRIBUTES])), details


__all__ = ["ATTRIBUTES", "adherence"]
