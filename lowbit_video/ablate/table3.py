"""`ablate table3`: the MXAttention paper's Table 3, a sequential ablation under fully 4-bit attention.

Checks that every row recipe is fully 4-bit (no high-precision block or step fallback) and that
its Hadamard / PNQ / UOS flags in the study file match the recipe; generates only the missing runs
(`generate` skips complete ones); scores them (`evaluate` skips what is scored); aggregates with
`compare` over exactly these runs; writes <out>/table3.md and <out>/table3.json. Under torchrun each
rank generates and scores its share of the runs and rank 0 writes the table; a `--shard i/n` job does
its share and writes nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import UserError
from ..recipes import Recipe, load_recipe
from ..toml_schema import Where
from .common import AblateOptions, Reporter, command, md_table, resolve, share_result, write_json, write_text, effective_steps
from .study import CaptureParams, Study, baseline_recipe, distinct_rows, metric_columns, recipe_name, table_rows

CHECK = "✓"
ROW_KEYS = ("config", "recipe", "hadamard", "pnq", "uos")
DEFAULT_METRICS = ("subject_consistency", "imaging_quality", "aesthetic_quality", "cosine", "ssim", "psnr")


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


def parameters(w: Where, p: str, raw: Any, capture: CaptureParams | None) -> Table3Params:
    """The [table3] table: rows (config label, recipe, the paper's three flags), baseline, metric columns."""
    t = w.table(raw, p, {"baseline", "rows", "metrics"})
    rows = [Table3Row(config=w.scalar(rt, "config", str, "", rp),
                      recipe=recipe_name(w, rp + "recipe", w.scalar(rt, "recipe", str, "", rp)),
                      hadamard=w.scalar(rt, "hadamard", bool, False, rp),
                      pnq=w.scalar(rt, "pnq", bool, False, rp), uos=w.scalar(rt, "uos", bool, False, rp))
            for rp, rt in table_rows(w, p, t, ROW_KEYS)]
    distinct_rows(w, p, rows)
    metrics = metric_columns(w, p, t, DEFAULT_METRICS)
    return Table3Params(baseline=baseline_recipe(w, p, t, rows), rows=tuple(rows), metrics=metrics)


def recipe_flags(recipe: Recipe) -> dict[str, bool]:
    """What the recipe really does: fixed Hadamard on Q/K, PNQ placement, UOS (ceil rule, Q_max 7.25) on every MXFP4 operand."""
    a = recipe.attention
    mx = [a.operand(o) for o in ("q", "k", "v", "p") if a.operand(o).format == "mxfp4"]
    return {"hadamard": a.rotation == "hadamard", "pnq": a.placement == "pnq",
            "uos": bool(mx) and all(op.rule == "uos" and op.qmax == 7.25 for op in mx)}


def check_rows(study: Study) -> list[tuple[object, Recipe]]:
    """Each row's recipe, after checking it is fully 4-bit and that its flags match the study file."""
    p: Table3Params = study.params  # type: ignore[assignment]
    out = []
    for row in p.rows:
        recipe = load_recipe(row.recipe)
        pol = recipe.policy
        if pol.high_precision_blocks or pol.high_precision_steps or pol.high_precision_calls:
            raise UserError(
                f"study {study.name}: row {row.config!r} uses recipe {recipe.name} ({recipe.source}), which keeps a "
                f"high-precision fallback (blocks {list(pol.high_precision_blocks)}, steps {list(pol.high_precision_steps)}, "
                f"calls {[list(c) for c in pol.high_precision_calls]}); "
                "Table 3 is fully 4-bit")
        if not recipe.attention.quantized or "self" not in pol.apply_to:
            raise UserError(f"study {study.name}: row {row.config!r}: recipe {recipe.name} does not quantize self-attention")
        flags = recipe_flags(recipe)
        for key, have in flags.items():
            if getattr(row, key) != have:
                raise UserError(f"study {study.name}: row {row.config!r} says {key} = {str(getattr(row, key)).lower()} "
                                f"but recipe {recipe.name} has {key} = {str(have).lower()}")
        out.append((row, recipe))
    return out


def run(study: Study, opts: AblateOptions, reporter: Reporter | None = None) -> dict:
    from .. import compare
    from .scored import baseline_row, generate_and_score

    rep = reporter or Reporter()
    p: Table3Params = study.params  # type: ignore[assignment]
    r = resolve(study, opts)
    rows = check_rows(study)
    sc = generate_and_score(r, baseline=p.baseline, recipes=[x.recipe for x, _ in rows], metrics=p.metrics, rep=rep)
    metrics = sc.metrics
    if sc.comp is None:
        return share_result(study, r, **sc.mine)
    comp = sc.comp
    mc = comp.model(r.model)
    order = [(x.config, x.recipe) for x, _ in rows]
    out_rows = []
    for (x, _), j in zip(rows, compare.rows_json(comp, r.model, order, columns=metrics, label_key="config")):
        out_rows.append({"config": x.config, "recipe": x.recipe, "hadamard": x.hadamard, "pnq": x.pnq, "uos": x.uos,
                         **{k: v for k, v in j.items() if k not in ("config", "recipe")}})
    result = {
        "study": study.name, "model": r.model, "prompts": r.prompts, "seeds": list(r.seeds), "steps": effective_steps(r),
        "generated": sc.generated, "reused": sc.reused, "metrics": metrics,
        "rows": out_rows, "baseline": baseline_row(comp, r.model),
        "best": {c: next((x.config for x, _ in rows if x.recipe == rec), rec) for c, rec in mc.best.items() if c in metrics},
        "warnings": list(comp.warnings), "command": command(study, r), "paper": list(study.paper_rows),
    }
    md = render_markdown(result, study, comp, order, metrics)
    write_json(r.out / "table3.json", result)
    write_text(r.out / "table3.md", md)
    result["files"] = [str(r.out / "table3.md"), str(r.out / "table3.json")]
    return result


def render_markdown(result: dict, study: Study, comp, order, metrics) -> str:
    from .. import compare

    flags = {key: {row["recipe"]: (CHECK if row[key] else "–") for row in result["rows"]} for key in ("hadamard", "pnq", "uos")}
    table = compare.render_markdown(
        comp, result["model"], rows=order, columns=metrics, include_baseline=True,
        extra_columns=[("Hadamard", flags["hadamard"]), ("PNQ", flags["pnq"]), ("UOS", flags["uos"])],
        label_header="Configuration", title=False, notes=True)
    lines = [f"# Sequential ablation under fully 4-bit attention ({study.paper or 'Table 3'})", "",
             f"Command: `{result['command']}`", "",
             f"Model {result['model']}, prompts {result['prompts']}, seeds {result['seeds']}, steps "
             f"{result['steps']}. Every attention block at every denoising step is quantized (the row recipes "
             "have no high-precision fallback; checked). VBench and adherence: per video; Cosine, SSIM, PSNR, LPIPS: "
             f"against {result['baseline']['recipe'] if result['baseline'] else 'fp16'} of the same prompt and seed, "
             "averaged over frames, then over prompts x seeds. Bold: best among the four rows.", "",
             table]
    if result["warnings"]:
        lines += ["Warnings:", *[f"- {w}" for w in result["warnings"]], ""]
    paper = result["paper"]
    if paper:
        pm = [m for m in ("subject_consistency", "imaging_quality", "aesthetic_quality", "cosine", "ssim", "psnr")]
        prow = [[str(x.get("model", "")), str(x.get("config", "")),
                 *((f"{x[m]:.2f}" if m == "psnr" else f"{x[m]:.4f}") if m in x else "–" for m in pm)] for x in paper]
        lines += ["The paper's Table 3 (Wan2.2 and HunyuanVideo, for reference):", "",
                  md_table(["Model", "Configuration", *(compare.label(m) for m in pm)], prow, align=["l", "l"] + ["r"] * len(pm))]
    return "\n".join(lines)
