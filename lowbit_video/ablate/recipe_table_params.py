"""The parameters of the two recipe-table kinds, rotate-table ([rotate]) and draft-pooling
([pooling]): the rows and their flags, the baseline and metric columns, the operator-level inputs,
the paper's claims, and draft-pooling's Figure 5 budget sweep. Run by lowbit_video/ablate/recipe_table.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..toml_schema import Where
from .study import CaptureParams, baseline_recipe, distinct_rows, metric_columns, recipe_name, table_rows

ROTATION_COLUMN = ("none", "half", "interleaved", "full")
POOLINGS = ("avg", "avg+max")
SYNTHETIC_SOURCES = ("outliers", "local")
DEFAULT_METRICS = ("cosine", "ssim", "psnr")


@dataclass(frozen=True)
class SyntheticInputs:
    """Model-free Q/K/V for the operator-level tables: `sources` from "outliers" (diagnose's
    video-DiT-like Q/K: channel outliers, K offset, 3D RoPE) and "local" (bench draft's inputs with
    the spatial-temporal locality of video attention), each for every seed."""

    sources: tuple[str, ...] = ("outliers",)
    seq: int = 2048
    heads: int = 2
    head_dim: int = 128
    seeds: tuple[int, ...] = (0,)


@dataclass(frozen=True)
class RotateRow:
    """A row of the RotateAttention table; every flag is checked against the recipe."""

    config: str
    recipe: str
    optim_p: bool  # range-rectified affine INT4 P̃
    rotation: str  # none | half | interleaved | full
    v_hadamard: bool
    orthogonal: bool


@dataclass(frozen=True)
class PoolingRow:
    """A row of DraftAttention2's pooling table; precision and pooling are checked against the recipe."""

    config: str
    recipe: str
    precision: str  # "16", "8/16", "4/8/16", ...: the formats of the retained pairs
    pooling: str  # "avg" or "avg+max"


@dataclass(frozen=True)
class BudgetSeries:
    """One curve of Figure 5: a split of the retained pairs, swept over the budget's sparsities."""

    label: str
    fp16: float
    int8: float
    nvfp4: float

    @property
    def single(self) -> bool:
        return sum(x > 0 for x in (self.fp16, self.int8, self.nvfp4)) == 1


@dataclass(frozen=True)
class BudgetParams:
    """Figure 5 at operator level: every series at every sparsity, its error and modelled cost."""

    base_recipe: str  # the draft recipe whose block and pooling the sweep keeps
    sparsities: tuple[float, ...]
    cost: dict  # {16: c16, 8: c8, 4: c4}: cost of one retained pair per precision, 16-bit = 1
    series: tuple[BudgetSeries, ...]
    samples: int  # captured (prompt, seed) samples the sweep runs on, every block of each (0: none)


@dataclass(frozen=True)
class Claim:
    """A paper's claim that row `better` beats row `worse` (by config label), checked on every table."""

    text: str
    better: str
    worse: str


@dataclass(frozen=True)
class TableParams:
    """rotate-table / draft-pooling: recipe rows scored against the baseline on generated videos, and
    the same rows at operator level on captured and synthetic Q/K/V."""

    baseline: str
    rows: tuple  # RotateRow or PoolingRow
    metrics: tuple[str, ...]
    synthetic: SyntheticInputs
    capture: CaptureParams
    operator_samples: int = 0  # captured (prompt, seed) samples for the operator table, evenly spaced; 0: all
    claims: tuple = ()  # Claim
    budget: BudgetParams | None = None  # draft-pooling only


def load_draft(name: str):
    """The DraftSpec of recipe `name`, or None when it is not a draft recipe."""
    from ..recipes import load_recipe

    return load_recipe(name).attention.draft


def _synthetic(w: Where, raw: Any, p: str) -> SyntheticInputs:
    t = w.table(raw, p, {"sources", "seq", "heads", "head_dim", "seeds"})
    sources = t.get("sources", ["outliers"])
    if not isinstance(sources, list) or any(x not in SYNTHETIC_SOURCES for x in sources) or len(set(sources)) != len(sources):
        raise w.error(p + "sources", f"expected distinct names from {', '.join(SYNTHETIC_SOURCES)}")
    seeds = w.int_list(t, "seeds", p) if "seeds" in t else (0,)
    sizes = {k: w.scalar(t, k, int, d, p) for k, d in (("seq", 2048), ("heads", 2), ("head_dim", 128))}
    for k, v in sizes.items():
        if v <= 0:
            raise w.error(p + k, "must be positive")
    if sizes["head_dim"] % 32:
        raise w.error(p + "head_dim", "must be a multiple of 32 (the RoPE split and the 4-bit blocks)")
    if sizes["seq"] % 256:
        raise w.error(p + "seq", "must be a multiple of 256 (frames of 16 x 16 tokens)")
    if any(x < 0 for x in seeds):
        raise w.error(p + "seeds", "expected non-negative integers")
    return SyntheticInputs(sources=tuple(sources), seeds=seeds, **sizes)


def _budget(w: Where, raw: Any, p: str) -> BudgetParams:
    t = w.table(raw, p, {"base_recipe", "sparsities", "cost", "series", "samples"})
    sp = t.get("sparsities", [])
    if not isinstance(sp, list) or not sp or not all(isinstance(x, (int, float)) and not isinstance(x, bool) and 0 <= x < 1 for x in sp):
        raise w.error(p + "sparsities", "expected a non-empty list of fractions in [0, 1)")
    cost_raw = w.table(t.get("cost", {}), p + "cost.", {"16", "8", "4"})
    cost = {16: 1.0, 8: 0.5, 4: 0.25}
    for key, v in cost_raw.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            raise w.error(p + "cost." + key, "expected a positive number")
        cost[int(key)] = float(v)
    series = []
    for i, r in enumerate(t.get("series", [])):
        rp = f"{p}series[{i}]."
        rt = w.table(r, rp, {"label", "fp16", "int8", "nvfp4"})
        shares = {k: w.scalar(rt, k, float, 0.0, rp) for k in ("fp16", "int8", "nvfp4")}
        if any(v < 0 for v in shares.values()) or abs(sum(shares.values()) - 1) > 1e-9:
            raise w.error(rp + "fp16", "the shares fp16 + int8 + nvfp4 must be >= 0 and sum to 1")
        series.append(BudgetSeries(label=w.scalar(rt, "label", str, "", rp), **shares))
    if not series or not any(x.single for x in series) or all(x.single for x in series):
        raise w.error(p + "series", "expected single-precision and mixed series ([[...budget.series]])")
    if len({x.label for x in series}) != len(series) or not all(x.label for x in series):
        raise w.error(p + "series", "every series needs its own non-empty label")
    base = recipe_name(w, p + "base_recipe", w.scalar(t, "base_recipe", str, "draftattention2", p))
    samples = w.scalar(t, "samples", int, 1, p)
    if samples < 0:
        raise w.error(p + "samples", "must be >= 0")
    if load_draft(base) is None:
        raise w.error(p + "base_recipe", f"{base} is not a draft recipe")
    return BudgetParams(base_recipe=base, sparsities=tuple(float(x) for x in sp), cost=cost, series=tuple(series),
                        samples=samples)


def _rotate_row(w: Where, rp: str, rt: Mapping[str, Any], common: dict) -> RotateRow:
    return RotateRow(**common, optim_p=w.scalar(rt, "optim_p", bool, False, rp),
                     rotation=w.choice(rt, "rotation", ROTATION_COLUMN, "none", rp),
                     v_hadamard=w.scalar(rt, "v_hadamard", bool, False, rp),
                     orthogonal=w.scalar(rt, "orthogonal", bool, True, rp))


def _pooling_row(w: Where, rp: str, rt: Mapping[str, Any], common: dict) -> PoolingRow:
    return PoolingRow(**common, precision=w.scalar(rt, "precision", str, "", rp),
                      pooling=w.choice(rt, "pooling", POOLINGS, "avg", rp))


def _claims(w: Where, p: str, t: Mapping[str, Any], rows: tuple) -> tuple[Claim, ...]:
    configs = {r.config for r in rows}
    claims = []
    for i, c in enumerate(t.get("claims", [])):
        cp = f"{p}claims[{i}]."
        ct = w.table(c, cp, {"text", "better", "worse"})
        claim = Claim(text=w.scalar(ct, "text", str, "", cp), better=w.scalar(ct, "better", str, "", cp),
                      worse=w.scalar(ct, "worse", str, "", cp))
        for key in ("better", "worse"):
            if getattr(claim, key) not in configs:
                raise w.error(cp + key, f"{getattr(claim, key)!r} is not a row's config")
        claims.append(claim)
    return tuple(claims)


def _recipe_table(w: Where, p: str, raw: Any, capture: CaptureParams, *, rotate: bool) -> TableParams:
    t = w.table(raw, p, {"baseline", "rows", "metrics", "synthetic", "operator_samples", "claims"}
                | (set() if rotate else {"budget"}))
    keys = ("config", "recipe", "optim_p", "rotation", "v_hadamard", "orthogonal") if rotate else \
        ("config", "recipe", "precision", "pooling")
    read_row = _rotate_row if rotate else _pooling_row
    rows = tuple(read_row(w, rp, rt, {"config": w.scalar(rt, "config", str, "", rp),
                                      "recipe": recipe_name(w, rp + "recipe", w.scalar(rt, "recipe", str, "", rp))})
                 for rp, rt in table_rows(w, p, t, keys))
    distinct_rows(w, p, rows)
    metrics = metric_columns(w, p, t, DEFAULT_METRICS)
    baseline = baseline_recipe(w, p, t, rows)
    budget = _budget(w, t["budget"], p + "budget.") if "budget" in t else None
    if not rotate:
        for r in rows:
            if load_draft(r.recipe) is None:
                raise w.error(p + "rows", f"row {r.config!r}: recipe {r.recipe} is not a draft recipe")
    samples = w.scalar(t, "operator_samples", int, 0, p)
    if samples < 0:
        raise w.error(p + "operator_samples", "must be >= 0 (0: every captured sample)")
    claims = _claims(w, p, t, rows)
    return TableParams(baseline=baseline, rows=rows, metrics=metrics,
                       synthetic=_synthetic(w, t.get("synthetic", {}), p + "synthetic."), capture=capture,
                       operator_samples=samples, claims=claims, budget=budget)


def rotate_parameters(w: Where, p: str, raw: Any, capture: CaptureParams | None) -> TableParams:
    """The [rotate] table: rows with the paper's Optim-P, rotation, V Hadamard and orthogonality columns."""
    return _recipe_table(w, p, raw, capture, rotate=True)


def pooling_parameters(w: Where, p: str, raw: Any, capture: CaptureParams | None) -> TableParams:
    """The [pooling] table: rows with precision and pooling columns, and the Figure 5 [pooling.budget]."""
    return _recipe_table(w, p, raw, capture, rotate=False)
