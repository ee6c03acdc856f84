"""Attention masks the quantized path can express: key padding (a subset of the keys, the same for every query
and head). Anything else makes the call run the model's own kernel (attention_hook.py)."""

from __future__ import annotations

import torch


class UnsupportedMask(Exception):
    """The mask is not a key-padding mask."""


def key_padding(mask: torch.Tensor | None, batch: int, n_keys: int) -> torch.Tensor | None:
    """(batch, n_keys) bool of the keys a mask keeps, if it is a key-padding mask; None if no mask.

    Accepts bool masks (True = keep), integer masks (nonzero = keep) and additive float masks
    (0 = keep, <= -1e4 or -inf = drop) of shape (B|1, Nk), (B|1, 1|Nq, Nk) or (B|1, 1|H, 1|Nq, Nk)
    that are the same for every query and head, or that pad queries and keys alike (HunyuanVideo-1.5:
    m[q, k] = valid[q] & valid[k], same for every head; the padded query rows then attend to nothing, and
    their outputs, which reach no valid token, are the valid keys' dense attention here).
    Raises UnsupportedMask otherwise."""
    if mask is None:
        return None
    if not isinstance(mask, torch.Tensor):
        raise UnsupportedMask(f"a {type(mask).__name__} mask")  # flex attention's BlockMask
    m = mask
    if m.dtype != torch.bool:
        if m.is_floating_point():
            keep, drop = m == 0, m <= -1e4
            if not bool((keep | drop).all()):
                raise UnsupportedMask("additive mask with values other than 0 and -inf")
            m = keep
        else:
            m = m != 0
    if m.dim() < 2 or m.dim() > 4 or m.shape[-1] != n_keys or m.shape[0] not in (1, batch):
        raise UnsupportedMask(f"mask of shape {tuple(mask.shape)}")
    if m.dim() == 4 and m.shape[1] == 1 and m.shape[2] == n_keys:
        valid = m[:, 0].any(dim=1)  # (B, Nk): the keys some query attends to
        if bool((m[:, 0] == (valid[:, :, None] & valid[:, None, :])).all()):
            return valid.expand(batch, n_keys)
    m = m.reshape(m.shape[0], -1, n_keys)
    if m.shape[1] > 1 and not bool((m == m[:, :1]).all()):
        raise UnsupportedMask("mask varies across queries or heads")
    return m[:, 0].expand(batch, n_keys)


__all__ = ["UnsupportedMask", "key_padding"]
