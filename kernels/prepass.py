"""Operand pre-passes: quantize Q, K, V once per call into what the attention kernel reads.

MXFP4 (mxattention family): Q/K (after the Hadamard rotation, a matmul with the normalized Hadamard
matrix) in 32-blocks along head_dim, V in 32-blocks along tokens per channel, each block with the
recipe's scale rule; the block exponents are folded into the E4M3 values against one exponent per
128-token tile (Q/K) or per channel (V): value = E2M1·2^(e_b − R), exact in E4M3 iff e_b − R ≥ −8
(R = max e_b − 6 puts the largest block at the top of E4M3). Blocks below that are counted on the device;
the launcher then runs the same pre-pass writing bf16 (exact for every block) and the Triton kernel, both gated on
that count (`mx_prepass(gated=True)`, kernels/launch.py) — never silently inexact, never a host read.

sage2-int8: K smoothing (per-channel mean over tokens), INT8 per token for Q and K, FP8 E4M3 per
channel for V (scale amax/448), in Triton; the codes are the engine's bit for bit (fp64 mean, fp32 scales
rounded once from fp64, and each code the RNE of the exact quotient, found without a division per element
by the sign of (rounding midpoint · scale − x): one fp32 FMA each where x is an fp32 value (Q, V), fp64
compares where it is not (smoothed K) and the fp32 quotient lies near a midpoint).
"""

from __future__ import annotations

import functools
import math
import os

import torch
import triton
import triton.language as tl

from . import _launcher, plans
from ._rounding import (EMULATE_FMA, SMALLEST_FP32_PATH_SCALE, e4m3_exact32, each_in_fp32_range, in_fp32_range,
                        nvfp4_rows_exact, rne_int_exact32, round_to_int)
from ._core import RULE_IDS, _pow2, e2m1_round, mx_exponent

# chunk partials per load of the statistics kernels that finish the token reductions
STATS_CHUNKS = 8
TILE = 128  # tokens per Q/K fold tile = the attention kernel's BLOCK_N (= the recipes' tile_k)
KEY_BLOCK = tl.constexpr(TILE)  # the same, for the kernels (a jit function reads only constexpr globals)


@triton.jit
def _partials_max(P, base, stride, n, D: tl.constexpr, CB: tl.constexpr = STATS_CHUNKS):
    """The channel-wise maximum of n partial rows P[base + i·stride + (0..D)] (|max| partials, >= 0), fp32, CB rows
    per load: with one load in flight at a time a statistics program waited on memory latency (sage2's took 34 µs
    for wan1.3b-480p's 128 chunks, 23 µs with eight per load)."""
    cols = tl.arange(0, D)
    rows = tl.arange(0, CB)
    acc = tl.zeros([CB, D], tl.float32)
    for i0 in range(0, n, CB):
        i = i0 + rows
        acc = tl.maximum(acc, tl.load(P + base + (i * stride)[:, None] + cols[None, :], mask=(i < n)[:, None],
                                      other=0.0))
    return tl.max(acc, axis=0)


@triton.jit
def _partials_sum64(P, base, stride, n, D: tl.constexpr, CB: tl.constexpr = STATS_CHUNKS):
    """The channel-wise fp64 sum of n partial rows P[base + i·stride + (0..D)] (fp64), CB rows per load."""
    cols = tl.arange(0, D)
    rows = tl.arange(0, CB)
    acc = tl.zeros([CB, D], tl.float64)
    for i0 in range(0, n, CB):
        i = i0 + rows
        acc += tl.load(P + base + (i * stride)[:, None] + cols[None, :], mask=(i < n)[:, None], other=0.0)
    return tl.sum(acc, axis=0)


@triton.jit
def _token_tile(X, sx_b, sx_h, sx_n, sx_d, H, N, pid_t, pid_bh, ROWS: tl.constexpr, D: tl.constexpr,
                OPERAND_ORDER: tl.constexpr = False):
    """Tokens pid_t·ROWS .. +ROWS of one (batch, head) of X (any strides) as a (ROWS, D) tile in X's dtype,
    tokens past N read as 0; and the tile's token and channel indices. OPERAND_ORDER: row p of the tile is token
    `operand_key(p)` (a permutation inside 16-token groups)."""
    b = pid_bh // H
    h = pid_bh % H
    rows = pid_t * ROWS + tl.arange(0, ROWS)
    if OPERAND_ORDER:
        rows = operand_key(rows)
    cols = tl.arange(0, D)
    x = tl.load(X + b * sx_b + h * sx_h + rows[:, None] * sx_n + cols[None, :] * sx_d, mask=(rows < N)[:, None],
                other=0.0)
    return x, rows, cols


@triton.jit
def _rotate(x, M, cols, scale, D: tl.constexpr, X_F32: tl.constexpr):
    """x @ M · scale with M (D, D) a ±1/0 matrix: for 16-bit x an MMA in x's own dtype (M exact there, products
    exact, fp32 accumulation), for fp32 x an IEEE fp32 MMA (TF32 would round x)."""
    m = tl.load(M + cols[:, None] * D + cols[None, :])
    if X_F32:
        return tl.dot(x.to(tl.float32), m.to(tl.float32), input_precision="ieee") * scale
    return tl.dot(x, m.to(x.dtype)) * scale


@triton.jit
def _gate_closed(COUNTS):
    """True where an exact-fallback launch has nothing to do: no Q/K block (COUNTS[0]) and no V block (COUNTS[1])
    needed it. Read on the device, so no host decides between the E4M3 operands and the bf16 fallback."""
    return (tl.load(COUNTS) + tl.load(COUNTS + 1)) == 0


@triton.jit
def _mx_rows(X, HM, OUT, REXP, BAD, sx_b, sx_h, sx_n, sx_d, H, N, n_tiles, had_scale, pid_t, pid_bh,
             D: tl.constexpr, ROWS: tl.constexpr, RULE: tl.constexpr, FLQ: tl.constexpr, QMAX: tl.constexpr,
             OUT_FP8: tl.constexpr, HAD: tl.constexpr, X_F32: tl.constexpr):
    """Q/K: one 128-token tile of one (batch, head). OUT is (B·H, n_tiles·ROWS, D); blocks E4M3 cannot hold are
    added to BAD (OUT_FP8). HAD: rotate first, x @ (±1 Sylvester matrix HM, exact in x's dtype) · 1/sqrt(D) with
    an fp32 accumulator (IEEE fp32 products for fp32 inputs)."""
    x, rows, cols = _token_tile(X, sx_b, sx_h, sx_n, sx_d, H, N, pid_t, pid_bh, ROWS, D)
    if HAD:
        x = _rotate(x, HM, cols, had_scale, D, X_F32)
    else:
        x = x.to(tl.float32)
    xb = tl.reshape(x, (ROWS, D // 32, 32))
    amax = tl.max(tl.abs(xb), axis=2)
    k = mx_exponent(amax, RULE, FLQ, QMAX)
    nz = amax > 0
    if OUT_FP8:
        kmax = tl.max(tl.max(tl.where(nz, k, -1000), axis=1), axis=0)
        r = tl.where(kmax == -1000, 0, kmax - 6)
        bad = tl.sum(tl.sum((nz & (k - r < -8)).to(tl.int32), axis=1), axis=0)
        tl.atomic_add(BAD, bad)
    else:
        r = 0
    xs = xb * _pow2(-k)[:, :, None]  # exact: a power of two
    q = e2m1_round(tl.abs(xs), tl.zeros_like(k)[:, :, None])
    y = tl.where(xs < 0, -q, q) * _pow2(tl.maximum(k - r, -126))[:, :, None]
    y = tl.reshape(y, (ROWS, D))
    tl.store(OUT + pid_bh * (n_tiles * ROWS * D) + rows[:, None] * D + cols[None, :], y.to(OUT.dtype.element_ty))
    tl.store(REXP + pid_bh * n_tiles + pid_t, r)


@triton.jit
def _mx_fold_kernel(Q, K, V, HM, QO, KO, QR, KR, VPART, COUNTS, sq_b, sq_h, sq_n, sq_d, sk_b, sk_h, sk_n, sk_d,
                    sv_b, sv_h, sv_n, sv_d, H, Nq, Nk, nq_tiles, nk_tiles, BH, had_scale,
                    D: tl.constexpr, ROWS: tl.constexpr, RULE_Q: tl.constexpr, FLQ_Q: tl.constexpr,
                    QMAX_Q: tl.constexpr, RULE_K: tl.constexpr, FLQ_K: tl.constexpr, QMAX_K: tl.constexpr,
                    OUT_FP8: tl.constexpr, HAD: tl.constexpr, X_F32: tl.constexpr, RTILES: tl.constexpr,
                    GATED: tl.constexpr):
    """The MXFP4 pre-pass's first launch, programs split by id: [0, nq_tiles) fold Q's 128-token tiles
    (`_mx_rows`, the blocks E4M3 cannot hold counted into COUNTS[0]), the next nk_tiles K's, the rest each write a
    chunk's |max| per channel of V (RTILES·ROWS tokens, into VPART (chunks, B·H, D); V's fold exponents need the
    whole sequence). GATED (the exact bf16 fallback): every program returns unless a fold counted a block."""
    pid = tl.program_id(0)
    pid_bh = tl.program_id(1)
    if GATED:
        if _gate_closed(COUNTS):
            return
    if pid < nq_tiles:
        _mx_rows(Q, HM, QO, QR, COUNTS, sq_b, sq_h, sq_n, sq_d, H, Nq, nq_tiles, had_scale, pid, pid_bh, D, ROWS,
                 RULE_Q, FLQ_Q, QMAX_Q, OUT_FP8, HAD, X_F32)
    elif pid < nq_tiles + nk_tiles:
        _mx_rows(K, HM, KO, KR, COUNTS, sk_b, sk_h, sk_n, sk_d, H, Nk, nk_tiles, had_scale, pid - nq_tiles, pid_bh,
                 D, ROWS, RULE_K, FLQ_K, QMAX_K, OUT_FP8, HAD, X_F32)
    else:
        _token_partial(V, VPART, sv_b, sv_h, sv_n, sv_d, H, Nk, BH, pid - nq_tiles - nk_tiles, pid_bh, D, ROWS,
                       RTILES, True)


@triton.jit
def operand_key(slot):
    """Which key column `slot` of Vᵀ holds where P̂ is an 8-bit MMA operand taken straight from the QKᵀ
    accumulator's registers (the Gluon kernel, `gluon_ws._as_operand`; the Triton kernel's INT4 mode): within every
    16 keys, column 4q + 2a + e holds key 8a + 2q + e, the wgmma accumulator's column of the operand's register.
    A permutation inside aligned 16-key groups: padding stays padding, tiles stay tiles. The pre-passes read
    tokens in this order and write Vᵀ contiguously (scattered stores doubled the sage2 V pass)."""
    return (slot & ~14) | ((slot >> 1) & 6) | ((slot & 2) << 2)


def operand_key_order(n: int, device=None) -> torch.Tensor:
    """The same map on the host: keys (n,) int64 with operand-order Vᵀ = Vᵀ[..., keys] (n a multiple of 16)."""
    p = torch.arange(n, device=device)
    return (p & ~14) | ((p >> 1) & 6) | ((p & 2) << 2)


@triton.jit
def _mx_cols_tile(X, sx_b, sx_h, sx_n, sx_d, H, N, pid_t, pid_bh, D: tl.constexpr, TB: tl.constexpr,
                  RULE: tl.constexpr, FLQ: tl.constexpr, QMAX: tl.constexpr, OPERAND_ORDER: tl.constexpr = False):
    """One TB-token tile of V (all D channels, read along D: coalesced), as (TB/32, 32, D) fp32 blocks of 32
    tokens per channel, and each block's MXFP4 exponent k (TB/32, D) and maximum |x|."""
    # (in OPERAND_ORDER the tile's 32-token blocks hold the same tokens in another order: same maxima, same codes)
    x, _, _ = _token_tile(X, sx_b, sx_h, sx_n, sx_d, H, N, pid_t, pid_bh, TB, D, OPERAND_ORDER)
    xb = tl.reshape(x.to(tl.float32), (TB // 32, 32, D))
    amax = tl.max(tl.abs(xb), axis=1)
    return xb, mx_exponent(amax, RULE, FLQ, QMAX), amax


@triton.jit
def _mx_v_exponent_kernel(VPART, REXP, BH, chunks, D: tl.constexpr, RULE: tl.constexpr, FLQ: tl.constexpr,
                          QMAX: tl.constexpr):
    """Per (batch, head) program: each channel's fold exponent REXP (B·H, D) int32, its largest block exponent − 6
    (0 for an all-zero channel), from the chunks' |max| partials VPART (chunks, B·H, D). Every rule's exponent is
    non-decreasing in the block maximum (and the clamp keeps that), so the largest block exponent is the exponent
    of the channel's largest |v|."""
    bh = tl.program_id(0)
    amax = _partials_max(VPART, bh * D, BH * D, chunks, D)
    tl.store(REXP + bh * D + tl.arange(0, D), tl.where(amax > 0, mx_exponent(amax, RULE, FLQ, QMAX) - 6, 0))


@triton.jit
def _mx_cols_kernel(X, OUT, REXP, BAD, sx_b, sx_h, sx_n, sx_d, H, N, N_PAD,
                    D: tl.constexpr, TB: tl.constexpr, RULE: tl.constexpr,
                    FLQ: tl.constexpr, QMAX: tl.constexpr, OUT_FP8: tl.constexpr, OPERAND_ORDER: tl.constexpr,
                    GATED: tl.constexpr = False):
    """V, second pass: one program per (TB-token tile, batch·head); 32-blocks along tokens; REXP (B·H, D)
    the fold exponent of each channel over the whole sequence (`_mx_v_exponent_kernel`); bf16 output folds
    against 0, written to REXP here. OUT is V transposed, (B·H, D, N_PAD), zero-padded; tokens in `operand_key`
    order if OPERAND_ORDER. GATED: as `_mx_fold_kernel`'s (BAD then holds the fold counters)."""
    pid_t = tl.program_id(0)
    pid_bh = tl.program_id(1)
    if GATED:
        if _gate_closed(BAD):
            return
    xb, k, amax = _mx_cols_tile(X, sx_b, sx_h, sx_n, sx_d, H, N, pid_t, pid_bh, D, TB, RULE, FLQ, QMAX, OPERAND_ORDER)
    chans = tl.arange(0, D)
    if OUT_FP8:
        r = tl.load(REXP + pid_bh * D + chans)
    else:
        r = tl.zeros([D], tl.int32)
        if pid_t == 0:
            tl.store(REXP + pid_bh * D + chans, r)
    rel = k - r[None, :]
    if OUT_FP8:
        bad = tl.sum(tl.sum(((amax > 0) & (rel < -8)).to(tl.int32), axis=1), axis=0)
        tl.atomic_add(BAD, bad)
    xs = xb * _pow2(-k)[:, None, :]
    q = e2m1_round(tl.abs(xs), tl.zeros_like(k)[:, None, :])
    y = tl.where(xs < 0, -q, q) * _pow2(tl.maximum(rel, -126))[:, None, :]
    y = tl.reshape(y, (TB, D))
    toks = pid_t * TB + tl.arange(0, TB)
    tl.store(OUT + pid_bh * (D * N_PAD) + chans[None, :] * N_PAD + toks[:, None], y.to(OUT.dtype.element_ty))


def _bhnd_strides(t: torch.Tensor, layout: str) -> tuple[int, int, int, int]:
    s = t.stride()
    return (s[0], s[2], s[1], s[3]) if layout == "BNHD" else (s[0], s[1], s[2], s[3])


def _dims(t: torch.Tensor, layout: str) -> tuple[int, int, int, int]:
    B, a, c, D = t.shape
    return (B, c, a, D) if layout == "BNHD" else (B, a, c, D)


def rule_params(op) -> tuple[int, int, float]:
    rule = RULE_IDS[op.rule]
    q = 6.0 if op.rule == "tfs" else float(op.qmax)
    if rule != 0 and not (4.0 <= q < 8.0):
        raise ValueError(f"kernel supports MXFP4 boundaries q in [4, 8), got {q}")
    return rule, int(math.floor(math.log2(q))) if rule != 0 else 2, q


def fp8_view(buf: torch.Tensor) -> torch.Tensor:
    """The first half of a bf16 buffer's bytes as an E4M3 tensor of the buffer's shape: the MXFP4 operands live
    there, so that the exact bf16 fallback can overwrite the same buffer without the host deciding first."""
    return buf.view(-1).view(torch.float8_e4m3fn)[:buf.numel()].view(buf.shape)


def mx_prepass(q: torch.Tensor | None, k: torch.Tensor | None, v: torch.Tensor, layout: str, spec, *,
               counts: torch.Tensor, qk_out=(None, None), v_out: torch.Tensor | None = None,
               operand_order: bool = False, gated: bool = False, run=_launcher.launch):
    """The MXFP4 operands of a call, written into the given buffers: Q and K folded per 128-token tile (qk_out,
    (B·H, N_pad, D) each, E4M3 or bf16 by their dtype), Vᵀ folded per channel (v_out (B·H, D, Nk_pad), tokens
    in `operand_key` order if operand_order). An operand whose buffer is None (or, for Q / K, whose tensor is
    None) is left out. Returns the exponents (Q (B·H, q tiles), K (B·H, k tiles), V (B·H, D); int32). E4M3 output
    counts the blocks it cannot hold into counts[0] (Q/K) and counts[1] (V). gated (bf16 output, the exact
    fallback): every launch returns at once unless one of those counts is nonzero. Three launches for E4M3 (Q, K
    and V's |max| partials; V's exponents; V's fold), two for the fallback, each by `run` (`_launcher.launch`, or a
    call plan's recorder). Q and K of two dtypes, or of one outside fp32 / bf16 / fp16, are cast by torch first,
    which a replay would not repeat: a recording call then declines its plan."""
    qo, ko = qk_out
    q = q if qo is not None else None
    k = k if ko is not None else None
    x = next(t for t in (q, k, v) if t is not None)
    B, H, _, D = _dims(x, layout)
    Nq = _dims(q, layout)[2] if q is not None else 0
    Nk = _dims(v, layout)[2]
    BH = B * H
    dev = x.device
    if _needs_cast(q, k):
        plans.decline(run)
        q, k = q.float() if q is not None else None, k.float() if k is not None else None
    fp8 = next((o.dtype == torch.float8_e4m3fn for o in (qo, ko) if o is not None), False)
    nq_t = triton.cdiv(Nq, TILE) if q is not None else 0
    nk_t = triton.cdiv(Nk, TILE)
    qr = torch.empty((BH, nq_t), device=dev, dtype=torch.int32)
    kr = torch.empty((BH, nk_t if k is not None else 0), device=dev, dtype=torch.int32)
    vr = torch.empty((BH, D), device=dev, dtype=torch.int32)
    v_fp8 = v_out is not None and v_out.dtype == torch.float8_e4m3fn
    rtiles = TOKEN_REDUCE[1]
    chunks = triton.cdiv(Nk, TILE * rtiles) if v_fp8 else 0
    vpart = torch.empty((chunks, BH, D), device=dev, dtype=torch.float32) if v_fp8 else counts
    had = spec.rotation == "hadamard"
    qx = q if q is not None else (k if k is not None else x)
    kx = k if k is not None else qx
    hm = _sylvester_pm1(D, qx.dtype, dev) if had else qx
    rq, rk = rule_params(spec.q), rule_params(spec.k)
    grid0 = nq_t + (nk_t if k is not None else 0) + chunks
    if grid0:
        run(_mx_fold_kernel, (grid0, BH),
            qx, kx, v, hm, qo if qo is not None else counts, ko if ko is not None else counts, qr, kr, vpart, counts,
            *_bhnd_strides(qx, layout), *_bhnd_strides(kx, layout), *_bhnd_strides(v, layout), H, Nq, Nk, nq_t,
            nk_t if k is not None else 0, BH, 1.0 / math.sqrt(D), D=D, ROWS=TILE, RULE_Q=rq[0], FLQ_Q=rq[1],
            QMAX_Q=rq[2], RULE_K=rk[0], FLQ_K=rk[1], QMAX_K=rk[2], OUT_FP8=fp8, HAD=had,
            X_F32=qx.dtype == torch.float32, RTILES=rtiles, GATED=gated, num_warps=8)
    if v_out is not None:
        rule, flq, qmax = rule_params(spec.v)
        if v_fp8:
            run(_mx_v_exponent_kernel, (BH,), vpart, vr, BH, chunks, D=D, RULE=rule, FLQ=flq, QMAX=qmax, num_warps=4)
        # (E4M3 adds to the V counter, counts[1]; a gated launch reads both counters)
        run(_mx_cols_kernel, (nk_t, BH), v, v_out, vr, counts if gated else counts[1:], *_bhnd_strides(v, layout), H,
            Nk, v_out.shape[-1], D=D, TB=TILE, RULE=rule, FLQ=flq, QMAX=qmax, OUT_FP8=v_fp8,
            OPERAND_ORDER=operand_order, GATED=gated, num_warps=8)
    return qr, kr, vr


_FOLD_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _needs_cast(q: torch.Tensor | None, k: torch.Tensor | None) -> bool:
    """Whether `mx_prepass` casts Q and K to fp32 in torch first: two dtypes, or one its kernels do not read."""
    given = [t.dtype for t in (q, k) if t is not None]
    return len(set(given)) > 1 or any(d not in _FOLD_DTYPES for d in given)


@triton.jit
def _zero_kernel(X, N: tl.constexpr):
    """X[0 .. N) = 0 (int32): counters zeroed by a launch, which a call plan's replay repeats (kernels/plans.py)."""
    tl.store(X + tl.arange(0, N), tl.zeros((N,), tl.int32))


def zeroed_counters(n: int, device, run=_launcher.launch) -> torch.Tensor:
    """n int32 counters (n a power of two) set to 0 by a launch through `run`."""
    counts = torch.empty((n,), device=device, dtype=torch.int32)
    run(_zero_kernel, (1,), counts, N=n)
    return counts


def _mx_one(x: torch.Tensor, layout: str, op, fp8: bool, along_tokens: bool, operand_order: bool = False,
            hadamard: bool = False):
    """One operand through `mx_prepass` (Q's slot for rows, V's for columns): (values, exponents, inexact count)."""
    from types import SimpleNamespace

    B, H, N, D = _dims(x, layout)
    n_pad = triton.cdiv(N, TILE) * TILE
    dtype = torch.float8_e4m3fn if fp8 else torch.bfloat16
    counts = torch.zeros((2,), device=x.device, dtype=torch.int32)
    spec = SimpleNamespace(q=op, k=op, v=op, rotation="hadamard" if hadamard else "none")
    if along_tokens:
        out = torch.empty((B * H, D, n_pad), device=x.device, dtype=dtype)
        _, _, rexp = mx_prepass(None, None, x, layout, spec, counts=counts, v_out=out, operand_order=operand_order)
        return out, rexp, counts[1:]
    out = torch.empty((B * H, n_pad, D), device=x.device, dtype=dtype)
    rexp, _, _ = mx_prepass(x, None, x, layout, spec, counts=counts, qk_out=(out, None))
    return out, rexp, counts[:1]


def mx_rows(x: torch.Tensor, layout: str, op, fp8: bool, hadamard: bool = False):
    """Q or K (rotated by the normalized Hadamard matrix first if `hadamard`) -> (values (B·H, N_pad, D),
    tile exponents (B·H, n_tiles) int32, count of blocks E4M3 could not hold exactly (fp8=True only))."""
    return _mx_one(x, layout, op, fp8, along_tokens=False, hadamard=hadamard)


def mx_cols(v: torch.Tensor, layout: str, op, fp8: bool,
            operand_order: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """V -> (Vᵀ values (B·H, D, N_pad), channel exponents (B·H, D) int32, inexact-block count); the tokens of
    Vᵀ in `operand_key` order if operand_order (the Gluon kernel's).
    The channels' fold exponents from one |max| reduction over the tokens, then one pass over (token tile,
    batch·head) programs for the quantization (one program per channel group looping over the sequence, as
    before, left the H200 with 160 programs at Wan shapes)."""
    return _mx_one(v, layout, op, fp8, along_tokens=True, operand_order=operand_order)


def _sylvester_pm1(d: int, dtype, device) -> torch.Tensor:
    """The ±1 Sylvester matrix of order d (= sqrt(d) · transforms.hadamard.hadamard_matrix(d)), made once per order,
    dtype and device (a call copies nothing from the host)."""
    return _sylvester_on(d, dtype, str(device))


@functools.lru_cache(maxsize=32)
def _sylvester_on(d: int, dtype, device: str) -> torch.Tensor:
    from lowbit_video.transforms.hadamard import hadamard_matrix

    return torch.round(hadamard_matrix(d) * math.sqrt(d)).to(dtype=dtype, device=device).contiguous()


@triton.jit
def _absmax(a, b):
    """The one of a, b with the larger magnitude (not NaN): one fp64 compare, on |a| and |b| as operand modifiers,
    and a select (tl.max(tl.abs(x)) on fp64 also materializes |x| and propagates NaN: four more instructions per
    element in sm_90 SASS, which has no fp64 min/max instruction)."""
    return tl.where(tl.abs(a) > tl.abs(b), a, b)


@triton.jit
def _fix_by_fp64_midpoints(x64, c, s, QMAX: tl.constexpr):
    """RNE(x / s) clamped to ±QMAX as int32, for x in fp64 (x64), an fp32 scale s > 0 per row ((ROWS,)) and a
    candidate c within one of the answer (from an fp32 quotient): x compared exactly with the two midpoints
    (c ± ½)·s, exact in fp64 (an 8-bit numerator times a 24-bit scale); on a midpoint the even neighbour wins.
    Equal to rounding the reference's fp64 quotient fl64(x / s): for fp64 x and fp32 s that quotient never lands
    on a midpoint unless the exact one does (x − m·s is a nonzero multiple of ulp(x), more than half an ulp of
    the quotient away)."""
    hs = (s.to(tl.float64) * 0.5)[:, None]
    hi = (2 * c + 1).to(tl.float64) * hs  # exact
    lo = (2 * c - 1).to(tl.float64) * hs
    odd = (c & 1) != 0
    c += ((x64 > hi) | ((x64 == hi) & odd)).to(tl.int32) - ((x64 < lo) | ((x64 == lo) & odd)).to(tl.int32)
    return tl.minimum(tl.maximum(c, -QMAX), QMAX)


@triton.jit
def _rne_int_fp32_or_near(xf, s, QMAX: tl.constexpr):
    """(c, near): c = RNE of the fp32 quotient xf · (1/s) clamped to ±QMAX (xf: x rounded to fp32; 1/s correctly
    rounded per row), and whether any element of the tile has that quotient within 2^-15 of a midpoint c ± ½, where
    it could round the other way than the exact x / s: xf, 1/s and the product each err by at most 2^-24 relative,
    3·127·2^-24 < 2^-15.4 at |x / s| <= 127. Where near is false, c is the exact quotient's RNE. About one program
    in eight of 16×128 elements is near on random data."""
    t = xf * tl.math.div_rn(tl.full(s.shape, 1.0, tl.float32), s)[:, None]
    c, cf = round_to_int(t)
    near = tl.max(tl.max((tl.abs(t - cf) > 0.5 - 2.0 ** -15).to(tl.int32), axis=1), axis=0) > 0
    return tl.minimum(tl.maximum(c, -QMAX), QMAX), near


@triton.jit
def _thread_group(rows):
    """SageAttention2's per-thread key group of each token: (n mod 8) div 2 (lowbit_video/attention/quantizers.py
    `_per_thread`; with 128-token blocks, the groups of a block are the logits one lane of a quad holds)."""
    return (rows % 8) // 2


@triton.jit
def _k_group_maxima(X, MEAN, sx_b, sx_h, sx_n, sx_d, H, N, pid_blk, pid_bh, D: tl.constexpr, ROWS: tl.constexpr):
    """The fp64 |max| of K − mean over each of the 4 per-thread groups of the TILE-token block pid_blk (tokens past
    N left out), as 4 scalars."""
    a0 = tl.zeros((), tl.float64)
    a1 = tl.zeros((), tl.float64)
    a2 = tl.zeros((), tl.float64)
    a3 = tl.zeros((), tl.float64)
    for c in range(KEY_BLOCK // ROWS):
        x, rows, cols = _token_tile(X, sx_b, sx_h, sx_n, sx_d, H, N, pid_blk * (KEY_BLOCK // ROWS) + c, pid_bh, ROWS, D)
        x64 = x.to(tl.float64) - tl.load(MEAN + pid_bh * D + cols)[None, :]
        amax = tl.where(rows < N, tl.abs(tl.reduce(x64, 1, _absmax)), 0.0)
        t = _thread_group(rows)
        a0 = tl.maximum(a0, tl.max(tl.where(t == 0, amax, 0.0), axis=0))
        a1 = tl.maximum(a1, tl.max(tl.where(t == 1, amax, 0.0), axis=0))
        a2 = tl.maximum(a2, tl.max(tl.where(t == 2, amax, 0.0), axis=0))
        a3 = tl.maximum(a3, tl.max(tl.where(t == 3, amax, 0.0), axis=0))
    return a0, a1, a2, a3


@triton.jit
def _k_thread_codes(X, MEAN, OUT, SC, sx_b, sx_h, sx_n, sx_d, H, N, n_pad, pid_blk, pid_bh, D: tl.constexpr,
                    ROWS: tl.constexpr, EMULATE_FMA: tl.constexpr):
    """K's INT8 codes after the mean for the TILE-token block pid_blk, one scale per per-thread group (the group's
    amax/127; SC gets each token's group scale): the maxima first, then the codes (`_int8_rows`), K read twice."""
    a0, a1, a2, a3 = _k_group_maxima(X, MEAN, sx_b, sx_h, sx_n, sx_d, H, N, pid_blk, pid_bh, D, ROWS)
    for c in range(KEY_BLOCK // ROWS):
        _int8_rows(X, MEAN, OUT, SC, sx_b, sx_h, sx_n, sx_d, H, N, n_pad, pid_blk * (KEY_BLOCK // ROWS) + c, pid_bh, D,
                   ROWS, True, EMULATE_FMA, True, a0, a1, a2, a3)


@triton.jit
def _int8_rows(X, MEAN, OUT, SC, sx_b, sx_h, sx_n, sx_d, H, N, n_pad, pid_t, pid_bh,
               D: tl.constexpr, ROWS: tl.constexpr, SUB_MEAN: tl.constexpr, EMULATE_FMA: tl.constexpr,
               GROUPS: tl.constexpr = False, a0=0.0, a1=0.0, a2=0.0, a3=0.0):
    """INT8 per token (scale amax/127, RNE, ±127), optionally after subtracting MEAN (B·H, D), fp64; GROUPS: the
    amax of each token's per-thread group instead (a0..a3, `_k_group_maxima`).

    As the reference (formats/intq.py, transforms/smoothing.py): the mean subtraction and amax/127 in fp64, the
    scale rounded once to fp32 (fp64 div.rn, once per row, then RN to fp32: Triton's fp32 `/` is div.full, not
    correctly rounded), the codes RNE of the quotient x / fp32-scale, without a division per element (one made
    these passes compute-bound at ~140 instructions per element): for Q by `rne_int_exact32` (fp32, exact signs
    from FMAs); for K, whose smoothed x is an fp64 value, from the fp32 quotient, and in the one program in eight
    where some quotient lies within 2^-15 of a midpoint corrected by `_fix_by_fp64_midpoints` (fp64 compares)."""
    x, rows, cols = _token_tile(X, sx_b, sx_h, sx_n, sx_d, H, N, pid_t, pid_bh, ROWS, D)
    valid = rows < N
    if SUB_MEAN:
        # padding rows (x read as 0) are left as 0 − mean here and given scale 1 and codes 0 below: a mask per row
        # rather than one per fp64 element
        x64 = x.to(tl.float64) - tl.load(MEAN + pid_bh * D + cols)[None, :]
        if GROUPS:
            t = _thread_group(rows)
            amax = tl.where(t == 0, a0, tl.where(t == 1, a1, tl.where(t == 2, a2, a3)))
        else:
            amax = tl.abs(tl.reduce(x64, 1, _absmax))
        xf = x64.to(tl.float32)
    else:
        xf = x.to(tl.float32)  # exact (16-bit or fp32 input): so is its maximum
        amax = tl.max(tl.abs(xf), axis=1).to(tl.float64)
    s = (amax / 127.0).to(tl.float32)
    s = tl.where((s > 0) & valid, s, 1.0)
    sq = s  # the scale the codes are formed with
    if tl.min(s, axis=0) < SMALLEST_FP32_PATH_SCALE:
        # rows with a scale below the fp32 path's range (down to subnormal s, whose reciprocal overflows): x and s
        # times 2^100, exactly, which leaves every quotient as it was
        f = tl.where(s < SMALLEST_FP32_PATH_SCALE, 2.0 ** 100, 1.0)
        sq = s * f
        if SUB_MEAN:
            x64 = x64 * f.to(tl.float64)[:, None]
            xf = x64.to(tl.float32)
        else:
            xf = xf * f[:, None]
    if SUB_MEAN:
        # x − mean is an fp64 value: the exact fp64 comparisons, but only where the fp32 quotient could be wrong
        c, near = _rne_int_fp32_or_near(xf, sq, 127)
        if near:
            c = _fix_by_fp64_midpoints(x64, c, sq, 127)
    else:
        c = rne_int_exact32(xf, sq[:, None], EMULATE_FMA)
    if SUB_MEAN:
        c = tl.where(valid[:, None], c, 0)
    tl.store(OUT + pid_bh * (n_pad * D) + rows[:, None] * D + cols[None, :], c.to(tl.int8))
    tl.store(SC + pid_bh * n_pad + rows, s)


@triton.jit
def _sage_kv_codes_kernel(K, V, KMEAN, SV, KC, KS, VT, sk_b, sk_h, sk_n, sk_d, sv_b, sv_h, sv_n, sv_d, H, Nk, n_pad,
                          n_k_progs, D: tl.constexpr, ROWS: tl.constexpr, TB: tl.constexpr,
                          OPERAND_ORDER: tl.constexpr, EMULATE_FMA: tl.constexpr):
    """The sage2 pre-pass's last launch, programs split by id: [0, n_k_progs) K's INT8 codes after the mean, one
    TILE-token block each (`_k_thread_codes`), the rest V's E4M3 codes (`_v_fp8`). One launch instead of two: 1 %
    slower at wan14b-720p, the same at wan14b-480p, one host launch (~25 µs, the GPU waiting) less where calls are
    short."""
    pid = tl.program_id(0)
    pid_bh = tl.program_id(1)
    if pid < n_k_progs:
        _k_thread_codes(K, KMEAN, KC, KS, sk_b, sk_h, sk_n, sk_d, H, Nk, n_pad, pid, pid_bh, D, ROWS, EMULATE_FMA)
    else:
        _v_fp8(V, SV, VT, sv_b, sv_h, sv_n, sv_d, H, Nk, n_pad, pid - n_k_progs, pid_bh, D, TB, OPERAND_ORDER,
               EMULATE_FMA)


@triton.jit
def _v_fp8(X, SV, OUT, sx_b, sx_h, sx_n, sx_d, H, N, n_pad, pid_t, pid_bh, D: tl.constexpr, TB: tl.constexpr,
           OPERAND_ORDER: tl.constexpr, EMULATE_FMA: tl.constexpr):
    """V / (per-channel scale SV (B·H, D)) -> E4M3 (RNE, saturating; `e4m3_exact32`), written transposed
    as bytes into OUT (B·H, D, n_pad) uint8, the tokens in `operand_key` order if OPERAND_ORDER."""
    b = pid_bh // H
    h = pid_bh % H
    toks = pid_t * TB + tl.arange(0, TB)
    keys = toks  # column toks of Vᵀ holds token keys
    if OPERAND_ORDER:
        keys = operand_key(toks)
    cols = tl.arange(0, D)
    x = tl.load(X + b * sx_b + h * sx_h + keys[None, :] * sx_n + cols[:, None] * sx_d,
                mask=(keys < N)[None, :], other=0.0).to(tl.float32)  # exact for 16-bit and fp32 V
    x, sv = each_in_fp32_range(x, tl.load(SV + pid_bh * D + cols)[:, None])  # channels below the fp32 path's range
    code = e4m3_exact32(x, sv, EMULATE_FMA)
    tl.store(OUT + pid_bh * (D * n_pad) + cols[:, None] * n_pad + toks[None, :], code.to(tl.uint8))


@triton.jit
def _token_reduce_kernel(X, OUT, sx_b, sx_h, sx_n, sx_d, H, N, BH, D: tl.constexpr, ROWS: tl.constexpr,
                         TILES: tl.constexpr, ABSMAX: tl.constexpr):
    """`_token_partial` for chunk program_id(0) of (batch, head) program_id(1)."""
    _token_partial(X, OUT, sx_b, sx_h, sx_n, sx_d, H, N, BH, tl.program_id(0), tl.program_id(1), D, ROWS, TILES, ABSMAX)


@triton.jit
def _token_partial(X, OUT, sx_b, sx_h, sx_n, sx_d, H, N, BH, pid_c, pid_bh, D: tl.constexpr, ROWS: tl.constexpr,
                   TILES: tl.constexpr, ABSMAX: tl.constexpr):
    """OUT (chunks, B·H, D): over chunk pid_c of TILES·ROWS tokens of X (tokens past N read as 0), the fp64 sum,
    or with ABSMAX the maximum |x| in fp32 (exact for fp32 / 16-bit X)."""
    if ABSMAX:
        acc = tl.zeros([D], tl.float32)
    else:
        acc = tl.zeros([D], tl.float64)
    for i in range(TILES):
        x, _, cols = _token_tile(X, sx_b, sx_h, sx_n, sx_d, H, N, pid_c * TILES + i, pid_bh, ROWS, D)
        if ABSMAX:
            acc = tl.maximum(acc, tl.max(tl.abs(x.to(tl.float32)), axis=0))
        else:
            acc += tl.sum(x.to(tl.float64), axis=0)
    tl.store(OUT + (pid_c * BH + pid_bh) * D + tl.arange(0, D), acc)


# (tokens per tile, tiles per program) of the token reductions: (128, 2) measured fastest of five
TOKEN_REDUCE = (128, 2)


def _token_reduce(x: torch.Tensor, layout: str, absmax: bool, run=_launcher.launch) -> torch.Tensor:
    """(chunks, B·H, D) partial results of `_token_reduce_kernel` over chunks of TOKEN_REDUCE[0]·[1] tokens,
    launched by `run`."""
    B, H, N, D = _dims(x, layout)
    rows, tiles = TOKEN_REDUCE
    chunks = triton.cdiv(N, rows * tiles)
    part = torch.empty((chunks, B * H, D), device=x.device, dtype=torch.float32 if absmax else torch.float64)
    run(_token_reduce_kernel, (chunks, B * H), x, part, *_bhnd_strides(x, layout), H, N, B * H, D=D, ROWS=rows,
        TILES=tiles, ABSMAX=absmax, num_warps=4)
    return part


def token_mean64(x: torch.Tensor, layout: str) -> torch.Tensor:
    """The fp64 mean over tokens, (B·H, D) (the reference's `k.mean()` of float64 K; only the summation
    order differs): fp64 partial sums over 1024-token chunks in Triton, then their sum. torch's
    `mean(dtype=float64)` took 1.0 / 2.3 ms at wan-480p / 720p."""
    return _token_reduce(x, layout, absmax=False).sum(dim=0) / _dims(x, layout)[2]


def token_absmax(x: torch.Tensor, layout: str) -> torch.Tensor:
    """max |x| over tokens, (B·H, D) fp32, exactly: one read of x (torch's `x.abs().amax()` writes |x| first;
    0.36 / 0.68 ms for sage2's V at wan-480p / 720p)."""
    return _token_reduce(x, layout, absmax=True).amax(dim=0)


# Per head_dim: (rows per program of the INT8 Q/K passes, tokens per program of the V pass), both dividing TILE
# (padding is to TILE); 4 warps per program. Measured on the H200 over rows 16-128 x tokens 16-128 x 4 or 8 warps,
# per launch (every tiling writes the same bytes): at head_dim 64 (32, 32) took 107 / 408 µs against 117 / 449 µs
# for (16, 16) at ltx-video / cogvideox-5b; at head_dim 128 (16, 16) and (16, 32) within 1 % of each other and
# the best at wan1.3b-480p (364 µs; (32, 32) 396, 8 warps 15-50 % slower everywhere)
SAGE_TILES = {64: (32, 32), 128: (16, 16)}
SAGE_WARPS = 4


@triton.jit
def _sage_q_and_stats_kernel(Q, K, V, QC, QS, KPART, VPART, COUNT, KMEAN, SV, sq_b, sq_h, sq_n, sq_d, sk_b, sk_h, sk_n,
                             sk_d, sv_b, sv_h, sv_n, sv_d, H, Nq, Nk, pad_q, BH, n_q_progs, D: tl.constexpr,
                             ROWS: tl.constexpr, RROWS: tl.constexpr, RTILES: tl.constexpr, EMULATE_FMA: tl.constexpr):
    """The sage2 pre-pass's first launch: programs [0, n_q_progs) write Q's INT8 codes (`_int8_rows`), the rest
    each a chunk's K fp64 sum and V |max| partials (`_token_partial`), and the last of a (batch, head)'s chunk
    programs to finish (COUNT, zeroed by the caller, counts them) turns its partials into K's mean and V's scales
    (`_sage_stats`). One launch instead of four: Q needs no statistic, so its pass runs beside the reductions (and
    the small Q programs fill the reductions' tail), and the statistics need no launch of their own (the GPU
    waited for the host's launch between the reductions and the codes at short sequences). The last program resets
    its COUNT entry to 0."""
    pid = tl.program_id(0)
    pid_bh = tl.program_id(1)
    if pid < n_q_progs:
        # (no mean subtracted from Q: KPART stands in for the unused MEAN pointer)
        _int8_rows(Q, KPART, QC, QS, sq_b, sq_h, sq_n, sq_d, H, Nq, pad_q, pid, pid_bh, D, ROWS, False, EMULATE_FMA)
    else:
        c = pid - n_q_progs
        _token_partial(K, KPART, sk_b, sk_h, sk_n, sk_d, H, Nk, BH, c, pid_bh, D, RROWS, RTILES, False)
        _token_partial(V, VPART, sv_b, sv_h, sv_n, sv_d, H, Nk, BH, c, pid_bh, D, RROWS, RTILES, True)
        chunks = tl.num_programs(0) - n_q_progs
        # every thread's partials stored before one thread counts the chunk (release: they are visible to the
        # program that reads them after its own count, acquire)
        tl.debug_barrier()
        if tl.atomic_add(COUNT + pid_bh, 1, sem="acq_rel", scope="gpu") == chunks - 1:
            _sage_stats(KPART, VPART, KMEAN, SV, pid_bh, BH, chunks, Nk, D)
            # every chunk program of this (batch, head) has counted: the count back to 0, ready for the next call
            # on the same buffer (a call plan's, kernels/plans.py)
            tl.store(COUNT + pid_bh, 0)


@triton.jit
def _sage_stats(KPART, VPART, KMEAN, SV, bh, BH, chunks, n, D: tl.constexpr):
    """For (batch, head) bh: K's fp64 mean over tokens from the chunk sums KPART (chunks, B·H, D), and V's channel
    scales amax/448 from the |max| partials VPART, divided in fp64 (correctly rounded) and rounded once to fp32
    (the reference's float32_scale; an all-zero channel gets 1). The same sums in the same order whichever program
    runs it."""
    cols = tl.arange(0, D)
    tl.store(KMEAN + bh * D + cols, _partials_sum64(KPART, bh * D, BH * D, chunks, D) / n.to(tl.float64))
    sv = (_partials_max(VPART, bh * D, BH * D, chunks, D).to(tl.float64) / 448.0).to(tl.float32)
    tl.store(SV + bh * D + cols, tl.where(sv > 0, sv, 1.0))


def sage_prepass(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: str, operand_order: bool = False,
                 run=_launcher.launch):
    """sage2-int8 operands: (q int8 (B·H, N_pad, D), q scales (B·H, N_pad) fp32, k int8 (K smoothed:
    its per-channel mean over tokens subtracted; one scale per per-thread group of each TILE-token block), k scales
    (each token's group scale, B·H, N_pad), Vᵀ E4M3 (B·H, D, N_pad), V channel scales (B·H, D));
    the tokens of Vᵀ in `operand_key` order if operand_order (the Gluon kernel's). Two launches: Q's codes with
    K's and V's token statistics, which the last chunk of each (batch, head) turns into K's mean and V's scales,
    then K's and V's codes (five Triton passes and the torch reductions between them before, then a launch of
    its own for the statistics: the GPU waited on the host between launches at short sequences). `run`: how each
    kernel is launched (`_launcher.launch`, or a recorder of a call plan: kernels/plans.py)."""
    B, H, Nq, D = _dims(q, layout)
    Nk = _dims(k, layout)[2]
    pad_q = triton.cdiv(Nq, TILE) * TILE
    pad_k = triton.cdiv(Nk, TILE) * TILE
    dev = q.device
    BH = B * H
    qc = torch.empty((BH, pad_q, D), device=dev, dtype=torch.int8)
    qs = torch.empty((BH, pad_q), device=dev, dtype=torch.float32)
    kc = torch.empty((BH, pad_k, D), device=dev, dtype=torch.int8)
    ks = torch.empty((BH, pad_k), device=dev, dtype=torch.float32)
    vt = torch.empty((BH, D, pad_k), device=dev, dtype=torch.float8_e4m3fn)
    rrows, rtiles = TOKEN_REDUCE
    chunks = triton.cdiv(Nk, rrows * rtiles)
    kpart = torch.empty((chunks, BH, D), device=dev, dtype=torch.float64)
    vpart = torch.empty((chunks, BH, D), device=dev, dtype=torch.float32)
    kmean = torch.empty((BH, D), device=dev, dtype=torch.float64)  # the reference's fp64 mean (summation order aside)
    # amax/448 rounded once to fp32 from fp64 (the reference's float32_scale): torch's CUDA division by a scalar
    # multiplies by the fp32 reciprocal, 1 ulp off for ~60 % of channels, which moves exact E4M3 ties
    # of bf16-valued V off their midpoint (kernel vs engine 0.4-0.5 % on bf16-valued random data)
    sv = torch.empty((BH, D), device=dev, dtype=torch.float32)
    rows, tb = SAGE_TILES.get(D, SAGE_TILES[128])
    n_q_progs = pad_q // rows
    count = torch.zeros((BH,), device=dev, dtype=torch.int32)  # chunk programs done per (batch, head)
    run(_sage_q_and_stats_kernel, (n_q_progs + chunks, BH),
        q, k, v, qc, qs, kpart, vpart, count, kmean, sv, *_bhnd_strides(q, layout), *_bhnd_strides(k, layout),
        *_bhnd_strides(v, layout), H, Nq, Nk, pad_q, BH, n_q_progs, D=D, ROWS=rows, RROWS=rrows, RTILES=rtiles,
        EMULATE_FMA=EMULATE_FMA, num_warps=SAGE_WARPS)
    run(_sage_kv_codes_kernel, (pad_k // TILE + pad_k // tb, BH),
        k, v, kmean, sv, kc, ks, vt.view(torch.uint8), *_bhnd_strides(k, layout), *_bhnd_strides(v, layout), H, Nk,
        pad_k, pad_k // TILE, D=D, ROWS=rows, TB=tb, OPERAND_ORDER=operand_order, EMULATE_FMA=EMULATE_FMA,
        num_warps=SAGE_WARPS)
    return qc, qs, kc, ks, vt, sv


# ------------------------------------------------------------------------------------------ INT4
# RotateAttention (rotateattention-half / -interleaved / -full) and its int4-baseline: the recipe's
# QKᵀ-preserving rotation (the matrices of lowbit_video.transforms.qk_rotation, applied as a ±1
# matrix times one constant in an fp32 MMA), SageAttention smoothing (K: minus its mean over tokens;
# Q: minus its mean over each 128-token group, kept for the ΔS term), INT4 symmetric per token
# (scale amax/7, RNE, ±7) written as int8 codes. V: optional Hadamard (V·H), INT4 per channel.


@triton.jit
def _int4_rows_kernel(X, RM, MEAN, OUT, SC, QM, KF, sx_b, sx_h, sx_n, sx_d, H, N, n_pad, rot_scale,
                      D: tl.constexpr, ROWS: tl.constexpr, ROT: tl.constexpr, SUB_MEAN: tl.constexpr,
                      GROUP_MEAN: tl.constexpr, WRITE_F: tl.constexpr, X_F32: tl.constexpr = True):
    """Q/K rows -> INT4 codes (OUT's dtype: int8 or E4M3, (B·H, n_pad, D)) and fp32 per-token scales (B·H, n_pad).
    ROT: x @ RM · rot_scale first (RM the ±1/0 integer form of the rotation): for 16-bit x an MMA in x's
    own dtype (±1/0 is exact there, products exact, fp32 accumulation), for fp32 x an IEEE fp32 MMA (88 ms
    per pass at wan-720p on the H200, against ≈ 1 ms in bf16: results/kernels-h200.md). SUB_MEAN: minus MEAN (B·H, D) (K's mean over tokens, already rotated). GROUP_MEAN: this
    program's ROWS tokens are one smoothing group: minus their mean, written to QM (B·H, tiles, D).
    WRITE_F: the smoothed full-precision rows to KF (B·H, n_pad, D) fp32 (ΔS needs them)."""
    pid_t = tl.program_id(0)
    pid_bh = tl.program_id(1)
    x, rows, cols = _token_tile(X, sx_b, sx_h, sx_n, sx_d, H, N, pid_t, pid_bh, ROWS, D)
    valid = rows < N
    if ROT:
        x = _rotate(x, RM, cols, rot_scale, D, X_F32)
    x = x.to(tl.float32)
    if SUB_MEAN:
        x = x - tl.load(MEAN + pid_bh * D + cols)[None, :]
    if GROUP_MEAN:
        cnt = tl.sum(valid.to(tl.float32), axis=0)
        gm = tl.sum(tl.where(valid[:, None], x, 0.0), axis=0) / tl.maximum(cnt, 1.0)
        x = x - gm[None, :]
        tl.store(QM + (pid_bh * (n_pad // ROWS) + pid_t) * D + cols, gm)
    x = tl.where(valid[:, None], x, 0.0)
    if WRITE_F:
        tl.store(KF + pid_bh * (n_pad * D) + rows[:, None] * D + cols[None, :], x)
    s = tl.max(tl.abs(x), axis=1) / 7.0
    s = tl.where(s > 0, s, 1.0)
    t = x / s[:, None]
    t = (t + 12582912.0) - 12582912.0  # RNE to an integer (|t| <= 7 + rounding)
    c = tl.minimum(tl.maximum(t, -7.0), 7.0).to(OUT.dtype.element_ty)  # integers: exact in int8 and E4M3
    tl.store(OUT + pid_bh * (n_pad * D) + rows[:, None] * D + cols[None, :], c)
    tl.store(SC + pid_bh * n_pad + rows, s)


@triton.jit
def _int4_v_tile(X, HM, sx_b, sx_h, sx_n, sx_d, H, N, rot_scale, pid_t, pid_bh, D: tl.constexpr, TB: tl.constexpr,
                 ROT: tl.constexpr, X_F32: tl.constexpr, OPERAND_ORDER: tl.constexpr = False):
    """One TB-token tile of V (all D channels), fp32, rotated by HM (±1 Sylvester, · rot_scale) if ROT: an MMA
    in V's own 16-bit dtype (exact products, fp32 accumulation) or IEEE fp32 for fp32 V; padding rows 0; its
    tokens in `operand_key` order if OPERAND_ORDER."""
    x, _, cols = _token_tile(X, sx_b, sx_h, sx_n, sx_d, H, N, pid_t, pid_bh, TB, D, OPERAND_ORDER)
    if ROT:
        x = _rotate(x, HM, cols, rot_scale, D, X_F32)
    return x.to(tl.float32)


@triton.jit
def _int4_v_amax_kernel(X, HM, AMAX, sx_b, sx_h, sx_n, sx_d, H, N, n_tiles, rot_scale, D: tl.constexpr,
                        TB: tl.constexpr, ROT: tl.constexpr, X_F32: tl.constexpr):
    """V, first pass: each channel's max |x| over one token tile, AMAX (B·H, n_tiles, D) fp32."""
    pid_t = tl.program_id(0)
    pid_bh = tl.program_id(1)
    x = _int4_v_tile(X, HM, sx_b, sx_h, sx_n, sx_d, H, N, rot_scale, pid_t, pid_bh, D, TB, ROT, X_F32)
    tl.store(AMAX + (pid_bh * n_tiles + pid_t) * D + tl.arange(0, D), tl.max(tl.abs(x), axis=0))


@triton.jit
def _int4_v_codes_kernel(X, HM, SV, VT, sx_b, sx_h, sx_n, sx_d, H, N, n_pad, rot_scale, D: tl.constexpr,
                         TB: tl.constexpr, ROT: tl.constexpr, X_F32: tl.constexpr, EMULATE_FMA: tl.constexpr):
    """V, second pass: codes RNE(x / s_c), as the torch path's RNE of the float64 quotient of fp32 x and the fp32
    scale, by `rne_int_exact32` (fp32, no division per element), clamped to ±7, stored transposed into VT (B·H, D,
    n_pad) int8 (padding tokens: code 0), the tokens in `operand_key` order (the INT4 kernel's P̂ operand order)."""
    pid_t = tl.program_id(0)
    pid_bh = tl.program_id(1)
    x = _int4_v_tile(X, HM, sx_b, sx_h, sx_n, sx_d, H, N, rot_scale, pid_t, pid_bh, D, TB, ROT, X_F32, True)
    cols = tl.arange(0, D)
    x, sv = each_in_fp32_range(x, tl.load(SV + pid_bh * D + cols)[None, :])
    c = tl.minimum(tl.maximum(rne_int_exact32(x, sv, EMULATE_FMA), -7), 7).to(tl.int8)
    toks = pid_t * TB + tl.arange(0, TB)
    tl.store(VT + pid_bh * (D * n_pad) + cols[None, :] * n_pad + toks[:, None], c)


def _int4_v(v, layout, rotate: bool, B, H, Nk, D, pad_k, run=_launcher.launch):
    """Vᵀ INT4 codes (B·H, D, pad_k) int8, tokens in `operand_key` order, and per-channel fp32 scales (B·H, D):
    two passes over (token tile, b·h) programs (the channels' maxima per tile, then the codes), equal to the torch
    formulation (V·H in fp32, scale = fp32(amax / 7) from float64, codes RNE in float64) up to the rotation's
    fp32 summation order. Each launch by `run`; V of a dtype the passes do not read (float64) is cast by torch
    first, which a replay would not repeat: a recording call then declines its plan."""
    dev = v.device
    n_tiles = pad_k // TILE
    x32 = v.dtype not in _HALF
    x = v
    if v.dtype not in _HALF and v.dtype != torch.float32:
        plans.decline(run)
        x = v.float()
    hm = _sylvester_pm1(D, torch.float32, dev)
    strides = _bhnd_strides(x, layout)
    amax = torch.empty((B * H, n_tiles, D), device=dev, dtype=torch.float32)
    run(_int4_v_amax_kernel, (n_tiles, B * H), x, hm, amax, *strides, H, Nk, n_tiles, 1.0 / math.sqrt(D), D=D,
        TB=TILE, ROT=rotate, X_F32=x32, num_warps=8)
    sv = torch.empty((B * H, D), device=dev, dtype=torch.float32)
    run(_int4_v_scales_kernel, (B * H,), amax, sv, n_tiles, D=D, num_warps=4)
    vt = torch.empty((B * H, D, pad_k), device=dev, dtype=torch.int8)
    run(_int4_v_codes_kernel, (n_tiles, B * H), x, hm, sv, vt, *strides, H, Nk, pad_k, 1.0 / math.sqrt(D), D=D,
        TB=TILE, ROT=rotate, X_F32=x32, EMULATE_FMA=EMULATE_FMA, num_warps=8)
    return vt, sv


def rotation_pm1(kind: str, head_dim: int, segments=None, device=None):
    """(±1/0 fp32 matrix M, constant c, the float64 matrix) on `device`, with M·c == transforms.qk_rotation(kind,
    ...).matrix() (checked), or None for the identity. The pair rotations have entries ±1/√2, the full Hadamard ±1/√D.
    Made once per kind, head_dim, segments and device: a call copies nothing from the host (a pageable copy waits)."""
    if kind == "none":
        return None
    return _rotation_on(kind, head_dim, tuple(segments or ()), None if device is None else str(device))


@functools.lru_cache(maxsize=64)
def _rotation_on(kind: str, head_dim: int, segments: tuple, device: str | None):
    from lowbit_video.transforms import qk_rotation

    r = qk_rotation(kind, head_dim, segments or None).matrix()
    c = float(r.abs().max())
    m = torch.round(r / c)
    if not torch.allclose(m * c, r, rtol=0, atol=1e-15):
        raise ValueError(f"rotation {kind!r} is not a multiple of a ±1/0 matrix")
    return m.to(torch.float32).to(device).contiguous(), c, r.to(device).contiguous() if device is not None else r


@triton.jit(do_not_specialize=["n"])
def _int4_kmean_kernel(PART, R, OUT, BH, chunks, n, D: tl.constexpr, ROT: tl.constexpr, JB: tl.constexpr):
    """Per (batch, head) program: K's mean over tokens in fp64 from the chunk sums PART (chunks, B·H, D), times
    the rotation R (D, D) fp64 if ROT (mean(k R) = mean(k) R), rounded once to fp32 into OUT (B·H, D): the
    statistic the INT4 pre-pass subtracts from every rotated key. One launch for what took six torch operations
    (sum, division, matmul, conversion, copies), each a launch the GPU waited for at short sequences."""
    bh = tl.program_id(0)
    cols = tl.arange(0, D)
    mean = _partials_sum64(PART, bh * D, BH * D, chunks, D) / n.to(tl.float64)
    if ROT:
        for j0 in tl.static_range(0, D, JB):
            js = j0 + tl.arange(0, JB)
            r = tl.load(R + cols[:, None] * D + js[None, :])
            tl.store(OUT + bh * D + js, tl.sum(mean[:, None] * r, axis=0).to(tl.float32))
    else:
        tl.store(OUT + bh * D + cols, mean.to(tl.float32))


@triton.jit
def _int4_v_scales_kernel(AMAX, SV, n_tiles, D: tl.constexpr):
    """Per (batch, head) program: V's per-channel INT4 scale from the token tiles' maxima AMAX (B·H, n_tiles, D):
    fp32(amax / 7) divided in fp64 (the torch formulation's), 1 for an all-zero channel."""
    bh = tl.program_id(0)
    sv = (_partials_max(AMAX, bh * n_tiles * D, D, n_tiles, D).to(tl.float64) / 7.0).to(tl.float32)
    tl.store(SV + bh * D + tl.arange(0, D), tl.where(sv > 0, sv, 1.0))


_HALF = (torch.float16, torch.bfloat16)
INT4_ROWS = (128, 8)  # rows per program (= the Q smoothing group = the kernel's BLOCK_M), warps


def int4_prepass(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: str, spec, rope_segments=None,
                 qk_fp8: bool = False, run=_launcher.launch):
    """INT4 operands: q codes (B·H, Nq_pad, D) int8 (E4M3 if qk_fp8: the same integers) and scales (B·H,
    Nq_pad), q group means (B·H, q tiles, D) (zeros without Q smoothing), k codes (as q's) and scales, the smoothed
    full-precision K (B·H, Nk_pad, D) fp32 (a 1-element dummy without Q smoothing), Vᵀ codes (B·H, D, Nk_pad)
    int8, V channel scales (B·H, D). Every kernel is launched by `run` (`_launcher.launch`, or a call plan's
    recorder); the buffers no launch writes (the zeros that stand in for what a recipe leaves out) are never
    written, so a replay reads the same zeros."""
    B, H, Nq, D = _dims(q, layout)
    Nk = _dims(k, layout)[2]
    rows, warps = INT4_ROWS
    pad_q = triton.cdiv(Nq, rows) * rows
    pad_k = triton.cdiv(Nk, TILE) * TILE
    dev = q.device
    segs = rope_segments if rope_segments else spec.rope_segments
    rot = rotation_pm1(spec.rotation, D, segs, dev)
    rm, rs = (rot[0], rot[1]) if rot is not None else (torch.zeros((1,), device=dev), 1.0)
    code_dtype = torch.float8_e4m3fn if qk_fp8 else torch.int8
    qc = torch.empty((B * H, pad_q, D), device=dev, dtype=code_dtype)
    qs = torch.empty((B * H, pad_q), device=dev, dtype=torch.float32)
    smq = bool(spec.smooth_q)
    # (the rows kernel writes every group's mean when Q is smoothed; without smoothing the means are 0)
    qm = (torch.empty if smq else torch.zeros)((B * H, pad_q // rows, D), device=dev, dtype=torch.float32)
    kc = torch.empty((B * H, pad_k, D), device=dev, dtype=code_dtype)
    ks = torch.empty((B * H, pad_k), device=dev, dtype=torch.float32)
    kf = torch.empty((B * H, pad_k, D), device=dev, dtype=torch.float32) if smq else torch.zeros((1,), device=dev)
    if spec.smooth_k:
        part = _token_reduce(k, layout, absmax=False, run=run)
        kmean = torch.empty((B * H, D), device=dev, dtype=torch.float32)
        run(_int4_kmean_kernel, (B * H,), part, rot[2] if rot is not None else part, kmean, B * H, part.shape[0], Nk,
            D=D, ROT=rot is not None, JB=32, num_warps=4)
    else:
        kmean = torch.zeros((1,), device=dev)
    run(_int4_rows_kernel, (pad_q // rows, B * H), q, rm, kmean, qc, qs, qm, kf, *_bhnd_strides(q, layout), H, Nq,
        pad_q, rs, D=D, ROWS=rows, ROT=rot is not None, SUB_MEAN=False, GROUP_MEAN=smq, WRITE_F=False,
        X_F32=q.dtype not in _HALF, num_warps=warps)
    run(_int4_rows_kernel, (pad_k // rows, B * H), k, rm, kmean, kc, ks, qm, kf, *_bhnd_strides(k, layout), H, Nk,
        pad_k, rs, D=D, ROWS=rows, ROT=rot is not None, SUB_MEAN=bool(spec.smooth_k), GROUP_MEAN=False,
        WRITE_F=smq, X_F32=k.dtype not in _HALF, num_warps=warps)
    vt, sv = _int4_v(v, layout, bool(spec.rotate_v), B, H, Nk, D, pad_k, run=run)
    return qc, qs, qm, kc, ks, kf, vt, sv


@triton.jit
def _delta_s_kernel(QM, KF, T, G, n_pad, D: tl.constexpr, TK: tl.constexpr, GB: tl.constexpr):
    """One key tile of one b·h: T[g, n] = QM[g] · KF[n] for every q group g, GB groups per 3xTF32 MMA."""
    pid_k = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    keys = pid_k * TK + tl.arange(0, TK)
    d = tl.arange(0, D)
    kf = tl.load(KF + bh * n_pad * D + keys[:, None] * D + d[None, :])
    for g0 in range(0, G, GB):
        g = g0 + tl.arange(0, GB)
        qm = tl.load(QM + (bh * G + g)[:, None] * D + d[None, :], mask=(g < G)[:, None], other=0.0)
        ds = tl.dot(qm, tl.trans(kf), input_precision="tf32x3")
        tl.store(T + (bh * G + g)[:, None] * n_pad + keys[None, :], ds, mask=(g < G)[:, None])


def delta_s_table(qm: torch.Tensor, kf: torch.Tensor, run=_launcher.launch) -> torch.Tensor:
    """The Q-smoothing term of every (q group, key): q_mean · K_smoothedᵀ, (B·H, q groups, Nk_pad) fp32, by a
    3xTF32 MMA (fp32-level accuracy, tested against float64; the reference adds ΔS in full precision, which
    TF32 alone would not keep; torch's IEEE fp32 bmm took 11.9 ms at wan-720p on the H200), launched by `run`
    (qm and kf contiguous, as the INT4 and NVFP4 pre-passes write them)."""
    bh, G, D = qm.shape
    n_pad = kf.shape[1]
    out = torch.empty((bh, G, n_pad), device=qm.device, dtype=torch.float32)
    # 64 keys × 64 q groups per MMA, 4 warps, 2 stages: the fastest of 32 tilings at wan-720p (6.1 ms; 10.65 with
    # 128 keys and 8 warps; the same bits)
    if not qm.is_contiguous() or not kf.is_contiguous():
        # (a copy made here would be a torch op outside `run`, which a replayed call plan would not repeat)
        raise ValueError("delta_s_table: qm and kf contiguous")
    run(_delta_s_kernel, (n_pad // 64, bh), qm, kf, out, G, n_pad, D=D, TK=64, GB=64, num_warps=4, num_stages=2)
    return out


# ----------------------------------------------------------------------------------------- NVFP4
# nvfp4 / sage-nvfp4: what the kernel reads is E2M1·s_b (<= 6 significant bits with an exponent in [-10, 11],
# exact in fp16), the fp32 tensor scales outside. nvfp4 on CUDA: a Triton pass per operand (exact rounding,
# _rounding.py); sage-nvfp4 and CPU: formats.nvfp4 itself in float64 torch after the reference's smoothing.

NVFP4_GROUP = 128  # the Q smoothing group = the kernel's BLOCK_M (one q mean per program)


def _nvfp4_unscaled(x64: torch.Tensor, axis: int, outer_scale):
    """(E2M1·s_b as float64 in x's shape, the fp32 outer scale (1 element)) of formats.nvfp4.quantize."""
    import dataclasses

    from lowbit_video.formats import nvfp4

    t = nvfp4.quantize(x64, block=16, axis=axis, outer_scale=outer_scale)
    one = torch.ones((), dtype=torch.float32, device=x64.device)
    return dataclasses.replace(t, outer_scale=one).dequantize(torch.float64), t.outer_scale.reshape(1).to(x64.device)


@triton.jit
def _nvfp4_tile_kernel(X, SO, OUT, sx_b, sx_h, sx_n, sx_d, H, N, n_pad, D: tl.constexpr, ROWS: tl.constexpr,
                       ALONG_TOKENS: tl.constexpr, EMULATE_FMA: tl.constexpr):
    """ROWS tokens of one (batch, head) -> E2M1·s_b in fp16 (exact), outer scale SO (1 element): blocks of 16
    along head_dim into OUT (B·H, n_pad, D), or (ALONG_TOKENS) along tokens into OUT (B·H, D, n_pad)."""
    pid_t = tl.program_id(0)
    pid_bh = tl.program_id(1)
    x, rows, cols = _token_tile(X, sx_b, sx_h, sx_n, sx_d, H, N, pid_t, pid_bh, ROWS, D)
    x = x.to(tl.float32)  # exact: inputs of <= 24 bits
    x, so = in_fp32_range(x, tl.load(SO))  # (the E2M1·s_b values do not depend on the scaling)
    if ALONG_TOKENS:
        e = nvfp4_rows_exact(tl.trans(x), so, D, ROWS, EMULATE_FMA)
        tl.store(OUT + pid_bh * (D * n_pad) + cols[:, None] * n_pad + rows[None, :], e.to(tl.float16))
    else:
        e = nvfp4_rows_exact(x, so, ROWS, D, EMULATE_FMA)
        tl.store(OUT + pid_bh * (n_pad * D) + rows[:, None] * D + cols[None, :], e.to(tl.float16))


def _tensor_scale(x: torch.Tensor, outer: str) -> torch.Tensor:
    """formats.nvfp4's outer scale, (1,) fp32: "tensor" = fl32(amax / 2688) (0 -> 1), "none" = 1."""
    if outer == "none":
        return torch.ones((1,), device=x.device, dtype=torch.float32)
    s = (x.abs().amax().to(torch.float64) / 2688.0).to(torch.float32).reshape(1)
    return torch.where(s > 0, s, torch.ones_like(s))


def _nvfp4_prepass_triton(q, k, v, layout, spec, B, H, Nq, Nk, D, pad_q, pad_k):
    """nvfp4 without smoothing: one Triton pass per operand, straight from the 16-bit/fp32 inputs."""
    dev = q.device
    out = []
    for x, n, pad, outer, along in ((q, Nq, pad_q, spec.q.outer_scale, False), (k, Nk, pad_k, spec.k.outer_scale, False),
                                    (v, Nk, pad_k, spec.v.outer_scale, True)):
        so = _tensor_scale(x, outer)
        shape = (B * H, D, pad) if along else (B * H, pad, D)
        t = torch.empty(shape, device=dev, dtype=torch.float16)
        _nvfp4_tile_kernel[(pad // NVFP4_GROUP, B * H)](x, so, t, *_bhnd_strides(x, layout), H, n, pad, D=D,
                                                        ROWS=NVFP4_GROUP, ALONG_TOKENS=along,
                                                        EMULATE_FMA=EMULATE_FMA, num_warps=8)
        out += [t, so]
    (qq, qs), (kk, ks), (vt, vs) = out[0:2], out[2:4], out[4:6]
    qm = torch.zeros((B * H, pad_q // NVFP4_GROUP, D), device=dev, dtype=torch.float32)
    kf = torch.zeros((1,), device=dev, dtype=torch.float32)  # no Q smoothing: no ΔS
    return qq, qs, qm, kk, ks, kf, vt, vs


def nvfp4_prepass(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: str, spec):
    """NVFP4 operands: (q E2M1·s_b fp16 (B·H, Nq_pad, D), q tensor scale (1,) fp32, q group means (B·H, q groups,
    D) fp32 (zeros without Q smoothing), k likewise (K smoothed if the recipe says so), its scale, the smoothed K
    in fp32 (B·H, Nk_pad, D) (for ΔS; a 1-element dummy without Q smoothing on the Triton path), Vᵀ E2M1·s_b
    fp16 (B·H, D, Nk_pad) (16-blocks along tokens), V's scale).

    Without smoothing (nvfp4) and for 16-bit or fp32 inputs on CUDA (or the interpreter): one Triton pass
    per operand with the exact midpoint rounding of kernels/_rounding.py. Otherwise (sage-nvfp4, or CPU):
    formats.nvfp4 itself in float64 torch after the reference's smoothing (206 ms at wan-720p on the H200)."""
    from lowbit_video.transforms import smooth_k, smooth_q

    B, H, Nq, D = _dims(q, layout)
    Nk = _dims(k, layout)[2]
    dev = q.device
    pad_q = triton.cdiv(Nq, NVFP4_GROUP) * NVFP4_GROUP
    pad_k = triton.cdiv(Nk, TILE) * TILE
    fast = (not spec.smooth_k and not spec.smooth_q and all(t.dtype in _HALF + (torch.float32,) for t in (q, k, v))
            and (dev.type == "cuda" or os.environ.get("TRITON_INTERPRET") == "1"))
    if fast:
        return _nvfp4_prepass_triton(q, k, v, layout, spec, B, H, Nq, Nk, D, pad_q, pad_k)
    qb, kb, vb = ((t.transpose(1, 2) if layout == "BNHD" else t).to(torch.float64) for t in (q, k, v))
    if spec.smooth_k:
        kb, _ = smooth_k(kb)
    qm = torch.zeros((B * H, pad_q // NVFP4_GROUP, D), device=dev, dtype=torch.float32)
    if spec.smooth_q:
        qb, qmean = smooth_q(qb, spec.smooth_q_group)
        qm = qmean[:, :, ::spec.smooth_q_group, :].to(torch.float32).reshape(B * H, -1, D).contiguous()
    qv, qs = _nvfp4_unscaled(qb, -1, spec.q.outer_scale)
    kv, ks = _nvfp4_unscaled(kb, -1, spec.k.outer_scale)
    vv, vs = _nvfp4_unscaled(vb, -2, spec.v.outer_scale)
    qq = torch.zeros((B * H, pad_q, D), device=dev, dtype=torch.float16)
    qq[:, :Nq] = qv.reshape(B * H, Nq, D)
    kk = torch.zeros((B * H, pad_k, D), device=dev, dtype=torch.float16)
    kk[:, :Nk] = kv.reshape(B * H, Nk, D)
    vt = torch.zeros((B * H, D, pad_k), device=dev, dtype=torch.float16)
    vt[:, :, :Nk] = vv.reshape(B * H, Nk, D).transpose(1, 2)
    kf = torch.zeros((B * H, pad_k, D), device=dev, dtype=torch.float32)
    kf[:, :Nk] = kb.reshape(B * H, Nk, D)
    return qq, qs.contiguous(), qm, kk, ks.contiguous(), kf, vt, vs.contiguous()
