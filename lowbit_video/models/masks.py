"""Attention masks the quantized path can express: key padding (a subset of the keys, the same for every query
and head), and flex attention's BlockMasks that are the same for every batch row and head and split the queries
into a few groups, each attending to one set of keys (block-causal frame chunks: AnyFlow's FAR transformer).
Anything else makes the call run the model's own kernel (attention_hook.py)."""

from __future__ import annotations

import weakref

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
        raise UnsupportedMask(f"a {type(mask).__name__} mask that is not key padding")  # see query_groups
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
    same = torch.ones((), dtype=torch.bool, device=m.device)
    for start in range(0, m.shape[1], rows):  # one host synchronisation at the end, not one per slab
        stop = min(start + rows, m.shape[1])
        same &= (m[:, start:stop] == (valid[:, start:stop, None] & valid[:, None, :])).all()
    return bool(same)


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


MAX_QUERY_GROUPS = 64  # beyond this many key sets, one recipe call per group costs more than it is worth


class QueryGroupPlan:
    """A flex-attention BlockMask as groups of queries that attend to one set of keys each: `groups` holds
    (query indices, key indices) device tensors; `empty` the queries that attend to no key (flex attention gives
    them a zero output). A block-causal mask over k frame chunks is k groups, each a key prefix."""

    def __init__(self, groups: list[tuple[torch.Tensor, torch.Tensor]], empty: torch.Tensor) -> None:
        self.groups, self.empty = groups, empty


def query_groups(mask, n_queries: int, n_keys: int, device: torch.device, rows: int = 2048) -> QueryGroupPlan:
    """QueryGroupPlan of a BlockMask (the same for every batch row and head) at n_queries x n_keys. Its mask_mod
    is evaluated a slab of query rows at a time on `device`; consecutive rows of a slab with the same keys form a
    segment, and segments with the same keys one group. Raises UnsupportedMask for a mask per batch row or head, a size
    other than the call's, or more than MAX_QUERY_GROUPS key sets."""
    if tuple(mask.shape[:2]) != (1, 1):
        raise UnsupportedMask(f"a BlockMask per batch row or head (shape {tuple(mask.shape)})")
    if tuple(mask.seq_lengths) != (n_queries, n_keys):
        raise UnsupportedMask(f"a BlockMask of {tuple(mask.seq_lengths)} for {n_queries} x {n_keys} tokens")
    zero = torch.zeros((), dtype=torch.int64, device=device)
    kv = torch.arange(n_keys, device=device)
    keys: dict[bytes, int] = {}  # a group's key set -> its index in `found`
    found: list[tuple[list[torch.Tensor], torch.Tensor]] = []
    for start in range(0, n_queries, rows):
        q = torch.arange(start, min(start + rows, n_queries), device=device)
        m = mask.mask_mod(zero, zero, q[:, None], kv[None, :]).expand(q.shape[0], n_keys).bool()
        first = torch.ones(q.shape[0], dtype=torch.bool, device=device)  # a slab starts a segment
        first[1:] = (m[1:] != m[:-1]).any(dim=1)
        starts = first.nonzero().squeeze(1).tolist() + [q.shape[0]]
        for a, b in zip(starts[:-1], starts[1:]):
            row = m[a]
            key = row.cpu().numpy().tobytes()
            if key not in keys:
                if len(keys) == MAX_QUERY_GROUPS:
                    raise UnsupportedMask(f"a BlockMask with more than {MAX_QUERY_GROUPS} distinct key sets")
                keys[key] = len(found)
                found.append(([], row.nonzero().squeeze(1)))
            found[keys[key]][0].append(q[a:b])
    groups, empty = [], torch.zeros(0, dtype=torch.int64, device=device)
    for parts, kept in found:
        qs = torch.cat(parts)
        if kept.numel():
            groups.append((qs, kept))
        else:
            empty = qs
    return QueryGroupPlan(groups, empty)


def padding_plan(cache: dict, mask: torch.Tensor | None, batch: int, n_keys: int,
                 text: slice | None, n_queries: int | None = None,
                 device: torch.device | None = None) -> PaddingPlan | QueryGroupPlan | None:
    """`PaddingPlan` of a key-padding mask, cached in `cache` by the mask object: a model that passes one mask to
    every block of a forward (HunyuanVideo) has it read once. The cache holds a weak reference, so a model that
    builds a new mask in every call (HunyuanVideo-1.5: 2.4 GB at 480p) frees each after its call, and an entry
    whose mask is gone never answers for a new object given the same id; the caller empties it at each forward.
    None without a mask. A BlockMask (which has no tensor form) gives a QueryGroupPlan for n_queries queries on
    `device`. UnsupportedMask as key_padding."""
    if mask is None:
        return None
    # a flex-attention BlockMask has no version counter, nor has a tensor made under torch.inference_mode (which
    # also cannot be changed in place outside that mode)
    version = mask._version if isinstance(mask, torch.Tensor) and not mask.is_inference() else 0
    key = (id(mask), version, batch, n_queries, n_keys, None if text is None else (text.start, text.stop))
    hit = cache.get(key)
    if hit is None or hit[0]() is not mask:
        try:
            found: PaddingPlan | QueryGroupPlan | UnsupportedMask
            if not isinstance(mask, torch.Tensor) and hasattr(mask, "mask_mod") and n_queries is not None:
                found = query_groups(mask, n_queries, n_keys, device)
            else:
                found = PaddingPlan(key_padding(mask, batch, n_keys), n_keys, text)
        except UnsupportedMask as e:
            found = e
        for dead in [k for k, (ref, _) in cache.items() if ref() is None]:
            del cache[dead]
        hit = cache[key] = (weakref.ref(mask), found)
    if isinstance(hit[1], UnsupportedMask):
        raise hit[1]
    return hit[1]


__all__ = ["MAX_QUERY_GROUPS", "PaddingPlan", "QueryGroupPlan", "UnsupportedMask", "key_padding", "padding_plan",
           "query_groups"]
