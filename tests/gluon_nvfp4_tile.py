"""A one-tile Gluon kernel around kernels/draft_ws.py `_nvfp4_p`, the draft kernel's in-register NVFP4
quantization of P̃, so a GPU test can hold it to formats.nvfp4 element by element. Imported by that test only
(it needs Triton's Gluon and a Hopper GPU)."""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from lowbit_video.kernels.draft_ws import _nvfp4_p
from lowbit_video.kernels.gluon_ws import acc_layout


@gluon.jit
def nvfp4_p_tiles(Y, P):
    """Program t: the 64 × 64 fp32 tile t of Y (row-major, ≤ 1) quantized into P (fp16), in the register layout
    the draft kernel's scores have (a 64 × 64 wgmma accumulator)."""
    layout: gl.constexpr = acc_layout(64, 16)
    rows = gl.arange(0, 64, gl.SliceLayout(1, layout))
    cols = gl.arange(0, 64, gl.SliceLayout(0, layout))
    off = gl.program_id(0) * 4096 + rows[:, None] * 64 + cols[None, :]
    gl.store(P + off, _nvfp4_p(gl.load(Y + off)))
