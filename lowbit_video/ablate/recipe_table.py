"""`ablate rotate-table` and `ablate draft-pooling`: a paper's recipe table, on videos and at operator level.

rotate-table is the RotateAttention paper's main table and ablation (INT4 SageAttention-style
baseline, range-rectified P̃, half / interleaved / full rotation, and the non-orthogonal negative
control); draft-pooling is DraftAttention2's pooling ablation (average vs average + max pooled draft
at fixed sparsity and precision budgets) with its Figure 5 (error at equal budget, single precision
against mixed). Both, from recipes/ablations/<study>.toml:

1. check that every row's flags (Optim-P, rotation, V Hadamard, orthogonality; precision, pooling)
   are what its recipe does;
2. generate the missing runs of the rows and the baseline, score them (`evaluate`), and average
   over prompts x seeds (`compare`) in the paper's column order;
3. capture Q/K/V (once; shared with qmax-sweep and rowsum) and score every row's attention output
   on those and on synthetic inputs against float64 softmax attention (rel-L2, cosine), with each
   input's attention entropy;
4. draft-pooling: the Figure 5 sweep on the same inputs;
5. check each claim of the study file (row A beats row B) on every table, and write
   <out>/<study>.md and .json with the paper's rows beside.
"""

from __future__ import annotations

from itertools import chain

from .. import compare
from ..errors import UserError
from ..recipes import Recipe, load_recipe
from .common import (AblateOptions, Reporter, command, effective_steps, md_table, resolve, share_result, write_json,
                     write_text)
from .recipe_table_params import PoolingRow, RotateRow, TableParams
from .study import Study

CHECK = "✓"
OPERATOR_METRICS = ("rel_l2", "cosine")


# ------------------------------------------------------------------------------------ row checks


def rotate_flags(recipe: Recipe) -> dict:
    """What an INT4 recipe does, in the paper's columns."""
    a = recipe.attention
    return {"optim_p": a.p.format == "int4" and a.p.scheme == "affine",
            "rotation": "full" if a.rotation == "hadamard" else a.rotation,
            "v_hadamard": a.rotate_v, "orthogonal": a.rotation_sigma == 1.0}


def pooling_flags(recipe: Recipe) -> dict:
    """The precisions of a draft recipe's retained pairs ("4/8/16", ...) and its draft's pooling."""
    d = recipe.attention.draft
    bits = [b for b, share in ((4, d.nvfp4), (8, d.int8), (16, d.fp16)) if share > 0]
    return {"precision": "/".join(map(str, bits)), "pooling": "avg+max" if d.maxpool_weight > 0 else "avg"}


def check_rows(study: Study) -> list[tuple[RotateRow | PoolingRow, Recipe]]:
    p: TableParams = study.params  # type: ignore[assignment]
    out = []
    for row in p.rows:
        recipe = load_recipe(row.recipe)
        rotate = isinstance(row, RotateRow)
        if rotate and not all(recipe.attention.operand(o).format == "int4" for o in "qkvp"):
            raise UserError(f"study {study.name}: row {row.config!r}: recipe {recipe.name} is not an INT4 recipe")
        flags = rotate_flags(recipe) if rotate else pooling_flags(recipe)
        for key, have in flags.items():
            if getattr(row, key) != have:
                raise UserError(f"study {study.name}: row {row.config!r} says {key} = {getattr(row, key)!r} "
                                f"but recipe {recipe.name} has {key} = {have!r}")
        out.append((row, recipe))
    if not isinstance(p.rows[0], RotateRow):
        # fixed sparsity and precision budgets: one sparsity and block for all, one split per precision
        drafts = [(row, r.attention.draft) for row, r in out]
        if len({(d.sparsity, d.block) for _, d in drafts}) != 1:
            raise UserError(f"study {study.name}: the rows' recipes differ in sparsity or block (the budget is fixed)")
        split: dict[str, tuple] = {}
        for row, d in drafts:
            if split.setdefault(row.precision, (d.fp16, d.int8, d.nvfp4)) != (d.fp16, d.int8, d.nvfp4):
                raise UserError(f"study {study.name}: two {row.precision}-bit rows split the retained pairs differently")
    return out


def flag_columns(rows) -> list[tuple[str, dict[str, str]]]:
    """The paper's descriptive columns, as compare's extra columns {recipe: text}."""
    if isinstance(rows[0], RotateRow):
        yes = lambda b: CHECK if b else "–"
        return [("Datatype", {r.recipe: "INT4" for r in rows}), ("Optim-P", {r.recipe: yes(r.optim_p) for r in rows}),
                ("Rotation", {r.recipe: r.rotation.capitalize() if r.rotation != "none" else "W/O" for r in rows}),
                ("V Hadamard", {r.recipe: yes(r.v_hadamard) for r in rows}),
                ("Orthogonal", {r.recipe: yes(r.orthogonal) for r in rows})]
    return [("Precision", {r.recipe: f"{r.precision}-bit" for r in rows}),
            ("Pooling", {r.recipe: {"avg": "Avg", "avg+max": "Avg + Max"}[r.pooling] for r in rows})]


def row_flags(row) -> dict:
    keys = ("optim_p", "rotation", "v_hadamard", "orthogonal") if isinstance(row, RotateRow) else ("precision", "pooling")
    return {k: getattr(row, k) for k in keys}


def quantized_share(recipe: Recipe, num_blocks: int, steps: int) -> float:
    """Share of the self-attention calls (blocks x steps) the recipe's policy quantizes."""
    pol = recipe.policy
    n = sum(pol.quantizes(block=b, step=s, num_steps=steps, num_blocks=num_blocks)
            for b in range(num_blocks) for s in range(steps))
    return n / (num_blocks * steps)


# ------------------------------------------------------------------------------------ claims


TIE = "tie"
# Operator-level errors are deterministic; a rel-L2 within 0.5 % of the other row's (cosine: within
# 0.5 % of the gap to 1) is "no measurable difference", well above roundoff and below every effect
# the papers report.
OPERATOR_TOLERANCE = 0.005


def _compare(better, worse, higher: bool, tol: float = 0.0):
    """True / False: `better` wins / loses; TIE: equal (within `tol` relative); None: not numbers."""
    if not (compare.is_number(better) and compare.is_number(worse)):
        return None
    if abs(better - worse) <= tol * max(abs(better), abs(worse)):
        return TIE
    return better > worse if higher else better < worse


def verdict(outcomes: list) -> str:
    known = [o for o in outcomes if o is not None]
    if not known:
        return "n/a"
    decided = [o for o in known if o != TIE]
    if not decided:
        return "no measurable difference"
    if all(o is True for o in decided):
        return "reproduced" + (f" ({len(decided)} of {len(known)} metrics, the rest tied)" if len(decided) < len(known) else "")
    if not any(o is True for o in decided):
        return "not reproduced (reversed)"
    return f"mixed ({sum(o is True for o in decided)} of {len(known)} metrics)"


def check_claims(p: TableParams, video_rows: list[dict], metrics: list[str], operator: dict) -> list[dict]:
    by_config = {r["config"]: r for r in video_rows}
    recipe_of = {r.config: r.recipe for r in p.rows}
    paired = [m for m in metrics if compare.is_paired(m)]
    out = []
    for c in p.claims:
        b, w = by_config[c.better], by_config[c.worse]
        video = {m: _compare(b.get(m), w.get(m), compare.higher_is_better(m)) for m in paired}
        levels = {"videos": {"verdict": verdict(list(video.values())), "metrics": video}}
        for group, summary in operator.items():
            rb, rw = summary["recipes"][recipe_of[c.better]], summary["recipes"][recipe_of[c.worse]]
            res = {"rel_l2": _compare(rb["rel_l2"], rw["rel_l2"], False, OPERATOR_TOLERANCE),
                   "cosine": _compare(1 - rb["cosine"], 1 - rw["cosine"], False, OPERATOR_TOLERANCE)}
            levels[group] = {"verdict": verdict(list(res.values())), "metrics": res,
                             "rel_l2_ratio": rb["rel_l2"] / rw["rel_l2"] if rw["rel_l2"] > 0 else None}
        out.append({"claim": c.text, "better": c.better, "worse": c.worse, "levels": levels})
    return out


# ------------------------------------------------------------------------------------ the study


def run(study: Study, opts: AblateOptions, reporter: Reporter | None = None) -> dict:
    from . import operator as op
    from .captures import ensure_captures
    from .scored import baseline_row, generate_and_score

    rep = reporter or Reporter()
    p: TableParams = study.params  # type: ignore[assignment]
    r = resolve(study, opts)
    rows = check_rows(study)
    sc = generate_and_score(r, baseline=p.baseline, recipes=[x.recipe for x, _ in rows], metrics=p.metrics, rep=rep)
    metrics = sc.metrics
    captures = ensure_captures(r, p.capture, rep)  # every process makes its share of them
    if sc.comp is None:
        return share_result(study, r, **sc.mine)
    comp = sc.comp
    order = [(x.config, x.recipe) for x, _ in rows]
    video_rows = []
    for (x, _), j in zip(rows, compare.rows_json(comp, r.model, order, columns=metrics, label_key="config")):
        video_rows.append({"config": x.config, "recipe": x.recipe, **row_flags(x),
                           **{k: v for k, v in j.items() if k not in ("config", "recipe")}})

    recipes = [recipe for _, recipe in rows]
    names = [x.recipe for x, _ in rows]
    chosen = op.select_samples(captures, p.operator_samples)
    n_syn = len(p.synthetic.sources) * len(p.synthetic.seeds)
    rep.stage(f"operator level: {len(names)} recipes on {len(chosen)} captured + {n_syn} synthetic inputs",
              len(chosen) + n_syn)
    device = r.device
    per_input = op.score_inputs(chain(op.captured_inputs(chosen, device), op.synthetic_inputs(p.synthetic, device)),
                                recipes, rep.advance)
    rep.done()
    operator = op.summarise(per_input, names)

    budget = None
    if p.budget is not None:
        b_caps = op.select_samples(captures, p.budget.samples) if p.budget.samples else []
        groups: dict[str, list] = {}
        for x in chain(op.captured_inputs(b_caps, device), op.synthetic_inputs(p.synthetic, device)):
            groups.setdefault(x.group, []).append(x)
        n_points = len(p.budget.series) * len(p.budget.sparsities) * len(groups)
        rep.stage(f"Figure 5 sweep: {n_points} points", n_points)
        budget = {"cost": {str(k): v for k, v in p.budget.cost.items()}, "base_recipe": p.budget.base_recipe,
                  "groups": {}}
        for g, xs in groups.items():
            points = op.budget_sweep(xs, p.budget, rep.advance)
            budget["groups"][g] = {"n": len(xs), "points": points, "claims": op.budget_claims(points)}
        rep.done()

    blocks = sorted({c.block for c in captures})
    steps = effective_steps(r)
    shares = {x.recipe: quantized_share(rec, len(blocks), steps) for x, rec in rows} if not p.capture.blocks else {}
    result = {
        "study": study.name, "kind": study.kind, "model": r.model, "prompts": r.prompts, "seeds": list(r.seeds),
        "steps": steps, "generated": sc.generated, "reused": sc.reused, "metrics": metrics,
        "rows": video_rows, "baseline": baseline_row(comp, r.model), "quantized_share": shares,
        "operator": {"capture": {"recipe": p.capture.recipe, "step": p.capture.step,
                                 "samples": len({(c.prompt, c.seed) for c in chosen}), "blocks": blocks},
                     "synthetic": {"sources": list(p.synthetic.sources), "seq": p.synthetic.seq,
                                   "heads": p.synthetic.heads, "head_dim": p.synthetic.head_dim,
                                   "seeds": list(p.synthetic.seeds)},
                     "summary": operator, "inputs": per_input},
        "claims": check_claims(p, video_rows, metrics, operator),
        "warnings": list(comp.warnings), "command": command(study, r), "paper": list(study.paper_rows),
        "notes": study.notes,
    }
    if budget is not None:
        result["budget"] = budget
    md = render_markdown(result, study, comp, order, metrics)
    write_json(r.out / f"{study.name}.json", result)
    write_text(r.out / f"{study.name}.md", md)
    result["files"] = [str(r.out / f"{study.name}.md"), str(r.out / f"{study.name}.json")]
    return result


# ------------------------------------------------------------------------------------ markdown


def _fmt(x, digits: int = 4) -> str:
    return f"{x:.{digits}f}" if compare.is_number(x) else "–"


def render_markdown(result: dict, study: Study, comp, order, metrics) -> str:
    p: TableParams = study.params  # type: ignore[assignment]
    rows = p.rows
    table = compare.render_markdown(comp, result["model"], rows=order, columns=metrics, include_baseline=True,
                                    extra_columns=flag_columns(rows), label_header="Configuration", title=False,
                                    notes=True)
    shares = result["quantized_share"]
    share_text = ""
    if shares:
        vals = sorted(set(round(v, 4) for v in shares.values()))
        share_text = (f" The recipes' FP16 fallback policies quantize {', '.join(f'{v:.0%}' for v in vals)} of the "
                      f"self-attention calls ({len(result['operator']['capture']['blocks'])} blocks x "
                      f"{result['steps']} steps).")
    lines = [f"# {study.description}", "", f"Command: `{result['command']}`", "", f"Paper: {study.paper}.", "",
             f"Model {result['model']}, prompts {result['prompts']}, seeds {result['seeds']}, steps {result['steps']}."
             f"{share_text} Videos: Cosine, SSIM, PSNR (and MSE, 0-255 scale) against "
             f"{p.baseline} of the same prompt and seed, averaged over frames, then over prompts x seeds; bold: "
             "best row.", "", "## Generated videos", "", table]
    if result["warnings"]:
        lines += ["Warnings:", *[f"- {w}" for w in result["warnings"]], ""]
    if result["paper"]:
        lines += _paper_table(result["paper"])
    lines += _operator_section(result, rows)
    if "budget" in result:
        lines += _budget_section(result["budget"])
    lines += _claims_section(result["claims"])
    if study.notes:
        lines += ["## Notes", "", study.notes.strip(), ""]
    return "\n".join(lines)


def _paper_table(paper: list[dict]) -> list[str]:
    cols = [c for c in ("cosine", "mse", "ssim", "psnr") if any(c in x for x in paper)]
    extra = [k for k in paper[0] if k not in cols and k not in ("model", "config")]
    head = ["Model", "Configuration", *extra, *(compare.label(c) for c in cols)]
    body = [[str(x.get("model", "")), str(x.get("config", "")), *(str(x.get(k, "")) for k in extra),
             *((_fmt(x[c], compare.decimals(c)) if compare.is_number(x[c]) else str(x[c])) if c in x
               else "–" for c in cols)]
            for x in paper]
    return ["The paper's rows (for reference):", "", md_table(head, body, align=["l"] * (2 + len(extra)) + ["r"] * len(cols))]


def _operator_section(result: dict, rows) -> list[str]:
    s = result["operator"]["summary"]
    groups = list(s)
    cap = result["operator"]["capture"]
    syn = result["operator"]["synthetic"]
    head = ["Configuration"] + [f"{g}: {m}" for g in groups for m in ("rel-L2 ↓", "cosine ↑")]
    body = []
    for row in rows:
        cells = [row.config]
        for g in groups:
            v = s[g]["recipes"][row.recipe]
            best = min(s[g]["recipes"].values(), key=lambda x: x["rel_l2"])["rel_l2"]
            cells += [f"**{v['rel_l2']:.4f}**" if v["rel_l2"] == best else f"{v['rel_l2']:.4f}", f"{v['cosine']:.5f}"]
        body.append(cells)
    body.append(["inputs (n) · attention entropy"] + [x for g in groups for x in (str(s[g]["n"]), f"{s[g]['entropy']:.3f}")])
    return ["## Operator level", "",
            f"Each row's attention output against float64 softmax attention of the same inputs (reference engine, "
            f"every block quantized, no fallback): `captured` are {result['model']}'s post-RoPE Q/K/V of "
            f"{cap['recipe']} at denoising step {cap['step']}, blocks {cap['blocks']}, {cap['samples']} (prompt, seed) "
            f"samples; `synthetic` are model-free inputs ({', '.join(syn['sources'])}; {syn['heads']} heads x "
            f"{syn['seq']} tokens x head_dim {syn['head_dim']}, seeds {syn['seeds']}). Entropy: mean softmax row "
            "entropy / log(keys) (1 = uniform). Bold: lowest rel-L2.", "",
            md_table(head, body)]


def _budget_section(b: dict) -> list[str]:
    lines = ["## Figure 5: error at equal budget", "",
             f"The draft engine ({b['base_recipe']}'s block and pooling) at each sparsity for single-precision and "
             f"mixed splits of the retained pairs; modelled cost per video pair = (1 − sparsity) · Σ share_b · cost_b "
             f"with cost {b['cost']} (16-bit dense = 1). rel-L2 against float64 softmax attention, mean over inputs.", ""]
    for g, data in b["groups"].items():
        pts = data["points"]
        series = list(dict.fromkeys(x["series"] for x in pts))
        sparsities = list(dict.fromkeys(x["sparsity"] for x in pts))
        head = ["Series"] + [f"s={sp:g}" for sp in sparsities]
        body = [[f"{name}{'' if next(x for x in pts if x['series'] == name)['single'] else ' (mixed)'}"] +
                [next(f"{x['rel_l2']:.4f} @ {x['cost']:.3f}" for x in pts if x["series"] == name and x["sparsity"] == sp)
                 for sp in sparsities] for name in series]
        c = data["claims"]
        wins = ", ".join(f"{x['budget']:.3f}: {x['mixed']['series']} s={x['mixed']['sparsity']:g} {x['mixed']['rel_l2']:.4f}"
                         f" vs {(x['single'] or {}).get('series', '–')} "
                         f"{'s=%g ' % x['single']['sparsity'] if x['single'] else ''}"
                         f"{_fmt((x['single'] or {}).get('rel_l2'))}" for x in c["budgets"])
        lines += [f"{g} ({data['n']} inputs); cells: rel-L2 @ modelled cost:", "", md_table(head, body),
                  f"Mixed beats the best single-precision point within the same budget at {c['mixed_wins']} of {c['of']} "
                  f"budgets ({wins}).", ""]
        f = c["eight_bit_floor"]
        if f:
            d8 = f["dense_8bit"]
            m = f["mixed_below"]
            lines += [f"8-bit at sparsity {d8['sparsity']:g} (cost {d8['cost']:.3f}) keeps rel-L2 {d8['rel_l2']:.4f}; "
                      + (f"the cheapest mixed point below it is {m['series']} at s={m['sparsity']:g} (cost {m['cost']:.3f}, "
                         f"rel-L2 {m['rel_l2']:.4f})." if m else "no mixed point at no higher cost is below it."), ""]
    return lines


def _claims_section(claims: list[dict]) -> list[str]:
    if not claims:
        return []
    levels = list(dict.fromkeys(k for c in claims for k in c["levels"]))
    body = []
    for c in claims:
        cells = [c["claim"], f"{c['better']} > {c['worse']}"]
        for lv in levels:
            x = c["levels"].get(lv)
            ratio = f" (rel-L2 ×{x['rel_l2_ratio']:.3f})" if x and x.get("rel_l2_ratio") else ""
            cells.append((x["verdict"] + ratio) if x else "–")
        body.append(cells)
    return ["## The paper's claims, row by row", "",
            "Reproduced: the better row wins on every metric of that table (videos: the paired metrics; operator "
            "level: rel-L2 and 1 − cosine, differences within 0.5 % count as none); rel-L2 × is better / worse.", "",
            md_table(["Claim", "Rows", *levels], body, align=["l", "l"] + ["l"] * len(levels))]
