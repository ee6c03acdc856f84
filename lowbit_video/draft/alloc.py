"""Allocation: turn a recipe's budget and a head's draft scores into a precision per block pair.

Per head, the R x R video region pairs get four quotas — 16-bit, 8-bit (INT8 QKᵀ, FP8 P̃·V), 4-bit
(NVFP4) and skipped — and one stable ranking of the draft scores hands them out in that order:
the n16 highest-scoring pairs run at 16 bit, the next n8 at 8 bit, the next n4 at 4 bit, the rest
are skipped (§3.1; anemoi `routing.py`: one per-head global argsort). So a higher draft score never
gets a lower precision than a lower score in the same head — the ordering §3.2/§B.6 proves optimal
for the error bound when ε8 ≤ ε4 (the draft score standing in for the attention mass).

Quotas are the largest-remainder (Hamilton) rounding of pairs x budget over the four categories at
once, so each count is within one block of its exact share and they sum to the pair count. Budget
fractions are read as the decimals written in the recipe (0.8 is 4/5, not the nearest binary
double), so rounding ties are real ties; they go to the higher precision first (16, 8, 4, skip).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Mapping

import torch

from ..recipes import DraftSpec

SKIP = 0
CODES = (16, 8, 4, SKIP)  # precision codes, highest first; also the tie-break order


def _decimal(x: float) -> Fraction:
    """The value a recipe wrote: the shortest decimal that round-trips to the float."""
    return Fraction(repr(float(x)))


def budget_fractions(spec: DraftSpec) -> dict[int, Fraction]:
    """Exact share of the video block pairs per code {16, 8, 4, 0 (skip)}; they sum to one.
    The recipe gives the skipped fraction and how the retained pairs split between precisions."""
    skip = _decimal(spec.sparsity)
    shares = {16: _decimal(spec.fp16), 8: _decimal(spec.int8), 4: _decimal(spec.nvfp4)}
    total = sum(shares.values())
    fractions = {code: (1 - skip) * share / total for code, share in shares.items()}
    fractions[SKIP] = skip
    return fractions


def largest_remainder(total: int, fractions: Mapping[int, Fraction]) -> dict[int, int]:
    """Hamilton apportionment of `total` items by exact `fractions` (keyed by code, summing to one):
    floors first, then one more item to each of the largest remainders (ties: CODES order)."""
    exact = {code: total * Fraction(f) for code, f in fractions.items()}
    counts = {code: math.floor(e) for code, e in exact.items()}
    left = total - sum(counts.values())
    order = sorted(exact, key=lambda code: (-(exact[code] - counts[code]), CODES.index(code)))
    for code in order[:left]:
        counts[code] += 1
    return counts


def head_quotas(regions: int, spec: DraftSpec) -> dict[int, int]:
    """Blocks per code for one head of `regions` x `regions` video region pairs."""
    return largest_remainder(regions * regions, budget_fractions(spec))


def allocate(scores: torch.Tensor, quotas: Mapping[int, int]) -> torch.Tensor:
    """Precision codes (..., R, R) for draft `scores` (..., R, R): per head (leading dims), pairs
    ranked by descending score (stable: equal scores keep row-major order) receive the quotas
    highest precision first."""
    flat = scores.flatten(-2)
    order = torch.argsort(flat, dim=-1, descending=True, stable=True)
    counts = torch.tensor([quotas.get(code, 0) for code in CODES], dtype=torch.int64)
    by_rank = torch.tensor(CODES, dtype=torch.int64).repeat_interleave(counts)
    if by_rank.numel() != flat.shape[-1]:
        raise ValueError(f"quotas cover {by_rank.numel()} pairs, the draft has {flat.shape[-1]}")
    codes = torch.empty_like(order)
    codes.scatter_(-1, order, by_rank.to(order.device).expand_as(order))
    return codes.view(scores.shape)
