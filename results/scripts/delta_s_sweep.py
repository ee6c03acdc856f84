"""Tile choices of the INT4 pre-pass's ΔS table kernel (`prepass._delta_s_kernel`) at wan-720p (rotateattention-half,
bf16 random Q, K, V): keys per program TK, q groups per MMA GB, warps, pipeline stages; median of 3 CUDA-event
times, and whether the table equals the default's bit for bit (every tiling sums each dot in the same order).
Prints one JSON object."""
import itertools
import json
import statistics

import torch
import triton

from lowbit_video.bench.kernels import cuda_times
from lowbit_video.kernels import prepass
from lowbit_video.recipes import load_recipe

spec = load_recipe("rotateattention-half").attention
n = 75600
g = torch.Generator(device="cuda").manual_seed(0)
q, k, v = (torch.randn(1, 40, n, 128, device="cuda", generator=g, dtype=torch.bfloat16) for _ in range(3))
ops = prepass.int4_prepass(q, k, v, "BHND", spec)
qm, kf = ops[2].contiguous(), ops[5].contiguous()
del q, k, v, ops
ref = prepass.delta_s_table(qm, kf)
bh, G, D = qm.shape
pad = kf.shape[1]
out = torch.empty_like(ref)
res = {"default_ms": round(statistics.median(cuda_times(lambda: prepass.delta_s_table(qm, kf), warmup=1, reps=3)), 3),
       "table_gb": round(ref.numel() * 4 / 1e9, 2), "rows": []}
for tk, gb, warps, stages in itertools.product((64, 128), (32, 64), (4, 8), (1, 2, 3, 4)):
    def run(tk=tk, gb=gb, warps=warps, stages=stages):
        prepass._delta_s_kernel[(pad // tk, bh)](qm, kf, out, G, pad, D=D, TK=tk, GB=gb, num_warps=warps,
                                                 num_stages=stages)
    row = dict(TK=tk, GB=gb, warps=warps, stages=stages)
    try:
        out.zero_()
        run()
        row["equal"] = bool(torch.equal(out, ref))
        row["ms"] = round(statistics.median(cuda_times(run, warmup=1, reps=3)), 3)
    except Exception as exc:  # e.g. out of shared memory
        row["error"] = f"{type(exc).__name__}: {str(exc)[:100]}"
    res["rows"].append(row)
print(json.dumps(res))
