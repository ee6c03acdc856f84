"""Ablation studies are data: recipes/ablations/<name>.toml, loaded into frozen, validated objects.

A study file names its `kind` (table3, qmax-sweep, rowsum, rotate-table or draft-pooling), the run
defaults the CLI options override ([run]), the kind's own table ([table3], [qmax], [rowsum],
[rotate], [pooling]; [capture] for the studies that read captured Q/K/V) and the paper's numbers for reference ([[paper]] rows, copied into the
output as they are). `include = "base/x.toml"` merges a base file first (the including file wins),
exactly as recipes do; files under base/ are not studies. Problems are one-line errors naming the
file and the key.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from ..errors import UserError
from ..recipes import (Where, check_qmax, file_stem, is_traversable, load_each, read_with_includes,  # shared include/merge and key-path errors
                       toml_files)

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

KINDS = ("table3", "qmax-sweep", "rowsum", "rotate-table", "draft-pooling")
TENSORS = ("q", "k", "v")
TIE_RULES = ("smallest", "largest")
MX_RULES = ("ocp", "tfs", "uos")


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
class Table3Row:
    config: str
    recipe: str
    hadamard: bool
    pnq: bool
    uos: bool


@dataclass(frozen=True)
class Table3Params:
    baseline: str
    rows: tuple[Table3Row, ...]
    metrics: tuple[str, ...]  # columns, in order (metric registry names)


@dataclass(frozen=True)
class QBin:
    """A bin of Q_max values in hundredths: lo <= q <= hi (None = unbounded)."""

    label: str
    lo: int | None
    hi: int | None

    def holds(self, hundredths: int) -> bool:
        return (self.lo is None or hundredths >= self.lo) and (self.hi is None or hundredths <= self.hi)


@dataclass(frozen=True)
class QmaxParams:
    grid: tuple[int, ...]  # Q_max values in hundredths (exact decimals: 600 = 6.00)
    bins: tuple[QBin, ...]
    tensors: tuple[str, ...]
    rotation_recipe: str  # whose fixed Q/K rotation is applied before quantizing Q and K
    tie_rule: str
    block: int
    capture: CaptureParams


@dataclass(frozen=True)
class RowsumParams:
    rule: str
    qmax: float
    block: int
    entropy_threshold: float  # nats
    representative_block: int  # negative: from the end
    scaling_rows: int  # query rows per head used for the global-scaling search (0 = all)
    pnq_recipe: str
    direct_recipe: str
    capture: CaptureParams


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


@dataclass(frozen=True)
class Study:
    name: str
    kind: str
    description: str
    file: str
    run: RunDefaults
    params: Table3Params | QmaxParams | RowsumParams | TableParams
    paper: str = ""
    paper_rows: tuple[Mapping[str, Any], ...] = ()
    notes: str = ""

    def row(self) -> dict:
        return {"name": self.name, "kind": self.kind, "description": self.description, "file": self.file}


# ----------------------------------------------------------------------------------------- finding


def study_dirs() -> list["Traversable"]:
    """ablations/ under each recipe folder: $LOWBIT_VIDEO_RECIPES entries first, then the shipped recipes."""
    from ..recipes import recipe_dirs

    return [d.joinpath("ablations") for d in recipe_dirs()]


def available_studies() -> dict[str, "Traversable"]:
    found: dict[str, Traversable] = {}
    for d in study_dirs():
        for file in toml_files(d):
            found.setdefault(file_stem(file), file)
    return found


def list_studies() -> list[Study]:
    return [load_study(p) for p in available_studies().values()]


def load_all_studies() -> tuple[list[Study], list[UserError]]:
    """Every available study that loads, and the error of each one that does not."""
    return load_each(available_studies(), study_from_file)


def load_study(name_or_path: "str | os.PathLike | Traversable") -> Study:
    if is_traversable(name_or_path):
        return study_from_file(name_or_path)
    text = str(name_or_path)
    path = Path(text)
    if text.endswith(".toml"):
        if not path.is_file():
            raise UserError(f"{text}: no such study file")
        return study_from_file(path)
    known = available_studies()
    if text not in known:
        raise UserError(f"unknown study {text!r}; known studies: {', '.join(sorted(known)) or 'none'}")
    return study_from_file(known[text])


def study_from_file(path: "Path | Traversable") -> Study:
    file = path if is_traversable(path) else Path(path)
    data = read_with_includes(file, seen=())
    return study_from_dict(data, source=str(file), default_name=file_stem(file))


# --------------------------------------------------------------------------------------- validation

_TOP = {"name", "kind", "description", "paper", "notes", "run", "table3", "qmax", "rowsum", "rotate", "pooling",
        "capture", "paper_rows"}
_SECTION = {"table3": "table3", "qmax-sweep": "qmax", "rowsum": "rowsum", "rotate-table": "rotate",
            "draft-pooling": "pooling"}


def study_from_dict(data: Mapping[str, Any], *, source: str = "<dict>", default_name: str = "") -> Study:
    w = Where(source)
    top = w.table(data, "", _TOP)
    kind = w.choice(top, "kind", KINDS, "", "")
    for other in set(_SECTION.values()) - {_SECTION[kind]}:
        if other in top:
            raise w.error(other, f"does not apply to kind {kind!r}")
    if kind == "table3" and "capture" in top:
        raise w.error("capture", "does not apply to kind 'table3'")
    name = w.scalar(top, "name", str, default_name)
    if not name:
        raise w.error("name", "must be a non-empty string")
    section = top.get(_SECTION[kind], {})
    if kind == "table3":
        params: Any = _table3(w, section)
    elif kind == "qmax-sweep":
        params = _qmax(w, section, _capture(w, top.get("capture", {})))
    elif kind in ("rotate-table", "draft-pooling"):
        params = _recipe_table(w, kind, section, _capture(w, top.get("capture", {})))
    else:
        params = _rowsum(w, section, _capture(w, top.get("capture", {})))
    rows = top.get("paper_rows", [])
    if not isinstance(rows, list) or not all(isinstance(r, Mapping) for r in rows):
        raise w.error("paper_rows", "expected an array of tables ([[paper_rows]])")
    return Study(name=name, kind=kind, description=w.scalar(top, "description", str, ""), file=source,
                 run=_run(w, top.get("run", {})), params=params, paper=w.scalar(top, "paper", str, ""),
                 paper_rows=tuple(dict(r) for r in rows), notes=w.scalar(top, "notes", str, ""))


def _run(w: Where, raw: Any) -> RunDefaults:
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


def _capture(w: Where, raw: Any) -> CaptureParams:
    p = "capture."
    t = w.table(raw, p, {"recipe", "step", "blocks"})
    step = w.scalar(t, "step", int, 0, p)
    if step < 0:
        raise w.error(p + "step", "must be >= 0")
    return CaptureParams(recipe=w.scalar(t, "recipe", str, "fp16", p), step=step, blocks=w.int_list(t, "blocks", p))


def _recipe_name(w: Where, key: str, name: str) -> str:
    from ..recipes import load_recipe

    try:
        load_recipe(name)
    except UserError as e:
        raise w.error(key, str(e)) from None
    return name


def _table3(w: Where, raw: Any) -> Table3Params:
    p = "table3."
    t = w.table(raw, p, {"baseline", "rows", "metrics"})
    rows_raw = t.get("rows", [])
    if not isinstance(rows_raw, list) or not rows_raw:
        raise w.error(p + "rows", "expected a non-empty array of tables ([[table3.rows]])")
    rows = []
    for i, r in enumerate(rows_raw):
        rp = f"{p}rows[{i}]."
        rt = w.table(r, rp, {"config", "recipe", "hadamard", "pnq", "uos"})
        for key in ("config", "recipe", "hadamard", "pnq", "uos"):
            if key not in rt:
                raise w.error(rp + key, "missing")
        rows.append(Table3Row(config=w.scalar(rt, "config", str, "", rp),
                              recipe=_recipe_name(w, rp + "recipe", w.scalar(rt, "recipe", str, "", rp)),
                              hadamard=w.scalar(rt, "hadamard", bool, False, rp),
                              pnq=w.scalar(rt, "pnq", bool, False, rp), uos=w.scalar(rt, "uos", bool, False, rp)))
    for key in ("config", "recipe"):
        values = [getattr(r, key) for r in rows]
        if len(set(values)) != len(values):
            raise w.error(p + "rows", f"two rows share a {key}")
    metrics = t.get("metrics", ["subject_consistency", "imaging_quality", "aesthetic_quality", "cosine", "ssim", "psnr"])
    if not isinstance(metrics, list) or not metrics or not all(isinstance(m, str) and m for m in metrics):
        raise w.error(p + "metrics", "expected a non-empty list of metric names")
    baseline = _recipe_name(w, p + "baseline", w.scalar(t, "baseline", str, "fp16", p))
    if baseline in {r.recipe for r in rows}:
        raise w.error(p + "baseline", "the baseline cannot also be a row")
    return Table3Params(baseline=baseline, rows=tuple(rows), metrics=tuple(metrics))


def hundredths(w: Where, key: str, value: Any) -> int:
    """An exact decimal with at most two places ("7.25", 7.25 or 7) as an integer number of hundredths."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise w.error(key, f"expected a decimal like \"7.25\", got {value!r}")
    try:
        d = Decimal(str(value).strip()) * 100
    except InvalidOperation:
        raise w.error(key, f"expected a decimal like \"7.25\", got {value!r}") from None
    if not d.is_finite() or d != d.to_integral_value():
        raise w.error(key, f"{value!r} is not a multiple of 0.01")
    return int(d)


def fmt_q(h: int) -> str:
    """Hundredths as the exact decimal string: 725 -> "7.25"."""
    return f"{h // 100}.{h % 100:02d}"


def _qmax(w: Where, raw: Any, capture: CaptureParams) -> QmaxParams:
    p = "qmax."
    t = w.table(raw, p, {"q_min", "q_max", "q_step", "bins", "tensors", "rotation_recipe", "tie_rule", "block"})
    lo, hi, step = (hundredths(w, p + k, t.get(k, d)) for k, d in (("q_min", "6.00"), ("q_max", "8.00"), ("q_step", "0.05")))
    if not (0 < lo <= hi) or step <= 0 or (hi - lo) % step:
        raise w.error(p + "q_step", f"need 0 < q_min <= q_max and (q_max - q_min) a multiple of q_step; got "
                                    f"{fmt_q(lo)}, {fmt_q(hi)}, {fmt_q(step)}")
    check_qmax(w, p + "q_min", lo / 100)
    check_qmax(w, p + "q_max", hi / 100)
    grid = tuple(range(lo, hi + 1, step))  # integers: no float drift
    bins_raw = t.get("bins", ["<=7.15", "7.20", "7.25", ">=7.30"])
    if not isinstance(bins_raw, list) or not bins_raw:
        raise w.error(p + "bins", "expected a list like [\"<=7.15\", \"7.20\", \"7.25\", \">=7.30\"]")
    bins = []
    for b in bins_raw:
        if not isinstance(b, str):
            raise w.error(p + "bins", f"expected strings, got {b!r}")
        s = b.replace(" ", "").replace("≤", "<=").replace("≥", ">=")
        if s.startswith("<="):
            bins.append(QBin(b, None, hundredths(w, p + "bins", s[2:])))
        elif s.startswith(">="):
            bins.append(QBin(b, hundredths(w, p + "bins", s[2:]), None))
        else:
            v = hundredths(w, p + "bins", s)
            bins.append(QBin(b, v, v))
    for q in grid:
        n = sum(b.holds(q) for b in bins)
        if n != 1:
            raise w.error(p + "bins", f"Q_max {fmt_q(q)} falls in {n} bins; the bins must cover the grid exactly once")
    tensors = t.get("tensors", list(TENSORS))
    if not isinstance(tensors, list) or not tensors or any(x not in TENSORS for x in tensors) or len(set(tensors)) != len(tensors):
        raise w.error(p + "tensors", f"expected distinct names from {', '.join(TENSORS)}")
    block = w.scalar(t, "block", int, 32, p)
    if block != 32:
        raise w.error(p + "block", "MXFP4 blocks are 32 elements")
    return QmaxParams(grid=grid, bins=tuple(bins), tensors=tuple(tensors),
                      rotation_recipe=_recipe_name(w, p + "rotation_recipe", w.scalar(t, "rotation_recipe", str, "mxattention", p)),
                      tie_rule=w.choice(t, "tie_rule", TIE_RULES, "smallest", p), block=block, capture=capture)


def _rowsum(w: Where, raw: Any, capture: CaptureParams) -> RowsumParams:
    p = "rowsum."
    t = w.table(raw, p, {"rule", "qmax", "block", "entropy_threshold", "representative_block", "scaling_rows",
                         "pnq_recipe", "direct_recipe"})
    rule = w.choice(t, "rule", MX_RULES, "ocp", p)
    if "qmax" in t and rule != "uos":
        raise w.error(p + "qmax", "only the 'uos' rule takes a qmax")
    qmax = w.scalar(t, "qmax", float, 7.25, p)
    check_qmax(w, p + "qmax", qmax)
    block = w.scalar(t, "block", int, 32, p)
    if block != 32:
        raise w.error(p + "block", "MXFP4 blocks are 32 elements")
    rows = w.scalar(t, "scaling_rows", int, 256, p)
    if rows < 0:
        raise w.error(p + "scaling_rows", "must be >= 0 (0: every row)")
    return RowsumParams(rule=rule, qmax=qmax, block=block,
                        entropy_threshold=w.scalar(t, "entropy_threshold", float, 5.0, p),
                        representative_block=w.scalar(t, "representative_block", int, -1, p), scaling_rows=rows,
                        pnq_recipe=_recipe_name(w, p + "pnq_recipe", w.scalar(t, "pnq_recipe", str, "mxattention", p)),
                        direct_recipe=_recipe_name(w, p + "direct_recipe", w.scalar(t, "direct_recipe", str, "mxfp4-ocp", p)),
                        capture=capture)


ROTATION_COLUMN = ("none", "half", "interleaved", "full")
POOLINGS = ("avg", "avg+max")
SYNTHETIC_SOURCES = ("outliers", "local")


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
    base = _recipe_name(w, p + "base_recipe", w.scalar(t, "base_recipe", str, "draftattention2", p))
    samples = w.scalar(t, "samples", int, 1, p)
    if samples < 0:
        raise w.error(p + "samples", "must be >= 0")
    if load_draft(base) is None:
        raise w.error(p + "base_recipe", f"{base} is not a draft recipe")
    return BudgetParams(base_recipe=base, sparsities=tuple(float(x) for x in sp), cost=cost, series=tuple(series),
                        samples=samples)


def load_draft(name: str):
    """The DraftSpec of recipe `name`, or None when it is not a draft recipe."""
    from ..recipes import load_recipe

    return load_recipe(name).attention.draft


def _recipe_table(w: Where, kind: str, raw: Any, capture: CaptureParams) -> TableParams:
    p = _SECTION[kind] + "."
    rotate = kind == "rotate-table"
    t = w.table(raw, p, {"baseline", "rows", "metrics", "synthetic", "operator_samples", "claims"}
                | (set() if rotate else {"budget"}))
    rows_raw = t.get("rows", [])
    if not isinstance(rows_raw, list) or not rows_raw:
        raise w.error(p + "rows", f"expected a non-empty array of tables ([[{p}rows]])")
    keys = ("config", "recipe", "optim_p", "rotation", "v_hadamard", "orthogonal") if rotate else \
        ("config", "recipe", "precision", "pooling")
    rows = []
    for i, r in enumerate(rows_raw):
        rp = f"{p}rows[{i}]."
        rt = w.table(r, rp, set(keys))
        for key in keys:
            if key not in rt:
                raise w.error(rp + key, "missing")
        common = {"config": w.scalar(rt, "config", str, "", rp),
                  "recipe": _recipe_name(w, rp + "recipe", w.scalar(rt, "recipe", str, "", rp))}
        if rotate:
            rows.append(RotateRow(**common, optim_p=w.scalar(rt, "optim_p", bool, False, rp),
                                  rotation=w.choice(rt, "rotation", ROTATION_COLUMN, "none", rp),
                                  v_hadamard=w.scalar(rt, "v_hadamard", bool, False, rp),
                                  orthogonal=w.scalar(rt, "orthogonal", bool, True, rp)))
        else:
            rows.append(PoolingRow(**common, precision=w.scalar(rt, "precision", str, "", rp),
                                   pooling=w.choice(rt, "pooling", POOLINGS, "avg", rp)))
    for key in ("config", "recipe"):
        values = [getattr(r, key) for r in rows]
        if len(set(values)) != len(values):
            raise w.error(p + "rows", f"two rows share a {key}")
    metrics = t.get("metrics", ["cosine", "ssim", "psnr"])
    if not isinstance(metrics, list) or not metrics or not all(isinstance(m, str) and m for m in metrics):
        raise w.error(p + "metrics", "expected a non-empty list of metric names")
    baseline = _recipe_name(w, p + "baseline", w.scalar(t, "baseline", str, "fp16", p))
    if baseline in {r.recipe for r in rows}:
        raise w.error(p + "baseline", "the baseline cannot also be a row")
    budget = _budget(w, t["budget"], p + "budget.") if "budget" in t else None
    if not rotate:
        for r in rows:
            if load_draft(r.recipe) is None:
                raise w.error(p + "rows", f"row {r.config!r}: recipe {r.recipe} is not a draft recipe")
    samples = w.scalar(t, "operator_samples", int, 0, p)
    if samples < 0:
        raise w.error(p + "operator_samples", "must be >= 0 (0: every captured sample)")
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
    return TableParams(baseline=baseline, rows=tuple(rows), metrics=tuple(metrics),
                       synthetic=_synthetic(w, t.get("synthetic", {}), p + "synthetic."), capture=capture,
                       operator_samples=samples, claims=tuple(claims), budget=budget)
