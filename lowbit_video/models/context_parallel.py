"""Context parallelism: one video's tokens split over the torchrun processes, through diffusers.

    enable_context_parallel(model, "ulysses", 2)   # once, after load_model, under torchrun
    model.generate(...)                            # every rank, same prompts and seeds

* diffusers does the splitting: `ContextParallelConfig` + `transformer.enable_parallelism`; the
  model's `_cp_plan` (Wan: native) splits the hidden states, RoPE and timestep along the sequence
  before the first block and gathers at `proj_out`, so every rank ends with the whole output.
* The recipe's attention takes part through diffusers' own helper: the recipe's attention hooks
  (attention_hook.py) hand their query/key/value shard to `_templated_context_parallel_attention` with
  the recipe as its forward op. Ulysses (all-to-all over heads): the op sees every token of
  heads/K heads, so the recipe runs unchanged. Ring (key/value chunks): the op returns (out, lse)
  (on CUDA the recipe's kernel, whose epilogue writes the LSE; the engine only where no kernel
  takes the call) and diffusers merges chunks; the quantized result then differs from one process by quantization
  noise (a chunk's P̃ tiles are scaled by its own running max, not the global one).
* Order: parallelism is enabled on the model as loaded (diffusers' processors and their backend
  must support context parallelism: the default `native` does), before any recipe is installed;
  the calls a recipe takes over carry the model's parallel config (injection.py). Enabling
  it while a recipe is installed is refused with a clear error.
* A model without a `_cp_plan` in diffusers (HunyuanVideo: its joint attention concatenates text to the
  video tokens in every block) is refused: "context parallel is not supported for HunyuanVideo yet".
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch

from ..errors import UserError

MODES = ("ulysses", "ring")


@contextlib.contextmanager
def _cpu_device_count() -> Iterator[None]:
    """diffusers 0.42.1 `_resolve_parallel_config` computes `rank % torch.accelerator.device_count()`,
    which is 0 on a CPU-only machine (ZeroDivisionError); count the CPU as one device meanwhile."""
    if torch.accelerator.device_count() > 0:
        yield
        return
    orig = torch.accelerator.device_count
    torch.accelerator.device_count = lambda *a, **k: 1
    try:
        yield
    finally:
        torch.accelerator.device_count = orig


def _check(transformer: torch.nn.Module, mode: str, degree: int) -> None:
    from . import families
    from .injection import _check_family, recipe_hooks

    _check_family(transformer)  # UserError for anything without attention modules in block lists
    if getattr(type(transformer), "_cp_plan", None) is None:
        # diffusers splits the sequence by the model's _cp_plan; without one there is nothing to split by
        raise UserError(f"context parallel is not supported for {families.family_name(transformer)} yet")
    heads = int(transformer.config.num_attention_heads)
    if mode == "ulysses" and heads % degree:
        raise UserError(f"--context-parallel ulysses --cp-degree {degree}: the model's {heads} attention heads "
                        f"do not divide by {degree} (use a divisor of {heads}, or ring)")
    if recipe_hooks(transformer):
        raise RuntimeError("enable context parallelism before installing a recipe "
                           "(enable_context_parallel after load_model, outside model.generate)")


def enable_context_parallel(model: Any, mode: str, degree: int) -> None:
    """Enable diffusers context parallelism (`mode` "ulysses" | "ring", `degree` ranks) on every
    transformer of a loaded VideoModel. torch.distributed must be initialised (torchrun + gloo on
    CPU, nccl on CUDA) with WORLD_SIZE == degree. Idempotent for the same mode and degree."""
    import torch.distributed as dist
    from diffusers import ContextParallelConfig

    if mode not in MODES:
        raise UserError(f"--context-parallel must be ulysses or ring, got {mode!r}")
    if not (dist.is_available() and dist.is_initialized()):
        raise UserError("context parallel needs torch.distributed: launch with torchrun")
    if degree != dist.get_world_size():
        raise UserError(f"--cp-degree {degree} must equal WORLD_SIZE ({dist.get_world_size()})")
    transformers = [t for _, t in model._transformers() if t is not None]
    if getattr(model, "_context_parallel", None) is not None:
        if model._context_parallel != (mode, degree):
            raise UserError(f"context parallel is already enabled as {model._context_parallel}")
        return
    for t in transformers:
        _check(t, mode, degree)
    from torch.distributed.device_mesh import init_device_mesh

    device_type = "cpu" if model.device.type == "cpu" else model.device.type
    shape = (degree, 1) if mode == "ring" else (1, degree)
    mesh = init_device_mesh(device_type, mesh_shape=shape, mesh_dim_names=("ring", "ulysses"))
    for t in transformers:
        cfg = (ContextParallelConfig(ring_degree=degree, mesh=mesh) if mode == "ring"
               else ContextParallelConfig(ulysses_degree=degree, mesh=mesh))
        with _cpu_device_count():
            t.enable_parallelism(config=cfg)
    model._context_parallel = (mode, degree)


__all__ = ["MODES", "enable_context_parallel"]
