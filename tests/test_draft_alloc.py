"""draft/alloc.py: DraftAttention2 allocation against hand computations.

Largest-remainder quotas over {16, 8, 4, skip} per head, handed out down a stable ranking of the
draft scores.
"""

from fractions import Fraction

import pytest
import torch

from lowbit_video.draft.alloc import allocate, head_quotas, largest_remainder
from lowbit_video.recipes import DraftSpec

RANK = {16: 3, 8: 2, 4: 1, 0: 0}
DRAFT2 = DraftSpec(block=64, maxpool_weight=0.5, sparsity=0.8, fp16=0.15, int8=0.25, nvfp4=0.6)


@pytest.mark.parametrize("regions, expected", [
    # 16 pairs: exact 16: 0.48, 8: 0.8, 4: 1.92, skip: 12.8 -> floors 0, 0, 1, 12 (13); 3 left to the
    # largest remainders .92 (4), then the .8 tie 8/skip in precision order -> 0, 1, 2, 13.
    (4, {16: 0, 8: 1, 4: 2, 0: 13}),
    # 256: 7.68, 12.8, 30.72, 204.8 -> floors 7, 12, 30, 204 (253); remainders .8 (8), .8 (skip), .72 (4).
    (16, {16: 7, 8: 13, 4: 31, 0: 205}),
    # 1024: 30.72, 51.2, 122.88, 819.2 -> floors 30, 51, 122, 819 (1022); remainders .88 (4), .72 (16).
    (32, {16: 31, 8: 51, 4: 123, 0: 819}),
])
def test_quotas_are_largest_remainder_of_the_budget(regions, expected):
    assert head_quotas(regions, DRAFT2) == expected


def test_sparse16_quotas():
    # 256 pairs at 80% skip: 204.8 / 51.2 -> 204 / 51, the one left goes to skip (.8 > .2).
    assert head_quotas(16, DraftSpec(sparsity=0.8)) == {16: 51, 8: 0, 4: 0, 0: 205}


def test_largest_remainder_is_within_one_of_the_exact_share():
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        raw = torch.rand(4, generator=g).tolist()
        fractions = {code: Fraction(x).limit_denominator(1000) for code, x in zip((16, 8, 4, 0), raw)}
        total_f = sum(fractions.values())
        fractions = {c: f / total_f for c, f in fractions.items()}
        total = int(torch.randint(1, 2000, (1,), generator=g))
        counts = largest_remainder(total, fractions)
        assert sum(counts.values()) == total
        assert all(abs(counts[c] - total * fractions[c]) < 1 for c in fractions)


def test_allocation_by_hand():
    # Ranking 0.4 > 0.3 > 0.2 > 0.1 hands out one 16, one 8, one 4, one skip in that order.
    scores = torch.tensor([[[[0.4, 0.1], [0.3, 0.2]]]], dtype=torch.float64)
    codes = allocate(scores, {16: 1, 8: 1, 4: 1, 0: 1})
    assert codes[0, 0].tolist() == [[16, 0], [8, 4]]
    # Equal scores: stable, row-major order decides.
    codes = allocate(torch.zeros(1, 1, 2, 2), {16: 1, 8: 1, 4: 1, 0: 1})
    assert codes[0, 0].tolist() == [[16, 8], [4, 0]]


def test_precision_is_monotone_in_draft_score_and_quotas_hold_per_head():
    g = torch.Generator().manual_seed(1)
    scores = torch.rand(2, 3, 6, 6, generator=g, dtype=torch.float64)
    quotas = head_quotas(6, DRAFT2)
    codes = allocate(scores, quotas)
    rank = codes.clone().apply_(lambda c: RANK[c])
    for b in range(2):
        for h in range(3):
            s, r = scores[b, h].flatten(), rank[b, h].flatten()
            higher = s[:, None] > s[None, :]
            assert bool((r[:, None] >= r[None, :])[higher].all())  # higher score, never lower precision
            for code, n in quotas.items():
                assert int((codes[b, h] == code).sum()) == n
