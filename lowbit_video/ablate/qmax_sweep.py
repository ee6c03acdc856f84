"""`ablate qmax-sweep`: the MXAttention paper's Table 4, per-block MSE-optimal Q_max.

For each captured attention block (x prompt x seed) and each of Q, K, V: the MSE of the exact MXFP4
quantizer under the ceiling rule e = ceil(log2(M/q)) against the unquantized tensor, for every q of
the grid; the minimiser (tie set, interval, the member the study's tie rule picks); then the share
of samples per bin. See recipes/ablations/qmax-sweep.toml for the axes and the tie convention.

Exactness and speed: over a grid [q_lo, q_hi] a block's exponent e_q(M) can only take the values
e_{q_hi}(M) + o, o = 0, 1, ... (at most 2 values when q_hi < 2 q_lo, as for 6.00..8.00), and the
quantizer with boundary q_hi / 2**o gives exactly exponent e_{q_hi} + o. So the quantizer runs once
per offset, not once per q; for each q the exponent (the library's exact `shared_exponent`) picks,
per block, which of those exact results applies. The MSE equals that of `fake_quantize(x, q=q)`
(tests check both against a direct sweep and an independent implementation).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Sequence

import torch

from ..formats import mxfp4
from ..formats._blocks import make_layout, to_blocks
from ..recipes import check_qmax
from ..toml_schema import Where
from .captures import ensure_captures
from .common import Reporter, command, md_table, pyplot, resolve, save_figure, share_result, write_json, write_text, AblateOptions, effective_steps
from .study import CaptureParams, Study, recipe_name

TENSORS = ("q", "k", "v")
TIE_RULES = ("smallest", "largest")


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


def _bins(w: Where, key: str, raw: Any) -> list[QBin]:
    if not isinstance(raw, list) or not raw:
        raise w.error(key, "expected a list like [\"<=7.15\", \"7.20\", \"7.25\", \">=7.30\"]")
    bins = []
    for b in raw:
        if not isinstance(b, str):
            raise w.error(key, f"expected strings, got {b!r}")
        s = b.replace(" ", "").replace("≤", "<=").replace("≥", ">=")
        if s.startswith("<="):
            bins.append(QBin(b, None, hundredths(w, key, s[2:])))
        elif s.startswith(">="):
            bins.append(QBin(b, hundredths(w, key, s[2:]), None))
        else:
            v = hundredths(w, key, s)
            bins.append(QBin(b, v, v))
    return bins


def parameters(w: Where, p: str, raw: Any, capture: CaptureParams | None) -> QmaxParams:
    """The [qmax] table: the grid (exact decimals), the bins that partition it, the tensors, the
    rotation recipe, the tie rule and the MXFP4 block."""
    t = w.table(raw, p, {"q_min", "q_max", "q_step", "bins", "tensors", "rotation_recipe", "tie_rule", "block"})
    lo, hi, step = (hundredths(w, p + k, t.get(k, d)) for k, d in (("q_min", "6.00"), ("q_max", "8.00"), ("q_step", "0.05")))
    if not (0 < lo <= hi) or step <= 0 or (hi - lo) % step:
        raise w.error(p + "q_step", f"need 0 < q_min <= q_max and (q_max - q_min) a multiple of q_step; got "
                                    f"{fmt_q(lo)}, {fmt_q(hi)}, {fmt_q(step)}")
    check_qmax(w, p + "q_min", lo / 100)
    check_qmax(w, p + "q_max", hi / 100)
    grid = tuple(range(lo, hi + 1, step))  # integers: no float drift
    bins = _bins(w, p + "bins", t.get("bins", ["<=7.15", "7.20", "7.25", ">=7.30"]))
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
                      rotation_recipe=recipe_name(w, p + "rotation_recipe", w.scalar(t, "rotation_recipe", str, "mxattention", p)),
                      tie_rule=w.choice(t, "tie_rule", TIE_RULES, "smallest", p), block=block, capture=capture)


AXES = {"q": -1, "k": -1, "v": -2}  # BHND: Q, K along head_dim; V along tokens (per channel)
AXES_NOTE = ("Q and K: 32-blocks along head_dim after the fixed Hadamard rotation of the rotation recipe "
             "(captures are post-RoPE, pre-rotation); V: 32-blocks along tokens per channel, not rotated — "
             "the tensors MXAttention's kernel quantizes (recipes/base/mxfp4-direct.toml).")


def sweep_mse(x: torch.Tensor, grid: Sequence[int], *, axis: int, block: int = 32) -> list[float]:
    """MSE of mxfp4.fake_quantize(x, rule="uos", q=h/100, axis=axis) against x, for h in `grid` (hundredths)."""
    x = x.to(torch.float64)
    layout = make_layout(x.shape, axis, block)
    amax = to_blocks(x, layout).abs().amax(dim=-1)
    q_hi = max(grid) / 100
    e_ref = mxfp4.shared_exponent(amax, rule="uos", q=q_hi)
    nonzero = amax > 0
    sse: dict[int, torch.Tensor] = {}

    def block_sse(offset: int) -> torch.Tensor:
        if offset not in sse:
            q = q_hi / 2**offset  # exact: a power-of-two division
            e = mxfp4.shared_exponent(amax, rule="uos", q=q)
            if not torch.equal(e[nonzero], (e_ref + offset)[nonzero]):
                raise AssertionError("exponent offset identity failed (E8M0 range clamp?)")
            err = mxfp4.fake_quantize(x, rule="uos", q=q, block=block, axis=axis) - x
            sse[offset] = to_blocks(err, layout).pow(2).sum(dim=-1)
        return sse[offset]

    n = x.numel()
    out = []
    for h in grid:
        d = mxfp4.shared_exponent(amax, rule="uos", q=h / 100) - e_ref
        d = torch.where(nonzero, d, torch.zeros_like(d))
        chosen = torch.zeros(amax.shape, dtype=torch.float64, device=x.device)
        for o in sorted(set(d.unique().tolist())):
            chosen = torch.where(d == o, block_sse(int(o)), chosen)
        out.append(float(chosen.sum()) / n)
    return out


def optimum(grid: Sequence[int], mse: Sequence[float], tie_rule: str = "smallest") -> dict:
    """The minimiser of a sweep: every tied grid value, the tied interval, and the one picked by the rule."""
    best = min(mse)
    ties = [h for h, v in zip(grid, mse) if v == best]
    i0, i1 = list(grid).index(ties[0]), list(grid).index(ties[-1])
    return {"optimum": fmt_q(ties[0] if tie_rule == "smallest" else ties[-1]), "ties": [fmt_q(h) for h in ties],
            "interval": [fmt_q(ties[0]), fmt_q(ties[-1])], "contiguous": len(ties) == i1 - i0 + 1, "mse_min": best}


def distribution(samples: list[dict], p: QmaxParams) -> dict:
    """Per tensor: percentage of samples per bin (and the share whose tie set holds 7.25)."""
    out = {}
    for t in p.tensors:
        rows = [s for s in samples if s["tensor"] == t]
        n = len(rows)
        counts = Counter()
        for s in rows:
            h = round(float(s["optimum"]) * 100)
            counts[next(b.label for b in p.bins if b.holds(h))] += 1
        out[t] = {"n": n, **{b.label: 100.0 * counts[b.label] / n if n else 0.0 for b in p.bins},
                  "7.25_in_ties": 100.0 * sum("7.25" in s["ties"] for s in rows) / n if n else 0.0}
    return out


def run(study: Study, opts: AblateOptions, reporter: Reporter | None = None) -> dict:
    from ..recipes import load_recipe
    from ..transforms import qk_rotation

    rep = reporter or Reporter()
    p: QmaxParams = study.params  # type: ignore[assignment]
    r = resolve(study, opts)
    caps = ensure_captures(r, p.capture, rep)
    if r.share_only:  # this process made its share of the captures; rank 0 (or a final run) writes
        return share_result(study, r)
    spec = load_recipe(p.rotation_recipe).attention
    grid = list(p.grid)
    samples = []
    rep.stage("sweeping Q_max", len(caps))
    for c in caps:
        q, k, v = c.load()
        rot = qk_rotation(spec.rotation, q.shape[-1], spec.rope_segments or None)
        tensors = {"q": rot.apply(q), "k": rot.apply(k), "v": v}
        for t in p.tensors:
            mse = sweep_mse(tensors[t], grid, axis=AXES[t], block=p.block)
            samples.append({"block": c.block, "prompt": c.prompt, "seed": c.seed, "tensor": t,
                            **optimum(grid, mse, p.tie_rule), "mse": mse})
        rep.advance()
    rep.done()
    result = {
        "study": study.name, "model": r.model, "prompts": r.prompts, "seeds": list(r.seeds), "steps": effective_steps(r),
        "capture": {"recipe": p.capture.recipe, "step": p.capture.step, "blocks": list(p.capture.blocks) or "all"},
        "grid": [fmt_q(h) for h in grid], "bins": [b.label for b in p.bins], "rule": "uos (ceil) with Q_max = q",
        "axes": AXES_NOTE, "rotation_recipe": p.rotation_recipe, "rotation": spec.rotation,
        "tie_rule": p.tie_rule, "distribution": distribution(samples, p), "samples": samples,
        "paper": list(study.paper_rows), "command": command(study, r),
    }
    out = r.out
    write_json(out / "qmax-sweep.json", result)
    _plot(result, out / "qmax-sweep.png")
    write_text(out / "qmax-sweep.md", render_markdown(result, study))
    result["files"] = [str(out / n) for n in ("qmax-sweep.md", "qmax-sweep.json", "qmax-sweep.png")]
    return result


def render_markdown(res: dict, study: Study) -> str:
    bins = res["bins"]
    lines = [f"# Per-block empirical Q_max optima ({study.paper or 'Table 4'})", "",
             f"Command: `{res['command']}`", "",
             f"Model {res['model']}, prompts {res['prompts']}, seeds {res['seeds']}, steps {res['steps']}; "
             f"Q, K, V captured from the {res['capture']['recipe']} run at denoising step {res['capture']['step']}, "
             f"blocks {res['capture']['blocks']}. Sweep: Q_max = {res['grid'][0]}, ..., {res['grid'][-1]} "
             f"({len(res['grid'])} values), exact MXFP4, scale rule {res['rule']}, MSE against the unquantized tensor.",
             "", f"Axes: {res['axes']}", "",
             f"Ties: the optimum is binned at the {res['tie_rule']} member of the tie set (a plain argmin over ascending "
             "q); the last column gives the share of samples whose tie set contains 7.25.", "",
             "Values are percentages of samples (attention block x prompt x seed).", ""]
    rows = []
    for t, d in res["distribution"].items():
        rows.append([res["model"], t.upper(), *(f"{d[b]:.1f}" for b in bins), str(d["n"]), f"{d['7.25_in_ties']:.1f}"])
    for pr in res["paper"]:
        rows.append([f"{pr.get('model', '?')} (paper)", str(pr.get("tensor", "?")).upper(),
                     *(f"{float(pr[b]):.1f}" if b in pr else "–" for b in bins), "40", "–"])
    lines.append(md_table(["Model", "Tensor", *bins, "n", "7.25 in tie set"], rows))
    samples = res["samples"]
    if len(samples) <= 120:
        lines += ["", "Per sample (MSE relative to the minimum at the paper's boundaries):", ""]
        i725, i8, i6 = (res["grid"].index(x) for x in ("7.25", "8.00", "6.00"))
        srows = []
        for s in samples:
            m = s["mse_min"] or 1.0
            srows.append([str(s["block"]), s["prompt"][:40], str(s["seed"]), s["tensor"].upper(), s["optimum"],
                          f"[{s['interval'][0]}, {s['interval'][1]}]" + ("" if s["contiguous"] else " (gaps)"),
                          f"{s['mse'][i725] / m:.4f}", f"{s['mse'][i8] / m:.4f}", f"{s['mse'][i6] / m:.4f}"])
        lines.append(md_table(["block", "prompt", "seed", "tensor", "optimum", "tied interval", "MSE(7.25)/min",
                               "MSE(8.00)/min", "MSE(6.00)/min"], srows))
    lines += ["", "Plot: qmax-sweep.png (MSE(q) / min MSE per sample).", ""]
    return "\n".join(lines)


def render(res: dict) -> str:
    """What the terminal shows of a finished sweep: the distribution per tensor, one line each."""
    lines = []
    for t, d in res["distribution"].items():
        cells = "  ".join(f"{b}: {d[b]:5.1f}%" for b in res["bins"])
        lines.append(f"{res['model']} {t.upper()}  {cells}  (n = {d['n']})")
    return "\n".join(lines)


def _plot(res: dict, path) -> None:
    plt = pyplot()
    tensors = list(res["distribution"])
    fig, axes = plt.subplots(1, len(tensors), figsize=(4.2 * len(tensors), 3.4), squeeze=False)
    qs = [float(q) for q in res["grid"]]
    for ax, t in zip(axes[0], tensors):
        for s in (s for s in res["samples"] if s["tensor"] == t):
            m = s["mse_min"] or 1.0
            ax.plot(qs, [v / m for v in s["mse"]], lw=0.8, alpha=0.6)
        ax.axvline(7.25, color="k", ls="--", lw=0.8)
        ax.set_title(f"{t.upper()} ({res['model']})")
        ax.set_xlabel("Q_max")
        ax.set_ylabel("MSE / min MSE")
    fig.suptitle("MXFP4 MSE vs Q_max per block (ceil rule); dashed: 7.25")
    fig.tight_layout()
    save_figure(fig, path)
