"""Exact reference numerics for low-bit formats (numerics.md §1-7).

Element codecs: ``e2m1`` (FP4), ``e4m3`` (OFP8 E4M3FN), ``e8m0`` (MX scale bytes).
Block-scaled formats, each with ``quantize`` -> quantized tensor (``dequantize``, ``pack`` -> ``unpack``) and
``fake_quantize``: ``mxfp4`` (OCP / TFS / UOS scale rules), ``nvfp4`` (two-level E4M3 + FP32 scales),
``intq`` (INT8 / INT4, symmetric or affine), ``fp8`` (E4M3 with per-token/per-block or static scale).
All computation is vectorised and done in float64 where exactness needs it; dequantized values are returned in
the input's dtype and shape (an ordinary cast: a value rounded up past that dtype's largest finite value, e.g.
float16 65504 -> 65536, becomes inf; ``dequantize(dtype=...)`` picks another dtype).
"""

from . import e2m1, e4m3, e8m0, fp8, intq, mxfp4, nvfp4

__all__ = ["e2m1", "e4m3", "e8m0", "fp8", "intq", "mxfp4", "nvfp4"]
