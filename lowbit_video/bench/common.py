"""What the benchmarks share: the benchmark shapes, the video geometry behind each, CUDA-event timing, and the
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


SHAPES = {
    "small": BenchShape("small", 1, 24, 8192, 128, "B=1 H=24 N=8192"),
    "wan-480p": BenchShape("wan-480p", 1, 40, 32760, 128, "Wan2.1-14B 480p 81 frames (21x30x52 latent patches)"),
    "wan-720p": BenchShape("wan-720p", 1, 40, 75600, 128, "Wan2.1-14B 720p 81 frames (21x45x80)"),
    "hunyuan-720p": BenchShape("hunyuan-720p", 1, 24, 119056, 128,
                               "HunyuanVideo 720p 129 frames (33x45x80 = 118800 video + 256 text tokens)"),
}
# (frames, height, width) of the latent patch grid behind each shape (the draft recipes pack by it)
GEOMETRIES = {
    "small": (8, 32, 32),
    "wan-480p": (21, 30, 52),
    "wan-720p": (21, 45, 80),
}


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


def median_ms(fn, *, warmup: int, reps: int) -> float:
    """Median milliseconds of `fn()` over `reps` calls."""
    return statistics.median(cuda_times(fn, warmup=warmup, reps=reps))


__all__ = ["BenchShape", "GEOMETRIES", "SHAPES", "cuda_times", "default_recipes", "draft_recipes", "median_ms"]
