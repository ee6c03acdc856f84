"""Every recipe on the shipped tiny-shapes model: prompt adherence and PSNR against the paired FP16
clip (same prompt, same seed, same initial noise). Library API only (no video files), so it runs
wherever torch and diffusers do:

    PYTHONPATH=. python3 results/scripts/recipe_sweep.py --device cuda --seeds 0 --out results/recipe-sweep-h200.json
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from lowbit_video.models.registry import load_model
from lowbit_video.models.tiny_shapes.adherence import score_many
from lowbit_video.models.tiny_shapes.grammar import parse_prompt, read_prompts
from lowbit_video.recipes import available_recipes, load_recipe


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(1.0 / mse)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--prompts", default="prompts/shapes.txt")
    ap.add_argument("--recipes", nargs="*", default=None)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

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
        with open(args.out, "w") as f:  # rewritten after every recipe: a time-out keeps what finished
            json.dump({"device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
                       "torch": torch.__version__, "prompts": args.prompts, "seeds": args.seeds,
                       "n_per_recipe": len(grid), "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
