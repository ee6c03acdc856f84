"""Time the sage2-int8 pre-pass piece by piece at wan-480p / wan-720p (bf16 random Q, K, V; CUDA events, median
of 10): the K mean (Triton fp64 partial sums, and torch's mean(dtype=float64) it replaced), V's channel maxima
(`prepass.token_absmax`, and torch's abs().amax() it replaced), the INT8 Q and K passes, the E4M3 V pass (token
order and the Gluon kernel's), and the whole `prepass.sage_prepass`; then the whole pre-pass for smaller tiles
(`prepass.SAGE_ROWS`, `SAGE_V_TOKENS`: fewer registers per thread, more programs per SM), and the two token
reductions for other chunkings (`prepass.TOKEN_REDUCE`). Prints one JSON object."""
import json
import statistics

import torch

from lowbit_video.bench.kernels import cuda_times
from lowbit_video.kernels import prepass


def med(fn, reps=10):
    return round(statistics.median(cuda_times(fn, warmup=1, reps=reps)), 3)


res = {}
for name, n in (("wan-480p", 32760), ("wan-720p", 75600)):
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(1, 40, n, 128, device="cuda", generator=g, dtype=torch.bfloat16) for _ in range(3))
    B, H, N, D = 1, 40, n, 128
    pad = -(-n // prepass.TILE) * prepass.TILE
    kmean = prepass.token_mean64(k, "BHND")
    sv = (prepass.token_absmax(v, "BHND").to(torch.float64) / 448.0).to(torch.float32)
    qc = torch.empty((B * H, pad, D), device="cuda", dtype=torch.int8)
    qs = torch.empty((B * H, pad), device="cuda", dtype=torch.float32)
    vt = torch.empty((B * H, D, pad), device="cuda", dtype=torch.float8_e4m3fn)
    rows, warps = prepass.SAGE_ROWS
    tb, vwarps = prepass.SAGE_V_TOKENS
    st = prepass._bhnd_strides(q, "BHND")

    def rows_pass(x, sub):
        prepass._int8_rows_kernel[(pad // rows, B * H)](x, kmean, qc, qs, *st, H, N, pad, D=D, ROWS=rows,
                                                        SUB_MEAN=sub, num_warps=warps)

    def v_pass(order):
        prepass._v_fp8_kernel[(pad // tb, B * H)](v, sv, vt.view(torch.uint8), *st, H, N, pad, D=D, TB=tb, OPERAND_ORDER=order,
                                                  num_warps=vwarps)

    res[name] = dict(
        kmean_triton=med(lambda: prepass.token_mean64(k, "BHND")),
        kmean_torch_fp64=med(lambda: k.mean(dim=2, dtype=torch.float64)),
        kmean_max_abs_diff=float((prepass.token_mean64(k, "BHND") - k.mean(dim=2, dtype=torch.float64).reshape(B * H, D)).abs().max()),
        v_absmax_triton=med(lambda: prepass.token_absmax(v, "BHND")),
        v_absmax_torch=med(lambda: v.abs().amax(dim=2)),
        v_absmax_equal=bool(torch.equal(prepass.token_absmax(v, "BHND"), v.abs().amax(dim=2).float().reshape(B * H, D))),
        q_pass=med(lambda: rows_pass(q, False)),
        k_pass=med(lambda: rows_pass(k, True)),
        v_pass=med(lambda: v_pass(False)),
        v_pass_gluon_order=med(lambda: v_pass(True)),
        whole=med(lambda: prepass.sage_prepass(q, k, v, "BHND")),
        whole_gluon_order=med(lambda: prepass.sage_prepass(q, k, v, "BHND", operand_order=True)),
    )
    default = prepass.SAGE_ROWS, prepass.SAGE_V_TOKENS
    for tiles in (((32, 4), (32, 4)), ((16, 4), (32, 4)), ((32, 4), (16, 4)), ((8, 4), (16, 4)), ((32, 8), (64, 8))):
        prepass.SAGE_ROWS, prepass.SAGE_V_TOKENS = tiles
        res[name][f"whole_rows{tiles[0]}_v{tiles[1]}"] = med(lambda: prepass.sage_prepass(q, k, v, "BHND"))
    prepass.SAGE_ROWS, prepass.SAGE_V_TOKENS = default
    default = prepass.TOKEN_REDUCE
    for red in ((64, 16), (128, 1), (256, 1), (64, 2)):
        prepass.TOKEN_REDUCE = red
        res[name][f"kmean_reduce{red}"] = med(lambda: prepass.token_mean64(k, "BHND"))
        res[name][f"v_absmax_reduce{red}"] = med(lambda: prepass.token_absmax(v, "BHND"))
    prepass.TOKEN_REDUCE = default
print(json.dumps(res))
