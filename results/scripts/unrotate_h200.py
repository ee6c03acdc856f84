"""Time the Gluon INT4 path's V-Hadamard undo at wan-720p (B=1, H=40, N=75600, D=128): the float64 torch matmul
of sessions 9-11 against kernels/unrotate.py (3xTF32), CUDA events, median of 5; and their largest difference.
    python3 results/scripts/unrotate_h200.py > OUT.json"""
import json
import math
import statistics

import torch

from lowbit_video.bench.kernels import cuda_times
from lowbit_video.kernels import prepass
from lowbit_video.kernels.unrotate import unrotate


def med(fn):
    return statistics.median(cuda_times(fn, warmup=1, reps=5))


B, H, N, D = 1, 40, 75600, 128
x = torch.randn(B, H, N, D, device="cuda")
hv = prepass._sylvester_pm1(D, torch.float32, x.device)
out = torch.empty((B, N, H, D), device="cuda", dtype=torch.bfloat16)  # BNHD, Wan's layout
so = prepass._bhnd_strides(out, "BNHD")
view = torch.as_strided(out, x.shape, so)


def old():
    view.copy_(torch.matmul(x.double(), hv.double()) * (1.0 / math.sqrt(D)))


def new():
    unrotate(x, hv, out, so)


res = {"float64_torch_ms": med(old)}
ref = view.float().clone()
res["unrotate_3xtf32_ms"] = med(new)
res["max_abs_diff_bf16_outputs"] = float((view.float() - ref).abs().max())
print(json.dumps(res))
