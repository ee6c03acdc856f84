"""Time the mxattention pre-pass piece by piece at the Wan 480p / 720p shapes (CUDA events, median of 5): Q and K
(Hadamard + MXFP4 rows, one kernel each), V (channel exponent maxima, torch amax, then the quantization), the
whole `_prepare`, and the bytes each piece must move at least. Prints one JSON object.

    python3 results/scripts/mx_prepass_pieces.py
"""
import json
import statistics
import sys

import torch

from lowbit_video.bench.kernels import cuda_times
from lowbit_video.kernels import prepass
from lowbit_video.kernels.launch import KernelStats, _prepare, _spec_and_variant


def main():
    spec, variant = _spec_and_variant("mxattention")
    out = {}
    for name, n in (("wan-480p", 32760), ("wan-720p", 75600)):
        q, k, v = (torch.randn(1, 40, n, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        t = {}

        def med(fn):
            return statistics.median(cuda_times(fn, warmup=1, reps=5))

        t["q_rows_ms"] = med(lambda: prepass.mx_rows(q, "BHND", spec.q, fp8=True, hadamard=True))
        t["k_rows_ms"] = med(lambda: prepass.mx_rows(k, "BHND", spec.k, fp8=True, hadamard=True))
        t["v_cols_ms"] = med(lambda: prepass.mx_cols(v, "BHND", spec.v, fp8=True))
        t["prepare_ms"] = med(lambda: _prepare(q, k, v, spec, variant, "BHND", False, KernelStats(), 1, 40, 128))
        elems = 40 * n * 128
        t["min_bytes_qk_each"] = elems * 3  # bf16 in, E4M3 out
        t["min_bytes_v"] = elems * 3
        t["qk_each_TBps"] = elems * 3 / t["q_rows_ms"] / 1e9
        t["v_TBps"] = elems * 3 / t["v_cols_ms"] / 1e9
        out[name] = t
        print(name, {k2: round(v2, 3) for k2, v2 in t.items()}, file=sys.stderr, flush=True)
    return out


if __name__ == "__main__":
    print(json.dumps(main()))
