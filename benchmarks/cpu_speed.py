"""Clip time of the quantized recipes on the CPU path against the FP16 clip, and their agreement with the engine.

On the shipped tiny-shapes model, one prompt and seed, every recipe's clip is timed right after an FP16 clip
(fp16, recipe, fp16, recipe, ... repeated --repeats times), so both see the same machine load; the table reports
the medians and the median of the per-pair ratios. With --psnr, each recipe's clip is also generated once on the
exact float64 reference engine (attend backend "reference") and compared with the CPU path's clip (paired PSNR,
capped at the identical-frame value). Makes results/cpu-speed.md:

    python benchmarks/cpu_speed.py --threads 2 --steps 12 --repeats 3 --psnr
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
TIMED = ["mxattention", "sage2-int8", "rotateattention-half", "draftattention2"]
PROMPT = "a red circle moving right on a black background"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recipes", nargs="*", default=None,
                    help=f"recipes to time (default: {' '.join(TIMED)}; 'all' = every quantized recipe)")
    ap.add_argument("--steps", type=int, default=12, help="denoising steps (default 12, the model's default)")
    ap.add_argument("--repeats", type=int, default=3, help="timed fp16/recipe pairs per recipe (default 3; 0: no timing)")
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")
    ap.add_argument("--psnr", action="store_true",
                    help="also generate every quantized recipe once on the reference engine and report the PSNR "
                         "of the CPU path's clip against it (slow: the engine takes minutes per clip)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = ap.parse_args()
    if args.steps < 1 or args.repeats < 0 or args.threads < 1:
        print("error: --steps and --threads must be positive, --repeats not negative", file=sys.stderr)
        sys.exit(2)
    if REPO not in sys.path:
        sys.path.insert(0, REPO)
    import torch

    from lowbit_video.errors import RecipeError
    from lowbit_video.metrics.paired import psnr
    from lowbit_video.models import processors
    from lowbit_video.models.registry import load_model
    from lowbit_video.recipes import available_recipes, load_recipe

    torch.set_num_threads(args.threads)
    quantized = [n for n in sorted(available_recipes()) if load_recipe(n).attention.kind == "draft"
                 or load_recipe(n).attention.quantized]
    names = quantized if args.recipes == ["all"] else (args.recipes or TIMED)
    try:
        recipes = {n: load_recipe(n) for n in names}
    except RecipeError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    model = load_model("tiny-shapes")

    def clip(recipe):
        start = time.perf_counter()
        video = model.generate([PROMPT], [0], recipe=recipe, steps=args.steps)
        return time.perf_counter() - start, video

    fp16 = load_recipe("fp16")
    if args.repeats:
        clip(fp16)  # warm-up: first-call allocations and library loading
    rows = []
    for name, recipe in recipes.items() if args.repeats else ():
        pairs = []
        for i in range(args.repeats):
            t16, _ = clip(fp16)
            t, video = clip(recipe)
            pairs.append((t16, t))
            print(f"{name} {i + 1}/{args.repeats}: fp16 {t16:.2f} s, {name} {t:.2f} s", file=sys.stderr, flush=True)
        row = {"recipe": name, "fp16_s": statistics.median(p[0] for p in pairs),
               "recipe_s": statistics.median(p[1] for p in pairs),
               "ratio": statistics.median(p[1] / p[0] for p in pairs), "pairs": pairs}
        rows.append(row)
    psnr_rows = []
    if args.psnr:
        engine_attend = functools.partial(processors.attend, backend="reference")
        for name in quantized if args.recipes == ["all"] or args.recipes is None else names:
            _, fast_video = clip(load_recipe(name))
            processors.attend, saved = engine_attend, processors.attend
            try:
                t, engine_video = clip(load_recipe(name))
            finally:
                processors.attend = saved
            value = psnr(fast_video[0], engine_video[0])
            psnr_rows.append({"recipe": name, "psnr_db": value, "engine_s": t,
                              "identical": bool((fast_video == engine_video).all())})
            print(f"{name}: PSNR vs engine {value:.2f} dB (engine clip {t:.1f} s)", file=sys.stderr, flush=True)
    result = {"steps": args.steps, "repeats": args.repeats, "threads": args.threads, "prompt": PROMPT,
              "torch": torch.__version__, "timing": rows, "psnr_vs_engine": psnr_rows}
    if args.json:
        print(json.dumps(result, indent=1))
        return
    print("| recipe | fp16 clip (s) | recipe clip (s) | ratio |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['recipe']} | {r['fp16_s']:.2f} | {r['recipe_s']:.2f} | {r['ratio']:.2f}× |")
    if psnr_rows:
        print("\n| recipe | PSNR vs engine (dB) | engine clip (s) |\n|---|---|---|")
        for r in psnr_rows:
            print(f"| {r['recipe']} | {r['psnr_db']:.2f} | {r['engine_s']:.1f} |")


if __name__ == "__main__":
    main()
