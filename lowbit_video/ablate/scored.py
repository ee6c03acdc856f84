"""Recipe rows on generated videos: generate what is missing, score it against the baseline, compare.

Shared by the studies whose rows are recipes (table3, rotate-table, draft-pooling). Under torchrun
each rank generates and scores its share of the runs and the result is gathered; a `--shard i/n`
job does its share only (the caller then writes nothing).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from .common import Reporter, Resolved


@dataclass
class Scored:
    """What generate + evaluate + compare gave: `comp` is None for a process that did its share only."""

    comp: Any  # compare.Comparison over exactly the study's runs
    generated: int  # runs generated (all processes)
    reused: int  # complete runs found (all processes)
    mine: dict  # this process's own counts: generated, reused, evaluated
    metrics: list  # the study's metrics that apply to the model (what was scored)


def applicable_metrics(metrics: Sequence[str], info) -> list[str]:
    """The study's metrics that apply to the model of ModelInfo `info` (adherence: the tiny-shapes model only)."""
    from ..metrics.registry import find_metric

    applies = {m: (spec := find_metric(m)) is None or spec.applies_to(info.name, info.family) for m in metrics}
    return [m for m in metrics if applies[m]]


def generate_and_score(r: Resolved, *, baseline: str, recipes: Sequence[str], metrics: Sequence[str],
                       rep: Reporter) -> Scored:
    from .. import compare
    from ..distributed import ShardSpec, all_gather
    from ..evaluate import evaluate_runs
    from ..generate import generate

    metrics = applicable_metrics(metrics, r.model_info())
    gen = generate(r.generate_config(recipes=[baseline, *recipes], out=r.out, shard=r.spec), rep.generate_reporter())
    dirs = [x["dir"] for x in gen["runs"]]
    # This process scores the runs it owns (generate's split of the grid, which is evaluate's split of
    # the same runs). Under torchrun generate has already waited for every rank, so each baseline run
    # exists; under --shard a baseline another job has not made yet leaves the paired metrics
    # unavailable, and the final run without --shard scores them (evaluate recomputes those).
    mine = [x["dir"] for x in gen["runs"] if x["status"] != "other-shard"]
    rep.stage(f"evaluating {len(mine)} runs", 1)
    if mine:
        evaluate_runs(mine, metrics=list(metrics), weights_dir=r.weights_dir, baseline=baseline, shard=ShardSpec())
    rep.advance()
    rep.done()
    counts = all_gather((gen["generated"], gen["skipped"]))  # also the barrier: every rank has scored
    own = {"generated": gen["generated"], "reused": gen["skipped"], "evaluated": len(mine)}
    if r.share_only:
        return Scored(None, sum(c[0] for c in counts), sum(c[1] for c in counts), own, metrics)
    comp = compare.collect(dirs, baseline=baseline, recipe_order=list(recipes))
    return Scored(comp, sum(c[0] for c in counts), sum(c[1] for c in counts), own, metrics)


def baseline_row(comp, model: str) -> dict | None:
    """The baseline's row of compare's JSON for `model` (per-video metrics; paired ones are '–')."""
    from .. import compare

    names = [m.model for m in comp.models]
    return compare.to_json(comp)["models"][names.index(comp.model(model).model)]["baseline_row"]
