"""Triton kernels for the Hopper fast path, installed as `lowbit_video.kernels` (never as a
top-level `kernels`: that name belongs to Hugging Face's `kernels` distribution, which transformers
depends on and diffusers probes for).

`attention(q, k, v, recipe, layout=..., scale=..., key_padding_mask=None)` runs one kernel family
(kernels/_core.py: one online-softmax core, variants dense / MXFP4 / sage2-int8 / INT4 / NVFP4; the
warp-specialized Gluon kernel kernels/gluon_ws.py for the 8-bit ones) after the operand pre-pass
(kernels/prepass.py); `draft.draft_attention` runs DraftAttention2. Which variant serves which recipe,
with which settings, is the table in kernels/dispatch.py. Importing this package needs neither triton
nor a GPU; `available()` says whether the kernels can run here.
"""

from __future__ import annotations

if __name__ == "kernels":
    # Imported by the top-level name, which happens only where a checkout's root is on sys.path
    # (`python -m ...` or `python -c` run there, PYTHONPATH naming it): the importer wanted Hugging Face's
    # `kernels`, not this folder. Hand it that distribution's package; without one, an empty module with no
    # file, as a namespace package that shadows nothing, which transformers' and diffusers' probes both
    # report as not installed (raising instead breaks transformers' probe, which imports the name).
    import importlib.machinery
    import importlib.util
    import os
    import sys
    import types

    _root = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    _spec = importlib.machinery.PathFinder.find_spec(
        "kernels", [p for p in sys.path if os.path.realpath(p or os.curdir) != _root])
    if _spec is not None and os.path.realpath(_spec.origin or "") != os.path.realpath(__file__):
        _real = importlib.util.module_from_spec(_spec)
        sys.modules["kernels"] = _real  # what the import statement returns once this body has run
        _spec.loader.exec_module(_real)
    else:
        _absent = types.ModuleType("kernels", "No `kernels` distribution is installed.")
        _absent.__file__ = None
        _absent.__path__ = []
        _absent.__spec__ = importlib.machinery.ModuleSpec("kernels", None, is_package=True)
        sys.modules["kernels"] = _absent


def __getattr__(name: str):
    # `supports` on first use, not at import: importing this package under the top-level name (above)
    # must not import its submodules under that name
    if name == "supports":
        from .dispatch import supports

        return supports
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
