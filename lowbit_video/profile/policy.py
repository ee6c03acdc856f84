"""From a profile to a precision policy: which (block, step) cells to keep in 16 bit, and the recipe file that does it.

Budgets (`--budget KIND=VALUE`):

* `rel-l2=X`: every call the policy quantizes had rel-L2 <= X in the profile: the cells whose worst call exceeded X
  are kept in 16 bit (and no other).
* `fp16-share=S`: the ceil(S x cells) most sensitive cells (mean rel-L2) are kept in 16 bit: at least the share S
  of the profiled (block, step) cells, hence of the profiled calls (every cell has the same number of calls).
* `psnr=P`: the fewest most-sensitive cells whose clips reach a mean PSNR of P dB against the 16-bit clips
  (search.py: a short bisection that generates and scores candidate policies).

The recipe written `include`s the base recipe and replaces its policy's blocks and steps with the cells, as
`policy.high_precision_calls = [[block, step], ...]` (non-negative indices: the profile's block and step count).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ..errors import UserError
from ..recipes import PrecisionPolicy, Recipe, available_recipes, file_key
from .cells import Profile

KINDS = ("rel-l2", "fp16-share", "psnr")


@dataclass(frozen=True)
class Budget:
    kind: str
    value: float

    def label(self) -> str:
        return f"{self.kind}={self.value:g}"


def parse_budget(text: str) -> Budget:
    """`rel-l2=0.05`, `fp16-share=0.2` or `psnr=30`; a one-line UserError otherwise."""
    kind, sep, raw = text.partition("=")
    kind = kind.strip().lower()
    if not sep or kind not in KINDS:
        raise UserError(f"--budget {text!r}: expected one of {', '.join(k + '=VALUE' for k in KINDS)}, "
                        "e.g. --budget rel-l2=0.05")
    try:
        value = float(raw)
    except ValueError:
        raise UserError(f"--budget {text!r}: {raw.strip()!r} is not a number") from None
    if not math.isfinite(value):
        raise UserError(f"--budget {text!r}: not a finite number")
    if kind == "fp16-share" and not 0.0 <= value <= 1.0:
        raise UserError(f"--budget {text!r}: the share of calls kept in 16 bit must be in [0, 1]")
    if kind in ("rel-l2", "psnr") and value <= 0:
        raise UserError(f"--budget {text!r}: must be positive")
    return Budget(kind, value)


def cells_over_error(profile: Profile, bound: float) -> list[tuple[int, int]]:
    """The (block, step) cells whose worst profiled call has rel-L2 above `bound`, most sensitive first."""
    cells = profile.policy_cells()
    worst = {bs: max(c.rel_l2_max for c in profile.cells if (c.block, c.step) == bs) for bs in cells}
    return [bs for bs in profile.ranking() if worst[bs] > bound]


def cells_for_share(profile: Profile, share: float) -> list[tuple[int, int]]:
    """The ceil(share x cells) most sensitive (block, step) cells."""
    ranking = profile.ranking()
    n = min(len(ranking), math.ceil(share * len(ranking) - 1e-9))
    return ranking[:max(n, 0)]


def share_of(cells: Sequence[tuple[int, int]], profile: Profile) -> float:
    """Share of the profiled (block, step) cells in `cells`."""
    total = len(profile.policy_cells())
    return len(set(cells) & set(profile.policy_cells())) / total if total else 0.0


def with_cells(base: Recipe, cells: Sequence[tuple[int, int]], *, name: str) -> Recipe:
    """`base` with its policy's blocks and steps replaced by the 16-bit `cells` (in memory)."""
    policy = PrecisionPolicy(apply_to=base.policy.apply_to, high_precision_calls=tuple(sorted(set(cells))))
    return dataclasses.replace(base, name=name, policy=policy)


def include_target(base: Recipe) -> str:
    """What the written file includes: a shipped or $LOWBIT_VIDEO_RECIPES recipe by its file name (found in a
    recipe folder from anywhere), any other file by its absolute path."""
    known = available_recipes().get(base.name)
    if known is not None and base.source and file_key(known) == file_key(Path(base.source)):
        return known.name
    if not base.source or not Path(base.source).is_file():
        raise UserError(f"recipe {base.name!r} has no file to include (give --recipe a name or a TOML path)")
    return str(Path(base.source).resolve())


def recipe_toml(base: Recipe, cells: Sequence[tuple[int, int]], *, name: str, include: str, note: str) -> str:
    """The recipe file: the base included, its policy set to the 16-bit cells."""
    pairs = ", ".join(f"[{b}, {s}]" for b, s in sorted(set(cells)))
    apply_to = ", ".join(f'"{a}"' for a in base.policy.apply_to)
    esc = lambda s: s.replace("\\", "\\\\").replace('"', '\\"')
    return "\n".join([
        f"# {note}",
        f'include = "{esc(include)}"',
        f'name = "{esc(name)}"',
        f'description = "{esc(base.name)} with the 16-bit calls chosen by lowbit-video profile ({len(set(cells))} '
        f'(block, step) cells)"',
        "",
        "[policy]",
        f"apply_to = [{apply_to}]",
        "high_precision_blocks = []",
        "high_precision_steps = []",
        f"high_precision_calls = [{pairs}]",
        "",
    ])


__all__ = ["Budget", "KINDS", "cells_for_share", "cells_over_error", "include_target", "parse_budget",
           "recipe_toml", "share_of", "with_cells"]
