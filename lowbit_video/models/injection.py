"""Applying a recipe to a diffusers pipeline or transformer, and taking it out again.

    with use_recipe(pipe, "sage2-int8") as handle:     # pipe.transformer (and .transformer_2)
        frames = pipe(prompt, ...).frames
    handle.calls   # attention calls by precision: {"quantized", "high", "fallback", "engine", "by_step", ...}

    handle = install_recipe(pipe, "sage2-int8")        # the same, as an explicit pair
    ...
    handle.remove()

`VideoModel.generate` (base.py) goes through `use_recipe` too, so a pipeline under
`use_recipe` computes what `lowbit-video generate` computes for the same recipe, prompt and noise.

* Target: a pipeline (any object with `transformer` / `transformer_2`, e.g. diffusers' WanPipeline or
  the shipped TinyShapesModel) or a bare WanTransformer3DModel / HunyuanVideoTransformer3DModel.
* Processors go in through the public `transformer.set_attn_processor({name: processor})`, one
  instance per attention module (the token refiner of HunyuanVideo keeps its own); the previous
  processor objects are put back on `remove()` / on leaving the block, also after an exception.
  Nothing process-wide is changed (no attention backend switch, no global registry): what is
  installed lives in the transformer's own processors, which is also how a second recipe on the
  same transformer is detected and refused (recipes do not nest).
* The step comes from wrapping the scheduler's `set_timesteps` / `step` (steps.py): the pipeline's
  `scheduler`, or `scheduler=` (a bare transformer has none; a recipe that keeps denoising steps in
  16 bit then needs it). The precision policy (recipe `[policy]`: blocks, steps, attention types)
  is applied per call; calls are counted as quantized / high (kept in 16 bit by the policy) /
  fallback (a mask the quantized path cannot express ran the original kernel).
* A forward pre-hook on each transformer (public `register_forward_pre_hook`) records the latent
  token grid (frames, height, width after patching) for draft recipes and captures, counts the
  forwards of a step (cond / uncond) for captures, and has each processor decide for the step
  which of its calls the policy quantizes (`make_plan`: what a compiled block depends on).

Processors are not saved with a model: a freshly loaded model has diffusers' defaults.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, Sequence

import torch

from ..errors import UserError
from ..recipes import Recipe, load_recipe
from .capture import CaptureWriter
from .processors import (HunyuanVideoRecipeProcessor, InjectionContext, WanRecipeProcessor, _RecipeProcessorMixin,
                         recipe_changes_attention)
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



PIPELINE_TRANSFORMERS = ("transformer", "transformer_2")  # the attributes a pipeline holds them in


def pipeline_transformers(target: Any) -> list[tuple[str, torch.nn.Module]]:
    """(name, transformer) pairs a recipe goes into: a bare supported transformer ("transformer"),
    else every non-None `transformer` / `transformer_2` of `target` (a pipeline). UserError otherwise."""
    named = [(n, getattr(target, n, None)) for n in PIPELINE_TRANSFORMERS]
    named = [(n, t) for n, t in named if t is not None]
    if not named:
        if isinstance(target, torch.nn.Module):
            _family(target)  # the one-line error naming the supported classes
            return [("transformer", target)]
        raise UserError(f"cannot apply a recipe to {type(target).__name__}: pass a diffusers pipeline (it holds "
                        "the model as .transformer) or a WanTransformer3DModel / HunyuanVideoTransformer3DModel")
    for _, t in named:
        _family(t)
    return named


def running_recipe(transformer: torch.nn.Module) -> str | None:
    """The name of the recipe whose processors are in `transformer`, or None."""
    for proc in transformer.attn_processors.values():
        if isinstance(proc, _RecipeProcessorMixin):
            return proc.ctx.recipe.name
    return None


class RecipeHandle:
    """A recipe installed in the transformers of a pipeline (`install_recipe`, `use_recipe`).

    `calls` counts the attention calls so far by precision; `remove()` restores the previous
    processors, scheduler methods and hooks (idempotent)."""

    def __init__(self, transformers: Sequence[tuple[str, torch.nn.Module]], recipe: Recipe, *,
                 schedulers: Sequence[Any] = (), tracker: StepTracker | None = None,
                 capture: CaptureWriter | None = None) -> None:
        self.recipe = recipe
        self.transformers = list(transformers)
        self.schedulers = list(schedulers)
        self.tracker = tracker or StepTracker()
        self.context = InjectionContext(recipe, self.tracker, capture=capture)
        self.context.injection = self
        self.processors: dict[str, Any] = {}  # "expert/module name" -> processor
        self._undo: contextlib.ExitStack | None = None

    @property
    def installed(self) -> bool:
        return self._undo is not None

    @property
    def calls(self) -> dict[str, Any]:
        """Attention calls so far: {"quantized", "high", "fallback", "engine", "by_step", "by_expert", "num_steps"}
        ("high": kept in 16 bit by the recipe's policy; "fallback": ran the original kernel because
        the quantized path could not express the call's mask; "engine": quantized calls on a CUDA device that
        no kernel takes, run by the float64 reference engine instead)."""
        return self.context.summary()

    def install(self) -> "RecipeHandle":
        if self.installed:
            raise UserError(f"recipe {self.recipe.name!r} is already installed by this handle")
        for expert, transformer in self.transformers:
            running = running_recipe(transformer)
            if running is not None:
                raise UserError(f"{expert} already runs recipe {running!r}; remove it first (recipes do not nest)")
        undo = contextlib.ExitStack()
        try:
            for sched in self.schedulers:
                undo.enter_context(self.tracker.wrap(sched))
            for expert, transformer in self.transformers:
                self._install_one(expert, transformer, undo)
        except BaseException:
            undo.close()
            raise
        self._undo = undo
        return self

    def _install_one(self, expert: str, transformer: torch.nn.Module, undo: contextlib.ExitStack) -> None:
        fam = _family(transformer)
        cls = WanRecipeProcessor if fam == "wan" else HunyuanVideoRecipeProcessor
        nb, segs = num_blocks(transformer), rope_segments(transformer)
        saved = dict(transformer.attn_processors)
        parallel = getattr(transformer, "_parallel_config", None)
        if parallel is not None and getattr(parallel, "context_parallel_config", None) is None:
            parallel = None
        new = dict(saved)
        mine = []  # this transformer's processors, in module order
        for name, _mod, block, kind in attention_modules(transformer):
            key = f"{name}.processor"
            proc = cls(self.context, block_index=block, attention_type=kind, num_blocks=nb, rope_segments=segs,
                       expert=expert, replaced=saved[key])
            if getattr(proc, "_parallel_config", None) is None and parallel is not None:
                # context parallelism enabled on the model (models/context_parallel.py): the
                # recipe's attention must take part in it, or each rank would attend to its shard only
                proc._parallel_config = parallel
            new[key] = proc
            mine.append(proc)
            self.processors[f"{expert}/{name}"] = proc
        # the same processor objects go back (a copy: set_attn_processor consumes the dict it is given)
        undo.callback(lambda: transformer.set_attn_processor(dict(saved)))
        transformer.set_attn_processor(new)  # public API; one instance per module
        undo.callback(transformer.register_forward_pre_hook(self._pre_hook(expert, transformer, mine),
                                                            with_kwargs=True).remove)

    def _pre_hook(self, expert: str, transformer: torch.nn.Module, processors: list) -> Callable:
        ctx = self.context

        def hook(module, args, kwargs):
            hs = kwargs.get("hidden_states", args[0] if args else None)
            if hs is not None and hs.dim() == 5:
                ctx.grid = token_grid(transformer, hs.shape)
            ctx.expert = expert
            ctx.forward_index = ctx.tracker.on_forward()
            for proc in processors:  # the policy's decisions for this forward's step
                proc.make_plan()
            return None

        return hook

    def remove(self) -> None:
        undo, self._undo = self._undo, None
        if undo is not None:
            undo.close()

    def __repr__(self) -> str:
        names = ", ".join(n for n, _ in self.transformers)
        return f"RecipeHandle(recipe={self.recipe.name!r}, transformers=[{names}], installed={self.installed})"


def install_recipe(target: Any, recipe: Recipe | str, *, scheduler: Any = None, tracker: StepTracker | None = None,
                   capture: CaptureWriter | None = None) -> RecipeHandle:
    """Install `recipe` (a name, a TOML path or a Recipe) in `target` (a diffusers pipeline, or a
    WanTransformer3DModel / HunyuanVideoTransformer3DModel); returns the installed handle, whose
    `remove()` restores the previous processors.

    `scheduler`: whose `set_timesteps` / `step` give the denoising step (default: `target.scheduler`).
    `tracker`: a StepTracker to count steps with (e.g. one with a progress callback, or one set to a
    fixed step for a single forward). `capture`: save post-RoPE Q/K/V of chosen blocks and steps."""
    recipe = load_recipe(recipe)
    named = pipeline_transformers(target)
    if scheduler is None:
        scheduler = getattr(target, "scheduler", None)
    steps = recipe.policy.high_precision_steps
    if scheduler is None and tracker is None and steps and recipe_changes_attention(recipe):
        raise UserError(f"recipe {recipe.name!r} keeps denoising steps {list(steps)} in 16 bit, so the step must be "
                        "known: pass scheduler= (the one your sampling loop calls set_timesteps/step on)")
    handle = RecipeHandle(named, recipe, schedulers=[scheduler] if scheduler is not None else [], tracker=tracker,
                          capture=capture)
    return handle.install()


@contextlib.contextmanager
def use_recipe(target: Any, recipe: Recipe | str, *, scheduler: Any = None, tracker: StepTracker | None = None,
               capture: CaptureWriter | None = None) -> Iterator[RecipeHandle]:
    """Run the block with `recipe` installed in `target` (see `install_recipe`); everything is
    restored on exit, also after an exception. Yields the RecipeHandle (`handle.calls`)."""
    handle = install_recipe(target, recipe, scheduler=scheduler, tracker=tracker, capture=capture)
    try:
        yield handle
    finally:
        handle.remove()


__all__ = ["PIPELINE_TRANSFORMERS", "RecipeHandle", "attention_modules", "install_recipe", "num_blocks",
           "pipeline_transformers", "rope_segments", "running_recipe", "token_grid", "use_recipe"]
