"""Issue 7, INT4 RotateAttention: `bench_kernels` rows for the INT4 variant plus ablations that leave one
stage out. Usage: python results/scripts/bench_int4_h200.py OUT.json SHAPE..."""

import dataclasses
import json
import sys

from lowbit_video.bench.kernels import bench_kernels, to_markdown
from lowbit_video.recipes import load_recipe

out, shapes = sys.argv[1], sys.argv[2:]
half = load_recipe("rotateattention-half").attention
variants = {
    # ΔS (Q smoothing) formed in the kernel per key tile (3xTF32 MMA on an fp32 K copy) instead of the table
    "rotateattention-half[DS-fused]": dict(recipe="rotateattention-half", config={"DS": "fused"}),
    # no Q smoothing at all (no ΔS term): what the ΔS costs
    "rotateattention-half[no-smooth-q]": dict(recipe=dataclasses.replace(half, smooth_q=False)),
}
info = bench_kernels(shapes, ["rotateattention-half"], variants=variants, log=lambda m: print(m, file=sys.stderr))
json.dump(info, open(out, "w"), indent=1, default=str)
try:
    print(to_markdown(info))
except Exception as exc:  # noqa: BLE001 - the JSON is what matters
    print(f"markdown failed: {exc}")
