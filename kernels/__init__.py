"""Triton kernels for the Hopper fast path, installed as `lowbit_video.kernels` (never as a
top-level `kernels`: diffusers probes for an unrelated package of that name).

`attention(q, k, v, recipe, layout=..., scale=..., key_padding_mask=None)` runs one kernel family
(kernels/_core.py: one online-softmax core, variants dense / MXFP4 / sage2-int8 / INT4 / NVFP4; the
warp-specialized Gluon kernel kernels/gluon_ws.py for the 8-bit ones) after the operand pre-pass
(kernels/prepass.py); `draft.draft_attention` runs DraftAttention2. Which variant serves which recipe,
with which settings, is the table in kernels/dispatch.py. Importing this package needs neither triton
nor a GPU; `available()` says whether the kernels can run here.
"""

from __future__ import annotations

from .dispatch import supports


def available() -> bool:
    """True when triton imports and a CUDA device is present."""
    try:
        import torch
        import triton  # noqa: F401
    except Exception:
        return False
    return torch.cuda.is_available()


def attention(*args, **kwargs):
    from .launch import attention as _attention

    return _attention(*args, **kwargs)


__all__ = ["attention", "available", "supports"]
