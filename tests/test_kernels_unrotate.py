"""The INT4 recipes' V un-rotation after the Gluon kernel (kernels/unrotate.py): a 3xTF32 pass, fp32-accurate
against float64, on the GPU and under Triton's CPU interpreter."""

from __future__ import annotations

import math
import textwrap

import pytest
import torch

from kernel_helpers import REPO, HAS_TRITON, needs_cuda, run_interpreted


def _unrotate_errors(device):
    """kernels/unrotate.py against float64 on `device`: the largest error relative to each row's largest entry,
    rows spanning 2^±20, head_dim 64 / 128, both layouts, ragged row tiles."""
    from lowbit_video.kernels import prepass
    from lowbit_video.kernels.unrotate import unrotate

    g = torch.Generator().manual_seed(3)
    res = {}
    for d, n, layout in ((64, 70, "BHND"), (128, 1100, "BNHD")):
        x = torch.randn(2, 3, n, d, generator=g) * torch.exp2(torch.randint(-20, 20, (2, 3, n, 1), generator=g).float())
        hv = prepass._sylvester_pm1(d, torch.float32, "cpu")
        want = x.double() @ hv.double() / math.sqrt(d)
        out = torch.empty((2, n, 3, d) if layout == "BNHD" else (2, 3, n, d), dtype=torch.float32, device=device)
        unrotate(x.to(device), hv.to(device), out, prepass._bhnd_strides(out, layout))
        got = (out.transpose(1, 2) if layout == "BNHD" else out).cpu()
        res[f"{d}/{layout}"] = float(((got.double() - want).abs() / want.abs().amax(-1, keepdim=True)).max())
    return res


_UNROTATE_SCRIPT = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, {tests!r})
    from test_kernels_unrotate import _unrotate_errors
    print(json.dumps(_unrotate_errors("cpu")))
    """
)


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed (it is not a test dependency)")
def test_unrotate_pass_is_fp32_accurate_under_triton_interpreter():
    """The Gluon INT4 path's V-Hadamard undo (x·H/sqrt(D) as two TF32 MMAs on x's high and low parts) against
    float64: within 2e-6 of each row's largest entry (2xTF32 keeps x to 2^-21; the interpreter's MMAs are fp32)."""
    res = run_interpreted(_UNROTATE_SCRIPT.format(tests=str(REPO / "tests")))
    for case, err in res.items():
        assert err < 2e-6, (case, err)


@pytest.mark.gpu
@needs_cuda
def test_unrotate_pass_is_fp32_accurate_on_gpu():
    """As above with the GPU's TF32 MMAs (inputs truncated to TF32's 11 significant bits)."""
    for case, err in _unrotate_errors("cuda").items():
        assert err < 2e-6, (case, err)
