"""A loaded study file, and the sections every kind of study shares.

A study is its name, kind, description, run defaults ([run]: what the CLI options override), the
kind's parameters (from the kind's own table; lowbit_video/ablate/kinds.py) and the paper's numbers
for reference ([[paper_rows]], copied into the output as they are). The readers below are used by
the kinds' parameter readers: [capture] (the studies that read captured Q/K/V), recipe names, the
rows of a recipe table and its metric columns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ..errors import UserError
from ..toml_schema import Where


@dataclass(frozen=True)
class RunDefaults:
    """What to run when the CLI does not say: model, prompt file, seeds, steps (0 = the model's)."""

    model: str = "tiny-shapes"
    prompts: str = "prompts/shapes.txt"
    seeds: tuple[int, ...] = (0,)
    steps: int = 0


@dataclass(frozen=True)
class CaptureParams:
    """Which captured Q/K/V a mechanism study reads: made by `recipe` at denoising step `step`,
    for `blocks` (empty = every attention block)."""

    recipe: str = "fp16"
    step: int = 0
    blocks: tuple[int, ...] = ()


@dataclass(frozen=True)
class Study:
    name: str
    kind: str
    description: str
    file: str
    run: RunDefaults
    params: Any  # the kind's parameters (kinds.KINDS[kind].parameters made them)
    paper: str = ""
    paper_rows: tuple[Mapping[str, Any], ...] = ()
    notes: str = ""

    def row(self) -> dict:
        return {"name": self.name, "kind": self.kind, "description": self.description, "file": self.file}


def read_run(w: Where, raw: Any) -> RunDefaults:
    p = "run."
    t = w.table(raw, p, {"model", "prompts", "seeds", "steps"})
    seeds = w.int_list(t, "seeds", p) if "seeds" in t else (0,)
    if not seeds or any(s < 0 for s in seeds):
        raise w.error(p + "seeds", "expected a non-empty list of non-negative integers")
    steps = w.scalar(t, "steps", int, 0, p)
    if steps < 0:
        raise w.error(p + "steps", "must be >= 0 (0: the model's default)")
    return RunDefaults(model=w.scalar(t, "model", str, "tiny-shapes", p),
                       prompts=w.scalar(t, "prompts", str, "prompts/shapes.txt", p), seeds=seeds, steps=steps)


def read_capture(w: Where, raw: Any) -> CaptureParams:
    p = "capture."
    t = w.table(raw, p, {"recipe", "step", "blocks"})
    step = w.scalar(t, "step", int, 0, p)
    if step < 0:
        raise w.error(p + "step", "must be >= 0")
    return CaptureParams(recipe=w.scalar(t, "recipe", str, "fp16", p), step=step, blocks=w.int_list(t, "blocks", p))


def recipe_name(w: Where, key: str, name: str) -> str:
    """`name`, once it loads as a recipe (else the recipe's error under `key`)."""
    from ..recipes import load_recipe

    try:
        load_recipe(name)
    except UserError as e:
        raise w.error(key, str(e)) from None
    return name


def table_rows(w: Where, p: str, t: Mapping[str, Any], keys: Sequence[str]) -> list[tuple[str, Mapping[str, Any]]]:
    """The [[<p>rows]] tables of a recipe table, each with every one of `keys` (and no other): (key path, table)."""
    rows_raw = t.get("rows", [])
    if not isinstance(rows_raw, list) or not rows_raw:
        raise w.error(p + "rows", f"expected a non-empty array of tables ([[{p}rows]])")
    out = []
    for i, r in enumerate(rows_raw):
        rp = f"{p}rows[{i}]."
        rt = w.table(r, rp, set(keys))
        for key in keys:
            if key not in rt:
                raise w.error(rp + key, "missing")
        out.append((rp, rt))
    return out


def distinct_rows(w: Where, p: str, rows: Sequence[Any]) -> None:
    """No two rows share a config label or a recipe."""
    for key in ("config", "recipe"):
        values = [getattr(r, key) for r in rows]
        if len(set(values)) != len(values):
            raise w.error(p + "rows", f"two rows share a {key}")


def metric_columns(w: Where, p: str, t: Mapping[str, Any], default: Sequence[str]) -> tuple[str, ...]:
    metrics = t.get("metrics", list(default))
    if not isinstance(metrics, list) or not metrics or not all(isinstance(m, str) and m for m in metrics):
        raise w.error(p + "metrics", "expected a non-empty list of metric names")
    return tuple(metrics)


def baseline_recipe(w: Where, p: str, t: Mapping[str, Any], rows: Sequence[Any]) -> str:
    baseline = recipe_name(w, p + "baseline", w.scalar(t, "baseline", str, "fp16", p))
    if baseline in {r.recipe for r in rows}:
        raise w.error(p + "baseline", "the baseline cannot also be a row")
    return baseline
