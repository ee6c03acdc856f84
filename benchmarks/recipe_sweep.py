"""Every recipe on the shipped tiny-shapes model: prompt adherence and PSNR against the paired FP16 clip.

Each recipe generates the whole prompt x seed grid (same prompt, same seed, same initial noise as the FP16 run);
the clips are scored in memory (no video files are written), so it runs wherever torch and diffusers do. Quantized
recipes run every self-attention call through the exact float64 reference engine, so use a GPU for the full grid
(CPU: a few seconds per denoising step). The JSON is rewritten after every recipe, so an interrupted run keeps what
finished. This makes results/recipe-sweep-h200.json:

    python benchmarks/recipe_sweep.py --device cuda --seeds 0 1 2 3 --out results/recipe-sweep-h200.json
"""

from __future__ import annotations

import argparse
import json
import time

import os
import sys

import numpy as np

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    """PSNR in dB of two clips with values in [0, 1]."""
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(1.0 / mse)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0], help="seeds (default 0)")
    ap.add_argument("--prompts", default="prompts/shapes.txt", help="prompt file (default prompts/shapes.txt)")
    ap.add_argument("--recipes", nargs="*", default=None, help="recipes (default: every shipped recipe; fp16 always runs first)")
    ap.add_argument("--out", required=True, help="JSON file to write")
    args = ap.parse_args()
    if REPO not in sys.path:
        sys.path.insert(0, REPO)
    import torch

    from lowbit_video.models.registry import load_model
    from lowbit_video.models.tiny_shapes.adherence import score_many
    from lowbit_video.models.tiny_shapes.grammar import parse_prompt, read_prompts
    from lowbit_video.recipes import available_recipes, load_recipe

    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda but no CUDA GPU is visible", file=sys.stderr)
        sys.exit(2)

    prompts = read_prompts(args.prompts)
    grid = [(p, s) for p in prompts for s in args.seeds]
    model = load_model("tiny-shapes", device=args.device)
    names = args.recipes or sorted(available_recipes())
    names = ["fp16"] + [n for n in names if n != "fp16"]
    rows, ref = [], None
    for name in names:
        t0 = time.perf_counter()
        frames = model.generate([p for p, _ in grid], [s for _, s in grid], recipe=load_recipe(name))
        secs = time.perf_counter() - t0
        if ref is None:
            ref = frames
        adh = score_many(list(frames), [parse_prompt(p) for p, _ in grid])
        rows.append({"recipe": name, **adh, "psnr_vs_fp16": float(np.mean([psnr(f, r) for f, r in zip(frames, ref)])) if name != "fp16" else None,
                     "seconds": round(secs, 2)})
        print(json.dumps(rows[-1]), flush=True)
        # rewritten after every recipe (through a temporary file): an interrupted run keeps what finished
        with open(args.out + ".tmp", "w") as f:
            json.dump({"device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
                       "torch": torch.__version__, "prompts": args.prompts, "seeds": args.seeds,
                       "n_per_recipe": len(grid), "rows": rows}, f, indent=2)
        os.replace(args.out + ".tmp", args.out)


if __name__ == "__main__":
    main()
