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
        if _pads_queries_and_keys(m[:, 0], valid):
            return valid.expand(batch, n_keys)
    m = m.reshape(m.shape[0], -1, n_keys)
    if m.shape[1] > 1 and not bool((m == m[:, :1]).all()):
        raise UnsupportedMask("mask varies across queries or heads")
    return m[:, 0].expand(batch, n_keys)


def _pads_queries_and_keys(m: torch.Tensor, valid: torch.Tensor, rows: int = 2048) -> bool:
    """Whether m[b, q, k] == valid[b, q] & valid[b, k] everywhere, compared a slab of query rows at a time: at video
    lengths (HunyuanVideo-1.5 480p: 49,800 tokens) the whole comparison would be several N x N temporaries."""
    for start in range(0, m.shape[1], rows):
        stop = min(start + rows, m.shape[1])
        if not bool((m[:, start:stop] == (valid[:, start:stop, None] & valid[:, None, :])).all()):
            return False
    return True


class PaddingPlan:
    """What one key-padding mask asks of the quantized path, read off the host once per mask and forward.

    `rows` groups the batch rows with the same valid keys: (row indices, kept key indices, padded key indices,
    kept text tokens), each index a device tensor, so the per-call work is gathers and one recipe call per group,
    with no host synchronisation (a batch whose rows share one prompt length, the usual case, is one group)."""

    def __init__(self, valid: torch.Tensor, n_keys: int, text: slice | None) -> None:
        self.all_valid = bool(valid.all())
        self.rows: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, int, int]] = []
        if self.all_valid:
            return
        groups: dict[bytes, list[int]] = {}
        host = valid.cpu()
        for b in range(host.shape[0]):
            groups.setdefault(host[b].numpy().tobytes(), []).append(b)
        dev = valid.device
        for rows in groups.values():
            v = host[rows[0]]
            keep = v.nonzero().squeeze(1)
            pad = (~v).nonzero().squeeze(1)
            n_text = int(v[text].sum()) if text is not None else 0
            kept_video = int(v.sum()) - n_text
            self.rows.append((torch.tensor(rows, device=dev), keep.to(dev), pad.to(dev), n_text, kept_video))


def padding_plan(cache: dict, mask: torch.Tensor | None, batch: int, n_keys: int,
                 text: slice | None) -> PaddingPlan | None:
    """`PaddingPlan` of a key-padding mask, cached in `cache` by the mask tensor (a model passes one mask object to
    every block of a forward; the cache holds a reference, so the object cannot be freed and its id reused while
    it is there, and the caller empties it at each forward). None without a mask. UnsupportedMask as key_padding."""
    if mask is None:
        return None
    # a flex-attention BlockMask has no version counter (it is refused below anyway), nor has a tensor made under
    # torch.inference_mode (which also cannot be changed in place outside that mode)
    version = mask._version if isinstance(mask, torch.Tensor) and not mask.is_inference() else 0
    key = (id(mask), version, batch, n_keys, None if text is None else (text.start, text.stop))
    hit = cache.get(key)
    if hit is None:
        try:
            found: PaddingPlan | UnsupportedMask = PaddingPlan(key_padding(mask, batch, n_keys), n_keys, text)
        except UnsupportedMask as e:
            found = e
        hit = cache[key] = (mask, found)
    if isinstance(hit[1], UnsupportedMask):
        raise hit[1]
    return hit[1]


__all__ = ["PaddingPlan", "UnsupportedMask", "key_padding", "padding_plan"]
