"""`ablate rowsum`: the MXAttention paper's Figure 7, row sums under direct MXFP4 quantization of P.

P = softmax(QKᵀ/√d) per head is materialized in float64 from captured Q, K and quantized directly
(exact MXFP4, 32-blocks along keys). Per row, the error Σ_j (P̂_ij − P_ij) is split by what the
quantizer did to each element (categories are disjoint and cover every element that changed):
  zeroing      P̂ = 0 < P                         (underflow to zero)
  saturation   P / scale > 6: P̂ = 6·scale          (beyond the largest E2M1 value)
  rounding up  P̂ > P otherwise;  rounding down  0 < P̂ < P otherwise
so the four parts add up to the total. Then a pre-quantization global scale (C), row sum against
entropy (D), and the reference engine showing PNQ's induced row sums are exactly 1.
See recipes/ablations/rowsum.toml.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from ..formats import e8m0, mxfp4
from ..formats._blocks import make_layout, to_blocks
from ..recipes import MX_RULES, check_qmax
from ..toml_schema import Where
from .captures import Capture, ensure_captures
from .common import AblateOptions, Reporter, command, md_table, pyplot, resolve, save_figure, share_result, write_json, write_text, effective_steps
from .study import CaptureParams, Study, recipe_name

PARTS = ("zeroing", "saturation", "rounding_down", "rounding_up")
TOL = 1e-12  # |row sum − 1| below this counts as exactly normalised (float64 summation noise)
E2M1_MAX = 6.0


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


def parameters(w: Where, p: str, raw: Any, capture: CaptureParams | None) -> RowsumParams:
    """The [rowsum] table: the MXFP4 quantizer of P, the entropy threshold, the representative block,
    the global-scaling rows and the two recipes run on the engine."""
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
                        pnq_recipe=recipe_name(w, p + "pnq_recipe", w.scalar(t, "pnq_recipe", str, "mxattention", p)),
                        direct_recipe=recipe_name(w, p + "direct_recipe", w.scalar(t, "direct_recipe", str, "mxfp4-ocp", p)),
                        capture=capture)


def split_rows(p: torch.Tensor, *, rule: str = "ocp", q: float = 7.25, block: int = 32) -> dict[str, torch.Tensor]:
    """Per row of p (..., keys): the quantized row sum, the exact row sum and each part of the error."""
    p = p.to(torch.float64)
    layout = make_layout(p.shape, -1, block)
    x = to_blocks(p, layout)
    scale = e8m0.pow2(mxfp4.shared_exponent(x.abs().amax(dim=-1), rule=rule, q=q)).unsqueeze(-1)
    xq = to_blocks(mxfp4.fake_quantize(p, rule=rule, q=q, block=block, axis=-1), layout)
    delta = xq - x
    sat = (x.abs() / scale) > E2M1_MAX
    zero = (xq == 0) & (x != 0)
    rest = ~sat & ~zero
    masks = {"zeroing": zero, "saturation": sat, "rounding_down": rest & (xq < x), "rounding_up": rest & (xq > x)}
    out = {name: torch.where(m, delta, 0.0).sum(dim=(-1, -2)) for name, m in masks.items()}
    out["counts"] = {name: int(m.sum()) for name, m in masks.items()}  # type: ignore[assignment]
    out["row_sum_q"] = xq.sum(dim=(-1, -2))
    out["row_sum"] = x.sum(dim=(-1, -2))
    out["error"] = delta.sum(dim=(-1, -2))
    return out


def row_entropy(p: torch.Tensor) -> torch.Tensor:
    """Shannon entropy of each row, in nats."""
    return -torch.where(p > 0, p * torch.log(p), 0.0).sum(dim=-1)


def probabilities(q: torch.Tensor, k: torch.Tensor, head: int) -> torch.Tensor:
    """softmax(Q Kᵀ / √d) of one head of BHND q, k (batch 0), float64."""
    s = (q[0, head] @ k[0, head].T) / math.sqrt(q.shape[-1])
    return torch.softmax(s, dim=-1)


def tensor_stats(c: Capture, p: RowsumParams, *, keep_rows: bool = False) -> dict:
    q, k, _ = c.load()
    sums = {n: [] for n in (*PARTS, "row_sum_q", "row_sum", "error", "entropy")}
    counts = {n: 0 for n in PARTS}
    for h in range(q.shape[1]):
        prob = probabilities(q, k, h)
        parts = split_rows(prob, rule=p.rule, q=p.qmax, block=p.block)
        for n in counts:
            counts[n] += parts["counts"][n]
        for n in (*PARTS, "row_sum_q", "row_sum", "error"):
            sums[n].append(parts[n])
        sums["entropy"].append(row_entropy(prob))
    rows = {n: torch.cat(v) for n, v in sums.items()}
    n_el = q.shape[1] * q.shape[2] * k.shape[2]
    rs = rows["row_sum_q"]
    high = rows["entropy"] > p.entropy_threshold
    stats = {
        "block": c.block, "prompt": c.prompt, "seed": c.seed, "rows": int(rs.numel()),
        "mean_row_sum": float(rs.mean()), "mean_row_sum_unquantized": float(rows["row_sum"].mean()),
        "total_error": float(rows["error"].mean()),
        **{n: float(rows[n].mean()) for n in PARTS},
        "element_share": {n: counts[n] / n_el for n in PARTS},
        "over_normalised": float((rs > 1 + TOL).double().mean()), "under_normalised": float((rs < 1 - TOL).double().mean()),
        "high_entropy_share": float(high.double().mean()),
        "high_entropy_under_normalised": float((rs[high] < 1 - TOL).double().mean()) if bool(high.any()) else None,
    }
    if keep_rows:
        stats["_rows"] = {"row_sum_q": rs, "entropy": rows["entropy"]}
    return stats


def global_scaling(c: Capture, p: RowsumParams, iterations: int = 24) -> dict:
    """One factor for the whole tensor before quantization, so that mean row sum of Q(c·P) = 1 (bisection)."""
    q, k, _ = c.load()
    n = q.shape[2]
    idx = torch.arange(n) if not p.scaling_rows or p.scaling_rows >= n else \
        torch.linspace(0, n - 1, p.scaling_rows).round().long().unique()
    probs = torch.cat([probabilities(q, k, h)[idx] for h in range(q.shape[1])])

    def sums(factor: float) -> torch.Tensor:
        return mxfp4.fake_quantize(probs * factor, rule=p.rule, q=p.qmax, block=p.block, axis=-1).sum(dim=-1)

    before = sums(1.0)
    f1 = float(before.mean())
    lo, hi = (1.0, 2.0) if f1 < 1 else (0.5, 1.0)
    for _ in range(iterations):
        mid = (lo + hi) / 2
        if float(sums(mid).mean()) < 1:
            lo = mid
        else:
            hi = mid
    after = sums(hi)
    return {"block": c.block, "prompt": c.prompt, "seed": c.seed, "rows": int(before.numel()),
            "rows_per_head": int(idx.numel()), "factor": hi, "mean_row_sum_before": f1,
            "mean_row_sum_after": float(after.mean()),
            "over_normalised_before": float((before > 1 + TOL).double().mean()),
            "over_normalised_after": float((after > 1 + TOL).double().mean()),
            "under_normalised_before": float((before < 1 - TOL).double().mean()),
            "under_normalised_after": float((after < 1 - TOL).double().mean()),
            "_before": before, "_after": after}


def engine_rowsums(c: Capture, recipe_name: str) -> dict:
    """The reference engine's induced row sums (weights applied to V) under a recipe."""
    from ..attention.reference import reference_attention
    from ..recipes import load_recipe

    q, k, v = c.load()
    recipe = load_recipe(recipe_name)
    _, diag = reference_attention(q, k, v, recipe.attention, measure_errors=False)
    return {"recipe": recipe.name, "placement": recipe.attention.placement, "rowsum_dev_max": diag.rowsum_dev_max,
            "rowsum_dev_mean": diag.rowsum_dev_mean, "rowsum_mean": float(diag.row_sums.mean())}


def run(study: Study, opts: AblateOptions, reporter: Reporter | None = None) -> dict:
    rep = reporter or Reporter()
    p: RowsumParams = study.params  # type: ignore[assignment]
    r = resolve(study, opts)
    caps = ensure_captures(r, p.capture, rep)
    if r.share_only:  # this process made its share of the captures; rank 0 (or a final run) writes
        return share_result(study, r)
    first = [c for c in caps if (c.prompt, c.seed) == (caps[0].prompt, caps[0].seed)]
    blocks = [c.block for c in first]
    want = blocks[len(blocks) // 2] if p.representative_block < 0 else p.representative_block
    rep_cap = next((c for c in first if c.block == want), None)
    if rep_cap is None:
        from ..errors import UserError

        raise UserError(f"rowsum: representative block {want} was not captured (captured: {blocks})")
    rep.stage("row sums of quantized P", len(caps) + 3)
    tensors, rows = [], None
    for c in caps:
        s = tensor_stats(c, p, keep_rows=c is rep_cap)
        if c is rep_cap:
            rows = s.pop("_rows")
        tensors.append(s)
        rep.advance()
    scaling = global_scaling(rep_cap, p)
    rep.advance()
    pnq = engine_rowsums(rep_cap, p.pnq_recipe)
    rep.advance()
    direct = engine_rowsums(rep_cap, p.direct_recipe)
    rep.advance()
    rep.done()
    avg = lambda key: sum(t[key] for t in tensors) / len(tensors)
    high = rows["entropy"] > p.entropy_threshold
    rs = rows["row_sum_q"]
    representative = tensors[caps.index(rep_cap)]
    result = {
        "study": study.name, "model": r.model, "prompts": r.prompts, "seeds": list(r.seeds), "steps": effective_steps(r),
        "capture": {"recipe": p.capture.recipe, "step": p.capture.step, "blocks": list(p.capture.blocks) or "all"},
        "quantizer": {"format": "mxfp4", "rule": p.rule, "qmax": p.qmax if p.rule == "uos" else None,
                      "block": p.block, "axis": "keys (per row)"},
        "definitions": {
            "zeroing": "elements with P > 0 quantized to 0", "saturation": "elements with P/scale > 6 (clipped to 6·scale)",
            "rounding_down": "other elements with 0 < P̂ < P", "rounding_up": "other elements with P̂ > P",
            "parts": "per-element P̂ − P summed per row, averaged over rows, then over tensors",
            "entropy": "−Σ p ln p (nats)", "over/under-normalised": f"row sum > 1 + {TOL} / < 1 − {TOL}"},
        "n_tensors": len(tensors),
        "average": {"mean_row_sum": avg("mean_row_sum"), "total_error": avg("total_error"), **{n: avg(n) for n in PARTS},
                    "over_normalised": avg("over_normalised"), "under_normalised": avg("under_normalised")},
        "tensors": tensors,
        "representative": {"block": rep_cap.block, "prompt": rep_cap.prompt, "seed": rep_cap.seed, **{
            k: representative[k] for k in ("mean_row_sum", "over_normalised", "under_normalised")}},
        "global_scaling": {k: v for k, v in scaling.items() if not k.startswith("_")},
        "entropy": {"threshold": p.entropy_threshold, "high_entropy_share": float(high.double().mean()),
                    "high_entropy_under_normalised": float((rs[high] < 1 - TOL).double().mean()) if bool(high.any()) else None,
                    "low_entropy_under_normalised": float((rs[~high] < 1 - TOL).double().mean()) if bool((~high).any()) else None,
                    "low_entropy_over_normalised": float((rs[~high] > 1 + TOL).double().mean()) if bool((~high).any()) else None},
        "pnq": pnq, "direct": direct,
        "paper": list(study.paper_rows), "command": command(study, r),
    }
    out = r.out
    write_json(out / "rowsum.json", result)
    _plot_main(result, scaling, out / "rowsum.png")
    _plot_entropy(rows, p.entropy_threshold, result, out / "rowsum-entropy.png")
    write_text(out / "rowsum.md", render_markdown(result, study))
    result["files"] = [str(out / n) for n in ("rowsum.md", "rowsum.json", "rowsum.png", "rowsum-entropy.png")]
    return result


def _f(x, digits=4) -> str:
    return "–" if x is None else f"{x:+.{digits}f}" if isinstance(x, float) and x < 0 else f"{x:.{digits}f}"


def render_markdown(res: dict, study: Study) -> str:
    paper = res["paper"][0] if res["paper"] else {}
    a = res["average"]
    qz = res["quantizer"]
    lines = [f"# Row sums under direct MXFP4 quantization of P ({study.paper or 'Figure 7'})", "",
             f"Command: `{res['command']}`", "",
             f"Model {res['model']}, prompts {res['prompts']}, seeds {res['seeds']}, steps {res['steps']}; "
             f"Q, K captured from the {res['capture']['recipe']} run at denoising step {res['capture']['step']}. "
             f"P = softmax(QKᵀ/√d) per head in float64, quantized with MXFP4 ({qz['rule']} rule, {qz['block']}-blocks "
             f"along keys). {res['n_tensors']} tensors (attention block x prompt x seed).", "",
             "## (A), (B): mean row sum and its error split (averages over tensors)", ""]
    rows = [["mean row sum", _f(a["mean_row_sum"]), _f(paper.get("mean_row_sum"))],
            ["total error", _f(a["total_error"]), _f(sum(paper[n] for n in PARTS) if all(n in paper for n in PARTS) else None)]]
    rows += [[n.replace("_", " "), _f(a[n]), _f(paper.get(n))] for n in PARTS]
    lines.append(md_table(["quantity", "ours", "paper (80 tensors)"], rows))
    lines += ["", f"The four parts sum to {sum(a[n] for n in PARTS):+.6f}; total error {a['total_error']:+.6f}.", "",
              "Per tensor:", ""]
    trows = [[str(t["block"]), t["prompt"][:40], str(t["seed"]), f"{t['mean_row_sum']:.4f}", *(_f(t[n]) for n in PARTS),
              f"{100 * t['over_normalised']:.1f}%", f"{100 * t['under_normalised']:.1f}%"] for t in res["tensors"][:120]]
    lines.append(md_table(["block", "prompt", "seed", "mean row sum", *(n.replace("_", " ") for n in PARTS),
                           "over-norm.", "under-norm."], trows))
    g = res["global_scaling"]
    lines += ["", f"## (C): pre-quantization global scaling (block {g['block']}, {g['rows_per_head']} rows per head)", "",
              f"One factor c = {g['factor']:.6f} applied to the whole tensor before quantization (chosen so that the mean "
              "row sum of Q(c·P) is 1):", "",
              md_table(["", "mean row sum", "over-normalised rows", "under-normalised rows"], [
                  ["before (c = 1)", f"{g['mean_row_sum_before']:.4f}", f"{100 * g['over_normalised_before']:.1f}%",
                   f"{100 * g['under_normalised_before']:.1f}%"],
                  [f"after (c = {g['factor']:.4f})", f"{g['mean_row_sum_after']:.4f}", f"{100 * g['over_normalised_after']:.1f}%",
                   f"{100 * g['under_normalised_after']:.1f}%"]])]
    e = res["entropy"]
    pct = lambda x: "–" if x is None else f"{100 * x:.1f}%"
    lines += ["", f"## (D): row sum vs row entropy (block {res['representative']['block']})", "",
              f"Rows with entropy > {e['threshold']:g} nats: {pct(e['high_entropy_share'])} of rows (paper: "
              f"{pct(paper.get('high_entropy_share'))}); of those, under-normalised: {pct(e['high_entropy_under_normalised'])}. "
              f"Lower-entropy rows: under-normalised {pct(e['low_entropy_under_normalised'])}, over-normalised "
              f"{pct(e['low_entropy_over_normalised'])}. Plot: rowsum-entropy.png.", "",
              "## PNQ: exactly normalised", "",
              md_table(["recipe", "placement", "max |row sum − 1|", "mean |row sum − 1|", "mean row sum"], [
                  [x["recipe"], x["placement"], f"{x['rowsum_dev_max']:.3g}", f"{x['rowsum_dev_mean']:.3g}",
                   f"{x['rowsum_mean']:.6f}"] for x in (res["pnq"], res["direct"])]),
              "", "Row sums of the weights the reference engine applies to V (Q, K, V and P̃ all quantized). Plots: "
              "rowsum.png (A–C), rowsum-entropy.png (D).", ""]
    return "\n".join(lines)


def render(res: dict) -> str:
    """What the terminal shows of a finished study: the averages against the paper's, and PNQ's exactness."""
    a = res["average"]
    return (f"mean row sum {a['mean_row_sum']:.4f} (paper 0.9266); zeroing {a['zeroing']:+.4f}, saturation "
            f"{a['saturation']:+.4f}, rounding down {a['rounding_down']:+.4f}, rounding up {a['rounding_up']:+.4f}; "
            f"PNQ max |row sum - 1| = {res['pnq']['rowsum_dev_max']:.3g}")


def _plot_main(res: dict, scaling: dict, path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(1, 3, figsize=(15, 3.8))
    ts = res["tensors"]
    ax[0].bar(range(len(ts)), [t["mean_row_sum"] for t in ts], color="tab:blue")
    ax[0].axhline(1.0, color="k", lw=0.8)
    paper = res["paper"][0] if res["paper"] else {}
    if "mean_row_sum" in paper:
        ax[0].axhline(paper["mean_row_sum"], color="tab:red", ls="--", lw=0.8, label=f"paper avg {paper['mean_row_sum']}")
        ax[0].legend(loc="lower right", fontsize=8)
    lo = min(t["mean_row_sum"] for t in ts)
    ax[0].set_ylim(min(lo, paper.get("mean_row_sum", lo)) - 0.02, 1.02)
    ax[0].set_title("(A) mean row sum of quantized P per tensor")
    ax[0].set_xlabel("tensor (block x prompt x seed)")
    x = range(len(PARTS))
    ax[1].bar([i - 0.2 for i in x], [res["average"][n] for n in PARTS], width=0.4, label="ours")
    if all(n in paper for n in PARTS):
        ax[1].bar([i + 0.2 for i in x], [paper[n] for n in PARTS], width=0.4, label="paper")
    ax[1].axhline(0, color="k", lw=0.8)
    ax[1].set_xticks(list(x), [n.replace("_", "\n") for n in PARTS])
    ax[1].set_title("(B) row-sum error by quantization outcome")
    ax[1].legend(fontsize=8)
    b, a = scaling["_before"].numpy(), scaling["_after"].numpy()
    ax[2].hist(b, bins=60, alpha=0.6, label="direct (c = 1)")
    ax[2].hist(a, bins=60, alpha=0.6, label=f"global scaling c = {scaling['factor']:.3f}")
    ax[2].axvline(1.0, color="k", lw=0.8)
    ax[2].set_title("(C) row sums, representative tensor")
    ax[2].set_xlabel("row sum")
    ax[2].legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)


def _plot_entropy(rows: dict, threshold: float, res: dict, path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4.5))
    hb = ax.hexbin(rows["entropy"].numpy(), rows["row_sum_q"].numpy(), gridsize=50, bins="log", cmap="viridis")
    fig.colorbar(hb, ax=ax, label="rows (log)")
    ax.axhline(1.0, color="w", lw=0.8)
    ax.axvline(threshold, color="r", ls="--", lw=0.8)
    ax.set_xlabel("row entropy (nats)")
    ax.set_ylabel("row sum of quantized P")
    ax.set_title(f"(D) row sum vs entropy, block {res['representative']['block']}")
    fig.tight_layout()
    save_figure(fig, path)
