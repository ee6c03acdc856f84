"""Triton kernels for the Hopper fast path, installed as `lowbit_video.kernels` (never as a
top-level `kernels`: diffusers probes for an unrelated package of that name)."""
