"""DraftAttention2's routing on the GPU: the reference engine's decisions (lowbit_video/draft: `draft_scores`,
`allocate`) without a sort and without waiting on the device, in a fixed sequence of launches.

`route_plan(q_mean, q_max, k_mean, k_max, scale=, maxpool_weight=, quotas=)` -> DraftPlan:

1. scores: the two float64 logit maps by torch matmul (as the engine computes them), then `_scores_kernel`,
   one program per query region, writes the mixed map A = (1 − w)·softmax(S_mean·scale) + w·softmax(S_max·scale)
   in float64 with the engine's formula and roundings (no FMA contraction; only the order of a row's sum
   differs), and counts the top byte of every score into a per-head histogram (level 0 of step 2).
2. boundaries: per head, the score v at each quota boundary t (t = n16, n16 + n8, n16 + n8 + n4: the t-th
   highest score) by a radix select over the scores' bit patterns — scores are ≥ 0, so their int64 bit
   patterns order as the values do — one byte per level, most significant first. `_radix_kernel` (one launch
   per level) counts the next byte of the scores that share a boundary's bytes found so far; each of its
   programs first finds where every boundary stands (`_boundary_state`: the state before the previous level,
   which that level's first program of the head stored, and that level's histograms). A boundary whose byte
   bin holds exactly the pairs still to take is settled there (the later levels read nothing for it), and
   boundaries with the same bytes so far share one histogram.
   `_bounds_kernel` writes each boundary's final state and, only where equal scores straddle a boundary (more
   scores equal v than pairs still to take), each row's number of them.
3. codes and plan: `_route_plan_kernel`, one program per query region. A pair is among a boundary's top t iff
   its score is above v, or equal to v and among the first t − #(scores above v) such pairs in row-major
   order — the stable descending order of `allocate`; its rank among them is the equal pairs of the rows
   above plus those before it in its row. Its code is the highest precision whose top set holds it. The same
   program writes the row's codes, its retained key blocks grouped by phase (NVFP4, INT8/FP8, 16-bit; each in
   column order) and their counts: the lists `draft_fwd` walks.

`plan_from_codes(codes)` builds the lists of a given code map (forced routing), `plan_from_scores` routes a
given score map. The readable references: `allocate_reference` (the boundary rule of steps 2–3 in torch,
itself checked against `allocate`) and `plan_reference`; tests/test_kernels_draft.py holds the kernels to them
and to the engine.
"""

from __future__ import annotations

import itertools
import struct
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

PHASE_CODES = (4, 8, 16)  # the kernel's phase order (anemoi's): NVFP4, INT8/FP8, 16-bit
BOUNDARY_CODES = (16, 8, 4)  # the code of each quota boundary's top set, highest precision first
SLOTS = tl.constexpr(4)  # per-head state vectors: the three boundaries and one unused slot (a power of two)
LEVELS = tl.constexpr(8)  # bytes of a float64 bit pattern
BINS = tl.constexpr(256)
SELECT_BLOCK, SELECT_TILES = 1024, 16  # scores per tile and at most tiles per program of `_radix_kernel`
SELECT_PROGRAMS = 1024  # fewer tiles per program while the grid would be smaller: a few programs per SM
DENSE = 128  # a tile's boundary counts through a shared-memory histogram above this many matches, else atomics
BOUND_ROWS = 16  # rows per program of `_bounds_kernel`


@dataclass(frozen=True, eq=False)
class DraftPlan:
    """What the kernel runs: `codes` (B, H, R, R) precision per region pair (16, 8, 4 or 0 = skipped),
    `idx` (B·H, R, R) retained key blocks per query region grouped by phase (the first Σ cnt entries of a
    row are used, the rest are 0), `cnt` (B·H, R, 3) their number per phase."""

    codes: torch.Tensor
    idx: torch.Tensor
    cnt: torch.Tensor

    def density(self) -> float:
        """Retained share of the video region pairs (all precisions)."""
        return float((self.codes != 0).double().mean())

    def fractions(self) -> dict[str, float]:
        return {str(c): float((self.codes == c).double().mean()) for c in (16, 8, 4)}


def quota_boundaries(quotas, pairs: int) -> tuple[int, int, int]:
    """The top-set size t of each code in BOUNDARY_CODES: the pairs ranked below t get that code or a higher one."""
    counts = [int(quotas.get(code, 0)) for code in (*BOUNDARY_CODES, 0)]
    if sum(counts) != pairs:
        raise ValueError(f"quotas cover {sum(counts)} pairs, the draft has {pairs}")
    return tuple(itertools.accumulate(counts[:3]))


def allocate_reference(scores: torch.Tensor, quotas) -> torch.Tensor:
    """The boundary rule the route kernels implement, in plain torch (any device): per head and boundary t, v is
    the t-th highest score; a pair is in the top t iff its score is above v, or equal to v and fewer than
    t − #(scores above v) equal scores precede it in row-major order. Codes (..., R, R) int8, equal to
    `lowbit_video.draft.alloc.allocate` (a stable descending ranking handed out 16 → 8 → 4 → skip)."""
    flat = scores.flatten(-2)
    codes = torch.zeros(flat.shape, dtype=torch.int8, device=flat.device)
    ranked = flat.sort(dim=-1, descending=True).values
    for code, t in reversed(list(zip(BOUNDARY_CODES, quota_boundaries(quotas, flat.shape[-1])))):
        if t == 0:
            continue
        v = ranked[..., t - 1:t]
        above, equal = flat > v, (flat == v).long()
        before = equal.cumsum(-1) - equal  # equal scores before the pair in row-major order
        top = above | ((equal == 1) & (before < t - above.sum(-1, keepdim=True)))
        codes[top] = code  # the 4-bit set first: a higher precision's (smaller) top set overrides
    return codes.view(scores.shape)


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


# ----------------------------------------------------------------------------------------------- kernels


@triton.jit
def _as_f64(bits):
    """A float64 passed as its int64 bit pattern (a float argument would arrive as fp32)."""
    return bits.to(tl.int64).to(tl.float64, bitcast=True)


@triton.jit
def _key(x):
    """Scores ≥ 0 as int64 bit patterns, ordered as the values (−0.0 as 0.0, which compares equal to it)."""
    return tl.where(x == 0, 0, x.to(tl.int64, bitcast=True))


@triton.jit
def _softmax_row(ptrs, inb, scale):
    x = tl.where(inb, tl.load(ptrs, mask=inb, other=0.0) * scale, float("-inf"))
    e = tl.exp(x - tl.max(x, 0))
    return e / tl.sum(e, 0)


@triton.jit(do_not_specialize=["scale_bits", "w_mean_bits", "w_max_bits"])
def _scores_kernel(SM, SX, A, HIST, R, scale_bits, w_mean_bits, w_max_bits, RP: tl.constexpr,
                   MAXPOOL: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, RP)
    inb = cols < R
    off = row.to(tl.int64) * R + cols
    scale = _as_f64(scale_bits)
    a = _softmax_row(SM + off, inb, scale)
    if MAXPOOL:
        a = _as_f64(w_mean_bits) * a + _as_f64(w_max_bits) * _softmax_row(SX + off, inb, scale)
    tl.store(A + off, a, mask=inb)
    # level 0 of the radix select: every score's top byte, into slot 0 of its head
    h = tl.histogram((_key(a) >> 56).to(tl.int32), BINS, mask=inb)
    bins = tl.arange(0, BINS)
    tl.atomic_add(HIST + (row // R) * (SLOTS * LEVELS * BINS) + bins, h, mask=h > 0, sem="relaxed")


@triton.jit
def _leaders(prefix, done):
    """Per boundary, the first unsettled boundary with the same bytes so far (itself if none): the one whose
    histogram it shares."""
    ks = tl.arange(0, SLOTS)
    same = ((prefix[:, None] == prefix[None, :]) & ~done[:, None] & ~done[None, :]
            & (ks[None, :] <= ks[:, None]))
    return tl.min(tl.where(same, ks[None, :], ks[:, None]), 1)


@triton.jit
def _take_level(HIST, bh, level, prefix, depth, rem, cnt, done):
    """The boundaries' state after reading the histograms of `level` (module docstring, step 2)."""
    bins = tl.arange(0, BINS)
    slot = tl.where(level == 0, 0, _leaders(prefix, done))
    h = tl.load(HIST + ((bh * SLOTS + slot[:, None]) * LEVELS + level) * BINS + bins[None, :])
    above = tl.sum(h, 1)[:, None] - tl.cumsum(h, 1)  # scores in the higher bins
    pick = (above < rem[:, None]) & (above + h >= rem[:, None])  # the bin holding the rem-th highest
    b = tl.max(tl.where(pick, bins[None, :], -1), 1)
    at = bins[None, :] == b[:, None]
    go = ~done
    rem = tl.where(go, rem - tl.sum(tl.where(at, above, 0), 1), rem)
    cnt = tl.where(go, tl.sum(tl.where(at, h, 0), 1), cnt)
    prefix = tl.where(go, prefix * BINS + b, prefix)
    depth = tl.where(go, level + 1, depth)
    return prefix, depth, rem, cnt, done | (cnt == rem)


@triton.jit
def _boundary_state(HIST, STATE, bh, T0, T1, T2, N, LEVEL):
    """Where the boundaries of head `bh` stand after the levels below LEVEL, as vectors over the SLOTS: the
    bytes found so far (prefix) and their number (depth), the pairs still to take among the scores with that
    prefix (rem) and how many there are (cnt), settled (done: an empty or full boundary, t = 0 or t = n, or one
    whose last bin held exactly rem scores, all taken), and the slot whose histogram each counts into at LEVEL
    (lead; level 0 is one histogram, in slot 0). From the state before level LEVEL − 1, which that level's
    programs stored in STATE, and that level's histograms."""
    ks = tl.arange(0, SLOTS)
    t = tl.where(ks == 0, T0, tl.where(ks == 1, T1, tl.where(ks == 2, T2, 0)))
    rem = t.to(tl.int64)
    cnt = tl.zeros([SLOTS], tl.int64)
    depth = tl.zeros([SLOTS], tl.int64)
    prefix = tl.zeros([SLOTS], tl.int64)
    if LEVEL > 1:
        st = STATE + (bh * LEVELS + LEVEL - 1) * (4 * SLOTS) + ks
        prefix, depth, rem, cnt = tl.load(st), tl.load(st + SLOTS), tl.load(st + 2 * SLOTS), tl.load(st + 3 * SLOTS)
    done = (t <= 0) | (t >= N) | (cnt == rem)  # (before level 0: cnt = 0 < rem = t for a boundary in range)
    if LEVEL > 0:
        prefix, depth, rem, cnt, done = _take_level(HIST, bh, LEVEL - 1, prefix, depth, rem, cnt, done)
    return prefix, depth, rem, cnt, done, tl.where(LEVEL == 0, 0, _leaders(prefix, done))


@triton.jit
def _store_state(OUT, prefix, depth, rem, cnt):
    ks = tl.arange(0, SLOTS)
    tl.store(OUT + ks, prefix)
    tl.store(OUT + SLOTS + ks, depth)
    tl.store(OUT + 2 * SLOTS + ks, rem)
    tl.store(OUT + 3 * SLOTS + ks, cnt)


@triton.jit
def _at(v, k: tl.constexpr):
    """Element k of a per-boundary vector, as a scalar."""
    return tl.sum(tl.where(tl.arange(0, SLOTS) == k, v, 0), 0)


@triton.jit
def _count_byte(HK, acc, d, match, DENSE: tl.constexpr):
    """Adds the bytes `d` of the matching scores to a histogram: a dense tile into the register histogram `acc`
    (flushed by the caller), a sparse one by atomics straight into HK."""
    if tl.sum(match.to(tl.int32), 0) > DENSE:
        acc += tl.histogram(d, BINS, mask=match)
    else:
        tl.atomic_add(HK + d, match.to(tl.int32), mask=match, sem="relaxed")
    return acc


@triton.jit
def _flush(HK, acc):
    bins = tl.arange(0, BINS)
    tl.atomic_add(HK + bins, acc, mask=acc > 0, sem="relaxed")


@triton.jit
def _radix_kernel(A, HIST, STATE, N, T0, T1, T2, LEVEL, TILES, BLOCK: tl.constexpr, DENSE: tl.constexpr):
    chunk = tl.program_id(0)
    bh = tl.program_id(1)
    prefix, depth, rem, cnt, done, lead = _boundary_state(HIST, STATE, bh, T0, T1, T2, N, LEVEL)
    if chunk == 0:  # for the next level's programs
        _store_state(STATE + (bh * LEVELS + LEVEL) * (4 * SLOTS), prefix, depth, rem, cnt)
    ks = tl.arange(0, SLOTS)
    # the boundaries that count at this level (level 0: one histogram for all, in slot 0)
    active = tl.sum((~done).to(tl.int32), 0) > 0
    counts = tl.where(LEVEL == 0, (ks == 0) & active, (lead == ks) & ~done)
    ci = counts.to(tl.int32)
    if tl.sum(ci, 0) > 0:  # else all are settled: nothing to read
        c0, c1, c2 = _at(ci, 0) > 0, _at(ci, 1) > 0, _at(ci, 2) > 0
        p0, p1, p2 = _at(prefix, 0), _at(prefix, 1), _at(prefix, 2)
        h0 = HIST + ((bh * SLOTS + 0) * LEVELS + LEVEL) * BINS
        h1 = HIST + ((bh * SLOTS + 1) * LEVELS + LEVEL) * BINS
        h2 = HIST + ((bh * SLOTS + 2) * LEVELS + LEVEL) * BINS
        acc0 = tl.zeros([BINS], tl.int32)
        acc1 = tl.zeros([BINS], tl.int32)
        acc2 = tl.zeros([BINS], tl.int32)
        shift = 56 - 8 * LEVEL
        base = A + bh.to(tl.int64) * N
        for i in range(TILES):
            offs = (chunk * TILES + i) * BLOCK + tl.arange(0, BLOCK)
            m = offs < N
            key = _key(tl.load(base + offs, mask=m, other=0.0))
            hi = (key >> shift) >> 8  # the bytes above this level's (two shifts: 64 is out of range)
            d = ((key >> shift) & 255).to(tl.int32)
            if c0:
                acc0 = _count_byte(h0, acc0, d, m & (hi == p0), DENSE)
            if c1:
                acc1 = _count_byte(h1, acc1, d, m & (hi == p1), DENSE)
            if c2:
                acc2 = _count_byte(h2, acc2, d, m & (hi == p2), DENSE)
        _flush(h0, acc0)
        _flush(h1, acc1)
        _flush(h2, acc2)


@triton.jit
def _bounds_kernel(A, HIST, STATE, BOUND, EQCNT, R, N, T0, T1, T2, ROWS: tl.constexpr, RP: tl.constexpr):
    bh = tl.program_id(0)
    blk = tl.program_id(1)
    prefix, depth, rem, cnt, done, lead = _boundary_state(HIST, STATE, bh, T0, T1, T2, N, LEVELS)
    ks = tl.arange(0, SLOTS)
    if blk == 0:
        _store_state(BOUND + bh * (4 * SLOTS), prefix, depth, rem, cnt)
    # a boundary not settled after the last byte: more scores equal its value than pairs left to take, so the
    # plan needs each pair's row-major rank among them: here, the count per row
    straddle = rem < cnt
    if tl.sum(straddle.to(tl.int32), 0) > 0:
        cols = tl.arange(0, RP)
        for i in range(ROWS):
            row = blk * ROWS + i
            inb = (cols < R) & (row < R)
            key = _key(tl.load(A + (bh * R + row).to(tl.int64) * R + cols, mask=inb, other=0.0))
            eq = (key[None, :] == prefix[:, None]) & inb[None, :]
            tl.store(EQCNT + (bh * R + row) * SLOTS + ks, tl.sum(eq.to(tl.int32), 1), mask=row < R)


@triton.jit
def _store_plan(c, cols, inb, IDX, CNT, row, R):
    """A row's retained key blocks grouped by phase, each in column order, then zeros; their counts. One scan:
    the three phases' running counts packed into 21-bit fields of an int64."""
    m4 = (c == 4) & inb
    m8 = (c == 8) & inb
    m16 = (c == 16) & inb
    packed = m4.to(tl.int64) | (m8.to(tl.int64) << 21) | (m16.to(tl.int64) << 42)
    run = tl.cumsum(packed, axis=0)  # inclusive
    tot = tl.sum(packed, axis=0)
    n4 = (tot & 0x1FFFFF).to(tl.int32)
    n8 = ((tot >> 21) & 0x1FFFFF).to(tl.int32)
    n16 = (tot >> 42).to(tl.int32)
    pos = tl.where(m4, run & 0x1FFFFF, tl.where(m8, n4 + ((run >> 21) & 0x1FFFFF), n4 + n8 + (run >> 42))) - 1
    base = IDX + row.to(tl.int64) * R
    tl.store(base + pos, cols, mask=m4 | m8 | m16)
    tl.store(CNT + row * 3, n4)
    tl.store(CNT + row * 3 + 1, n8)
    tl.store(CNT + row * 3 + 2, n16)
    tl.store(base + cols, tl.zeros_like(cols), mask=inb & (cols >= n4 + n8 + n16))


@triton.jit
def _plan_kernel(CODES, IDX, CNT, R, RP: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, RP)
    inb = cols < R
    c = tl.load(CODES + row.to(tl.int64) * R + cols, mask=inb, other=0)
    _store_plan(c, cols, inb, IDX, CNT, row, R)


@triton.jit
def _route_plan_kernel(A, BOUND, EQCNT, CODES, IDX, CNT, R, N, T0, T1, T2, RP: tl.constexpr):
    row = tl.program_id(0)
    bh = row // R
    r = row - bh * R
    cols = tl.arange(0, RP)
    inb = cols < R
    a = tl.load(A + row.to(tl.int64) * R + cols, mask=inb, other=0.0)
    c = tl.zeros([RP], tl.int32)
    for j in tl.static_range(3):  # the 4-bit boundary first: a higher precision's (smaller) top set overrides
        k = 2 - j
        t = T0 if k == 0 else (T1 if k == 1 else T2)
        st = BOUND + bh * (4 * SLOTS) + k
        v, depth, rem, cnt = tl.load(st), tl.load(st + SLOTS), tl.load(st + 2 * SLOTS), tl.load(st + 3 * SLOTS)
        # the scores whose resolved bytes (all 8 unless settled earlier) equal v's lie in [lo, hi): bit patterns
        # of scores >= 0 order as the scores, so two float64 compares stand for the byte compare
        shift = 64 - 8 * tl.maximum(depth, 1)
        lo = (v << shift).to(tl.float64, bitcast=True)
        hi = tl.minimum((v + 1) << shift, 0x7FF0000000000000).to(tl.float64, bitcast=True)  # at most +inf
        if rem < cnt:
            # equal scores straddle the boundary: a pair equal to v is in iff its rank among them in row-major
            # order is below rem: the equal pairs of the rows above plus those before it in its row
            eq = (a >= lo) & (a < hi) & inb
            ei = eq.to(tl.int32)
            above = tl.sum(tl.load(EQCNT + (bh * R + cols) * SLOTS + k, mask=cols < r, other=0), 0)
            rank = above + tl.cumsum(ei, 0) - ei
            top = (a >= hi) | (eq & (rank < rem))
        else:  # every score equal to v is taken
            top = a >= lo
        top = (t >= N) | ((t > 0) & top)
        c = tl.where(top & inb, 4 if k == 2 else (8 if k == 1 else 16), c)
    tl.store(CODES + row.to(tl.int64) * R + cols, c.to(tl.int8), mask=inb)
    _store_plan(c, cols, inb, IDX, CNT, row, R)


# ------------------------------------------------------------------------------------------------- launch


def _row_warps(rp: int) -> int:
    """Warps of a one-row-per-program kernel: about 8 values per thread up to 16 warps."""
    return max(4, min(16, rp // 256))


def _f64_bits(x: float) -> int:
    return struct.unpack("<q", struct.pack("<d", float(x)))[0]


def _new_histograms(bh: int, device) -> torch.Tensor:
    return torch.zeros((bh, SLOTS.value, LEVELS.value, BINS.value), dtype=torch.int32, device=device)


def _allocate_and_plan(scores: torch.Tensor, hist: torch.Tensor, quotas, first_level: int) -> DraftPlan:
    """Steps 2 and 3 on a contiguous float64 score map (B, H, R, R) whose levels below `first_level` are
    already counted in `hist`."""
    B, H, R, _ = scores.shape
    n, bh, dev = R * R, B * H, scores.device
    ts = quota_boundaries(quotas, n)
    rp = triton.next_power_of_2(R)
    codes = torch.empty((B, H, R, R), dtype=torch.int8, device=dev)
    idx = torch.empty((bh, R, R), dtype=torch.int32, device=dev)
    cnt = torch.empty((bh, R, 3), dtype=torch.int32, device=dev)
    eqcnt = torch.empty((bh, R, SLOTS.value), dtype=torch.int32, device=dev)
    if any(0 < t < n for t in ts):
        bound = torch.empty((bh, 4, SLOTS.value), dtype=torch.int64, device=dev)
        state = torch.empty((bh, LEVELS.value, 4, SLOTS.value), dtype=torch.int64, device=dev)  # before each level
        tiles = max(1, min(SELECT_TILES, triton.cdiv(n, SELECT_BLOCK), n * bh // (SELECT_BLOCK * SELECT_PROGRAMS)))
        grid = (triton.cdiv(n, SELECT_BLOCK * tiles), bh)
        for level in range(first_level, LEVELS.value):
            _radix_kernel[grid](scores, hist, state, n, *ts, level, tiles, BLOCK=SELECT_BLOCK, DENSE=DENSE,
                                num_warps=4)
        _bounds_kernel[(bh, triton.cdiv(R, BOUND_ROWS))](scores, hist, state, bound, eqcnt, R, n, *ts,
                                                          ROWS=BOUND_ROWS, RP=rp, num_warps=_row_warps(rp))
    else:  # every boundary is empty or takes all pairs: nothing to select
        bound = torch.zeros((bh, 4, SLOTS.value), dtype=torch.int64, device=dev)
    _route_plan_kernel[(bh * R,)](scores, bound, eqcnt, codes, idx, cnt, R, n, *ts, RP=rp, num_warps=_row_warps(rp))
    return DraftPlan(codes, idx, cnt)


def mixed_scores(q_mean, q_max, k_mean, k_max, *, scale: float, maxpool_weight: float):
    """Step 1: the draft map (B, H, R, R) float64 of pooled (B, H, R, D) float64 descriptors — the engine's
    `draft_scores` up to the order of each row's sum — and the histograms with level 0 counted."""
    B, H, R, _ = q_mean.shape
    w = float(maxpool_weight)
    s_mean = torch.matmul(q_mean, k_mean.transpose(-1, -2))
    s_max = torch.matmul(q_max, k_max.transpose(-1, -2)) if w else s_mean
    scores = torch.empty_like(s_mean)
    hist = _new_histograms(B * H, q_mean.device)
    rp = triton.next_power_of_2(R)
    _scores_kernel[(B * H * R,)](s_mean, s_max, scores, hist, R, _f64_bits(scale), _f64_bits(1.0 - w), _f64_bits(w),
                                 RP=rp, MAXPOOL=w != 0.0, num_warps=_row_warps(rp), enable_fp_fusion=False)
    return scores, hist


def route_plan(q_mean, q_max, k_mean, k_max, *, scale: float, maxpool_weight: float, quotas) -> DraftPlan:
    """The engine's routing decision and the kernel's lists from pooled (B, H, R, D) float64 descriptors
    (the pre-pass's): codes equal to `allocate(draft_scores(...), quotas)` (module docstring)."""
    scores, hist = mixed_scores(q_mean, q_max, k_mean, k_max, scale=scale, maxpool_weight=maxpool_weight)
    return _allocate_and_plan(scores, hist, quotas, first_level=1)


def plan_from_scores(scores: torch.Tensor, quotas) -> DraftPlan:
    """The codes (equal to `allocate(scores, quotas)`) and lists of a given draft map (B, H, R, R) of scores ≥ 0."""
    s = scores.to(torch.float64).contiguous()
    return _allocate_and_plan(s, _new_histograms(s.shape[0] * s.shape[1], s.device), quotas, first_level=0)


def plan_from_codes(codes: torch.Tensor) -> DraftPlan:
    """The per-query-region key lists of a code map (B, H, R, R) (any integer dtype), by a Triton kernel
    (CUDA, or the CPU interpreter); entries past a row's count are 0."""
    B, H, R, _ = codes.shape
    c8 = codes.to(torch.int8).contiguous()
    idx = torch.empty((B * H, R, R), dtype=torch.int32, device=codes.device)
    cnt = torch.empty((B * H, R, 3), dtype=torch.int32, device=codes.device)
    rp = triton.next_power_of_2(R)
    _plan_kernel[(B * H * R,)](c8, idx, cnt, R, RP=rp, num_warps=_row_warps(rp))
    return DraftPlan(codes, idx, cnt)
