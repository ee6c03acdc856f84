"""Triton building blocks shared by every kernel of the family: the MXFP4 scale rules and the exact
E2M1 rounding (used by the pre-pass and by the in-kernel P̃ quantization alike), and the one
online-softmax attention kernel whose variants (dense 16-bit, MXFP4 folded into E4M3, SageAttention2
INT8/FP8, INT4 RotateAttention) differ only in constexpr branches of the per-tile step.

Numerics (why the fast path is exact):
- MXFP4 block exponents come from the fp32 bit pattern (floor(log2 M) read off the exponent field; the
  ceil rules settled by one exact comparison M > q·2^d), as formats/mxfp4.shared_exponent does in
  float64.
- E2M1 rounding is one fp32 add-and-subtract of a power of two C = 2^(max(E, k) + 22), E = floor(log2 a),
  k = the block exponent: ulp(C) is the E2M1 grid step at a, so the single RNE of a + C is the
  round-half-even onto the grid (C's significand is even, so ties go to the even E2M1 mantissa);
  saturation at 6·2^k is one min. Two integer ops, two FMAs (C = 2^max(E, k) · 2^22, exact), one min
  per element.
- E2M1·2^k is exact in E4M3 for k in [-8, 6]. P̃ ≤ 1 gets block exponents ≤ −2 under all three rules,
  so P̃ is produced directly as P̃·2^8 (the 8 folded into the exp2 argument) and blocks with
  exponent ≥ −16 land exactly in E4M3; blocks below (weights < 6·2^−17 each) are counted, and
  `exact_p=True` runs P̂·V in bf16 instead (exact for every block).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .modes import MODE_DENSE, MODE_INT4, MODE_MX, MODE_NVFP4, MODE_SAGE  # noqa: F401 (the MODE numbers, named)

RULE_IDS = {"ocp": 0, "tfs": 1, "uos": 2}
LOG2E = 1.4426950408889634


@triton.jit
def row_lse(m_log2, l, shift):
    """The rows' log-sum-exp, natural log, from the online-softmax state every kernel ends with: the running
    maximum m_log2 (log2 domain) and the normaliser l it divides the output by, l in units of 2^(m_log2 − shift)
    (shift: the exponent the kernel's P̃ carries, e.g. P_SHIFT). lse = ln 2 · (m_log2 − shift + log2 l): the
    logarithm of the normaliser the output was divided by, so ring attention's merge by exp(lse) weighs each key
    chunk by the mass it applied (for PNQ recipes Σ P̂, for direct placement Σ P̃; the engine's `lse`).
    Rows with no key (l = 0) get −inf."""
    return tl.where(l > 0, (m_log2 - shift + tl.log2(tl.where(l > 0, l, 1.0))) * 0.6931471805599453, float("-inf"))


@triton.jit
def _pow2(k):
    """2.0**k as fp32 for int32 k in [-126, 127] (bit pattern, exact)."""
    return ((k + 127) << 23).to(tl.float32, bitcast=True)


@triton.jit
def mx_exponent(amax, RULE: tl.constexpr, FLQ: tl.constexpr, QMAX: tl.constexpr, P_PATH: tl.constexpr = False):
    """Shared exponent k (int32) of blocks with maxima `amax` (fp32, >= 0) under RULE (0 ocp, 1 tfs,
    2 uos with boundary QMAX, FLQ = floor(log2 QMAX)). All-zero blocks get 0; clamped to [-100, 100].
    floor(log2 amax) is amax's exponent field; the ceil rules' test amax > QMAX·2^(fl − FLQ) compares the
    significands 1.m(amax) > 1.m(QMAX) (equal exponents once aligned), one integer compare of the mantissa
    fields (exact; subnormal maxima land below −100 either way). P_PATH (the in-kernel P̃ blocks, whose maxima
    are at most 2^9): no upper clamp, and all-zero blocks get −100 instead of 0 (their elements are 0 on any grid)."""
    bits = amax.to(tl.int32, bitcast=True)
    fl = bits >> 23  # biased exponent: amax >= 0 has no sign bit
    if RULE == 0:
        k = fl - (127 + 2)
    else:
        # QMAX's mantissa field, a compile-time constant (tl.cast, not tl.full: Gluon's full needs a layout)
        q_mant = tl.cast(QMAX, tl.float32).to(tl.int32, bitcast=True) & 0x7FFFFF
        k = fl - (127 + FLQ) + ((bits & 0x7FFFFF) > q_mant).to(tl.int32)
    if P_PATH:
        return tl.maximum(k, -100)
    k = tl.where(amax > 0, k, 0)
    return tl.minimum(tl.maximum(k, -100), 100)


@triton.jit
def e2m1_round_bits(a, kbits, sat):
    """e2m1_round with the block constants precomputed (the in-kernel P̃ path broadcasts them per 32 keys):
    kbits = the fp32 bits of 2^k, sat = 6·2^k. C = c0·2^22 with c0 = 2^max(E, k); a + C and then − C run
    as two FMAs (c0·2^22 is exact, so each is the same single rounding as the add; it saves an integer add)."""
    c0 = tl.maximum(a.to(tl.int32, bitcast=True) & 0x7F800000, kbits).to(tl.float32, bitcast=True)
    return tl.minimum(tl.fma(c0, -4194304.0, tl.fma(c0, 4194304.0, a)), sat)


@triton.jit
def e2m1_round(a, k):
    """RNE of a >= 0 onto the grid E2M1·2^k (k int32, broadcastable), saturating at 6·2^k."""
    sat = (((k + 129) << 23) | 0x400000).to(tl.float32, bitcast=True)  # 1.5·2^(k+2) = 6·2^k
    return e2m1_round_bits(a, (k + 127) << 23, sat)


@triton.jit
def e4m3_round(t):
    """RNE of t >= 0 (fp32) onto the E4M3 grid, saturating at 448, in fp32 arithmetic (no fp8 cast: the
    interpreter's fp32 -> E4M3 cast rounds ties away from zero and some values wrongly). One add-and-
    subtract of C = 2^(max(E, -6) + 20), E = floor(log2 t): ulp(C) is E4M3's step 2^(E - 3) (2^-9 on the
    subnormals), C's significand is even, so ties go to the even mantissa; t < 2^-10 (ties incl.) -> 0."""
    cbits = tl.maximum(t.to(tl.int32, bitcast=True) & 0x7F800000, (-6 + 127) << 23) + (20 << 23)
    c = cbits.to(tl.float32, bitcast=True)
    return tl.minimum((t + c) - c, 448.0)


@triton.jit
def int4_p_codes(qk, rmax, PLEV: tl.constexpr, MASKED: tl.constexpr, c=1.0):
    """INT4 P̃ codes of one tile (MODE 3; also the Gluon kernel's): RNE(P̃ / s) with s = the tile's row maximum
    of P̃ / PLEV, i.e. RNE(PLEV·2^(c·(qk − rowmax qk))), straight from the logits (the running maximum cancels),
    one exp2 per element, the row maximum's code exactly PLEV. qk·c: the logits in the log2 domain (c > 0, a
    scalar: the Gluon kernel folds sm_scale·log2 e in here, as one FMA with the exponent's shift), rmax = the
    rows' maximum of qk. The RNE is one FMA e·PLEV + 1.5·2^23 (a single rounding, at unit steps: the RNE of the
    exact product), whose low bits are the integer code (e·PLEV <= PLEV, no clamp). Returns (e = 2^(c·(qk −
    rowmax)), e·PLEV + 1.5·2^23); rows with no key in a MASKED tile get codes 0. The scale s is the caller's:
    the Triton kernel's 2^(c·rowmax − m) / PLEV against the running maximum m, the Gluon kernel keeps its
    accumulator in units of s."""
    rmaxc = rmax * c
    if MASKED:
        rmaxc = tl.where(rmax == float("-inf"), 0.0, rmaxc)
    e = tl.exp2(tl.fma(qk, c, -rmaxc[:, None]))
    return e, tl.fma(e, PLEV, 12582912.0)


@triton.jit
def _tile_scores(q, k_base, sk_n, offs_d, start_n, ks_base, c_row, N_KV, kf_base, sk_n_kf, qm16, ds_scale,
                 MODE: tl.constexpr, MASKED: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 SMQ: tl.constexpr):
    """First half of `_tile_step`: the key tile's logits QKᵀ (fp32, unmasked: `_tile_update` masks) and
    the per-row factor still to apply in the log2 domain (MODE 3/4 fold theirs in here and return 1).
    Split off so the kernel can issue the next tile's QKᵀ before this tile's softmax (PIPE)."""
    offs_n = start_n + tl.arange(0, BLOCK_N)
    k_ptrs = k_base + offs_n[:, None] * sk_n + offs_d[None, :]
    if MASKED:
        inb = offs_n < N_KV
        k = tl.load(k_ptrs, mask=inb[:, None], other=0.0)
    else:
        k = tl.load(k_ptrs)
    qk = tl.dot(q, tl.trans(k))
    if MODE == 2:
        if MASKED:
            ks = tl.load(ks_base + offs_n, mask=inb, other=0.0)
        else:
            ks = tl.load(ks_base + offs_n)
        qk = qk.to(tl.float32) * ks[None, :]
    if MODE == 3 or MODE == 4:
        if MODE == 3:
            if MASKED:
                ks = tl.load(ks_base + offs_n, mask=inb, other=0.0)
            else:
                ks = tl.load(ks_base + offs_n)
            qk = qk.to(tl.float32) * c_row[:, None] * ks[None, :]  # log2 domain
        else:
            qk = qk * c_row[:, None]  # the tensor scales · sm_scale·log2 e: log2 domain
        if SMQ == 1:
            # ΔS = q_mean · K_smoothedᵀ (full precision): the 16 rows of qm16 are equal, max = any row
            kf = tl.load(kf_base + offs_n[:, None] * sk_n_kf + offs_d[None, :])
            dq = tl.dot(qm16, tl.trans(kf), input_precision="tf32x3")
            qk = qk + tl.max(dq, axis=0)[None, :]
        elif SMQ == 2:
            # ΔS from the pre-pass table (q group, key) in fp32; kf_base is this program's row
            qk = qk + (tl.load(kf_base + offs_n) * ds_scale)[None, :]
        c_row = tl.full((BLOCK_M,), 1.0, tl.float32)
    return qk, c_row


@triton.jit
def _tile_update(acc, m_i, l_i, n_bad, qk, c_row, vt_base, sv_n, start_n, kpm_base, N_KV,
                 MODE: tl.constexpr, MASKED: tl.constexpr, HAS_KPM: tl.constexpr, PNQ: tl.constexpr,
                 P_FP8: tl.constexpr, RULE: tl.constexpr, FLQ: tl.constexpr, QMAX: tl.constexpr,
                 P_SHIFT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 PROMOTE: tl.constexpr, PQ: tl.constexpr, PLEV: tl.constexpr = 15,
                 PROW: tl.constexpr = False, lsc=1.0, pvs=1.0, PHASE: tl.constexpr = False,
                 RNE_P: tl.constexpr = False):
    """Second half of `_tile_step`: masking, the online-softmax update, P̃ quantization and P̂·V̂."""
    offs_n = start_n + tl.arange(0, BLOCK_N)
    v_ptrs = vt_base + offs_n[None, :] * sv_n
    if MASKED:
        inb = offs_n < N_KV
        valid = inb
        if HAS_KPM:
            valid = valid & (tl.load(kpm_base + offs_n, mask=inb, other=0) != 0)
        qk = tl.where(valid[None, :], qk, float("-inf"))
    if MODE == 1:
        # block maxima of the logits first; the row maximum from them (1/32 of the extra work)
        bmax = tl.max(tl.reshape(qk, (BLOCK_M, BLOCK_N // 32, 32)), axis=2)
        m_new = tl.maximum(m_i, tl.max(bmax, axis=1) * c_row)
    else:
        m_new = tl.maximum(m_i, tl.max(qk, axis=1) * c_row)
    if MASKED:
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
    else:
        m_use = m_new
    alpha = tl.exp2(m_i - m_use)
    mb = m_use - P_SHIFT
    y = tl.exp2(qk * c_row[:, None] - mb[:, None])  # P̃ · 2^P_SHIFT
    if MODE == 1 and PQ:
        ymax = tl.exp2(bmax * c_row[:, None] - mb[:, None])  # block maxima of y
        # The block holding the row maximum has P̃ = 1 exactly in the reference; fp32 exp2 of an
        # FMA residual can land a hair below 2^P_SHIFT and flip floor(log2) (the OCP rule), so pin it.
        ymax = tl.where(bmax * c_row[:, None] >= m_use[:, None], 2.0 ** P_SHIFT, ymax)
        kb = mx_exponent(ymax, RULE, FLQ, QMAX, True)  # block exponent in the y domain (= e_b + P_SHIFT)
        # per row, not to a scalar: a scalar sum would cost a cross-warp reduction (a barrier) every tile
        n_bad += tl.sum(((kb < -8) & (ymax > 0)).to(tl.int32), axis=1)
        # per-block constants first (1/32 of the work), then broadcast: the bits of 2^k and the 6·2^k bound
        kbits = (kb + 127) << 23
        satb = (((kb + 129) << 23) | 0x400000).to(tl.float32, bitcast=True)
        kbits = tl.reshape(tl.broadcast_to(kbits[:, :, None], (BLOCK_M, BLOCK_N // 32, 32)), (BLOCK_M, BLOCK_N))
        satb = tl.reshape(tl.broadcast_to(satb[:, :, None], (BLOCK_M, BLOCK_N // 32, 32)), (BLOCK_M, BLOCK_N))
        p = e2m1_round_bits(y, kbits, satb)  # = e2m1_round(y, kb): RNE onto E2M1·2^kb, saturated
        if PNQ:
            l_i = l_i * alpha + tl.sum(p, axis=1)
        else:
            l_i = l_i * alpha + tl.sum(y, axis=1) * lsc
    elif MODE == 3:
        rmax = tl.max(qk, axis=1)
        e, tm = int4_p_codes(qk, rmax, PLEV, MASKED)
        pmax = tl.exp2(rmax - mb)  # the tile's row maximum of P̃ (0 for a row with no key in a masked tile)
        sp = pmax / PLEV  # the rows' P̃ scale
        p = tm.to(tl.int32, bitcast=True).to(tl.int8)  # the low byte of 1.5·2^23 + code is the code
        if PNQ:
            l_i = l_i * alpha + tl.sum(tm - 12582912.0, axis=1) * sp
        else:
            l_i = l_i * alpha + tl.sum(e, axis=1) * pmax * lsc  # Σ P̃ = rowmax P̃ · Σ 2^(qk − rowmax)
    elif MODE == 4:
        # NVFP4 P̃: blocks of 16 keys per row, as formats/nvfp4.quantize (s_b from the block maximum)
        yb = tl.reshape(y, (BLOCK_M, BLOCK_N // 16, 16))
        amax = tl.max(yb, axis=2)
        if PROW:
            rmax = tl.max(amax, axis=1)
            # rowmax / (448·6): the fp32 outer scale. A tile whose P̃ maximum is <= 2^-100 (every weight
            # < 2^-100 of the row maximum) gets s_o = 1 and so all-zero block scales (the reference rounds
            # s_o to fp32 and raises once it underflows; here 1/step must stay finite)
            so = tl.where(rmax > 7.888609052210118e-31, rmax / 2688.0, 1.0)
            sb = e4m3_round(amax / (6.0 * so)[:, None])
            step = sb * so[:, None]
        else:
            so = tl.full((BLOCK_M,), 1.0, tl.float32)
            sb = e4m3_round(amax / 6.0)
            step = sb
        # a block scale that rounds to 0 makes the whole block zero codes
        inv = tl.where(sb > 0, 1.0 / tl.where(sb > 0, step, 1.0), 0.0)
        z = yb * inv[:, :, None]
        e = e2m1_round(z, tl.zeros((BLOCK_M, BLOCK_N // 16, 1), tl.int32))
        p = tl.reshape(e * sb[:, :, None], (BLOCK_M, BLOCK_N))  # P̂ / s_o = E2M1·s_b: exact in fp16
        if PNQ:
            l_i = l_i * alpha + tl.sum(p, axis=1) * so
        else:
            l_i = l_i * alpha + tl.sum(y, axis=1) * lsc
    else:
        p = y
        l_i = l_i * alpha + tl.sum(y, axis=1) * lsc
    if MASKED and MODE == 0:
        vt = tl.load(v_ptrs, mask=inb[None, :], other=0.0)
    else:
        vt = tl.load(v_ptrs)  # MXFP4 / sage2 V is zero-padded to whole tiles by the pre-pass
    if MODE == 3:
        # exact INT8 MMA (|Σ| <= 128·15·7), promoted with the row's P̃ scale into the fp32 accumulator. The codes
        # enter it in the key order Vᵀ is stored in (prepass.operand_key: per 16 keys 8a + 2q + e -> 4q + 2a + e),
        # which is the accumulator's own register order: no shuffles (offline SASS, key loop 1066 -> 1018)
        p = tl.reshape(tl.permute(tl.reshape(p, (BLOCK_M, BLOCK_N // 16, 2, 4, 2)), (0, 1, 3, 2, 4)),
                       (BLOCK_M, BLOCK_N))
        pv = tl.dot(p, tl.trans(vt))
        acc = acc * alpha[:, None] + pv.to(tl.float32) * sp[:, None]
    elif MODE == 4 and PROW:
        # 16-bit MMA (exact products), the row's outer scale s_o applied to the tile's product
        pv = tl.dot(p.to(vt.dtype), tl.trans(vt))
        acc = acc * alpha[:, None] + pv * so[:, None]
    else:
        if P_FP8 and RNE_P:
            p_op = e4m3_round(p).to(tl.float8e4nv)  # RNE first: the CPU interpreter's cast is not RNE
        elif P_FP8:
            p_op = p.to(tl.float8e4nv)
        else:
            p_op = p.to(vt.dtype)
        acc = acc * alpha[:, None]
        if PHASE:
            if PROMOTE and P_FP8:
                pv = tl.dot(p_op, tl.trans(vt), max_num_imprecise_acc=BLOCK_N)
            else:
                pv = tl.dot(p_op, tl.trans(vt))
            acc = acc + pv * pvs
        elif PROMOTE:
            acc = tl.dot(p_op, tl.trans(vt), acc, max_num_imprecise_acc=BLOCK_N)
        else:
            acc = tl.dot(p_op, tl.trans(vt), acc)
    return acc, m_new, l_i, n_bad


@triton.jit
def _tile_step(acc, m_i, l_i, n_bad, q, k_base, sk_n, vt_base, sv_n, offs_d, start_n, kpm_base, ks_base,
               c_row, N_KV, kf_base, sk_n_kf, qm16, ds_scale,
               MODE: tl.constexpr, MASKED: tl.constexpr, HAS_KPM: tl.constexpr, PNQ: tl.constexpr,
               P_FP8: tl.constexpr, RULE: tl.constexpr, FLQ: tl.constexpr, QMAX: tl.constexpr,
               P_SHIFT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               PROMOTE: tl.constexpr, PQ: tl.constexpr, PLEV: tl.constexpr = 15, SMQ: tl.constexpr = 0,
               PROW: tl.constexpr = False, lsc=1.0, pvs=1.0, PHASE: tl.constexpr = False,
               RNE_P: tl.constexpr = False):
    """One key tile of the online-softmax recurrence (the core every variant shares).

    K rows are read at k_base + n·sk_n + d (head_dim contiguous); V as the (D, BLOCK_N) tile at
    vt_base + d·sv_d + n·sv_n with the d stride folded into vt_base's offsets by the caller.
    m_i is kept in the log2 domain; P̃ is produced pre-multiplied by 2^P_SHIFT (P_SHIFT folded into
    the exp2 argument: 8 for MXFP4, log2 448 for the FP8 P̃ of sage2, 0 for dense and INT4).

    MODE 3 (INT4): q, k hold INT4 codes in int8, so QKᵀ is an exact INT8 MMA (int32); c_row carries
    q's per-token scale · sm_scale·log2 e, ks_base K's per-token scales; with SMQ the ΔS term
    (q's group mean, qm16 pre-scaled by sm_scale·log2 e, against the full-precision smoothed K at
    kf_base) is added in fp32 (SMQ 1: a 3xTF32 MMA per tile; SMQ 2: read from a (q group, key)
    table the pre-pass computed, kf_base then pointing at this program's row, scaled by ds_scale). P̃ gets PLEV + 1 integer levels per row of the tile,
    codes = RNE(P̃ / s) ∈ [0, PLEV], s = rowmax(P̃ tile) / PLEV: for PLEV = 15 these are the
    affine codes + 8 (the zero point −8 folded in: s·(c + 8)·V̂ is one exact INT8 MMA with the
    unsigned codes, i.e. Σ c·V̂ plus 8·colsum(V̂)), for PLEV = 7 the symmetric codes. P̂·V̂ is an
    exact INT8 MMA against V's INT4 codes, scaled by s per row into the fp32 accumulator.

    MODE 4 (NVFP4): q, k hold E2M1·s_b (the E4M3 block scale, 16-blocks along head_dim) in fp16, exact
    (<= 6 significant bits; fp16 rather than bf16, equally exact, because Triton's CPU interpreter computes
    bf16 tl.dot wrongly and could not verify it), so QKᵀ is a 16-bit MMA with exact products; c_row carries the two fp32 tensor
    scales · sm_scale·log2 e; SMQ 2 adds ΔS as for MODE 3. P̃ is quantized per 16 keys of each row as
    formats/nvfp4: s_b = E4M3_RNE(amax_b / (6·s_o)), elements E2M1_RNE(P̃ / (s_b·s_o)); s_o = 1 (PROW
    False) or the two-level rowmax(P̃ tile)/(448·6) (PROW, SageAttention3). P̂/s_o = E2M1·s_b is exact in
    fp16; the P̂·V̂ MMA runs in fp16 against V's E2M1·s_b and s_o multiplies the tile's product per row.

    PHASE (DraftAttention2's precision phases sharing one state): the tile's P̂·V̂ product is taken out of
    the MMA and multiplied by `pvs` (this phase's V scale per channel, times 2^−P_SHIFT) before it joins
    the fp32 accumulator, and `lsc` (= 2^−P_SHIFT) brings the tile's Σ P̃ to the unshifted unit, so
    every phase adds to m, ℓ and Õ in the same units and the output is normalised once."""
    qk, c_row = _tile_scores(q, k_base, sk_n, offs_d, start_n, ks_base, c_row, N_KV, kf_base, sk_n_kf, qm16,
                             ds_scale, MODE, MASKED, BLOCK_M, BLOCK_N, SMQ)
    return _tile_update(acc, m_i, l_i, n_bad, qk, c_row, vt_base, sv_n, start_n, kpm_base, N_KV, MODE, MASKED,
                        HAS_KPM, PNQ, P_FP8, RULE, FLQ, QMAX, P_SHIFT, BLOCK_M, BLOCK_N, PROMOTE, PQ, PLEV, PROW,
                        lsc, pvs, PHASE, RNE_P)


@triton.jit
def _tile_row_factor(c_row, KS, pid_bh, sks_bh, j, MODE: tl.constexpr):
    """The row factor of key tile j: MODE 1 folds K's per-tile exponent 2^R_j in, the others use c_row."""
    if MODE == 1:
        return c_row * _pow2(tl.maximum(tl.load(KS + pid_bh * sks_bh + j), -126))
    return c_row


@triton.jit
def _tile_start(LIST, j, BLOCK_N: tl.constexpr, INDIRECT: tl.constexpr):
    """First key of tile j: j·BLOCK_N, or LIST[j]·BLOCK_N for a block-sparse key list (INDIRECT)."""
    if INDIRECT:
        start = tl.load(LIST + j) * BLOCK_N
    else:
        start = j * BLOCK_N
    return start


@triton.jit
def _tile_loop(acc, m_i, l_i, n_bad, q, k_base, sk_n, vt_base, sv_n, offs_d, kpm_base, ks_base, c_row, N_KV,
               kf_base, sk_n_kf, qm16, ds_scale, KS, pid_bh, sks_bh, LIST, n_tiles, lsc, pvs,
               MODE: tl.constexpr, MASKED: tl.constexpr, HAS_KPM: tl.constexpr, PNQ: tl.constexpr,
               P_FP8: tl.constexpr, RULE: tl.constexpr, FLQ: tl.constexpr, QMAX: tl.constexpr,
               P_SHIFT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PROMOTE: tl.constexpr,
               PQ: tl.constexpr, PLEV: tl.constexpr, SMQ: tl.constexpr, PROW: tl.constexpr,
               PHASE: tl.constexpr, RNE_P: tl.constexpr, INDIRECT: tl.constexpr, PIPE: tl.constexpr,
               NUM_STAGES: tl.constexpr):
    """`n_tiles` key tiles through `_tile_step` (attn_fwd's whole tiles, and each precision phase of draft_fwd).

    PIPE: software pipelining (FA3's intra-warpgroup overlap): the next tile's QKᵀ is issued before this
    tile's softmax and P̃ quantization, so the asynchronous MMA runs under the ALU work. The arithmetic is
    the same, in the same order (GPU: equal outputs for MODE 0–3, measured)."""
    n_iter = n_tiles
    if PIPE:
        if n_iter > 0:
            s0 = _tile_start(LIST, 0, BLOCK_N, INDIRECT)
            qk, c_q = _tile_scores(q, k_base, sk_n, offs_d, s0, ks_base,
                                   _tile_row_factor(c_row, KS, pid_bh, sks_bh, 0, MODE), N_KV, kf_base, sk_n_kf,
                                   qm16, ds_scale, MODE, MASKED, BLOCK_M, BLOCK_N, SMQ)
            for j in tl.range(0, n_iter - 1, num_stages=NUM_STAGES):
                s_next = _tile_start(LIST, j + 1, BLOCK_N, INDIRECT)
                qk_next, c_next = _tile_scores(
                    q, k_base, sk_n, offs_d, s_next, ks_base,
                    _tile_row_factor(c_row, KS, pid_bh, sks_bh, j + 1, MODE), N_KV, kf_base, sk_n_kf, qm16,
                    ds_scale, MODE, MASKED, BLOCK_M, BLOCK_N, SMQ)
                s_j = _tile_start(LIST, j, BLOCK_N, INDIRECT)
                acc, m_i, l_i, n_bad = _tile_update(
                    acc, m_i, l_i, n_bad, qk, c_q, vt_base, sv_n, s_j, kpm_base,
                    N_KV, MODE, MASKED, HAS_KPM, PNQ, P_FP8, RULE, FLQ, QMAX, P_SHIFT, BLOCK_M, BLOCK_N, PROMOTE,
                    PQ, PLEV, PROW, lsc, pvs, PHASE, RNE_P)
                qk = qk_next
                c_q = c_next
            s_last = _tile_start(LIST, n_iter - 1, BLOCK_N, INDIRECT)
            acc, m_i, l_i, n_bad = _tile_update(
                acc, m_i, l_i, n_bad, qk, c_q, vt_base, sv_n, s_last,
                kpm_base, N_KV, MODE, MASKED, HAS_KPM, PNQ, P_FP8, RULE, FLQ, QMAX, P_SHIFT, BLOCK_M, BLOCK_N,
                PROMOTE, PQ, PLEV, PROW, lsc, pvs, PHASE, RNE_P)
    else:
        for j in tl.range(0, n_iter, num_stages=NUM_STAGES):
            s_j = _tile_start(LIST, j, BLOCK_N, INDIRECT)
            acc, m_i, l_i, n_bad = _tile_step(
                acc, m_i, l_i, n_bad, q, k_base, sk_n, vt_base, sv_n, offs_d, s_j,
                kpm_base, ks_base, _tile_row_factor(c_row, KS, pid_bh, sks_bh, j, MODE), N_KV, kf_base, sk_n_kf,
                qm16, ds_scale, MODE, MASKED, HAS_KPM, PNQ, P_FP8, RULE, FLQ, QMAX, P_SHIFT, BLOCK_M, BLOCK_N,
                PROMOTE, PQ, PLEV, SMQ, PROW, lsc, pvs, PHASE, RNE_P)
    return acc, m_i, l_i, n_bad


@triton.jit
def attn_fwd(Q, K, VT, O, QS, KS, VS, KPM, BAD, LSE, KF, QM, HV,
             sq_b, sq_h, sq_n, sk_b, sk_h, sk_n, sv_b, sv_h, sv_d, sv_n, so_b, so_h, so_n, so_d,
             sqs_bh, sks_bh, svs_bh, skpm_b,
             H, N_Q, N_KV, sm_scale_log2, skf_bh, sqm_bh, rotv_scale,
             MODE: tl.constexpr, HEAD_DIM: tl.constexpr, HAS_KPM: tl.constexpr, PNQ: tl.constexpr,
             P_FP8: tl.constexpr, RULE: tl.constexpr, FLQ: tl.constexpr, QMAX: tl.constexpr,
             P_SHIFT: tl.constexpr, PROMOTE: tl.constexpr, PQ: tl.constexpr,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, NUM_STAGES: tl.constexpr,
             PLEV: tl.constexpr = 15, SMQ: tl.constexpr = 0, ROTV: tl.constexpr = False,
             PROW: tl.constexpr = False, PIPE: tl.constexpr = False, GATED: tl.constexpr = False,
             WRITE_LSE: tl.constexpr = False):
    """Non-causal attention forward. Grid (cdiv(N_Q, BLOCK_M), B·H). WRITE_LSE: also each row's log-sum-exp
    (`row_lse`, natural log, of the scores as the kernel scaled them) into LSE, fp32 (B·H, N_Q).

    MODE 0 dense: Q, K, V in 16 bit (any strides); no scales.
    MODE 1 MXFP4: Q, K hold E2M1·2^(e_b − R) (E4M3, or bf16 for the exact fallback) with one exponent R
      per 128-token tile (QS, KS: int32 (B·H, tiles)); VT (B·H, D, N_pad) holds V folded per channel
      with exponent VS (int32 (B·H, D)); P̃ quantized in-kernel per 32 keys.
    MODE 2 sage2: Q, K INT8 with fp32 per-token scales QS, KS; VT FP8 with fp32 per-channel scale VS;
      P̃·448 cast to E4M3.
    MODE 3 INT4 (rotateattention-*, int4-baseline): Q, K INT4 codes in int8 (rotated, smoothed by the
      pre-pass) with fp32 per-token scales QS, KS; VT INT4 codes in int8 (B·H, D, N_pad) with fp32
      per-channel scales VS; SMQ 1: QM (B·H, q tiles, D) q group means (group = BLOCK_M = 128) and KF
      (B·H, N_pad, D) the full-precision smoothed K for ΔS, computed per tile; SMQ 2: KF the ΔS table
      q_mean · K_smoothedᵀ (B·H, q tiles, N_pad) fp32, sqm_bh its row stride; ROTV: output · Hᵀ (HV the ±1 Sylvester
      matrix, rotv_scale = 1/sqrt(D)) in the epilogue, undoing the V Hadamard.
    MODE 4 NVFP4 (nvfp4, sage-nvfp4): Q, K (B·H, N_pad, D) and VT (B·H, D, N_pad) hold E2M1·s_b in fp16
      (exact); QS, KS, VS the fp32 per-tensor outer scales (1 element each); SMQ 2 as MODE 3 (ΔS table);
      P̃ quantized in-kernel per 16 keys, PROW: with the two-level per-row outer scale.
    GATED (MODE 1, the exact bf16 fallback launched after the E4M3 kernel; kernels/launch.py): BAD holds the
      pre-pass's counters [Q/K blocks, V blocks E4M3 could not hold, P̃ blocks of the E4M3 kernel, of this one];
      every program returns at once unless a fold counted a block, so no host decides which kernel's output stands.
    """
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    if GATED:
        if tl.load(BAD) + tl.load(BAD + 1) == 0:
            return
    b = pid_bh // H
    h = pid_bh % H
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q_ptrs = Q + b * sq_b + h * sq_h + offs_m[:, None] * sq_n + offs_d[None, :]
    q = tl.load(q_ptrs, mask=(offs_m < N_Q)[:, None], other=0.0)
    k_base = K + b * sk_b + h * sk_h
    vt_base = VT + b * sv_b + h * sv_h + offs_d[:, None] * sv_d
    kpm_base = KPM + b * skpm_b
    ks_base = KS + pid_bh * sks_bh

    if MODE == 1:
        rq = tl.load(QS + pid_bh * sqs_bh + (pid_m * BLOCK_M) // 128)
        c_row = tl.full((BLOCK_M,), 1.0, tl.float32) * (sm_scale_log2 * _pow2(tl.maximum(rq, -126)))
    elif MODE == 2 or MODE == 3:
        c_row = tl.load(QS + pid_bh * sqs_bh + offs_m, mask=offs_m < N_Q, other=0.0) * sm_scale_log2
    elif MODE == 4:
        c_row = tl.full((BLOCK_M,), 1.0, tl.float32) * (tl.load(QS) * tl.load(KS) * sm_scale_log2)
    else:
        c_row = tl.full((BLOCK_M,), 1.0, tl.float32) * sm_scale_log2

    kf_base = KF + pid_bh.to(tl.int64) * skf_bh  # the ΔS table passes 2^31 elements at hunyuan-720p (24 heads)
    if SMQ == 2:
        kf_base = kf_base + pid_m * sqm_bh  # sqm_bh: the table's row stride (one row per q group)
    qm16 = tl.zeros((16, HEAD_DIM), tl.float32)
    if MODE == 3 and SMQ == 1:
        qm = tl.load(QM + pid_bh * sqm_bh + pid_m * HEAD_DIM + offs_d) * sm_scale_log2
        qm16 = qm16 + qm[None, :]
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)
    n_bad = tl.zeros((BLOCK_M,), tl.int32)  # MODE 1: P̃ blocks E4M3 cannot hold exactly, per row

    if HAS_KPM:
        n_full = 0
    else:
        n_full = N_KV // BLOCK_N
    acc, m_i, l_i, n_bad = _tile_loop(
        acc, m_i, l_i, n_bad, q, k_base, sk_n, vt_base, sv_n, offs_d, kpm_base, ks_base, c_row, N_KV, kf_base,
        HEAD_DIM, qm16, sm_scale_log2, KS, pid_bh, sks_bh, KS, n_full, 1.0, 1.0, MODE, False, HAS_KPM, PNQ, P_FP8,
        RULE, FLQ, QMAX, P_SHIFT, BLOCK_M, BLOCK_N, PROMOTE, PQ, PLEV, SMQ, PROW, False, False, False, PIPE,
        NUM_STAGES)
    for j in range(n_full, tl.cdiv(N_KV, BLOCK_N)):
        acc, m_i, l_i, n_bad = _tile_step(
            acc, m_i, l_i, n_bad, q, k_base, sk_n, vt_base, sv_n, offs_d, j * BLOCK_N, kpm_base, ks_base,
            _tile_row_factor(c_row, KS, pid_bh, sks_bh, j, MODE), N_KV, kf_base, HEAD_DIM, qm16, sm_scale_log2, MODE, True, HAS_KPM, PNQ, P_FP8, RULE, FLQ, QMAX, P_SHIFT,
            BLOCK_M, BLOCK_N, PROMOTE, PQ, PLEV, SMQ, PROW)

    l_safe = tl.where(l_i > 0, l_i, 1.0)
    out = acc / l_safe[:, None]
    if MODE == 1:
        out = out * _pow2(tl.maximum(tl.load(VS + pid_bh * svs_bh + offs_d), -126))[None, :]
    elif MODE == 2 or MODE == 3:
        out = out * tl.load(VS + pid_bh * svs_bh + offs_d)[None, :]
    elif MODE == 4:
        out = out * tl.load(VS)
    if MODE == 3 and ROTV:
        hv = tl.load(HV + offs_d[:, None] * HEAD_DIM + offs_d[None, :])  # symmetric: H = Hᵀ
        out = tl.dot(out, hv, input_precision="tf32x3") * rotv_scale
    o_ptrs = O + b * so_b + h * so_h + offs_m[:, None] * so_n + offs_d[None, :] * so_d
    tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=(offs_m < N_Q)[:, None])
    if WRITE_LSE:  # l_i counts P̃·2^P_SHIFT (every MODE; INT4 and NVFP4 have P_SHIFT 0)
        tl.store(LSE + pid_bh.to(tl.int64) * N_Q + offs_m, row_lse(m_i, l_i, P_SHIFT), mask=offs_m < N_Q)
    if MODE == 1:
        if GATED:
            tl.atomic_add(BAD + 3, tl.sum(n_bad, axis=0))
        else:
            tl.atomic_add(BAD, tl.sum(n_bad, axis=0))


@triton.jit
def draft_fwd(Q16, K16, V16, Q8, K8, V8T, QS8, KS8, VS8, Q4, K4, V4T, S4, VALID, IDX, CNT, PK, PV, O, LSE,
              R, S, W, N_PRE, sm_scale_log2, p8_shift_inv,
              HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr, P8_SHIFT: tl.constexpr, PROMOTE: tl.constexpr,
              NUM_STAGES: tl.constexpr, RNE_P: tl.constexpr = False, WRITE_LSE: tl.constexpr = False):
    """DraftAttention2, block-sparse and mixed precision: one program per (packed query region, b·h).

    Operands are packed region blocks of BLOCK slots (S = R·BLOCK per b·h, padding slots zero and marked 0
    in VALID): Q16/K16/V16 (B·H, S, D) 16-bit; Q8/K8 INT8 codes (B·H, S, D) with fp32 scales QS8 (one per
    region block, (B·H, R)) and KS8 (per slot, (B·H, S)), V8T FP8 E4M3 (B·H, D, S) with VS8 (B·H, D)
    per channel; Q4/K4 (B·H, S, D) and V4T (B·H, D, S) NVFP4 as E2M1·s_b in fp16 (exact) with the fp32
    outer scales S4 (B·H, 3) = (s_o(Q), s_o(K), s_o(V)). IDX (B·H, R, W) int32 lists this query region's
    retained key blocks, grouped by phase (NVFP4, INT8/FP8, 16-bit — anemoi's order) with CNT
    (B·H, R, 3) entries each. PK, PV (B·H, N_PRE, D): the prefix (text) keys, dense at 16 bit, last.
    Every phase is `_tile_loop` (`_tile_step`) of the shared core with PHASE=True, unpipelined (its 64×64
    tiles leave too little ALU work per MMA for PIPE to pay): one (m, ℓ, Õ) per row, normalised once
    (rows that kept nothing give 0). O (B·H, S, D) fp32, packed; WRITE_LSE: each row's log-sum-exp (`row_lse`;
    ℓ counts P̃ before quantization in every phase, as the engine's; −inf for rows that kept nothing) into LSE
    (B·H, S) fp32, packed. RNE_P: round P̃·448 onto E4M3 in fp32 before
    the FP8 cast (only under the CPU interpreter, whose cast is not RNE; on the GPU the cast is cvt.rn).
    """
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    offs_m = pid_m * BLOCK + tl.arange(0, BLOCK)
    offs_d = tl.arange(0, HEAD_DIM)
    rows = offs_m[:, None] * HEAD_DIM + offs_d[None, :]
    base = bh.to(tl.int64) * S * HEAD_DIM
    ones = tl.full((BLOCK,), 1.0, tl.float32)
    qm16 = tl.zeros((16, HEAD_DIM), tl.float32)
    m_i = tl.full((BLOCK,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK,), tl.float32)
    acc = tl.zeros((BLOCK, HEAD_DIM), tl.float32)
    n_bad = tl.zeros((), tl.int32)
    lists = IDX + (bh.to(tl.int64) * R + pid_m) * W
    cnt = CNT + (bh * R + pid_m) * 3
    n4 = tl.load(cnt)
    n8 = tl.load(cnt + 1)
    n16 = tl.load(cnt + 2)

    # phase 1: NVFP4 (MODE 4): QKᵀ and P̂·V̂ as exact fp16 MMAs, P̃ per 16 keys (s_o = 1)
    if n4 > 0:
        q = tl.load(Q4 + base + rows)
        c_row = ones * (tl.load(S4 + bh * 3) * tl.load(S4 + bh * 3 + 1) * sm_scale_log2)
        pvs = tl.zeros((1, HEAD_DIM), tl.float32) + tl.load(S4 + bh * 3 + 2)
        acc, m_i, l_i, n_bad = _tile_loop(
            acc, m_i, l_i, n_bad, q, K4 + base, HEAD_DIM, V4T + base + offs_d[:, None] * S, 1, offs_d, VALID, VALID,
            c_row, S, VALID, 0, qm16, 0.0, VALID, bh, 0, lists, n4, 1.0, pvs, 4, True, True, False, False, 0, 2, 6.0,
            0.0, BLOCK, BLOCK, False, False, 15, 0, False, True, False, True, False, NUM_STAGES)
    # phase 2: INT8 QKᵀ (per-block Q scale, per-slot K scale), FP8 P̃·V̂ (static 1/448, per-channel V)
    if n8 > 0:
        q = tl.load(Q8 + base + rows)
        c_row = ones * (tl.load(QS8 + bh * R + pid_m) * sm_scale_log2)
        pvs = (tl.load(VS8 + bh * HEAD_DIM + offs_d) * p8_shift_inv)[None, :]
        acc, m_i, l_i, n_bad = _tile_loop(
            acc, m_i, l_i, n_bad, q, K8 + base, HEAD_DIM, V8T + base + offs_d[:, None] * S, 1, offs_d, VALID,
            KS8 + bh.to(tl.int64) * S, c_row, S, VALID, 0, qm16, 0.0, VALID, bh, 0, lists + n4, n8, p8_shift_inv,
            pvs, 2, True, True, False, True, 0, 2, 6.0, P8_SHIFT, BLOCK, BLOCK, PROMOTE, False, 15, 0, False, True,
            RNE_P, True, False, NUM_STAGES)
    # phase 3: 16 bit (the caller's dtype), unquantized
    if n16 > 0:
        q = tl.load(Q16 + base + rows)
        c_row = ones * sm_scale_log2
        acc, m_i, l_i, n_bad = _tile_loop(
            acc, m_i, l_i, n_bad, q, K16 + base, HEAD_DIM, V16 + base + offs_d[:, None], HEAD_DIM, offs_d, VALID,
            VALID, c_row, S, VALID, 0, qm16, 0.0, VALID, bh, 0, lists + n4 + n8, n16, 1.0, 1.0, 0, True, True,
            False, False, 0, 2, 6.0, 0.0, BLOCK, BLOCK, False, False, 15, 0, False, True, False, True, False,
            NUM_STAGES)
    # prefix keys: dense 16 bit for every video query, outside the budget (ragged last tile masked)
    if N_PRE > 0:
        q = tl.load(Q16 + base + rows)
        c_row = ones * sm_scale_log2
        pbase = bh.to(tl.int64) * N_PRE * HEAD_DIM
        for start_n in range(0, N_PRE, BLOCK):
            acc, m_i, l_i, n_bad = _tile_step(
                acc, m_i, l_i, n_bad, q, PK + pbase, HEAD_DIM, PV + pbase + offs_d[:, None], HEAD_DIM, offs_d,
                start_n, VALID, VALID, c_row, N_PRE, VALID, 0, qm16, 0.0, 0, True, False, False, False, 0, 2,
                6.0, 0.0, BLOCK, BLOCK, False, False, 15, 0, False, 1.0, 1.0, True)

    l_safe = tl.where(l_i > 0, l_i, 1.0)
    out = tl.where(l_i[:, None] > 0, acc / l_safe[:, None], 0.0)
    tl.store(O + base + rows, out)
    if WRITE_LSE:  # every phase adds to ℓ in unshifted units (lsc)
        tl.store(LSE + bh.to(tl.int64) * S + offs_m, row_lse(m_i, l_i, 0.0))
