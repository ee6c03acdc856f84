"""GPU run behind results/kernels-h200.{md,json}: `lowbit-video bench kernels` plus ablation variants
that leave one stage out (where the time goes). Usage: python results/scripts/bench_kernels_h200.py OUT.json SHAPE..."""

import json
import sys

from lowbit_video.bench.kernels import DEFAULT_RECIPES, bench_kernels, to_markdown

out, shapes = sys.argv[1], sys.argv[2:]
variants = {
    "mxattention[no-P-quant]": dict(recipe="mxattention", config={"PQ": False}),
    "mxattention[no-promote]": dict(recipe="mxattention", promote=False),
    "mxattention[exact_p]": dict(recipe="mxattention", exact_p=True),
    "sage2-int8[no-promote]": dict(recipe="sage2-int8", promote=False),
}
info = bench_kernels(shapes, DEFAULT_RECIPES, variants=variants)
json.dump(info, open(out, "w"), indent=1)
print(to_markdown(info))
