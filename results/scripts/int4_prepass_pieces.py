"""Time rotateattention-half's pre-pass piece by piece at wan-480p / wan-720p (bf16 random Q, K, V; CUDA events,
median of 5): the whole `launch._prepare` (what `bench kernels` reports as pre-pass), `prepass.int4_prepass` (Q, K
and V codes), its V part alone (`_int4_v`), and the ΔS table (`prepass.delta_s_table`) with its tile choices
(GB q groups per MMA, warps); plus the table's size. Prints one JSON object."""
import json
import statistics

import torch
import triton

from lowbit_video.bench.kernels import cuda_times
from lowbit_video.kernels import launch, prepass
from lowbit_video.recipes import load_recipe


def med(fn, reps=5):
    return round(statistics.median(cuda_times(fn, warmup=1, reps=reps)), 3)


spec = load_recipe("rotateattention-half").attention
res = {}
for name, n in (("wan-480p", 32760), ("wan-720p", 75600)):
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(1, 40, n, 128, device="cuda", generator=g, dtype=torch.bfloat16) for _ in range(3))
    B, H, N, D = 1, 40, n, 128
    pad = triton.cdiv(n, prepass.TILE) * prepass.TILE
    ops = prepass.int4_prepass(q, k, v, "BHND", spec)
    qm, kf = ops[2], ops[5]
    st = launch.KernelStats()
    r = dict(
        prepare_whole=med(lambda: launch._prepare(q, k, v, spec, "int4", "BHND", False, st, B, H, D)),
        int4_prepass=med(lambda: prepass.int4_prepass(q, k, v, "BHND", spec)),
        v_part=med(lambda: prepass._int4_v(v, "BHND", bool(spec.rotate_v), B, H, N, D, pad)),
        delta_s_table=med(lambda: prepass.delta_s_table(qm, kf)),
        table_gb=round(qm.shape[0] * qm.shape[1] * pad * 4 / 1e9, 2),
    )
    out = torch.empty((qm.shape[0], qm.shape[1], pad), device="cuda", dtype=torch.float32)
    for gb, warps in ((32, 4), (64, 4), (128, 8), (32, 8)):
        def tab(gb=gb, warps=warps):
            prepass._delta_s_kernel[(pad // prepass.TILE, qm.shape[0])](qm, kf, out, qm.shape[1], pad, D=D,
                                                                        TK=prepass.TILE, GB=gb, num_warps=warps)
        try:
            r[f"delta_s_table_gb{gb}_w{warps}"] = med(tab)
            r[f"delta_s_table_gb{gb}_w{warps}_equal"] = bool(torch.equal(out, prepass.delta_s_table(qm, kf)))
        except Exception as exc:  # e.g. out of shared memory
            r[f"delta_s_table_gb{gb}_w{warps}"] = f"{type(exc).__name__}: {str(exc)[:120]}"
    res[name] = r
    del q, k, v, ops, qm, kf, out
    torch.cuda.empty_cache()
print(json.dumps(res))
