"""DraftAttention2's routing on the GPU: the engine's decisions, computed without a global sort.

- `allocate_by_boundaries(scores, quotas)` equals `lowbit_video.draft.alloc.allocate` (one stable
  descending ranking per head, quotas handed out 16 → 8 → 4 → skip) exactly: after one sort per head, a
  pair's code follows from comparing its score with the score at each quota boundary; when a tie straddles
  a boundary the engine's own `allocate` runs (tests/test_kernels_draft.py checks equality with many ties).
  On the H200 at wan-720p: 15.8 ms per route instead of 19 (engine) or 53 (kthvalue selections, tried);
  the ranking by topk instead of a full sort saves another 7 ms (measured: 3.4 vs 10.7 ms).
- `plan_from_codes(codes)`: per (b·h, query region) the retained key blocks grouped by phase (NVFP4,
  INT8/FP8, 16-bit; each in column order) and their counts — one Triton program per row (a cumsum per
  phase), the lists `draft_fwd` walks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from lowbit_video.draft.alloc import allocate

PHASE_CODES = (4, 8, 16)  # the kernel's phase order (anemoi's): NVFP4, INT8/FP8, 16-bit


def allocate_by_boundaries(scores: torch.Tensor, quotas) -> torch.Tensor:
    """Precision codes (..., R, R) int8, equal to draft.alloc.allocate(scores, quotas): one descending ranking
    (topk) per head gives the score at each quota boundary, and a pair's code follows from comparing its score
    with them. That is exact unless a value is tied across a boundary (the stable order then splits equal
    scores); only then, for the whole call, the engine's own `allocate` runs instead (its scatter of the
    sorted order is what this saves)."""
    flat = scores.flatten(-2)
    n = flat.shape[-1]
    bounds, taken = [], 0
    for code in (16, 8, 4):
        taken += int(quotas.get(code, 0))
        if 0 < taken < n:
            bounds.append((code, taken))
    codes = torch.zeros(flat.shape, dtype=torch.int8, device=flat.device)
    if not bounds:
        first = next((c for c in (16, 8, 4) if quotas.get(c, 0)), 0)
        return codes.fill_(first).view(scores.shape)
    # only the scores at the boundaries are needed: per boundary (deepest first) an unsorted topk (a radix
    # select) of the t + 1 highest scores, each within the previous selection, whose smallest is the highest
    # score left out and whose second smallest the lowest taken (equal: a tie across the boundary)
    last, nxt = [], []
    pool = flat
    for _, t in sorted(bounds, key=lambda b: -b[1]):
        pool = torch.topk(pool, t + 1, dim=-1, largest=True, sorted=False).values
        low = pool.min(dim=-1, keepdim=True).values
        nxt.append(low)
        last.append(torch.where(pool > low, pool, torch.inf).min(dim=-1, keepdim=True).values
                    .where((pool == low).sum(-1, keepdim=True) == 1, low))
    last = torch.cat(last[::-1], dim=-1)  # lowest score taken at each boundary (bounds' order)
    nxt = torch.cat(nxt[::-1], dim=-1)  # highest score left out
    if bool((last == nxt).any()):
        return allocate(scores, quotas).to(torch.int8)
    for i, (code, _) in reversed(list(enumerate(bounds))):
        codes = torch.where(flat >= last[..., i:i + 1], torch.tensor(code, dtype=torch.int8, device=flat.device), codes)
    if taken >= n:  # the last quota reaches the end of the ranking: everything not yet coded gets it
        tail = next(c for c in (4, 8, 16) if quotas.get(c, 0))
        codes = torch.where(codes == 0, torch.tensor(tail, dtype=torch.int8, device=flat.device), codes)
    return codes.view(scores.shape)


@dataclass(frozen=True, eq=False)
class DraftPlan:
    """What the kernel runs: `codes` (B, H, R, R) precision per region pair (16, 8, 4 or 0 = skipped),
    `idx` (B·H, R, R) retained key blocks per query region grouped by phase (the first Σ cnt entries of a
    row are used), `cnt` (B·H, R, 3) their number per phase."""

    codes: torch.Tensor
    idx: torch.Tensor
    cnt: torch.Tensor

    def density(self) -> float:
        """Retained share of the video region pairs (all precisions)."""
        return float((self.codes != 0).double().mean())

    def fractions(self) -> dict[str, float]:
        return {str(c): float((self.codes == c).double().mean()) for c in (16, 8, 4)}


@triton.jit
def _plan_kernel(CODES, IDX, CNT, R, RP: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, RP)
    inb = cols < R
    c = tl.load(CODES + row.to(tl.int64) * R + cols, mask=inb, other=0)
    off = 0
    for p in tl.static_range(3):
        code = 4 if p == 0 else (8 if p == 1 else 16)
        m = (c == code) & inb
        mi = m.to(tl.int32)
        pos = tl.cumsum(mi, axis=0) - 1 + off
        tl.store(IDX + row.to(tl.int64) * R + pos, cols, mask=m)
        n = tl.sum(mi, axis=0)
        tl.store(CNT + row * 3 + p, n)
        off += n


def plan_reference(codes: torch.Tensor) -> DraftPlan:
    """`plan_from_codes` in plain torch (any device): a stable sort of (phase rank, column) per row."""
    B, H, R, _ = codes.shape
    rank = torch.full((17,), 3, dtype=torch.int64, device=codes.device)
    for r, code in enumerate(PHASE_CODES):
        rank[code] = r
    key = rank[codes.long()] * R + torch.arange(R, device=codes.device)
    idx = (key.sort(dim=-1).values % R).to(torch.int32).reshape(B * H, R, R)
    cnt = torch.stack([(codes == c).sum(-1) for c in PHASE_CODES], dim=-1).to(torch.int32).reshape(B * H, R, 3)
    used = torch.arange(R, device=codes.device) < cnt.sum(-1, keepdim=True)
    return DraftPlan(codes, torch.where(used, idx, 0), cnt)


def plan_from_codes(codes: torch.Tensor) -> DraftPlan:
    """The per-query-region key lists of a code map (B, H, R, R) (any integer dtype), by a Triton kernel
    (CUDA, or the CPU interpreter); entries past a row's count are 0."""
    B, H, R, _ = codes.shape
    c8 = codes.to(torch.int8).contiguous()
    idx = torch.zeros((B * H, R, R), dtype=torch.int32, device=codes.device)
    cnt = torch.empty((B * H, R, 3), dtype=torch.int32, device=codes.device)
    _plan_kernel[(B * H * R,)](c8, idx, cnt, R, RP=triton.next_power_of_2(R), num_warps=4)
    return DraftPlan(codes, idx, cnt)
