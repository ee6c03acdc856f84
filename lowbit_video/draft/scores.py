"""The low-resolution draft: pooled Q and K per region, and the region-pair attention map per head.

Why pooling: a region's average query/key is a cheap stand-in for all of its tokens, so
softmax(Q̄ K̄ᵀ · scale) over regions approximates how much attention mass each block pair carries
(DraftAttention v1). DraftAttention2 adds the per-channel *maximum* over the region, which keeps
the strongest tokens visible where averaging washes them out (§1: "average- and max-pooled queries
and keys capture complementary regional statistics"; §4.3: adding MaxPool improves the trade-off).

The two statistics are combined as anemoi's public code does (docs/attention_api.md,
`maxpool_weight` = w): two independently row-normalised maps, mixed,

    A = (1 − w) · softmax_rows(Q_mean K_meanᵀ · scale) + w · softmax_rows(Q_max K_maxᵀ · scale),

so every row of A sums to one whatever w is. Padding slots never enter a mean (the divisor is the
region's real-token count) or a maximum.
"""

from __future__ import annotations

import torch

from .layout import PackedLayout


def pool_regions(x_packed: torch.Tensor, layout: PackedLayout) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, max) over each region's real tokens: (..., R * block, D) -> two (..., R, D)."""
    blocks = x_packed.unflatten(-2, (layout.regions, layout.block))  # (..., R, block, D)
    valid = layout.valid.to(x_packed.device).unsqueeze(-1)  # (R, block, 1)
    counts = layout.counts.to(x_packed.device, x_packed.dtype).unsqueeze(-1)  # (R, 1)
    mean = (blocks * valid).sum(dim=-2) / counts
    maximum = blocks.masked_fill(~valid, -torch.inf).amax(dim=-2)
    return mean, maximum


def draft_map(
    q_packed: torch.Tensor,
    k_packed: torch.Tensor,
    layout: PackedLayout,
    *,
    scale: float,
    maxpool_weight: float,
) -> torch.Tensor:
    """The draft attention map (B, H, R, R) of packed (B, H, R * block, D) queries and keys; row a
    is query region a's estimated distribution of attention over key regions."""
    q_mean, q_max = pool_regions(q_packed, layout)
    k_mean, k_max = pool_regions(k_packed, layout)
    return draft_scores(q_mean, q_max, k_mean, k_max, scale=scale, maxpool_weight=maxpool_weight)


def draft_scores(
    q_mean: torch.Tensor,
    q_max: torch.Tensor,
    k_mean: torch.Tensor,
    k_max: torch.Tensor,
    *,
    scale: float,
    maxpool_weight: float,
) -> torch.Tensor:
    """The draft map (..., R, R) from pooled (..., R, D) descriptors (what the GPU pre-pass produces)."""
    w = float(maxpool_weight)
    mean_map = torch.softmax((q_mean @ k_mean.transpose(-1, -2)) * scale, dim=-1)
    if w == 0.0:
        return mean_map
    max_map = torch.softmax((q_max @ k_max.transpose(-1, -2)) * scale, dim=-1)
    return (1.0 - w) * mean_map + w * max_map
