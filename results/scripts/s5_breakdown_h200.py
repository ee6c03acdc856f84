"""Session 5, device call 1: where the time goes now (leave-one-stage-out with the current defaults, PIPE
included), the compiled kernels' registers / spills / shared memory, and the draft route's sort against
torch.topk. Usage: PYTHONPATH=$PWD python3 results/scripts/s5_breakdown_h200.py OUT.json"""

import json
import statistics
import sys

import torch
from triton.runtime.jit import JITFunction

from lowbit_video.bench.kernels import bench_kernels, cuda_times, to_markdown

out = sys.argv[1]
compiled = {}
_run = JITFunction.run


def _recording_run(self, *args, **kw):
    kernel = _run(self, *args, **kw)
    try:
        kernel._init_handles()
        consts = {k: v for k, v in kw.items() if isinstance(v, (bool, int, float, str)) and k not in ("grid", "warmup")}
        compiled[f"{self.__name__} {sorted(consts.items())}"] = dict(
            n_regs=kernel.n_regs, n_spills=kernel.n_spills, shared=kernel.metadata.shared)
    except Exception as exc:  # recording is best effort, never the measurement
        compiled.setdefault(self.__name__, repr(exc))
    return kernel


JITFunction.run = _recording_run

variants = {
    "mxattention[no-P-quant]": dict(recipe="mxattention", config={"PQ": False}),
    "mxattention[no-PIPE]": dict(recipe="mxattention", config={"PIPE": False, "NUM_STAGES": 3}),
    "mxattention[no-P-quant,no-PIPE]": dict(recipe="mxattention", config={"PQ": False, "PIPE": False, "NUM_STAGES": 3}),
    "mxattention[exact_p]": dict(recipe="mxattention", exact_p=True),
    "sage2-int8[no-promote]": dict(recipe="sage2-int8", promote=False),
}
log = lambda m: print(m, file=sys.stderr, flush=True)
info = bench_kernels(["wan-720p"], ["mxattention", "sage2-int8", "rotateattention-half", "fp16"], variants=variants, log=log)
info["compiled"] = compiled
print(to_markdown(info), flush=True)

# the draft route's ranking: full sort (current) vs topk of the retained share + 1, float64, wan-720p shape
med = lambda f: statistics.median(cuda_times(f, warmup=2, reps=7))
g = torch.Generator(device="cuda").manual_seed(0)
R = 1182
scores = torch.randn(1, 40, R * R, device="cuda", dtype=torch.float64, generator=g)
k = int(0.2 * R * R) + 1
sort_ms = med(lambda: torch.sort(scores, dim=-1, descending=True).values)
topk_ms = med(lambda: torch.topk(scores, k, dim=-1, largest=True, sorted=True).values)
top = torch.topk(scores, k, dim=-1, largest=True, sorted=True).values
srt = torch.sort(scores, dim=-1, descending=True).values
info["route_rank"] = dict(shape=[1, 40, R * R], k=k, sort_ms=sort_ms, topk_ms=topk_ms,
                          topk_equals_sort_prefix=bool(torch.equal(top, srt[..., :k])))
print(info["route_rank"], flush=True)
json.dump(info, open(out, "w"), indent=1)
