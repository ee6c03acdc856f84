"""lowbit-video: 4-bit and mixed-precision attention for video diffusion transformers."""

__version__ = "0.1.0"
