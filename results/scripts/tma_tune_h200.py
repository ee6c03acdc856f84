"""Session 4, device call 9: sage2-int8 with K / Vᵀ tiles through TMA tensor descriptors (config TMA) vs
pointer loads, kernel only, at wan-480p and wan-720p, SDPA cuDNN bf16 in the same run.
Usage: PYTHONPATH=$PWD python3 results/scripts/tma_tune_h200.py OUT.json"""

import json
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from lowbit_video.bench.kernels import SHAPES, cuda_times
from lowbit_video.kernels.launch import split_call

med = lambda f: statistics.median(cuda_times(f, warmup=1, reps=3))
out = {"rows": []}
CONFIGS = [dict(TMA=False), dict(TMA=True), dict(TMA=True, NUM_STAGES=2), dict(TMA=True, NUM_STAGES=4),
           dict(TMA=True, PIPE=True, NUM_STAGES=2), dict(TMA=True, BLOCK_M=128, num_warps=8)]
for shape in ("wan-480p", "wan-720p"):
    sh = SHAPES[shape]
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = [torch.randn(sh.batch, sh.heads, sh.tokens, sh.head_dim, device="cuda", dtype=torch.bfloat16, generator=g)
               for _ in range(3)]
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        base = med(lambda: F.scaled_dot_product_attention(q, k, v))
    out["rows"].append({"shape": shape, "recipe": "sdpa-cudnn", "ms": base})
    print(shape, "cudnn", base, flush=True)
    ref = None
    for cfg in (CONFIGS if shape == "wan-480p" else CONFIGS[:3]):
        try:
            pre, kern, st = split_call(q, k, v, "sage2-int8", config=cfg)
            ms = med(kern)
            o = kern()
            ref = o if ref is None else ref
            eq = bool(torch.equal(o, ref))
        except Exception as exc:
            print(shape, cfg, "failed", repr(exc)[:300], file=sys.stderr, flush=True)
            ms, eq = None, None
        out["rows"].append({"shape": shape, "recipe": "sage2-int8", "config": cfg, "kernel_ms": ms,
                            "ratio_cudnn_kernel": base / ms if ms else None, "equal_to_first": eq})
        print(shape, cfg, ms, base / ms if ms else None, eq, flush=True)
        json.dump(out, open(sys.argv[1], "w"), indent=1)
