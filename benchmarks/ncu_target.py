"""One attention call for Nsight Compute to profile: the operand pre-pass once, then the kernel once, on random
bf16 Q, K, V at B=1, H=16, N=16384, D=128 (BHND; --tokens, --heads, --head-dim set them). `ncu -k regex:NAME
-c 1` then profiles the first launch of the kernel named NAME (attn_ws_fwd: the Gluon kernel; attn_fwd: the Triton
kernel; the cuDNN kernel for sdpa-cudnn).

Example (on the GPU machine, repository root; summarise with benchmarks/ncu_summary.py):
    ncu --set full --page raw --csv -k regex:attn_ws_fwd -c 1 \\
        python benchmarks/ncu_target.py mxattention > ncu_mx-gluon.csv
    ncu --set full --page raw --csv -k regex:attn_fwd -c 1 \\
        python benchmarks/ncu_target.py sage2-int8 --config GLUON=false > ncu_sage-triton.csv
    ncu --set full --page raw --csv -k regex:"cudnn|sm90|flash|fmha" -c 1 \\
        python benchmarks/ncu_target.py sdpa-cudnn > ncu_sdpa-cudnn.csv
"""

from __future__ import annotations

import argparse
import sys


def run_once(recipe: str, config: dict, tokens: int = 16384, heads: int = 16, head_dim: int = 128) -> None:
    """The pre-pass and one kernel launch of `recipe` (or one torch SDPA cuDNN call for "sdpa-cudnn")."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(1, heads, tokens, head_dim, device="cuda", generator=g, dtype=torch.bfloat16) for _ in range(3))
    if recipe == "sdpa-cudnn":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            torch.nn.functional.scaled_dot_product_attention(q, k, v)
    else:
        from lowbit_video.bench.kernels import parse_config
        from lowbit_video.kernels.launch import split_call
        from lowbit_video.recipes import load_recipe

        cfg = parse_config([f"{k2}={v2}" for k2, v2 in config.items()]) if config else None
        _, kernel, _ = split_call(q, k, v, load_recipe(recipe).attention, config=cfg)
        kernel()
    torch.cuda.synchronize()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("recipe", help="a recipe name (lowbit-video recipes list) or sdpa-cudnn")
    ap.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                    help="kernel setting, as for `lowbit-video bench kernels --config` (repeat)")
    ap.add_argument("--tokens", type=int, default=16384, help="sequence length N (default 16384)")
    ap.add_argument("--heads", type=int, default=16, help="heads H (default 16)")
    ap.add_argument("--head-dim", type=int, default=128, choices=(64, 128), help="head_dim D (default 128)")
    args = ap.parse_args(argv)
    config = {}
    for item in args.config:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            ap.error(f"--config wants KEY=VALUE, got {item!r}")
        config[key] = raw
    import torch

    if not torch.cuda.is_available():
        print("error: ncu_target.py needs a CUDA GPU (none is visible)", file=sys.stderr)
        return 2
    run_once(args.recipe, config, args.tokens, args.heads, args.head_dim)
    return 0


if __name__ == "__main__":
    sys.exit(main())
