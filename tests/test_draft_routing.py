"""DraftAttention2 draft map and allocation against hand computations.

The draft map (anemoi docs/attention_api.md): A = (1 − w)·softmax(Q̄ K̄ᵀ·scale) + w·softmax(Q̂max K̂maxᵀ·scale),
rows over key regions, pooling over each region's real tokens. Allocation: largest-remainder quotas
over {16, 8, 4, skip} per head, handed out down a stable ranking of the draft scores.
"""

import math
from fractions import Fraction

import pytest
import torch

from lowbit_video.attention import attend
from lowbit_video.attention.draft import VideoGeometry
from lowbit_video.draft.alloc import allocate, head_quotas, largest_remainder
from lowbit_video.draft.layout import pack_layout
from lowbit_video.draft.scores import draft_map, pool_regions
from lowbit_video.recipes import DraftSpec, recipe_from_dict

RANK = {16: 3, 8: 2, 4: 1, 0: 0}


def tiny_qk():
    """One 8 x 16 frame, head_dim 2. At B = 64 its regions are the left and right 8 x 8 halves
    (test_draft_layout). Values are chosen so the pooled vectors are easy to write down."""
    q = torch.zeros(8, 16, 2, dtype=torch.float64)
    k = torch.zeros(8, 16, 2, dtype=torch.float64)
    q[:, :8] = torch.tensor([1.0, 0.0])
    q[3, 5] = torch.tensor([3.0, 2.0])
    q[:, 8:] = torch.tensor([0.0, 1.0])
    k[:, :8] = torch.tensor([1.0, 1.0])
    k[:, 8:] = torch.tensor([-1.0, 0.0])
    k[6, 12] = torch.tensor([0.0, 4.0])
    return q.reshape(1, 1, 128, 2), k.reshape(1, 1, 128, 2)


def hand_draft(scale, w):
    # Means: left q (63·1 + 3, 2)/64, right q (0, 1); left k (1, 1), right k (−63/64, 4/64).
    # Maxima: left q (3, 2), right q (0, 1); left k (1, 1), right k (0, 4).
    q_mean = [(66 / 64, 2 / 64), (0.0, 1.0)]
    k_mean = [(1.0, 1.0), (-63 / 64, 4 / 64)]
    q_max = [(3.0, 2.0), (0.0, 1.0)]
    k_max = [(1.0, 1.0), (0.0, 4.0)]

    def softmax_rows(qs, ks):
        rows = []
        for a in qs:
            logits = [scale * (a[0] * c[0] + a[1] * c[1]) for c in ks]
            z = sum(math.exp(x) for x in logits)
            rows.append([math.exp(x) / z for x in logits])
        return rows

    mean, mx = softmax_rows(q_mean, k_mean), softmax_rows(q_max, k_max)
    return [[(1 - w) * mean[a][c] + w * mx[a][c] for c in range(2)] for a in range(2)]


@pytest.mark.parametrize("w", [0.0, 0.25, 1.0])
def test_draft_map_matches_hand_computation(w):
    q, k = tiny_qk()
    layout = pack_layout(VideoGeometry(1, 8, 16), 64)
    got = draft_map(layout.pack(q), layout.pack(k), layout, scale=0.5, maxpool_weight=w)
    expected = torch.tensor(hand_draft(0.5, w), dtype=torch.float64)
    assert torch.allclose(got[0, 0], expected, rtol=0, atol=1e-15)


def test_draft_through_attend_ignores_prefix_tokens():
    # Prefix tokens (text) are outside the draft: junk there must not move the scores.
    q, k = tiny_qk()
    junk = torch.randn(1, 1, 5, 2, dtype=torch.float64) * 100
    q, k = torch.cat([junk, q], dim=2), torch.cat([junk, k], dim=2)
    v = torch.randn_like(q)
    recipe = recipe_from_dict({"name": "t", "attention": {"kind": "draft", "draft": {"maxpool_weight": 0.25, "sparsity": 0.5}}})
    _, diag = attend(q, k, v, recipe, scale=0.5, geometry=VideoGeometry(1, 8, 16, prefix=5), return_diagnostics=True)
    expected = torch.tensor(hand_draft(0.5, 0.25), dtype=torch.float64)
    assert torch.allclose(diag.route.scores[0, 0], expected, rtol=0, atol=1e-15)


def test_pooling_excludes_padding():
    # 6 x 11 = 66 tokens at B = 64: two regions of 33 real tokens + 31 padding slots each. With all
    # tokens (−1, −2), counting padding would give mean −33/64·(1, 2) and max (0, 0).
    layout = pack_layout(VideoGeometry(1, 6, 11), 64)
    x = torch.tensor([-1.0, -2.0], dtype=torch.float64).expand(1, 1, 66, 2)
    mean, maximum = pool_regions(layout.pack(x), layout)
    target = torch.tensor([[-1.0, -2.0]] * 2, dtype=torch.float64)
    assert torch.equal(mean[0, 0], target) and torch.equal(maximum[0, 0], target)


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
