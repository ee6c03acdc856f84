"""Installing recipe processors into diffusers transformers, and taking them out again.

    with injected([pipe.transformer, pipe.transformer_2], recipe, schedulers=[pipe.scheduler]) as ctx:
        pipe(...)
    ctx.summary()   # how many attention calls ran quantized / 16-bit, per step

* Processors go in through the public `transformer.set_attn_processor({name: processor})`, one
  instance per attention module (the token refiner of HunyuanVideo keeps its own); the previous
  processors are put back on exit. Nothing process-wide is changed (no attention backend switch).
* The step comes from wrapping each scheduler's `set_timesteps` / `step` (steps.py).
* A forward pre-hook on each transformer (public `register_forward_pre_hook`) records the latent
  token grid (frames, height, width after patching) for draft recipes and captures, and counts the
  forwards of a step (cond / uncond) for captures.

Processors are not saved with a model: a freshly loaded model has diffusers' defaults, so
`VideoModel.generate` installs them on every call.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterable, Iterator, Sequence

import torch

from ..errors import UserError
from ..recipes import Recipe, load_recipe
from .capture import CaptureWriter
from .processors import HunyuanVideoRecipeProcessor, InjectionContext, WanRecipeProcessor
from .steps import StepTracker


def _family(transformer: torch.nn.Module) -> str:
    from diffusers import HunyuanVideoTransformer3DModel, WanTransformer3DModel

    if isinstance(transformer, WanTransformer3DModel):
        return "wan"
    if isinstance(transformer, HunyuanVideoTransformer3DModel):
        return "hunyuanvideo"
    raise UserError(f"no recipe processors for {type(transformer).__name__} "
                    "(supported: WanTransformer3DModel, HunyuanVideoTransformer3DModel)")


def attention_modules(transformer: torch.nn.Module) -> list[tuple[str, torch.nn.Module, int, str]]:
    """(module name, module, block index, attention type) of every attention the recipe may touch.

    Wan: `blocks.{i}.attn1` (self) and `.attn2` (cross), block i. HunyuanVideo: the joint
    attention `transformer_blocks.{i}.attn` (block i) and `single_transformer_blocks.{j}.attn`
    (block num_layers + j)."""
    fam = _family(transformer)
    out = []
    if fam == "wan":
        for i, block in enumerate(transformer.blocks):
            for name in ("attn1", "attn2"):
                mod = getattr(block, name)
                out.append((f"blocks.{i}.{name}", mod, i, "cross" if mod.is_cross_attention else "self"))
    else:
        n = len(transformer.transformer_blocks)
        for i, block in enumerate(transformer.transformer_blocks):
            out.append((f"transformer_blocks.{i}.attn", block.attn, i, "joint"))
        for j, block in enumerate(transformer.single_transformer_blocks):
            out.append((f"single_transformer_blocks.{j}.attn", block.attn, n + j, "joint"))
    return out


def num_blocks(transformer: torch.nn.Module) -> int:
    if _family(transformer) == "wan":
        return len(transformer.blocks)
    return len(transformer.transformer_blocks) + len(transformer.single_transformer_blocks)


def rope_segments(transformer: torch.nn.Module) -> tuple[int, ...]:
    """The t/h/w channel split of the model's 3D RoPE (per head)."""
    if _family(transformer) == "wan":
        return (transformer.rope.t_dim, transformer.rope.h_dim, transformer.rope.w_dim)
    return tuple(int(d) for d in transformer.config.rope_axes_dim)


def token_grid(transformer: torch.nn.Module, latent_shape: Sequence[int]) -> tuple[int, int, int]:
    """(frames, height, width) of the video tokens for a latent input of shape (B, C, F, H, W)."""
    _, _, f, h, w = latent_shape
    if _family(transformer) == "wan":
        pt, ph, pw = transformer.config.patch_size
    else:
        pt, ph, pw = transformer.config.patch_size_t, transformer.config.patch_size, transformer.config.patch_size
    return (f // pt, h // ph, w // pw)


class Injection:
    """Recipe processors installed in some transformers; `remove()` restores the previous ones."""

    def __init__(self, transformers: Iterable[tuple[str, torch.nn.Module]], ctx: InjectionContext) -> None:
        self.ctx = ctx
        self.transformers = [(name, t) for name, t in transformers if t is not None]
        self._saved: list[tuple[torch.nn.Module, dict]] = []
        self._hooks: list[Any] = []
        self.processors: dict[str, Any] = {}  # "expert/module name" -> processor

    def install(self) -> "Injection":
        for expert, transformer in self.transformers:
            fam = _family(transformer)
            cls = WanRecipeProcessor if fam == "wan" else HunyuanVideoRecipeProcessor
            nb, segs = num_blocks(transformer), rope_segments(transformer)
            saved = dict(transformer.attn_processors)
            parallel = getattr(transformer, "_parallel_config", None)
            if parallel is not None and getattr(parallel, "context_parallel_config", None) is None:
                parallel = None
            new = dict(saved)
            for name, _mod, block, kind in attention_modules(transformer):
                key = f"{name}.processor"
                proc = cls(self.ctx, block_index=block, attention_type=kind, num_blocks=nb, rope_segments=segs,
                           expert=expert, replaced=saved[key])
                if getattr(proc, "_parallel_config", None) is None and parallel is not None:
                    # context parallelism enabled on the model (models/context_parallel.py): the
                    # recipe's attention must take part in it, or each rank would attend to its shard only
                    proc._parallel_config = parallel
                new[key] = proc
                self.processors[f"{expert}/{name}"] = proc
            transformer.set_attn_processor(new)  # public API; one instance per module
            self._saved.append((transformer, saved))
            self._hooks.append(transformer.register_forward_pre_hook(self._pre_hook(expert, transformer),
                                                                     with_kwargs=True))
        return self

    def _pre_hook(self, expert: str, transformer: torch.nn.Module) -> Callable:
        ctx = self.ctx

        def hook(module, args, kwargs):
            hs = kwargs.get("hidden_states", args[0] if args else None)
            if hs is not None and hs.dim() == 5:
                ctx.grid = token_grid(transformer, hs.shape)
            ctx.expert = expert
            ctx.forward_index = ctx.tracker.on_forward()
            return None

        return hook

    def remove(self) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks.clear()
        for transformer, saved in self._saved:
            transformer.set_attn_processor(dict(saved))
        self._saved.clear()


@contextlib.contextmanager
def injected(transformers: Sequence[torch.nn.Module | tuple[str, torch.nn.Module] | None], recipe: Recipe | str, *,
             schedulers: Sequence[Any] = (), tracker: StepTracker | None = None,
             capture: CaptureWriter | None = None) -> Iterator[InjectionContext]:
    """Run the block with `recipe`'s processors in `transformers` and the step tracked on `schedulers`.

    `transformers` are modules or (name, module) pairs (names label captures, e.g. "transformer_2");
    None entries are skipped. Everything is restored on exit, also after an exception."""
    recipe = load_recipe(recipe)
    tracker = tracker or StepTracker()
    ctx = InjectionContext(recipe, tracker, capture=capture)
    named = []
    for i, t in enumerate(transformers):
        if t is None:
            continue
        named.append(t if isinstance(t, tuple) else ("transformer" if i == 0 else f"transformer_{i + 1}", t))
    inj = Injection(named, ctx)
    with contextlib.ExitStack() as stack:
        for sched in schedulers:
            stack.enter_context(tracker.wrap(sched))
        inj.install()
        stack.callback(inj.remove)
        ctx.injection = inj
        yield ctx


__all__ = ["Injection", "attention_modules", "injected", "num_blocks", "rope_segments", "token_grid"]
