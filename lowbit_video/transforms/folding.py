"""Fold RotateAttention's V Hadamard into the value and output projections (zero run-time cost).

Per head, O_h = softmax(Q_h K_hᵀ/√d) V_h, and for any orthogonal H (d x d)

    O_h W_o,h = softmax(·) (V_h H) (Hᵀ W_o,h),

so V can be quantized in the rotated basis (outliers spread over channels) while the model's output
is unchanged: in the paper's math layout, W_v' = W_v H and W_o' = Hᵀ W_o.

torch.nn.Linear stores weight as (out_features, in_features) and computes y = x Wᵀ + b. With heads
concatenated along features (head h owns features h·d … h·d + d − 1), that becomes:

- value projection: output rows of head h rotate, W_v'[h] = Hᵀ W_v[h] (W_v[h] = rows of head h),
  and its bias b_v'[h] = b_v[h] H;
- output projection: input columns of head h rotate, W_o'[:, h] = W_o[:, h] H.

The output projection's bias is unchanged. Heads are counted separately for each matrix (V heads in
W_v, attention heads in W_o), so grouped-query attention folds the same way.
"""

from __future__ import annotations

import torch

from ..errors import ShapeError
from .hadamard import hadamard_matrix


def fold_v_rotation(
    w_v: torch.Tensor,
    w_o: torch.Tensor,
    head_dim: int,
    *,
    b_v: torch.Tensor | None = None,
    rotation: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(W_v', W_o', b_v') for torch Linear weights W_v (heads·d, in) and W_o (out, heads·d).

    `rotation` is the per-head orthogonal d x d matrix H (default: the normalized Hadamard matrix of
    order head_dim). Computed in the weights' dtype; pass float64 weights for an exact check.
    """
    if w_v.dim() != 2 or w_o.dim() != 2:
        raise ShapeError(f"weights must be 2-D (out, in), got {tuple(w_v.shape)} and {tuple(w_o.shape)}")
    if w_v.shape[0] % head_dim or w_o.shape[1] % head_dim:
        raise ShapeError(
            f"head_dim {head_dim} must divide W_v's out features ({w_v.shape[0]}) and W_o's in features ({w_o.shape[1]})"
        )
    h = hadamard_matrix(head_dim) if rotation is None else rotation
    if h.shape != (head_dim, head_dim):
        raise ShapeError(f"rotation must be ({head_dim}, {head_dim}), got {tuple(h.shape)}")
    h = h.to(dtype=w_v.dtype, device=w_v.device)

    heads_v = w_v.shape[0] // head_dim
    # W_v'[h] = Hᵀ W_v[h]: (heads, d, in) contracted over the head's d output rows.
    w_v_new = torch.einsum("de,hdi->hei", h, w_v.reshape(heads_v, head_dim, -1)).reshape(w_v.shape)
    b_v_new = None
    if b_v is not None:
        b_v_new = (b_v.reshape(heads_v, head_dim) @ h).reshape(b_v.shape)
    heads_o = w_o.shape[1] // head_dim
    w_o_new = (w_o.reshape(w_o.shape[0], heads_o, head_dim) @ h.to(w_o.dtype)).reshape(w_o.shape)
    return w_v_new, w_o_new, b_v_new
