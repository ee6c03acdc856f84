"""SageAttention smoothing of Q and K (tensors in BHND layout: batch, heads, tokens, head_dim).

K smoothing subtracts K's per-channel mean over tokens. Every score in a row then shifts by the same
q·mean(K), which softmax ignores, so attention is unchanged exactly while K's common offset (large in
DiTs) no longer eats the quantization range.

Q smoothing subtracts the mean of each group of `group` consecutive query tokens. The removed part
contributes q_mean·Kᵀ to the scores, which differs per key, so it is added back as a full-precision
correction ΔS (SageAttention2/3 compute this GEMV in FP32).
"""

from __future__ import annotations

import torch


def smooth_k(k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(k − mean_tokens(k), mean) with mean of shape (B, H, 1, D)."""
    mean = k.mean(dim=-2, keepdim=True)
    return k - mean, mean


def smooth_q(q: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(q − group_mean, group_mean broadcast back to q's shape). The last group may be shorter."""
    if group <= 0:
        raise ValueError(f"group must be positive, got {group}")
    n = q.shape[-2]
    means = []
    for start in range(0, n, group):
        chunk = q[..., start : start + group, :]
        means.append(chunk.mean(dim=-2, keepdim=True).expand_as(chunk))
    mean = torch.cat(means, dim=-2) if means else torch.zeros_like(q)
    return q - mean, mean
