"""What the benchmarks share: the benchmark shapes, the video geometry behind each, CUDA-event timing (each call
from an idle GPU, calls back to back, or calls back to back under sustained load), and the
default recipe lists (every recipe the kernel dispatch table runs; `bench kernels` and `bench draft` default to
them, and so does the CLI)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class BenchShape:
    name: str
    batch: int
    heads: int
    tokens: int
    head_dim: int = 128
    note: str = ""


# The model zoo's self-attention shapes (batch 1; tokens = latent frames x height x width patches, plus the text
# tokens HunyuanVideo and CogVideoX join to their video tokens); head_dim 128 unless the model has 64
SHAPES = {
    "short": BenchShape("short", 1, 24, 8192, 128, "B=1 H=24 N=8192: a short, small clip"),
    "wan1.3b-480p": BenchShape("wan1.3b-480p", 1, 12, 32760, 128, "Wan2.1-1.3B 480p 81 frames (21x30x52)"),
    "wan2.2-5b-720p": BenchShape("wan2.2-5b-720p", 1, 24, 27280, 128, "Wan2.2-TI2V-5B 720p 121 frames (31x22x40)"),
    "hunyuan-540p": BenchShape("hunyuan-540p", 1, 24, 67576, 128,
                               "HunyuanVideo 540p 129 frames (33x34x60 = 67320 video + 256 text tokens)"),
    "wan14b-480p": BenchShape("wan14b-480p", 1, 40, 32760, 128, "Wan2.1-14B 480p 81 frames (21x30x52)"),
    "wan14b-720p": BenchShape("wan14b-720p", 1, 40, 75600, 128, "Wan2.1-14B 720p 81 frames (21x45x80)"),
    "hunyuan-720p": BenchShape("hunyuan-720p", 1, 24, 119056, 128,
                               "HunyuanVideo 720p 129 frames (33x45x80 = 118800 video + 256 text tokens)"),
    "short-d64": BenchShape("short-d64", 1, 24, 8192, 64, "B=1 H=24 N=8192 D=64: the short clip at head_dim 64"),
    "ltx-video": BenchShape("ltx-video", 1, 32, 6144, 64, "LTX-Video 768x512 121 frames (16x16x24), head_dim 64"),
    "cogvideox-5b": BenchShape("cogvideox-5b", 1, 48, 17776, 64,
                               "CogVideoX-5B 720x480 49 frames (13x30x45 = 17550 video + 226 text), head_dim 64"),
}
# the names earlier results and commands use
ALIASES = {"small": "short", "wan-480p": "wan14b-480p", "wan-720p": "wan14b-720p"}
# (frames, height, width) of the latent patch grid behind each shape (the draft recipes pack by it; HunyuanVideo's
# text tokens are outside any grid)
GEOMETRIES = {
    "short": (8, 32, 32),
    "wan1.3b-480p": (21, 30, 52),
    "wan2.2-5b-720p": (31, 22, 40),
    "wan14b-480p": (21, 30, 52),
    "wan14b-720p": (21, 45, 80),
    "short-d64": (8, 32, 32),
    "ltx-video": (16, 16, 24),
}


def shape_name(name: str) -> str:
    """A shape's name in SHAPES (an alias resolved)."""
    return ALIASES.get(name, name)


def default_recipes() -> tuple[str, ...]:
    """Every available recipe a kernel runs (`bench kernels`' default), in dispatch-table order."""
    from ..kernels.dispatch import kernel_recipes

    return kernel_recipes()


def draft_recipes() -> tuple[str, ...]:
    """Every available draft recipe a kernel runs (`bench draft`'s default)."""
    from ..kernels.dispatch import kernel_recipes

    return kernel_recipes("draft")


def cuda_times(fn, *, warmup: int, reps: int) -> list[float]:
    """Milliseconds of each of `reps` calls of `fn()` after `warmup` calls, CUDA events around each."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return times


def queued_ms(fn, *, reps: int, head_start_cycles: int = 0) -> float:
    """Milliseconds per call of `reps` calls of `fn()` issued back to back, CUDA events around the whole run: the
    GPU's rate when the host issues each call while the GPU still runs the last, as inside a model step (host work
    hidden wherever it is shorter than the GPU's). head_start_cycles: the GPU spins that long before the timed
    run, so that the host has queued calls ahead of it and no host gap counts (kernels alone). Call after warm-up
    calls."""
    import torch

    torch.cuda.synchronize()
    if head_start_cycles:
        torch.cuda._sleep(head_start_cycles)
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps):
        fn()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / reps


def sm_clock_mhz() -> int | None:
    """The GPU's SM clock in MHz over NVML's last sample period (about the last 1/6 s), or None where NVML
    (pynvml / nvidia-ml-py) is missing."""
    import torch

    try:
        return int(torch.cuda.clock_rate())
    except Exception:
        return None


def sustained_ms(fn, *, seconds: float, settle_s: float = 1.0) -> tuple[float, int | None]:
    """(milliseconds per call, the SM clock in MHz when the timed calls ended, or None where the driver's library is
    missing) of `fn()` under sustained load: calls issued back to back for about `seconds` / 2 untimed, so that the
    GPU settles at the clock its power limit holds, then as many timed with events around them; then `settle_s` of
    sleep, so that the next measurement starts from idle clocks again. Why: a run of a few calls runs at the boost
    clock, a model step does not. Under sustained attention an H100 at its 700 W limit ran cuDNN bf16 at about
    1550 MHz and sage2-int8's kernel at about 1830, against 1980 for short runs (results/kernels-h200.md, "The zoo on
    one H100"), so the ratios differ. Call after warm-up calls."""
    import math
    import time

    per = queued_ms(fn, reps=3)  # a first estimate of one call
    n = max(3, math.ceil(seconds / 2 * 1e3 / max(per, 1e-3)))
    for _ in range(n):  # untimed: the clock settles (the timed run's synchronisation first costs one call's host time)
        fn()
    ms = queued_ms(fn, reps=n)
    clock = sm_clock_mhz()
    time.sleep(settle_s)
    return ms, clock


def median_ms(fn, *, warmup: int, reps: int) -> float:
    """Median milliseconds of `fn()` over `reps` calls."""
    return statistics.median(cuda_times(fn, warmup=warmup, reps=reps))


__all__ = ["ALIASES", "BenchShape", "GEOMETRIES", "SHAPES", "shape_name", "cuda_times", "default_recipes", "draft_recipes", "median_ms",
           "queued_ms", "sm_clock_mhz", "sustained_ms"]
