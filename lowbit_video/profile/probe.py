"""The recipes' error at every attention call of a 16-bit generation, measured where the call happens.

`CallProbe` is handed to `VideoModel.generate` as its capture sink (models/capture.py's `wants` / `save`): the
attention hook gives it the exact post-RoPE Q, K, V of every self- or joint-attention call, one batch row at a time
(padded keys already dropped), on the model's device. For each recipe it computes

    out    = attend(q, k, v, recipe, layout="BNHD", ...)   # the recipe's kernel / CPU path, as the hook runs it
    ref    = attend(q, k, v, fp16, layout="BNHD")          # the 16-bit call (torch SDPA in the model's dtype)

and keeps four float32 sums on the device: |out - ref|², |ref|², <out, ref>, |out|². Nothing is read back to the
host and nothing is written to disk per call: `rows()` stacks every call's sums and reads them back once, after
the generation. rel-L2 = sqrt(|out - ref|² / |ref|²), cosine = <out, ref> / (|out| |ref|).

Cross-attention calls are not handed to capture sinks (the hook captures self and joint attention), so they are
not profiled; the shipped recipes quantize self / joint attention only (`policy.apply_to`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from ..attention import VideoGeometry, attend
from ..kernels import dispatch
from ..models.injection_context import dense_recipe
from ..recipes import Recipe


@dataclass(frozen=True)
class CallKey:
    """Which attention call a row of sums belongs to."""

    block: int
    step: int
    attention_type: str  # "self" | "joint"
    prompt: int  # index of the prompt in the generate call
    branch: str  # "cond" | "uncond"
    seed: int | None


class CallProbe:
    """Capture sink that measures `recipes` against the 16-bit call (module docstring)."""

    def __init__(self, recipes: Sequence[Recipe], *, text_position: str | None = None) -> None:
        self.recipes = list(recipes)
        self.text_position = text_position  # "before" | "after" | None: where joint text sits (families.py)
        self.prompts: list[str] = []  # set by VideoModel.generate
        self.seeds: list[int] = []
        self.keys: list[CallKey] = []
        self.sums: list[torch.Tensor] = []  # per call: (len(recipes), 4) float32 on the model's device
        self.skipped: dict[str, int] = {}  # recipe name -> calls the recipe cannot take (head_dim)

    # -- the capture-sink interface (attention_hook.py calls these)

    def wants(self, **_: Any) -> bool:
        return True  # every block, step, prompt and guidance branch

    def save(self, *, block: int, step: int, num_steps: int, prompt: int, branch: str, q: torch.Tensor,
             k: torch.Tensor, v: torch.Tensor, info: dict[str, Any]) -> None:
        geometry = self._geometry(info)
        ref = attend(q, k, v, dense_recipe(), layout="BNHD")
        rows = []
        for recipe in self.recipes:
            if q.shape[-1] % recipe.attention.head_dim_multiple:
                self.skipped[recipe.name] = self.skipped.get(recipe.name, 0) + 1
                rows.append(torch.full((4,), float("nan"), device=q.device))
                continue
            out = self._recipe_output(q, k, v, recipe, info, geometry)
            rows.append(call_sums(out, ref))
        seed = self.seeds[prompt] if prompt < len(self.seeds) else None
        self.keys.append(CallKey(block, step, str(info.get("attention_type", "self")), prompt, branch, seed))
        self.sums.append(torch.stack(rows))

    # -- reading back

    def rows(self) -> list[dict[str, Any]]:
        """One dict per (call, recipe): key fields, recipe, rel_l2, cosine (one host read for all)."""
        if not self.sums:
            return []
        sums = torch.stack(self.sums).to("cpu", torch.float64)  # (calls, recipes, 4): the one host sync
        out = []
        for key, per_recipe in zip(self.keys, sums):
            for recipe, (d2, r2, dot, o2) in zip(self.recipes, per_recipe.tolist()):
                if d2 != d2:  # NaN: the recipe cannot take this call
                    continue
                out.append({"block": key.block, "step": key.step, "attention_type": key.attention_type,
                            "prompt": key.prompt, "branch": key.branch, "seed": key.seed, "recipe": recipe.name,
                            "rel_l2": rel_l2(d2, r2), "cosine": cosine(dot, o2, r2)})
        return out

    # -- the call as the hook makes it

    def _geometry(self, info: dict[str, Any]) -> VideoGeometry | None:
        grid = info.get("grid")
        if not grid:
            return None
        return VideoGeometry(int(grid[0]), int(grid[1]), int(grid[2]), prefix=int(info.get("text_tokens") or 0))

    def _recipe_output(self, q, k, v, recipe: Recipe, info: dict[str, Any], geometry) -> torch.Tensor:
        """The recipe's attention of one row, as attention_hook.RecipeAttentionHook._attend computes it."""
        segments = tuple(info["rope_segments"]) if info.get("rope_segments") else None
        if not dispatch.variant_of(recipe.attention).geometry:
            return attend(q, k, v, recipe, layout="BNHD", rope_segments=segments)
        text = int(info.get("text_tokens") or 0)
        if geometry is None or geometry.frames * geometry.height * geometry.width + text != q.shape[1]:
            raise ValueError(f"{recipe.name}: cannot lay out {q.shape[1]} tokens as the video grid {info.get('grid')}")
        if not text or self.text_position == "before":
            return attend(q, k, v, recipe, layout="BNHD", rope_segments=segments, geometry=geometry)
        n = q.shape[1]  # text follows the video (the capture's order): VideoGeometry wants it first
        front = lambda t: torch.cat([t[:, n - text:], t[:, : n - text]], dim=1)
        out = attend(front(q), front(k), front(v), recipe, layout="BNHD", rope_segments=segments, geometry=geometry)
        return torch.cat([out[:, text:], out[:, :text]], dim=1)


def call_sums(out: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """(|out - ref|², |ref|², <out, ref>, |out|²) in float32, on the tensors' device (no host sync)."""
    o, r = out.float(), ref.float()
    return torch.stack([(o - r).square().sum(), r.square().sum(), (o * r).sum(), o.square().sum()])


def rel_l2(d2: float, r2: float) -> float:
    return (d2 / r2) ** 0.5 if r2 > 0 else (0.0 if d2 == 0 else float("inf"))


def cosine(dot: float, o2: float, r2: float) -> float:
    den = (o2 * r2) ** 0.5
    return dot / den if den > 0 else (1.0 if o2 == r2 else 0.0)


__all__ = ["CallKey", "CallProbe", "call_sums", "cosine", "rel_l2"]
