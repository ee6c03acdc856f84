"""draft/scores.py: the DraftAttention2 draft map against hand computations.

The draft map (anemoi docs/attention_api.md): A = (1 − w)·softmax(Q̄ K̄ᵀ·scale) + w·softmax(Q̂max K̂maxᵀ·scale),
rows over key regions, pooling over each region's real tokens.
"""

import math

import pytest
import torch

from lowbit_video.attention import attend
from lowbit_video.attention.draft import VideoGeometry
from lowbit_video.draft.layout import pack_layout
from lowbit_video.draft.scores import draft_map, pool_regions
from lowbit_video.recipes import recipe_from_dict


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
    g = torch.Generator().manual_seed(0)
    junk = torch.randn(1, 1, 5, 2, generator=g, dtype=torch.float64) * 100
    q, k = torch.cat([junk, q], dim=2), torch.cat([junk, k], dim=2)
    v = torch.randn(q.shape, generator=g, dtype=q.dtype)
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
