"""Where rotateattention-half's INT4 pre-pass time goes at wan-720p (one H200): each stage of
kernels/prepass.int4_prepass and delta_s_table timed with CUDA events, plus the Q/K pass with the rotation's
MMA in tf32 (exact for 16-bit inputs times a ±1/0 matrix) instead of IEEE fp32.
Usage: python results/scripts/int4_prepass_profile.py OUT.json"""

import json
import statistics
import sys

import torch
import triton

from lowbit_video.bench.kernels import cuda_times
from lowbit_video.kernels import prepass as pp
from lowbit_video.recipes import load_recipe

B, H, N, D = 1, 40, 75600, 128
g = torch.Generator(device="cuda").manual_seed(0)
q, k, v = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
spec = load_recipe("rotateattention-half").attention
med = lambda f: statistics.median(cuda_times(f, warmup=1, reps=5))
res = {}
res["whole_int4_prepass"] = med(lambda: pp.int4_prepass(q, k, v, "BHND", spec))
out = pp.int4_prepass(q, k, v, "BHND", spec)
qc, qs, qm, kc, ks, kf, vt, sv = out
res["delta_s_table"] = med(lambda: pp.delta_s_table(qm, kf))
rows, warps = pp.INT4_ROWS
pad = triton.cdiv(N, rows) * rows
rot = pp.rotation_pm1(spec.rotation, D, spec.rope_segments, "cuda")
for label, rotate in (("q_pass_rot", True), ("q_pass_norot", False)):
    res[label] = med(lambda: pp._int4_rows_kernel[(pad // rows, B * H)](
        q, rot[0], qm, qc, qs, qm, kf, *pp._bhnd_strides(q, "BHND"), H, N, pad, rot[1], D=D, ROWS=rows, ROT=rotate,
        SUB_MEAN=False, GROUP_MEAN=True, WRITE_F=False, num_warps=warps))
def vpath():
    vb = v.to(torch.float32)
    with pp._ieee_fp32_matmul():
        vb = vb @ pp._sylvester_pm1(D, torch.float32, "cuda") * (1.0 / D ** 0.5)
    s = (vb.abs().amax(dim=2).to(torch.float64) / 7.0).to(torch.float32)
    c = torch.round(vb.to(torch.float64) / s.to(torch.float64)[:, :, None, :]).clamp_(-7, 7).to(torch.int8)
    return c
res["v_torch_path"] = med(vpath)
res["k_mean_fp64"] = med(lambda: k.mean(dim=2, dtype=torch.float64))
print(json.dumps(res, indent=1))
json.dump(res, open(sys.argv[1], "w"), indent=1)
