"""Worker for tests/test_models_context_parallel.py, launched with torchrun (2 gloo ranks on CPU).

argv: <checkpoint folder> <result json>. Every rank loads the tiny random Wan, generates one clip per
recipe in a single process (no context parallelism), then again with Ulysses and with ring context
parallelism (a fresh load each, as enable_parallelism is once per model); rank 0 writes the largest
absolute differences to the result file.
"""

import json
import sys
import warnings

import numpy as np
import torch
import torch.distributed as dist

warnings.simplefilter("ignore")


def main() -> None:
    folder, result = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo")
    from lowbit_video.models.context_parallel import enable_context_parallel
    from lowbit_video.models.registry import load_model

    settings = dict(steps=2, height=64, width=64, frames=13, guidance=1.0)
    recipes = ("fp16", "mxattention")

    def load():
        m = load_model("wan2.1-t2v-1.3b", path=folder, dtype=torch.float32)
        m.max_sequence_length = 16
        return m

    def run(m, recipe):
        return m.generate(["a red circle moving right"], [0], recipe=recipe, **settings)

    model = load()
    single = {r: run(model, r) for r in recipes}
    out = {"mx_vs_fp16_single": {"max_abs": float(np.abs(single["mxattention"] - single["fp16"]).max()),
                                 "mean_abs": float(np.abs(single["mxattention"] - single["fp16"]).mean())},
           "modes": {}}
    for mode in ("ulysses", "ring"):
        enable_context_parallel(model, mode, 2)
        stats = {}
        for r in recipes:
            v = run(model, r)
            d = np.abs(v - single[r])
            stats[r] = {"max_abs": float(d.max()), "mean_abs": float(d.mean()),
                        "quantized_calls": model.last_run["quantized"], "high_calls": model.last_run["high"]}
        out["modes"][mode] = stats
        model = load()
    if dist.get_rank() == 0:
        with open(result, "w") as f:
            json.dump(out, f, indent=2)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
