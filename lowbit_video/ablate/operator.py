"""Operator-level tables: a study's recipes on attention inputs, scored against float64 softmax.

Inputs are the Q/K/V captured from the model (`captures.ensure_captures`) and model-free synthetic
ones: "outliers" (`diagnose attention --outliers`: channel outliers, a K offset, 3D RoPE) and "local"
(`bench draft`'s inputs, whose attention decays with distance in time and space as video attention
does). Every input is scored per recipe by `diagnostics.attention_report` on the reference engine
(rel-L2 and cosine of the output), and its attention's normalised row entropy is recorded (1: uniform
over the keys; small: peaked), the property the papers tie their effects to.

The budget sweep (DraftAttention2's Figure 5) runs the draft engine over single-precision and mixed
splits at several sparsities; each point's cost is modelled as Σ over retained pairs of the cost of
its precision (16-bit = 1), so points are compared at equal modelled budget.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Iterator, Sequence

import torch

from .captures import Capture
from .recipe_table_params import BudgetParams, SyntheticInputs

FRAME_SIDE = 16  # synthetic inputs: frames of 16 x 16 tokens (diagnose's grid)
ENTROPY_ROWS = 256  # query rows per head (evenly spaced) for the entropy estimate


@dataclass(frozen=True)
class OperatorInput:
    group: str  # "captured" or "synthetic <source>"
    label: str  # which input: block / prompt / seed, or source and seed
    q: torch.Tensor  # BHND
    k: torch.Tensor
    v: torch.Tensor
    geometry: object | None  # VideoGeometry (draft recipes), prefix tokens first
    rope_segments: tuple[int, ...] | None
    block: int | None = None


def evenly_spaced(items: Sequence, n: int) -> list:
    """n items spread evenly over the sequence, first and last included (all when n is 0 or >= len)."""
    if n <= 0 or n >= len(items):
        return list(items)
    if n == 1:
        return [items[0]]
    return [items[round(i * (len(items) - 1) / (n - 1))] for i in range(n)]


def select_samples(captures: Sequence[Capture], samples: int) -> list[Capture]:
    """Every block of `samples` evenly spaced (prompt, seed) samples (0: every sample)."""
    keys = list(dict.fromkeys((c.prompt, c.seed) for c in captures))
    keep = set(evenly_spaced(keys, samples))
    return [c for c in captures if (c.prompt, c.seed) in keep]


def captured_inputs(captures: Sequence[Capture], device: str = "cpu") -> Iterator[OperatorInput]:
    from ..attention.draft import VideoGeometry

    for c in captures:
        q, k, v = (t.to(device) for t in c.load())
        geometry = None
        if c.grid is not None:
            if c.text_tokens:  # the text follows the video in a capture; VideoGeometry wants it first
                front = lambda t: torch.cat([t[..., -c.text_tokens:, :], t[..., :-c.text_tokens, :]], dim=-2)
                q, k, v = front(q), front(k), front(v)
            geometry = VideoGeometry(*(int(x) for x in c.grid), prefix=c.text_tokens)
        yield OperatorInput("captured", f"block {c.block} · {c.prompt} · seed {c.seed}", q, k, v, geometry,
                            c.rope_segments, c.block)


def synthetic_inputs(s: SyntheticInputs, device: str = "cpu") -> Iterator[OperatorInput]:
    from ..attention.draft import VideoGeometry
    from ..bench.draft import structured_qkv
    from ..diagnostics.synthetic import synthetic_qkv

    frames = s.seq // (FRAME_SIDE * FRAME_SIDE)
    geometry = VideoGeometry(frames, FRAME_SIDE, FRAME_SIDE, 0)
    for source in s.sources:
        for seed in s.seeds:
            if source == "outliers":
                q, k, v = synthetic_qkv(seq=s.seq, heads=s.heads, head_dim=s.head_dim, seed=seed, outliers=True)
            else:
                q, k, v = structured_qkv(1, s.heads, (frames, FRAME_SIDE, FRAME_SIDE), s.head_dim, seed=seed,
                                         device="cpu", dtype=torch.float32)
            yield OperatorInput(f"synthetic {source}", f"{source} · seed {seed}", q.to(device), k.to(device),
                                v.to(device), geometry, None)


def row_entropy(q: torch.Tensor, k: torch.Tensor, rows: int = ENTROPY_ROWS) -> float:
    """Mean over heads and (evenly spaced) query rows of the softmax row entropy divided by log(keys)."""
    n, keys = q.shape[-2], k.shape[-2]
    idx = torch.linspace(0, n - 1, min(rows, n)).round().long().unique().to(q.device)
    s = (q[..., idx, :].double() @ k.double().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    logp = torch.log_softmax(s, dim=-1)
    h = -(logp.exp() * logp).sum(dim=-1)
    return float(h.mean()) / math.log(keys) if keys > 1 else 0.0


def score_inputs(inputs: Iterator[OperatorInput], recipes: Sequence, on_input=None) -> list[dict]:
    """Per input: its entropy and every recipe's rel_l2 / cosine against float64 softmax attention."""
    from ..diagnostics.attention_report import attention_report

    out = []
    for x in inputs:
        row = {"group": x.group, "input": x.label, "block": x.block, "tokens": int(x.q.shape[-2]),
               "entropy": row_entropy(x.q, x.k), "recipes": {}}
        for recipe in recipes:
            rep = attention_report(x.q, x.k, x.v, recipe, geometry=x.geometry, rope_segments=x.rope_segments)
            row["recipes"][recipe.name] = {"rel_l2": rep["rel_l2"], "cosine": rep["cosine"],
                                           **({"skip_fraction": rep["skip_fraction"]} if "skip_fraction" in rep else {})}
        out.append(row)
        if on_input is not None:
            on_input()
    return out


def summarise(scored: Sequence[dict], recipes: Sequence[str]) -> dict:
    """Per group: n inputs, mean entropy, and per recipe the mean rel_l2 and cosine."""
    groups: dict[str, list[dict]] = {}
    for row in scored:
        groups.setdefault(row["group"], []).append(row)
    out = {}
    for g, rows in groups.items():
        out[g] = {"n": len(rows), "entropy": sum(r["entropy"] for r in rows) / len(rows),
                  "recipes": {name: {m: sum(r["recipes"][name][m] for r in rows) / len(rows) for m in ("rel_l2", "cosine")}
                              for name in recipes}}
    return out


# ------------------------------------------------------------------------------------ budget sweep


def modelled_cost(spec, cost: dict) -> float:
    """Cost of a draft spec per video pair: retained share x Σ share_b · cost_b (16-bit dense = 1)."""
    total = spec.fp16 + spec.int8 + spec.nvfp4
    return (1 - spec.sparsity) * (spec.fp16 * cost[16] + spec.int8 * cost[8] + spec.nvfp4 * cost[4]) / total


def budget_sweep(inputs: Sequence[OperatorInput], p: BudgetParams, on_point=None) -> list[dict]:
    """Every series at every sparsity on every input: the mean rel_l2 over inputs and the modelled cost."""
    from ..attention import exact_attention
    from ..attention.draft import draft_attention
    from ..recipes import load_recipe

    base = load_recipe(p.base_recipe).attention.draft
    refs = [exact_attention(x.q, x.k, x.v) for x in inputs]
    points = []
    for s in p.series:
        for sparsity in p.sparsities:
            spec = replace(base, sparsity=sparsity, fp16=s.fp16, int8=s.int8, nvfp4=s.nvfp4)
            errs = []
            for x, ref in zip(inputs, refs):
                out, _ = draft_attention(x.q, x.k, x.v, spec, x.geometry)
                errs.append(float(torch.linalg.vector_norm(out - ref) / torch.linalg.vector_norm(ref)))
            points.append({"series": s.label, "single": s.single, "sparsity": sparsity,
                           "split": {"16": s.fp16, "8": s.int8, "4": s.nvfp4},
                           "cost": modelled_cost(spec, p.cost), "rel_l2": sum(errs) / len(errs)})
            if on_point is not None:
                on_point()
    return points


def budget_claims(points: Sequence[dict]) -> dict:
    """Figure 5's two claims, checked on the sweep.

    (a) At each mixed point's modelled cost B, the lowest error of any mixed point with cost <= B
        against the lowest error of any single-precision point with cost <= B (the paper's rule:
        the lowest measured error among configurations within the budget).
    (b) Reducing sparsity alone does not remove quantization error: the 8-bit series at its lowest
        sparsity keeps an error floor, and some mixed point reaches a lower error at no higher cost."""
    single = [x for x in points if x["single"]]
    mixed = [x for x in points if not x["single"]]
    budgets = []
    for b in sorted({x["cost"] for x in mixed}):
        within = lambda xs: [x for x in xs if x["cost"] <= b + 1e-12]
        bm = min(within(mixed), key=lambda x: x["rel_l2"])
        bs = within(single)
        best_s = min(bs, key=lambda x: x["rel_l2"]) if bs else None
        budgets.append({"budget": b, "mixed": bm, "single": best_s,
                        "mixed_wins": best_s is None or bm["rel_l2"] < best_s["rel_l2"]})
    floor = None
    eight = [x for x in single if x["split"]["8"] == 1.0]
    if eight:
        dense8 = min(eight, key=lambda x: x["sparsity"])
        beat = [x for x in mixed if x["cost"] <= dense8["cost"] + 1e-12 and x["rel_l2"] < dense8["rel_l2"]]
        floor = {"dense_8bit": dense8, "mixed_below": min(beat, key=lambda x: x["cost"]) if beat else None}
    return {"budgets": budgets, "mixed_wins": sum(b["mixed_wins"] for b in budgets), "of": len(budgets),
            "eight_bit_floor": floor}
