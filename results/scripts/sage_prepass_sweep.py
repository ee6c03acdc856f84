"""Time the sage2-int8 pre-pass pieces (fp64 K mean, INT8 Q/K pass, E4M3 V pass) at wan-480p/720p for
tile/warp choices of kernels/prepass.py (SAGE_ROWS, SAGE_V_TOKENS). Prints one JSON line."""
import json, statistics
import torch
from lowbit_video.kernels import prepass


def t(fn, reps=10):
    fn(); torch.cuda.synchronize(); ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); b.synchronize(); ts.append(a.elapsed_time(b))
    return round(statistics.median(ts), 3)


res = {}
for name, n in (("wan-480p", 32760), ("wan-720p", 75600)):
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(1, 40, n, 128, device="cuda", generator=g, dtype=torch.bfloat16) for _ in range(3))
    r = {"kmean_fp64": t(lambda: k.mean(dim=2, dtype=torch.float64)), "kmean_fp32": t(lambda: k.mean(dim=2, dtype=torch.float32))}
    for rows in ((128, 8), (64, 4), (32, 4), (16, 2)):
        for vt in ((128, 8), (64, 4), (32, 4)):
            prepass.SAGE_ROWS, prepass.SAGE_V_TOKENS = rows, vt
            r[f"rows{rows}-v{vt}"] = t(lambda: prepass.sage_prepass(q, k, v, "BHND"))
    res[name] = r
print(json.dumps(res))
