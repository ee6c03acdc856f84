"""The state the attention hooks of one installation share: the recipe, its row of the kernel dispatch table,
the step tracker, the latent token grid of the running forward, captures, and the call counts."""

from __future__ import annotations

import functools
import warnings
from collections import Counter
from typing import Any

from ..kernels import dispatch
from ..recipes import Recipe
from .capture import CaptureWriter
from .steps import StepTracker


def recipe_changes_attention(recipe: Recipe) -> bool:
    """False for plain-softmax recipes (fp16: unquantized attention): they run the original kernel everywhere."""
    return not dispatch.variant_of(recipe.attention).plain_softmax


class InjectionContext:
    """State shared by the attention hooks of one installation (one `generate` call)."""

    def __init__(self, recipe: Recipe, tracker: StepTracker, *, capture: CaptureWriter | None = None) -> None:
        self.recipe = recipe
        self.tracker = tracker
        self.capture = capture
        self.dispatch = dispatch.variant_of(recipe.attention)  # the recipe's row of the kernel dispatch table
        self.changes = not self.dispatch.plain_softmax
        self.head_dim_multiple = int(recipe.attention.head_dim_multiple)  # what the recipe's Q/K blocks divide
        self.grid: tuple[int, int, int] | None = None  # latent token grid of the running forward
        self.forward_index = 0  # index of the running forward within its denoising step
        self.expert = "transformer"  # which transformer of the pipeline runs (Wan2.2 A14B: two)
        # Global prompt index of each conditional batch row; the sampler sets it per batch.
        self.batch_prompts: list[int] = [0]
        # (expert, block, step, attention_type, "quantized" | "high" | "fallback" | "engine") -> number of calls
        self.stats: Counter = Counter()
        self.fallback_reasons: Counter = Counter()  # why calls ran the original kernel -> number of calls
        # steps whose forwards the policy planned to quantize some call of (the transformer's pre-hook runs eagerly
        # also when the blocks are compiled, whose calls go uncounted: what tells a compiled run's quantized steps)
        self.planned_steps: set[int] = set()
        # key-padding plans of this forward's masks (masks.padding_plan), emptied by the transformer's pre-hook
        self.mask_plans: dict = {}
        self._warned: set[str] = set()
        self.injection: Any = None  # the RecipeHandle that installed the hooks (injection.py)

    def quantizes(self, *, block: int, num_blocks: int, attention_type: str) -> bool:
        if not self.changes:
            return False
        if self.dispatch.geometry and attention_type == "cross":
            return False  # a recipe laid out by the video geometry has no layout for text keys
        policy_type = "cross" if attention_type == "cross" else "self"
        return self.recipe.policy.quantizes(block=block, step=self.tracker.step, num_steps=self.tracker.num_steps,
                                            num_blocks=num_blocks, attention_type=policy_type)

    def note_plan(self, quantizes_any: bool) -> None:
        """The plan of the forward about to run (made by every hook): whether any of its calls is quantized."""
        if quantizes_any:
            self.planned_steps.add(self.tracker.step)

    def row_labels(self, batch: int) -> list[tuple[int, str]]:
        """(prompt index, "cond" | "uncond") of each batch row of the running forward.

        Wan/HunyuanVideo pipelines run the conditional pass first and the unconditional one as a
        second forward of the same step; tiny-shapes batches them as [cond rows; uncond rows]."""
        n = len(self.batch_prompts)
        if batch == n:
            branch = "cond" if self.forward_index == 0 else "uncond"
            return [(p, branch) for p in self.batch_prompts]
        if batch == 2 * n:
            return [(p, "cond") for p in self.batch_prompts] + [(p, "uncond") for p in self.batch_prompts]
        return [(i, "cond") for i in range(batch)]

    def warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(message, RuntimeWarning, stacklevel=3)

    def summary(self) -> dict[str, Any]:
        """JSON-ready counts of attention calls by precision, and by step, expert and attention type."""
        # "engine": quantized calls on a CUDA device that no kernel could take, so the float64 reference
        # engine ran them (a part of "quantized"; at video sizes such a call takes minutes, so it is counted)
        out: dict[str, Any] = {"quantized": 0, "high": 0, "fallback": 0, "engine": 0, "by_step": {}, "by_expert": {},
                               "by_type": {}}
        for (expert, block, step, kind, how), n in sorted(self.stats.items()):
            out[how] += n
            for key, table in ((str(step), out["by_step"]), (expert, out["by_expert"]), (kind, out["by_type"])):
                table.setdefault(key, {"quantized": 0, "high": 0, "fallback": 0, "engine": 0})[how] += n
        out["num_steps"] = self.tracker.num_steps
        out["fallback_reasons"] = dict(self.fallback_reasons)
        out["planned_quantized_steps"] = sorted(self.planned_steps)
        return out


@functools.cache
def dense_recipe() -> Recipe:
    """The unquantized recipe (torch SDPA in the inputs' dtype), parsed once (recipes are frozen)."""
    from ..recipes import load_recipe

    return load_recipe("fp16")


__all__ = ["InjectionContext", "dense_recipe", "recipe_changes_attention"]
