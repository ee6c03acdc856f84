"""Benchmarks (not timed tests): `kernels` measures the Triton attention kernels against torch SDPA
(cuDNN and flash backends, same run) and sageattention 1.0.6 when importable."""

from .kernels import SHAPES, BenchShape, bench_kernels

__all__ = ["SHAPES", "BenchShape", "bench_kernels"]
