"""What the kernel test files share (tests/test_kernels_*.py): inputs, the reference check and its tolerance, the
CPU interpreter runner and the GPU skip.

Tolerance and why: the kernels fold MXFP4 exactly into E4M3 (or fall back to exact bf16), so what is left
between kernel and reference is arithmetic the reference does in float64 and the kernel in fp32 or less:
exp2 (approximate), the FP8/INT8 MMA's accumulation (< 32 bits inside one key tile on Hopper), summation
order, and the rare P̃ element whose fp32 value lands on the other side of an E2M1 rounding boundary.
All of it must stay far below the recipe's own quantization error, so the criterion is
    rel_l2(kernel, reference) <= 5 % of rel_l2(reference, exact float64 attention)
                                 + rel_l2(reference rounded to the output dtype, reference),
on random and on outlier-laden Q/K/V. The dense 16-bit kernel is held to bf16/fp16 rounding instead.

GPU tests skip on CPU (conftest: `gpu` marker; `needs_cuda` also without triton). The pre-passes and kernels
also run on CPU through Triton's interpreter (TRITON_INTERPRET=1) on tiny shapes, in a subprocess
(`run_interpreted`: the variable must be set before triton is imported); skipped where triton is not installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lowbit_video.attention import attend, exact_attention


REPO = Path(__file__).resolve().parent.parent
MX_RECIPES = ["mxattention", "mxattention-no-uos", "mxattention-no-pnq-uos", "mxfp4-ocp", "mxfp4-tfs"]
QUANT_RECIPES = MX_RECIPES + ["sage2-int8"]
INT4_RECIPES = ["rotateattention-half", "rotateattention-interleaved", "rotateattention-full", "int4-baseline"]
NVFP4_RECIPES = ["nvfp4", "sage-nvfp4"]
RATIO = 0.05  # kernel–reference difference allowed, as a share of the recipe's own error (module docstring)
# (B, H, Nq, Nk, D) and layout of the reference checks: ragged query and key tiles, Nq != Nk, both layouts, both
# head_dims; LONG adds more key tiles than query rows
SHAPES = [((2, 3, 300, 200, 64), "BHND"), ((1, 2, 257, 384, 128), "BNHD")]
LONG = ((1, 2, 130, 1000, 128), "BHND")

try:
    import triton  # noqa: F401

    HAS_TRITON = True
except Exception:  # pragma: no cover - depends on the environment
    HAS_TRITON = False


def _triton_version() -> tuple[int, int]:
    try:
        import triton

        return tuple(int(x) for x in triton.__version__.split(".")[:2])
    except Exception:
        return (0, 0)


interpreter_kernels = pytest.mark.skipif(
    HAS_TRITON and _triton_version() < (3, 8),
    reason="Triton < 3.8's CPU interpreter fails on range() over scalar tensors (TypeError); CI runs 3.8, the GPU tests cover 3.6")


def run_interpreted(script: str, timeout: int = 600):
    """Run `script` in a fresh Python with TRITON_INTERPRET=1 (the variable must be set before triton is
    imported) and return the JSON its last stdout line prints; a failing script fails the test with its stderr."""
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=REPO,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


needs_cuda = pytest.mark.skipif(not (torch.cuda.is_available() and HAS_TRITON),
                                reason="needs a CUDA device and triton (GPU figures live in results/kernels-h200.md)")


def rel_l2(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm())


def make_qkv(b, h, nq, nk, d, *, outliers: bool, seed: int = 0, dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, nq, d, generator=g)
    k = torch.randn(b, h, nk, d, generator=g)
    v = torch.randn(b, h, nk, d, generator=g)
    if outliers:
        # DiT-like: a few heavy channels in Q/K, a common K offset, outlier tokens in V
        ch = torch.randperm(d, generator=g)[:4]
        q[..., ch] *= 12.0
        k[..., ch] *= 12.0
        k += 3.0 * torch.randn(1, 1, 1, d, generator=g)
        tok = torch.randperm(nk, generator=g)[: max(1, nk // 50)]
        v[..., tok, :] *= 20.0
    return q.to(dtype), k.to(dtype), v.to(dtype)


def ring_merge(parts):
    """diffusers' TemplatedRingAttention merge of (out BHND, lse BHN) pairs over key chunks, in float64: returns
    the merged (out, lse)."""
    out, lse = parts[0][0].double(), parts[0][1].double().unsqueeze(-1)
    for o, l in parts[1:]:
        o, l = o.double(), l.double().unsqueeze(-1)
        out = out - torch.sigmoid(l - lse) * (out - o)
        lse = lse - torch.nn.functional.logsigmoid(lse - l)
    return out, lse.squeeze(-1)


def to_layout(t: torch.Tensor, layout: str) -> torch.Tensor:
    return t.transpose(1, 2).contiguous() if layout == "BNHD" else t


def from_layout(t: torch.Tensor, layout: str) -> torch.Tensor:
    return t.transpose(1, 2) if layout == "BNHD" else t


def check_against_reference(recipe, q, k, v, out, *, ratio=RATIO, nk_valid=None):
    """out (BHND, any device) vs the reference engine on CPU; returns (difference, recipe error)."""
    qc, kc, vc = (t.float().cpu() for t in (q, k, v))
    if nk_valid is not None:
        kc, vc = kc[:, :, :nk_valid], vc[:, :, :nk_valid]
    ref = attend(qc, kc, vc, recipe, backend="reference").double()
    exact = exact_attention(qc, kc, vc)
    diff, err = rel_l2(out.float().cpu(), ref), rel_l2(ref, exact)
    # plus the unavoidable rounding of the output to the caller's dtype (bf16: ~1e-3)
    floor = rel_l2(ref.to(out.dtype), ref)
    assert diff <= ratio * err + floor, (
        f"{recipe}: kernel-reference {diff:.3e} > {ratio} x recipe error {err:.3e} + output rounding {floor:.1e}")
    return diff, err


class StandInKernel:
    """A compiled Triton kernel's launch interface (`run`, `function`, `packed_metadata`), recording its launches:
    what kernels/_launcher.py and kernels/plans.py launch directly, for their CPU tests."""

    function = "function"
    packed_metadata = "metadata"

    def __init__(self):
        self.launches = []

    def run(self, *a):
        self.launches.append(a)


class StandInJit:
    """What kernels/_launcher.py and kernels/plans.py use of a JITFunction: `fn` (the Python function) and
    `fn[grid](...)`, which returns the compiled kernel (those calls recorded in `jit_calls`: the ones that pay
    Triton's binding and specialization)."""

    def __init__(self, fn):
        self.fn = fn
        self.kernel = StandInKernel()
        self.jit_calls = []

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.jit_calls.append((grid, args, kwargs))
            return self.kernel
        return launch
