"""One attention call for Nsight Compute to profile (results/scripts/s7_ncu.sh): the pre-pass once, then the
kernel once (ncu filters on the kernel's name), at B=1, H=16, N=16384, D=128, bf16.

    python3 results/scripts/ncu_target.py RECIPE [KEY=VALUE ...]   (kernel config; RECIPE sdpa-cudnn: torch SDPA)
"""
import sys

import torch


def main(recipe: str, cfg: dict):
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(1, 16, 16384, 128, device="cuda", generator=g, dtype=torch.bfloat16) for _ in range(3))
    if recipe == "probe-ws":  # the plain FP8 warp-specialized probe (results/scripts/gluon_probe.py)
        import os

        sys.path.insert(0, os.path.dirname(__file__))
        from gluon_probe import probe_ws_attention

        q8, k8 = (t.view(16, 16384, 128).to(torch.float8_e4m3fn) for t in (q, k))
        vt8 = v.view(16, 16384, 128).transpose(1, 2).contiguous().to(torch.float8_e4m3fn)
        probe_ws_attention(q8, k8, vt8, 128 ** -0.5 * 1.4426950408889634, STAGES=2)
    elif recipe == "sdpa-cudnn":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            torch.nn.functional.scaled_dot_product_attention(q, k, v)
    else:
        from lowbit_video.kernels.launch import split_call

        _, kernel, _ = split_call(q, k, v, recipe, config=cfg or None)
        kernel()
    torch.cuda.synchronize()


if __name__ == "__main__":
    conf = {}
    for a in sys.argv[2:]:
        key, val = a.split("=", 1)
        conf[key] = {"True": True, "False": False}.get(val, int(val) if val.isdigit() else val)
    main(sys.argv[1], conf)
