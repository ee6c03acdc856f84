"""A profile: the recipe's per-call error aggregated by attention type x block x denoising step.

A cell holds every call of its (type, block, step) over the prompts, seeds and guidance branches profiled:
rel-L2 mean and max, cosine mean and min. The precision policy works on (block, step): a policy cell's score is
the largest over its attention types (a model has one profiled type per block: self in Wan, joint in HunyuanVideo).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable

FORMAT = "lowbit-video profile"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class Cell:
    attention_type: str
    block: int
    step: int
    calls: int
    rel_l2_mean: float
    rel_l2_max: float
    cosine_mean: float
    cosine_min: float

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Profile:
    """What profile.json holds (besides provenance): the cells and the grid they live on."""

    recipe: str
    num_blocks: int
    num_steps: int
    cells: list[Cell] = field(default_factory=list)

    @property
    def attention_types(self) -> list[str]:
        return sorted({c.attention_type for c in self.cells})

    def policy_cells(self) -> dict[tuple[int, int], Cell]:
        """(block, step) -> its most sensitive cell over attention types."""
        out: dict[tuple[int, int], Cell] = {}
        for c in self.cells:
            have = out.get((c.block, c.step))
            if have is None or c.rel_l2_mean > have.rel_l2_mean:
                out[(c.block, c.step)] = c
        return out

    def ranking(self) -> list[tuple[int, int]]:
        """(block, step) cells, most sensitive first (mean rel-L2; ties: earlier step, then earlier block)."""
        cells = self.policy_cells()
        return sorted(cells, key=lambda bs: (-cells[bs].rel_l2_mean, bs[1], bs[0]))

    def to_dict(self) -> dict[str, Any]:
        return {"recipe": self.recipe, "num_blocks": self.num_blocks, "num_steps": self.num_steps,
                "attention_types": self.attention_types, "cells": [c.to_dict() for c in self.cells]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Profile":
        return cls(d["recipe"], int(d["num_blocks"]), int(d["num_steps"]), [Cell(**c) for c in d["cells"]])


def aggregate(rows: Iterable[dict[str, Any]], recipe: str, *, num_blocks: int, num_steps: int) -> Profile:
    """The cells of `recipe` from CallProbe.rows()."""
    groups: dict[tuple[str, int, int], list[dict]] = defaultdict(list)
    for r in rows:
        if r["recipe"] == recipe:
            groups[(r["attention_type"], r["block"], r["step"])].append(r)
    cells = []
    for (kind, block, step), rs in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][2], kv[0][1])):
        errs = [r["rel_l2"] for r in rs]
        coss = [r["cosine"] for r in rs]
        cells.append(Cell(kind, block, step, len(rs), sum(errs) / len(errs), max(errs), sum(coss) / len(coss),
                          min(coss)))
    return Profile(recipe, num_blocks, num_steps, cells)


__all__ = ["Cell", "FORMAT", "FORMAT_VERSION", "Profile", "aggregate"]
