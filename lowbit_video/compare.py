"""Compare scored runs: one table per model in the layout of the MXAttention paper's Table 2.

Reusable API (the `ablate` helper renders the paper's Table 3 with it)::

    comp = collect(run_dirs, baseline="fp16", recipe_order=None)        # -> Comparison
    render_markdown(comp, model=None, *, rows=None, columns=None, include_baseline=True,
                    extra_columns=(), label_header="Method", title=True, notes=True) -> str
    rows_json(comp, model, rows, *, columns=None, label_key="config") -> list[dict]
    render_table(comp, marker="") -> list[rich.table.Table | str]   (what `compare --format table` prints)
    render_csv(comp) -> str;  to_json(comp) -> dict;  render(comp, fmt) -> str

* `rows`: a fixed row order with custom labels, `[(label, recipe), ...]`, e.g.
  `[("Full", "mxattention"), ("w/o UOS", "mxattention-no-uos"), ...]`; a recipe without a row in the
  comparison is shown with every cell 'n/a' (reason "no scored runs"). Default: every quantized
  recipe under its own name. The best value per column is marked among the rows shown (bold).
* `columns`: metric names in display order (default: the model's columns, see below).
* `extra_columns`: text columns placed after the label, `[(header, {recipe: text})]`
  (Table 3's Hadamard / PNQ / UOS check marks).
* `rows_json` gives `[{label_key: label, "recipe": r, "n": n, <metric>: float | {"unavailable": why}}]`.

What is compared
----------------
`collect` finds the complete runs (runstore.is_complete) at or under each path, adds the baseline run
that sits beside a given run (runstore.find_baseline: the pairing rule), and reads each run's record
(runstore.RunRecord) and metrics.json (written by `evaluate`).

* Every run left out is named with its reason in `Comparison.left_out` and counted in a warning
  line per reason: a damaged run folder (meta.json unreadable, its files gone), a meta.json without
  model, recipe, prompt or seed, an unreadable metrics.json.
* No run has metrics.json → UserError ("run `lowbit-video evaluate` first"). Some lack it → they are
  left out with one warning line (decision: a partial table with a warning is more useful than none;
  the warning names the runs, `Comparison.left_out` and the JSON list them).
* A quantized run counts towards its recipe's row iff its metrics.json was paired against the
  baseline recipe (`metrics.json["baseline"]["recipe"] == baseline`) and that baseline's frames have
  not changed since (`frames_sha256`); otherwise it is left out with a warning. So a row averages
  over the (prompt, seed) pairs that have a baseline; `n` and the pairs are reported. Rows whose
  pair sets differ produce a warning and `"pair_sets_differ": true`.
* Per (model, recipe) each metric is the mean over the counted runs; a metric unavailable (or not
  evaluated) for any counted run makes the row's value `{"unavailable": reason}`.
* The baseline row averages the per-video metrics (VBench dimensions, adherence) over the baseline
  runs that have metrics.json; paired metrics are '–' there.
* Columns per model: subject_consistency, imaging_quality, aesthetic_quality (the paper's three,
  always), then each metric of the registry (metrics.registry) that its `shown` rule keeps, in its
  `column` rank: the other VBench dimensions present, other per-video metrics present, then cosine,
  ssim, psnr (then mse where scored), lpips (always), then adherence for tiny-shapes. Labels, number
  formats and directions (higher is better except LPIPS and MSE) are the registry's too.
* Recipe order: `recipe_order` when given (a study's order; recipes not in it follow), else the order
  in which recipes first appear among the runs (paths in command-line order, each walked sorted).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from . import runstore
from .errors import UserError
from .metrics.registry import UNREGISTERED_COLUMN, find_metric, list_metrics

METRICS_NAME = "metrics.json"

# The MXAttention paper's three VBench columns come first, shown whether scored or not; the other
# columns and their order, labels, number formats and directions are the metric registry's.
PAPER_VBENCH = ("subject_consistency", "imaging_quality", "aesthetic_quality")
FORMATS = ("table", "md", "csv", "json")
NOT_EVALUATED = "not evaluated (run `lowbit-video evaluate --metrics {name}`)"

Value = Any  # float | {"unavailable": str}


def is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def unavailable(v: Any) -> str | None:
    """The reason when `v` is not a usable number, else None."""
    if is_number(v):
        return None
    if isinstance(v, dict) and "unavailable" in v:
        return str(v["unavailable"])
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return f"non-finite score ({v})"
    return f"not a score ({json.dumps(v)[:40]})"


def is_paired(metric: str) -> bool:
    spec = find_metric(metric)
    return spec is not None and spec.paired


def label(metric: str) -> str:
    spec = find_metric(metric)
    return spec.label if spec is not None and spec.label else metric


def higher_is_better(metric: str) -> bool:
    spec = find_metric(metric)
    return spec is None or spec.higher_is_better


def decimals(metric: str) -> int:
    """Decimals a metric's values are shown with."""
    spec = find_metric(metric)
    return spec.decimals if spec is not None else 4


# --------------------------------------------------------------------------------- data


@dataclass
class RunInfo:
    dir: Path
    model: str
    family: str | None
    recipe: str
    prompt: str
    seed: int
    meta: dict
    metrics: dict | None = None          # the parsed metrics.json, None when absent/unreadable
    given: bool = True                   # False: found beside a given run (baseline sibling)

    @property
    def pair(self) -> tuple[str, int]:
        return (self.prompt, self.seed)

    @property
    def record(self) -> runstore.RunRecord:
        return runstore.RunRecord.of(self.dir, self.meta)

    def metric(self, name: str) -> Value:
        values = (self.metrics or {}).get("metrics") or {}
        if name not in values:
            return {"unavailable": NOT_EVALUATED.format(name=name)}
        v = values[name]
        why = unavailable(v)
        return {"unavailable": why} if why else float(v)


@dataclass
class Row:
    recipe: str
    n: int
    values: dict[str, Value]
    pairs: list[tuple[str, int]]
    runs: list[Path] = field(default_factory=list)


@dataclass
class ModelComparison:
    model: str
    columns: list[str]
    baseline_row: Row | None
    rows: list[Row]
    best: dict[str, str]
    pairs: list[tuple[str, int]]          # (prompt, seed) of the baseline runs of this model
    pair_sets_differ: bool
    runs: dict[tuple[str, str, int], RunInfo]   # (recipe, prompt, seed) -> run (frame grids)

    def row(self, recipe: str) -> Row | None:
        return next((r for r in self.rows if r.recipe == recipe), None)


@dataclass
class Comparison:
    baseline: str
    models: list[ModelComparison]
    warnings: list[str] = field(default_factory=list)
    left_out: list[dict] = field(default_factory=list)   # [{"dir", "reason"}]

    def model(self, name: str | None = None) -> ModelComparison:
        if name is None:
            if len(self.models) != 1:
                raise UserError(f"several models compared ({', '.join(m.model for m in self.models)}); name one")
            return self.models[0]
        for m in self.models:
            if m.model == name:
                return m
        raise UserError(f"model {name!r} not among the compared runs ({', '.join(m.model for m in self.models)})")


# ------------------------------------------------------------------------------ collect


def _run_info(run: runstore.RunRecord | None, given: bool) -> RunInfo | None:
    """The run as compare counts it; None when meta.json is unreadable or does not identify it."""
    if run is None or not run.identified:
        return None
    return RunInfo(dir=run.dir, model=str(run.model), family=run.family, recipe=str(run.recipe), prompt=run.prompt,
                   seed=run.seed, meta=run.meta, given=given)


def _read_metrics(run: Path) -> tuple[dict | None, str | None]:
    p = run / METRICS_NAME
    if not p.is_file():
        return None, "no metrics.json"
    try:
        data = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        return None, f"unreadable metrics.json ({type(e).__name__})"
    if not isinstance(data, dict) or not isinstance(data.get("metrics"), dict):
        return None, "metrics.json without a \"metrics\" object"
    return data, None


def find_runs(paths: Sequence[str | os.PathLike]) -> list[Path]:
    """Complete runs at or under each path, in argument order, duplicates removed."""
    return runstore.find_runs(paths)


def _group_warning(reason: str, dirs: list[str]) -> str:
    shown = ", ".join(dirs[:3]) + (f" and {len(dirs) - 3} more" if len(dirs) > 3 else "")
    return f"{len(dirs)} run{'s' * (len(dirs) != 1)} left out ({reason}): {shown}"


def _mean(values: list[Value], n_label: str = "runs") -> Value:
    """Mean of floats; {"unavailable": reason} if any value is unavailable."""
    if not values:
        return {"unavailable": "no scored runs"}
    reasons = [unavailable(v) for v in values]
    bad = [r for r in reasons if r is not None]
    if not bad:
        return float(sum(float(v) for v in values) / len(values))
    distinct = list(OrderedDict.fromkeys(bad))
    why = "; ".join(distinct[:2]) + (f"; +{len(distinct) - 2} more reasons" if len(distinct) > 2 else "")
    if len(bad) < len(values):
        why += f" ({len(bad)} of {len(values)} {n_label})"
    return {"unavailable": why}


def _columns(scored_runs: list[RunInfo], runs: list[RunInfo]) -> list[str]:
    """A model's columns: the paper's VBench three, then every registered metric its `shown` rule
    keeps (in `column` rank order), metrics the registry does not know among them (by name).
    `scored_runs`: the model's runs with metrics.json; `runs`: all of them."""
    present: "OrderedDict[str, None]" = OrderedDict()
    scored = set()
    for r in scored_runs:
        for k, v in ((r.metrics or {}).get("metrics") or {}).items():
            present[k] = None
            if not isinstance(v, dict):
                scored.add(k)

    def shown(spec) -> bool:
        if spec.shown == "applies":
            return spec.name in present or any(spec.applies_to(r.model, r.family) for r in runs)
        return spec.shown == "always" or spec.name in (scored if spec.shown == "scored" else present)

    ranked = [(m.column, m.name) for m in list_metrics() if m.name not in PAPER_VBENCH and shown(m)]
    ranked += [(UNREGISTERED_COLUMN, k) for k in present if find_metric(k) is None]
    return list(PAPER_VBENCH) + [name for _, name in sorted(ranked)]


def _best(rows: Sequence[Row], columns: Sequence[str]) -> dict[str, str]:
    """metric -> recipe with the best value among `rows` (first in row order on ties; rows without a
    number are skipped). Empty when there are fewer than two rows (nothing to rank)."""
    best: dict[str, str] = {}
    if len(rows) < 2:
        return best
    for c in columns:
        scored = [(r.values.get(c), r.recipe) for r in rows if is_number(r.values.get(c))]
        if not scored:
            continue
        pick = max if higher_is_better(c) else min
        target = pick(v for v, _ in scored)
        best[c] = next(rec for v, rec in scored if v == target)
    return best


def collect(run_dirs: Sequence[str | os.PathLike], baseline: str = "fp16",
            recipe_order: Sequence[str] | None = None) -> Comparison:
    """Read the runs at or under `run_dirs` and aggregate per (model, recipe). See the module doc."""
    infos, left_out = _plan_runs(run_dirs, baseline)
    warnings = _read_scores(infos, left_out, run_dirs)
    by_dir = {i.dir: i for i in infos.values()}
    models: "OrderedDict[str, list[RunInfo]]" = OrderedDict()
    for info in infos.values():
        models.setdefault(info.model, []).append(info)
    not_paired: "OrderedDict[str, list[str]]" = OrderedDict()
    out_models = []
    for model, runs in models.items():
        mc = _compare_model(model, runs, baseline, recipe_order, by_dir, not_paired, warnings)
        if mc is not None:
            out_models.append(mc)
    for why, dirs in not_paired.items():
        warnings.append(_group_warning(why, dirs))
        left_out.extend({"dir": d, "reason": why} for d in dirs)
    if not out_models:
        raise UserError("nothing to compare: " + "; ".join(warnings))
    return Comparison(baseline=baseline, models=out_models, warnings=warnings, left_out=left_out)


def _plan_runs(run_dirs, baseline: str) -> tuple["OrderedDict[Path, RunInfo]", list[dict]]:
    """The runs given, plus the baseline run beside each (runstore.find_baseline); those left out."""
    left_out: list[dict] = []
    infos: "OrderedDict[Path, RunInfo]" = OrderedDict()
    damaged: list[tuple[Path, str]] = []
    for d in runstore.find_runs(run_dirs, damaged):
        info = _run_info(runstore.read_run(d), given=True)
        if info is None:
            left_out.append({"dir": str(d), "reason": "meta.json without model, recipe, prompt or seed"})
            continue
        infos[d] = info
    left_out += [{"dir": str(d), "reason": f"damaged run: {why}"} for d, why in damaged]
    for info in list(infos.values()):
        if info.recipe == baseline:
            continue
        sibling = runstore.find_baseline(info.record, baseline)
        if sibling is not None and sibling.dir not in infos and (b := _run_info(sibling, given=False)) is not None:
            infos[sibling.dir] = b
    if not any(i.recipe == baseline for i in infos.values()):
        recipes = ", ".join(OrderedDict.fromkeys(i.recipe for i in infos.values())) or "none"
        raise UserError(f"--baseline {baseline}: no run of recipe {baseline!r} among the runs found "
                        f"(recipes found: {recipes})")
    return infos, left_out


def _read_scores(infos: Mapping[Path, RunInfo], left_out: list[dict], run_dirs) -> list[str]:
    """Read each run's metrics.json; the warnings naming every run left out so far, by reason."""
    missing: list[str] = []
    for info in infos.values():
        info.metrics, why = _read_metrics(info.dir)
        if info.metrics is None and why != "no metrics.json":
            left_out.append({"dir": str(info.dir), "reason": why})
        elif info.metrics is None and info.given:
            missing.append(str(info.dir))
    if not any(i.metrics is not None for i in infos.values()):
        args = " ".join(map(str, run_dirs))
        raise UserError(f"none of the {len(infos)} runs found has metrics.json; run `lowbit-video evaluate {args}` first")
    # every run left out so far is named in a warning, grouped by reason (rows would otherwise
    # average different prompt sets without a word)
    by_reason: "OrderedDict[str, list[str]]" = OrderedDict()
    for x in left_out:
        by_reason.setdefault(x["reason"], []).append(x["dir"])
    warnings = [_group_warning(why, dirs) for why, dirs in by_reason.items()]
    if missing:
        warnings.append(_group_warning("no metrics.json; run `lowbit-video evaluate` on them first", missing))
        left_out.extend({"dir": d, "reason": "no metrics.json"} for d in missing)
    return warnings


def _compare_model(model: str, runs: list[RunInfo], baseline: str, recipe_order, by_dir: Mapping[Path, RunInfo],
                   not_paired: "OrderedDict[str, list[str]]", warnings: list[str]) -> ModelComparison | None:
    """One model's table (None: nothing to compare); runs not counted go to `not_paired` by reason."""
    columns = _columns([r for r in runs if r.metrics is not None], runs)
    index: dict[tuple[str, str, int], RunInfo] = {}
    for r in runs:
        key = (r.recipe, r.prompt, r.seed)
        if key in index:
            not_paired.setdefault("a second run of the same model, recipe, prompt and seed (the first is used)",
                                  []).append(str(r.dir))
            continue
        index[key] = r
    base_runs = [r for r in index.values() if r.recipe == baseline]
    baseline_row = _baseline_row(base_runs, baseline, columns) if base_runs else None
    rows = _recipe_rows(index, baseline, recipe_order, columns, by_dir, not_paired)
    if not rows and baseline_row is None:
        warnings.append(f"{model}: nothing to compare (no baseline runs and no paired runs)")
        return None
    if not rows:
        warnings.append(f"{model}: no quantized runs paired with {baseline}; only the baseline row is shown")
    differ = len({tuple(sorted(r.pairs)) for r in rows}) > 1
    if differ:
        sizes = ", ".join(f"{r.recipe} {r.n}" for r in rows)
        warnings.append(f"{model}: recipes are averaged over different (prompt, seed) pairs ({sizes}); "
                        "their rows are not over the same videos")
    return ModelComparison(model=model, columns=columns, baseline_row=baseline_row, rows=rows,
                           best=_best(rows, columns), pairs=[r.pair for r in base_runs], pair_sets_differ=differ,
                           runs=index)


def _baseline_row(base_runs: list[RunInfo], baseline: str, columns: Sequence[str]) -> Row:
    """The per-video metrics averaged over the baseline runs that have metrics.json."""
    scored = [r for r in base_runs if r.metrics is not None]
    values = {c: _mean([r.metric(c) for r in scored], "baseline runs") for c in columns if not is_paired(c)}
    return Row(recipe=baseline, n=len(scored), values=values, pairs=[r.pair for r in scored],
               runs=[r.dir for r in scored])


def _recipe_rows(index: Mapping[tuple, RunInfo], baseline: str, recipe_order, columns: Sequence[str],
                 by_dir: Mapping[Path, RunInfo], not_paired: "OrderedDict[str, list[str]]") -> list[Row]:
    """A row per quantized recipe with runs paired against the baseline, in the recipe order."""
    recipes: list[str] = list(OrderedDict.fromkeys(r.recipe for r in index.values() if r.recipe != baseline))
    if recipe_order:
        first = [r for r in recipe_order if r in recipes]
        recipes = first + [r for r in recipes if r not in first]
    rows: list[Row] = []
    for recipe in recipes:
        counted: list[RunInfo] = []
        for r in index.values():
            if r.recipe != recipe or r.metrics is None:
                continue
            why = _pairing_problem(r, baseline, by_dir)
            if why:
                not_paired.setdefault(why, []).append(str(r.dir))
            else:
                counted.append(r)
        if counted:
            rows.append(Row(recipe=recipe, n=len(counted), values={c: _mean([r.metric(c) for r in counted])
                                                                   for c in columns},
                            pairs=[r.pair for r in counted], runs=[r.dir for r in counted]))
    return rows


def _pairing_problem(run: RunInfo, baseline: str, by_dir: Mapping[Path, RunInfo]) -> str | None:
    """Why `run`'s paired metrics cannot be counted against `baseline`, or None."""
    m = run.metrics or {}
    b = m.get("baseline")
    if not isinstance(b, dict):
        return f"no {baseline} run of the same model, prompt, seed and steps when it was evaluated"
    if b.get("recipe") != baseline:
        return (f"evaluated against {b.get('recipe')!r}, not {baseline!r}; "
                f"run `lowbit-video evaluate --baseline {baseline}` on them")
    own = (m.get("run") or {}).get("frames_sha256")
    if own and run.meta.get("frames_sha256") and own != run.meta["frames_sha256"]:
        return "metrics.json is stale (the run was regenerated since); run `lowbit-video evaluate` again"
    bdir = b.get("dir")
    if bdir and b.get("frames_sha256"):
        bpath = (runstore.output_root(run.dir) / bdir).resolve()
        binfo = by_dir.get(bpath)
        bmeta = binfo.meta if binfo is not None else (runstore.read_meta(bpath) or {})
        if bmeta.get("frames_sha256") and bmeta["frames_sha256"] != b["frames_sha256"]:
            return f"the {baseline} run was regenerated after evaluation; run `lowbit-video evaluate --overwrite` again"
    return None


# ---------------------------------------------------------------------------- rendering


def fmt_value(metric: str, v: Value) -> str:
    if v is None:
        return "–"
    if not is_number(v):
        return "n/a"
    return f"{v:.{decimals(metric)}f}"


def _header(metric: str) -> str:
    return f"{label(metric)} {'↑' if higher_is_better(metric) else '↓'}"


def _display_rows(mc: ModelComparison, rows: Sequence[tuple[str, str]] | None) -> list[tuple[str, Row]]:
    if rows is None:
        return [(r.recipe, r) for r in mc.rows]
    shown = []
    for lab, recipe in rows:
        row = mc.row(recipe)
        if row is None:
            row = Row(recipe=recipe, n=0, values={}, pairs=[])
        shown.append((lab, row))
    return shown


def _cell(row: Row, c: str) -> Value:
    return row.values.get(c, {"unavailable": "no scored runs"})


def render_markdown(comp: Comparison, model: str | None = None, *, rows: Sequence[tuple[str, str]] | None = None,
                    columns: Sequence[str] | None = None, include_baseline: bool = True,
                    extra_columns: Sequence[tuple[str, Mapping[str, str]]] = (), label_header: str = "Method",
                    title: bool = True, notes: bool = True) -> str:
    """Markdown table(s). `model=None`: every model of the comparison, one section each (then `rows`
    and `extra_columns` apply to each). See the module doc for the arguments."""
    models = comp.models if model is None else [comp.model(model)]
    parts = [_markdown_one(comp, mc, rows, columns, include_baseline, extra_columns, label_header, title, notes)
             for mc in models]
    return "\n".join(parts)


def _markdown_one(comp, mc, rows, columns, include_baseline, extra_columns, label_header, title, notes) -> str:
    cols = list(columns) if columns is not None else list(mc.columns)
    shown = _display_rows(mc, rows)
    best = _best([r for _, r in shown], cols)
    lines = []
    if title:
        lines += [f"### {mc.model}", "",
                  f"Baseline {comp.baseline}: {len(mc.pairs)} (prompt, seed) pairs. VBench and adherence: per video; "
                  f"Cosine, SSIM, PSNR, LPIPS: against {comp.baseline} of the same prompt and seed. "
                  "Bold: best among the quantized rows.", ""]
    head = [label_header] + [h for h, _ in extra_columns] + [_header(c) for c in cols] + ["n"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("| " + " | ".join(["---"] * (1 + len(extra_columns)) + ["---:"] * (len(cols) + 1)) + " |")
    if include_baseline and mc.baseline_row is not None:
        b = mc.baseline_row
        cells = [comp.baseline] + [str(m.get(comp.baseline, "")) for _, m in extra_columns]
        cells += ["–" if is_paired(c) else fmt_value(c, b.values.get(c, {"unavailable": "not evaluated"})) for c in cols]
        lines.append("| " + " | ".join(cells + [str(b.n)]) + " |")
    for lab, row in shown:
        cells = [lab] + [str(m.get(row.recipe, "")) for _, m in extra_columns]
        for c in cols:
            text = fmt_value(c, _cell(row, c))
            cells.append(f"**{text}**" if best.get(c) == row.recipe else text)
        lines.append("| " + " | ".join(cells + [str(row.n)]) + " |")
    if notes:
        note_rows = list(shown)
        if include_baseline and mc.baseline_row is not None:
            note_rows.insert(0, (comp.baseline, mc.baseline_row))
        n = _notes_for(note_rows, cols, comp.baseline if include_baseline else None)
        if n:
            lines += ["", "n/a:"] + [f"- {x}" for x in n]
    lines.append("")
    return "\n".join(lines)


def _notes_for(shown: Sequence[tuple[str, Row]], cols: Sequence[str], baseline_label: str | None) -> list[str]:
    reasons: "OrderedDict[tuple[str, str], list[str]]" = OrderedDict()
    for i, (lab, row) in enumerate(shown):
        is_base = baseline_label is not None and i == 0
        for c in cols:
            if is_base and is_paired(c):
                continue
            v = row.values.get(c, {"unavailable": "not evaluated" if is_base else "no scored runs"})
            why = unavailable(v)
            if why is not None:
                reasons.setdefault((c, why), []).append(lab)
    return [f"{label(c)} ({', '.join(labs)}): {why}" for (c, why), labs in reasons.items()]


def rows_json(comp: Comparison, model: str | None, rows: Sequence[tuple[str, str]], *,
              columns: Sequence[str] | None = None, label_key: str = "config") -> list[dict]:
    """[{label_key: label, "recipe", "n", <metric>: float | {"unavailable": reason}}] in the given order."""
    mc = comp.model(model)
    cols = list(columns) if columns is not None else list(mc.columns)
    out = []
    for lab, row in _display_rows(mc, rows):
        out.append({label_key: lab, "recipe": row.recipe, "n": row.n,
                    **{c: _json_value(_cell(row, c)) for c in cols}})
    return out


def _json_value(v: Value) -> Value:
    why = unavailable(v)
    return {"unavailable": why} if why is not None else float(v)


def _pairs_json(pairs: Sequence[tuple[str, int]]) -> list[dict]:
    return [{"prompt": p, "seed": s} for p, s in pairs]


def to_json(comp: Comparison) -> dict:
    models = []
    for mc in comp.models:
        b = mc.baseline_row
        baseline_row = None
        if b is not None:
            baseline_row = {"recipe": comp.baseline, "n": b.n,
                            **{c: _json_value(v) for c, v in b.values.items()}}
        models.append({
            "model": mc.model, "n_pairs": len(mc.pairs), "pairs": _pairs_json(mc.pairs),
            "columns": list(mc.columns), "baseline_row": baseline_row,
            "rows": [{"recipe": r.recipe, "n": r.n, **{c: _json_value(r.values[c]) for c in mc.columns},
                      "pairs": _pairs_json(r.pairs)} for r in mc.rows],
            "best": dict(mc.best), "pair_sets_differ": mc.pair_sets_differ,
            "higher_is_better": {c: higher_is_better(c) for c in mc.columns},
        })
    return {"baseline": comp.baseline, "models": models, "warnings": list(comp.warnings),
            "left_out": list(comp.left_out)}


def render_json(comp: Comparison, extra: Mapping[str, Any] | None = None) -> str:
    return json.dumps({**to_json(comp), **(extra or {})}, indent=2, allow_nan=False) + "\n"


def render_csv(comp: Comparison) -> str:
    """One header line; one line per (model, recipe), the baseline first; unavailable values are
    empty cells explained in the `note` column."""
    cols: list[str] = []
    for mc in comp.models:
        cols += [c for c in mc.columns if c not in cols]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["model", "recipe", "role", "n"] + cols + ["note"])

    def cells(row: Row, base: bool) -> tuple[list[str], str]:
        vals, notes = [], []
        for c in cols:
            if base and is_paired(c):
                vals.append("")
                continue
            v = row.values.get(c)
            if v is None:
                vals.append("")
                continue
            why = unavailable(v)
            if why is None:
                vals.append(repr(float(v)))
            else:
                vals.append("")
                notes.append(f"{c}: {why}")
        if base:
            notes.insert(0, "baseline (paired metrics not applicable)")
        return vals, "; ".join(notes)

    for mc in comp.models:
        if mc.baseline_row is not None:
            vals, note = cells(mc.baseline_row, True)
            w.writerow([mc.model, comp.baseline, "baseline", mc.baseline_row.n] + vals + [note])
        for r in mc.rows:
            vals, note = cells(r, False)
            w.writerow([mc.model, r.recipe, "quantized", r.n] + vals + [note])
    return buf.getvalue()


def _has_number(mc: ModelComparison, column: str) -> bool:
    """Whether any row (the baseline too, for unpaired columns) has a number in `column`."""
    rows = list(mc.rows) + ([mc.baseline_row] if mc.baseline_row is not None and not is_paired(column) else [])
    return any(isinstance(r.values.get(column), (int, float)) for r in rows)


def render_table(comp: Comparison, marker: str = "") -> list[Any]:
    """rich Tables (one per model), each followed by its n/a notes (strings). The best quantized
    value per column is bold green, followed by `marker` (e.g. "*" where styles do not show)."""
    from rich.table import Table

    items: list[Any] = []
    what = f"bold{' / ' + marker if marker else ''}"
    for mc in comp.models:
        t = Table(title=f"{mc.model} · vs {comp.baseline} · {len(mc.pairs)} (prompt, seed) pairs",
                  caption=f"{what}: best among quantized recipes; '–': not applicable to the baseline")
        # A terminal table stays readable: columns n/a for every row are left out (named below);
        # md/csv/json keep every column.
        columns = [c for c in mc.columns if _has_number(mc, c)]
        hidden = [c for c in mc.columns if c not in columns]
        t.add_column("recipe", no_wrap=True)
        for c in columns:
            t.add_column(_header(c), justify="right", no_wrap=True)
        t.add_column("n", justify="right")
        if mc.baseline_row is not None:
            b = mc.baseline_row
            t.add_row(comp.baseline, *("–" if is_paired(c) else fmt_value(c, b.values.get(c)) for c in columns),
                      str(b.n), style="dim", end_section=True)
        for r in mc.rows:
            cells = []
            for c in columns:
                text = fmt_value(c, r.values[c])
                cells.append(f"[bold green]{text}{marker}[/bold green]" if mc.best.get(c) == r.recipe else text)
            t.add_row(r.recipe, *cells, str(r.n))
        items.append(t)
        if hidden:
            items.append(f"  not shown (n/a for every recipe): {', '.join(_header(c) for c in hidden)}")
        shown = ([(comp.baseline, mc.baseline_row)] if mc.baseline_row is not None else []) + [(r.recipe, r) for r in mc.rows]
        for note in _notes_for(shown, mc.columns, comp.baseline if mc.baseline_row is not None else None):
            items.append(f"  n/a · {note}")
    return items


def render_text(comp: Comparison, width: int = 160) -> str:
    """The rich table as plain text (for `--format table --out FILE`)."""
    from rich.console import Console

    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system=None, soft_wrap=True)
    for item in render_table(comp, marker="*"):
        console.print(item, highlight=False)
    return buf.getvalue()


def render(comp: Comparison, fmt: str, extra: Mapping[str, Any] | None = None) -> str:
    if fmt == "md":
        return render_markdown(comp)
    if fmt == "csv":
        return render_csv(comp)
    if fmt == "json":
        return render_json(comp, extra)
    if fmt == "table":
        return render_text(comp)
    raise UserError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")


__all__ = [
    "Comparison", "ModelComparison", "Row", "RunInfo", "FORMATS", "PAPER_VBENCH",
    "collect", "decimals", "find_runs", "fmt_value", "higher_is_better", "is_paired", "label", "render", "render_csv", "render_json",
    "render_markdown", "render_table", "render_text", "rows_json", "to_json",
]
