"""The attention kernel family's variants as numbers: the MODE constexpr of kernels/_core.py and kernels/gluon_ws.py,
one per dispatch row with a kernel (kernels/dispatch.py `Variant.mode`). Pure Python, so that the dispatch table can
name a row's mode without importing triton."""

MODE_DENSE, MODE_MX, MODE_SAGE, MODE_INT4, MODE_NVFP4 = 0, 1, 2, 3, 4

__all__ = ["MODE_DENSE", "MODE_INT4", "MODE_MX", "MODE_NVFP4", "MODE_SAGE"]
