"""Session 4, device call 6: does Triton 3.6's automatic warp specialization (tl.range(..., warp_specialize=True))
work on the H200 for this kernel family, and what does it give? Library kernel (WS config, kernel only) for
sage2-int8 and mxattention at wan-480p, and the plain FP8 probe kernel of pipe_tune_h200.py with WS and
TMA loads. Usage: PYTHONPATH=$PWD python3 results/scripts/ws_probe_h200.py OUT.json
(Measured before the launcher refused WS below 8 warps; re-run now, those rows fail with that one-line
error instead of the compiler's assertion.)"""

import json
import statistics
import sys

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from torch.nn.attention import SDPBackend, sdpa_kernel

from lowbit_video.bench.kernels import SHAPES, cuda_times
from lowbit_video.kernels.launch import split_call

med = lambda f, r=3: statistics.median(cuda_times(f, warmup=1, reps=r))
out = {"rows": [], "probe": []}
sh = SHAPES["wan-480p"]
g = torch.Generator(device="cuda").manual_seed(0)
q, k, v = [torch.randn(sh.batch, sh.heads, sh.tokens, sh.head_dim, device="cuda", dtype=torch.bfloat16, generator=g)
           for _ in range(3)]
flop = 4 * sh.batch * sh.heads * sh.tokens ** 2 * sh.head_dim
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    base = med(lambda: F.scaled_dot_product_attention(q, k, v))
out["rows"].append({"recipe": "sdpa-cudnn", "ms": base})
print("cudnn", base, flush=True)
for r, cfgs in {"sage2-int8": [{}, dict(WS=True), dict(WS=True, BLOCK_M=128, num_warps=8), dict(WS=True, NUM_STAGES=2)],
                "mxattention": [{}, dict(WS=True, PIPE=False), dict(WS=True, PIPE=False, NUM_STAGES=3)]}.items():
    ref = None
    for cfg in cfgs:
        try:
            pre, kern, st = split_call(q, k, v, r, config=cfg)
            ms = med(kern)
            o = kern()
            ref = o if ref is None else ref
            eq = bool(torch.equal(o, ref))
        except Exception as exc:
            print(r, cfg, "failed", repr(exc)[:400], file=sys.stderr, flush=True)
            ms, eq = None, None
        out["rows"].append({"recipe": r, "config": cfg, "kernel_ms": ms, "ratio_cudnn_kernel": base / ms if ms else None,
                            "equal_to_default": eq})
        print(r, cfg, ms, base / ms if ms else None, eq, flush=True)
        json.dump(out, open(sys.argv[1], "w"), indent=1)


@triton.jit
def _probe_ws(Q, kd, vd, O, N, scale, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, STAGES: tl.constexpr,
              WS: tl.constexpr):
    pid = tl.program_id(0)
    bh = tl.program_id(1)
    om = pid * BM + tl.arange(0, BM)
    od = tl.arange(0, D)
    qq = tl.load(Q + (bh * N + om)[:, None] * D + od[None, :])
    m_i = tl.full((BM,), float("-inf"), tl.float32)
    l_i = tl.zeros((BM,), tl.float32)
    acc = tl.zeros((BM, D), tl.float32)
    for j in tl.range(0, N // BN, num_stages=STAGES, warp_specialize=WS):
        kk = kd.load([bh * N + j * BN, 0])
        qk = tl.dot(qq, tl.trans(kk))
        m_new = tl.maximum(m_i, tl.max(qk, 1) * scale)
        p = tl.exp2(qk * scale - m_new[:, None] + 8.0)
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        vt = vd.load([bh * D, j * BN])
        acc = tl.dot(p.to(tl.float8e4nv), tl.trans(vt), acc * alpha[:, None])
        m_i = m_new
    tl.store(O + (bh * N + om)[:, None] * D + od[None, :], acc / l_i[:, None])


try:
    from triton.tools.tensor_descriptor import TensorDescriptor
    N, BH, D = 32768, sh.batch * sh.heads, sh.head_dim
    Q = (torch.randn(BH * N, D, device="cuda", generator=g) * 0.5).to(torch.float8_e4m3fn)
    K = (torch.randn(BH * N, D, device="cuda", generator=g) * 0.5).to(torch.float8_e4m3fn)
    VT = torch.randn(BH * D, N, device="cuda", generator=g).to(torch.float8_e4m3fn)
    O = torch.empty(BH * N, D, device="cuda", dtype=torch.float32)
    f2 = 4 * BH * N * N * D
    qb, kb, vb = [torch.randn(1, BH, N, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3)]
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        b2 = med(lambda: F.scaled_dot_product_attention(qb, kb, vb))
    out["probe"].append({"variant": "sdpa-cudnn N=32768", "ms": b2, "tflops": f2 / b2 / 1e9})
    for BM, BN, W in ((128, 128, 8), (128, 128, 4), (64, 128, 4)):
        kd = TensorDescriptor.from_tensor(K, block_shape=[BN, D])
        vd = TensorDescriptor.from_tensor(VT, block_shape=[D, BN])
        for ws in (False, True):
            for st in (2, 3):
                fn = lambda: _probe_ws[(N // BM, BH)](Q, kd, vd, O, N, 0.0883883 * 1.4427, D=D, BM=BM, BN=BN,
                                                       STAGES=st, WS=ws, num_warps=W)
                try:
                    ms = med(fn)
                except Exception as exc:
                    print("probe failed", BM, W, ws, st, repr(exc)[:400], file=sys.stderr, flush=True)
                    ms = None
                row = {"variant": f"fp8 tma BM{BM} BN{BN} w{W} ws={ws} stages={st}", "ms": ms,
                       "tflops": f2 / ms / 1e9 if ms else None, "ratio_cudnn": b2 / ms if ms else None}
                out["probe"].append(row)
                print(row, flush=True)
                json.dump(out, open(sys.argv[1], "w"), indent=1)
except Exception as exc:
    print("probe section failed", repr(exc)[:500], file=sys.stderr)
json.dump(out, open(sys.argv[1], "w"), indent=1)
