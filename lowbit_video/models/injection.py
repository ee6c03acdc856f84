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
  the shipped TinyShapesModel) or a bare diffusers video transformer (any of them: what differs per family is a
  row of families.py's facts table, and a class without a row still gets every recipe that needs no video grid).
* One `RecipeAttentionHook` (a diffusers `ModelHook`, attention_hook.py) goes on each attention module of the
  transformer's block lists: through torch's forward pre- and post-hooks where the processor calls
  `dispatch_attention_fn` (one pair of functions for every module, so regional compilation makes one graph for
  all blocks), through diffusers' `HookRegistry` where it calls SDPA itself; the model's processors stay as they
  are. `remove()` / leaving the block takes
  the hooks off and leaves each module as it was (no hook registry or forward attribute left behind), also after
  an exception. The `dispatch_attention_fn` name of a processor's module is bound to a shared interposer while a
  recipe is installed and put back when the last one is removed (attention_hook.py); nothing else process-wide
  changes. A second recipe on the same transformer is refused (recipes do not nest).
* The step comes from wrapping the scheduler's `set_timesteps` / `step` (steps.py): the pipeline's
  `scheduler`, or `scheduler=` (a bare transformer has none; a recipe that keeps denoising steps in
  16 bit then needs it). The precision policy (recipe `[policy]`: blocks, steps, attention types)
  is applied per call; calls are counted as quantized / high (kept in 16 bit by the policy) /
  fallback (a call the quantized path cannot express ran the original kernel).
* A forward pre-hook on each transformer (public `register_forward_pre_hook`) records the latent
  token grid (frames, height, width after patching) for draft recipes and captures, counts the
  forwards of a step (cond / uncond) for captures, and has each hook decide for the step
  which of its calls the policy quantizes (`make_plan`: what a compiled block depends on).

Hooks are not saved with a model: a freshly loaded model has none.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, Sequence

import torch
from diffusers.hooks.hooks import HookRegistry

from ..errors import UserError
from ..recipes import Recipe, load_recipe
from . import families
from .attention_hook import (DISPATCH_NAME, HOOK_ATTRIBUTE, HOOK_NAME, DispatchInterposer, RecipeAttentionHook,
                             enter_module, leave_module)
from .capture import CaptureWriter
from .injection_context import InjectionContext, recipe_changes_attention
from .steps import StepTracker


def _check_family(transformer: Any) -> None:
    if not isinstance(transformer, torch.nn.Module) or not families.attention_sites(transformer):
        raise UserError(f"no recipe processors for {type(transformer).__name__}: it has no diffusers attention "
                        "modules in block lists (pass a diffusers video transformer or pipeline)")


def attention_modules(transformer: torch.nn.Module) -> list[tuple[str, torch.nn.Module, int, str]]:
    """(module name, module, block index, attention type) of every attention the recipe may touch: the attention
    modules of the block lists (families.py). The type is "cross" for a module declared cross-attention, "joint"
    where the family concatenates text to the video, else "self" (a call whose key count differs from its query
    count is cross-attention whatever the module)."""
    _check_family(transformer)
    joint = families.text_position(transformer) in ("before", "after")
    return [(s.name, s.module, s.block, "cross" if s.cross else ("joint" if joint else "self"))
            for s in families.attention_sites(transformer)]


def num_blocks(transformer: torch.nn.Module) -> int:
    return families.num_blocks(transformer)


def rope_segments(transformer: torch.nn.Module) -> tuple[int, ...] | None:
    """The t/h/w channel split of the model's 3D RoPE (per head); None where the facts table does not say."""
    return families.rope_segments(transformer)


def token_grid(transformer: torch.nn.Module, latent_shape: Sequence[int]) -> tuple[int, int, int] | None:
    """(frames, height, width) of the video tokens for a latent input of shape (B, C, F, H, W)."""
    return families.token_grid(transformer, latent_shape)


PIPELINE_TRANSFORMERS = ("transformer", "transformer_2")  # the attributes a pipeline holds them in


def pipeline_transformers(target: Any) -> list[tuple[str, torch.nn.Module]]:
    """(name, transformer) pairs a recipe goes into: a bare transformer ("transformer"),
    else every non-None `transformer` / `transformer_2` of `target` (a pipeline). UserError otherwise."""
    named = [(n, getattr(target, n, None)) for n in PIPELINE_TRANSFORMERS]
    named = [(n, t) for n, t in named if t is not None]
    if not named:
        if isinstance(target, torch.nn.Module):
            _check_family(target)  # the one-line error
            return [("transformer", target)]
        raise UserError(f"cannot apply a recipe to {type(target).__name__}: pass a diffusers pipeline (it holds "
                        "the model as .transformer) or a diffusers video transformer")
    for _, t in named:
        _check_family(t)
    return named


def recipe_hooks(transformer: torch.nn.Module) -> list[RecipeAttentionHook]:
    """The recipe hooks in `transformer`'s modules (empty when no recipe is installed)."""
    out = []
    for mod in transformer.modules():
        registry = getattr(mod, "_diffusers_hook", None)
        hook = registry.get_hook(HOOK_NAME) if registry is not None else None
        hook = vars(mod).get(HOOK_ATTRIBUTE, hook)
        if isinstance(hook, RecipeAttentionHook):
            out.append(hook)
    return out


def running_recipe(transformer: torch.nn.Module) -> str | None:
    """The name of the recipe whose hooks are in `transformer`, or None."""
    hooks = recipe_hooks(transformer)
    return hooks[0].ctx.recipe.name if hooks else None


class RecipeHandle:
    """A recipe installed in the transformers of a pipeline (`install_recipe`, `use_recipe`).

    `calls` counts the attention calls so far by precision; `remove()` takes the hooks out and restores the
    scheduler methods (idempotent). `hooks`: "expert/module name" -> RecipeAttentionHook."""

    def __init__(self, transformers: Sequence[tuple[str, torch.nn.Module]], recipe: Recipe, *,
                 schedulers: Sequence[Any] = (), tracker: StepTracker | None = None,
                 capture: CaptureWriter | None = None) -> None:
        self.recipe = recipe
        self.transformers = list(transformers)
        self.schedulers = list(schedulers)
        self.tracker = tracker or StepTracker()
        self.context = InjectionContext(recipe, self.tracker, capture=capture)
        self.context.injection = self
        self.hooks: dict[str, RecipeAttentionHook] = {}  # "expert/module name" -> hook
        self._undo: contextlib.ExitStack | None = None

    @property
    def installed(self) -> bool:
        return self._undo is not None

    @property
    def calls(self) -> dict[str, Any]:
        """Attention calls so far: {"quantized", "high", "fallback", "engine", "by_step", "by_expert", "by_type",
        "num_steps", "planned_quantized_steps"} ("planned_quantized_steps": the steps whose forwards the policy planned
        to quantize a call of, also known where compiled blocks leave the calls uncounted;
        "high": kept in 16 bit by the recipe's policy; "fallback": ran the original kernel because
        the quantized path could not express the call (its mask, causal, grouped-query heads, head_dim); "engine": quantized calls on a CUDA device that
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
        ctx = self.context
        why = families.grid_refusal(families.facts_for(transformer), text_needed=False)
        if ctx.dispatch.geometry and why:
            raise UserError(f"recipe {self.recipe.name!r} lays attention out by the video token grid, which needs "
                            f"the patch sizes and token layout of {type(transformer).__name__}: {why} "
                            "(lowbit_video/models/families.py)")
        nb, segs, text = num_blocks(transformer), rope_segments(transformer), families.text_position(transformer)
        parallel = getattr(transformer, "_parallel_config", None)
        if parallel is not None and getattr(parallel, "context_parallel_config", None) is None:
            parallel = None
        mine = []  # this transformer's hooks, in module order
        for site in families.attention_sites(transformer):
            proc = getattr(site.module, "processor", None)
            namespace = type(proc).__call__.__globals__ if proc is not None else {}
            interposer = None
            if DISPATCH_NAME in namespace:
                interposer = DispatchInterposer.attach(namespace)
                undo.callback(interposer.detach)
            hook = RecipeAttentionHook(ctx, name=site.name, block_index=site.block, declared_cross=site.cross,
                                       num_blocks=nb, rope_segments=segs, text=text, expert=expert,
                                       interposer=interposer, parallel_config=parallel)
            undo.enter_context(_hooked(site.module, hook))
            mine.append(hook)
            self.hooks[f"{expert}/{site.name}"] = hook
        undo.callback(transformer.register_forward_pre_hook(self._pre_hook(expert, transformer, mine),
                                                            with_kwargs=True).remove)
        # An exception inside an attention module skips its post-hook (an always-called one would give each module
        # a hook id that dynamo guards, a graph per block): the transformer's forward, ended by any means, frees
        # the interposers, so no later call outside a module's forward (a VAE's attention) reaches a hook.
        interposers = {id(h.interposer): h.interposer for h in mine if h.interposer is not None}.values()
        undo.callback(transformer.register_forward_hook(_free_interposers(list(interposers)),
                                                        always_call=True).remove)

    def _pre_hook(self, expert: str, transformer: torch.nn.Module, hooks: list) -> Callable:
        ctx = self.context

        def hook(module, args, kwargs):
            ctx.grid = families.call_grid(transformer, args, kwargs)
            ctx.mask_plans.clear()
            ctx.expert = expert
            ctx.forward_index = ctx.tracker.on_forward()
            for hook in hooks:  # the policy's decisions for this forward's step
                hook.make_plan()
            if not torch.compiler.is_compiling():  # a Python set dynamo would guard on
                ctx.note_plan(any(h.quant_cross if h.declared_cross else h.quant_self for h in hooks))
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
    diffusers video transformer); returns the installed handle, whose `remove()` takes the recipe out again.

    `scheduler`: whose `set_timesteps` / `step` give the denoising step (default: `target.scheduler`).
    `tracker`: a StepTracker to count steps with (e.g. one with a progress callback, or one set to a
    fixed step for a single forward). `capture`: save post-RoPE Q/K/V of chosen blocks and steps."""
    recipe = load_recipe(recipe)
    named = pipeline_transformers(target)
    if scheduler is None:
        scheduler = getattr(target, "scheduler", None)
    pol = recipe.policy
    if scheduler is None and tracker is None and recipe_changes_attention(recipe) and (
            pol.high_precision_steps or pol.high_precision_calls):
        what = (f"denoising steps {list(pol.high_precision_steps)}" if pol.high_precision_steps
                else f"{len(pol.high_precision_calls)} (block, step) calls")
        raise UserError(f"recipe {recipe.name!r} keeps {what} in 16 bit, so the step must be "
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


def _free_interposers(interposers: list[DispatchInterposer]) -> Callable:
    def hook(module, args, output):
        for ip in interposers:
            ip.active = None

    return hook


@contextlib.contextmanager
def _hooked(module: torch.nn.Module, hook: RecipeAttentionHook) -> Iterator[None]:
    """`hook` on `module` while the block runs: the dispatch route through torch's forward pre- and post-hooks (after
    an exception, the transformer's post-hook frees the interposer: `_free_interposers`), the SDPA route through diffusers' HookRegistry (its forward holds the scoped
    mode); afterwards the module holds exactly the attributes it held before."""
    if hook.interposer is not None:
        setattr(module, HOOK_ATTRIBUTE, hook)
        handles = [module.register_forward_pre_hook(enter_module, with_kwargs=True),
                   module.register_forward_hook(leave_module, with_kwargs=True)]
        try:
            yield
        finally:
            for h in handles:
                h.remove()
            vars(module).pop(HOOK_ATTRIBUTE, None)
        return
    had = {name: name in vars(module) for name in ("_diffusers_hook", "forward")}
    registry = HookRegistry.check_if_exists_or_initialize(module)
    registry.register_hook(hook, HOOK_NAME)
    try:
        yield
    finally:
        registry.remove_hook(HOOK_NAME, recurse=False)
        if not registry.hooks:
            for name, present in had.items():
                if not present:
                    vars(module).pop(name, None)


__all__ = ["PIPELINE_TRANSFORMERS", "RecipeHandle", "attention_modules", "install_recipe", "num_blocks",
           "pipeline_transformers", "recipe_hooks", "recipe_changes_attention", "rope_segments", "running_recipe",
           "token_grid", "use_recipe"]
