"""Regional torch.compile of a video transformer: each of its repeated blocks compiled (`fullgraph=True`), the rest
(embeddings, the output head, the sampler) left eager.

Blocks of one class share their code, so dynamo compiles one graph for all of them (the recipe's hooks are made
for that: attention_hook.py), at a fraction of a whole-model compile's time. Which blocks:

* the classes a diffusers model names in `_repeated_blocks` (WanTransformer3DModel: WanTransformerBlock), as
  diffusers' `ModelMixin.compile_repeated_blocks` finds them;
* else the blocks of the model's block lists (families.py: the lists whose blocks a recipe's policy numbers);
* a model with neither is refused in one line naming its class.

`torch.compile` is lazy: the blocks are traced on their first call, with whatever hooks are installed then.
`generate --compile` compiles them once after loading and calls `forget_graphs` before each recipe's first call;
`train-tiny --compile` compiles them after its eager steps and `uncompile_blocks` them if the compile fails.
"""

from __future__ import annotations

from typing import Any

import torch

from ..errors import UserError
from . import families

BACKEND = "inductor"  # torch.compile's default


def _named_blocks(transformer: torch.nn.Module) -> list[torch.nn.Module]:
    """The modules of the classes named in the model's `_repeated_blocks` (diffusers' regional compilation)."""
    names = getattr(transformer, "_repeated_blocks", None) or ()
    return [m for m in transformer.modules() if type(m).__name__ in names]


def repeated_blocks(transformer: torch.nn.Module) -> list[torch.nn.Module]:
    """The blocks regional compilation compiles, in module order (UserError naming the class when there are none)."""
    blocks = _named_blocks(transformer) or [b for name in families.block_lists(transformer)
                                            for b in getattr(transformer, name)]
    if not blocks:
        raise UserError(f"cannot compile {type(transformer).__name__}: it names no repeated blocks "
                        "(_repeated_blocks) and has no block lists of attention modules")
    return blocks


def compile_blocks(transformer: torch.nn.Module, *, backend: str = BACKEND) -> list[torch.nn.Module]:
    """Compile the transformer's repeated blocks in place (fullgraph); returns them (for `uncompile_blocks`)."""
    blocks = repeated_blocks(transformer)
    for block in blocks:  # what diffusers' compile_repeated_blocks does for each block it finds, for either kind
        block.compile(fullgraph=True, backend=backend)
    return blocks


def uncompile_blocks(blocks: list[torch.nn.Module]) -> None:
    """Run `blocks` eagerly again (what `nn.Module.compile` set aside is its compiled call)."""
    for block in blocks:
        block._compiled_call_impl = None


def is_compiled(block: torch.nn.Module) -> bool:
    return getattr(block, "_compiled_call_impl", None) is not None


def forget_graphs() -> None:
    """Drop every graph dynamo has compiled in this process (`torch._dynamo.reset`), before a recipe's first call:
    the blocks are then traced afresh under that recipe's hooks, whatever ran before. Dynamo's guards would tell most
    recipes apart on their own, but every recipe adds graphs to the blocks' shared code, and past dynamo's recompile
    limit (8) a fullgraph block fails: a grid of nine recipes could not be compiled."""
    torch._dynamo.reset()


def is_compile_error(error: BaseException) -> bool:
    """Whether `error` is torch.compile's (a graph break under fullgraph, a backend that failed, the recompile limit
    reached), not the model's."""
    from torch._dynamo.exc import FailOnRecompileLimitHit, TorchDynamoException

    return isinstance(error, (TorchDynamoException, FailOnRecompileLimitHit))


def describe(blocks: list[torch.nn.Module], backend: str = BACKEND) -> dict[str, Any]:
    """What a run's meta records of the compilation."""
    return {"scope": "repeated blocks", "fullgraph": True, "backend": backend, "blocks": len(blocks),
            "classes": sorted({type(b).__name__ for b in blocks})}


__all__ = ["BACKEND", "compile_blocks", "describe", "forget_graphs", "is_compile_error", "is_compiled",
           "repeated_blocks", "uncompile_blocks"]
