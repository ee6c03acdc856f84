"""Benchmarks (not timed tests): `kernels` measures the Triton attention kernels against torch SDPA
(cuDNN and flash backends, same run) and sageattention 1.0.6 when importable; `draft` DraftAttention2's
error–latency trade-off; `e2e` one DiT forward. `common` holds what they share (shapes, timing, default recipes)."""

from .common import SHAPES, BenchShape
from .kernels import bench_kernels

__all__ = ["SHAPES", "BenchShape", "bench_kernels"]
