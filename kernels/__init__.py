"""Triton kernels for the Hopper fast path, installed as `lowbit_video.kernels` (never as a
top-level `kernels`: diffusers probes for an unrelated package of that name).

`attention(q, k, v, recipe, layout=..., scale=..., key_padding_mask=None)` runs one kernel family
(kernels/_core.py: one online-softmax core, variants dense / MXFP4 / sage2-int8 / INT4) after the operand
pre-pass (kernels/prepass.py). Importing this package needs `triton`; `available()` says whether it
can run here without raising.
"""

from __future__ import annotations


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


def supports(spec, device=None, head_dim=None):
    """(ok, reason): whether the kernel family runs the recipe's AttentionSpec on device/head_dim."""
    try:
        from .launch import supports as _supports
    except ImportError as exc:  # no triton
        return False, f"triton is not importable ({exc})"
    return _supports(spec, device, head_dim)


__all__ = ["attention", "available", "supports"]
