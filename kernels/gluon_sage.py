"""sage2-int8 as a warp-specialized Gluon kernel (Hopper): two consumer warpgroups, one TMA loader warp.

Why a second kernel for one recipe (results/kernels-h200.md, "Session 6"): Triton 3.6 waits for every wgmma group
right after issuing it, so inside a warpgroup QKᵀ, the softmax and P̃·V run one after another. ptxas keeps that
serial order inside a warpgroup in Gluon too, but two warpgroups with their own 64 query rows, sharing the K/Vᵀ
stages a loader warp fills by TMA, run out of phase: one's softmax runs while the other's MMAs do. The plain FP8
probe of that structure measured 1.39–1.41× cuDNN against 1.24–1.25× for the Triton kernel's plain core.

Numerics are `attn_fwd` MODE 2 with PROMOTE (the default): the same pre-pass operands (prepass.sage_prepass:
INT8 Q, K with fp32 per-token scales, Vᵀ E4M3 with per-channel scales), an exact INT8 QKᵀ (int32), logits
int32 → fp32 · k scale, running max in the log2 domain with q scale · sm_scale·log2 e, P̃·2^P_SHIFT = exp2(·) cast
to E4M3 (RNE), P̃·V as an FP8 MMA into a zeroed fp32 tile added to the rescaled accumulator (the per-tile
promotion), output / ℓ · V scale. Only fp32 rounding order may differ from `attn_fwd` (FMA contraction): tests
compare both with the reference engine (tests/test_kernels_attention.py).

Launch: `attention(..., config={"GLUON": True})` for sage2-int8 without a key padding mask, head_dim 64/128.
"""

from __future__ import annotations

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                               warpgroup_mma_wait)

BLOCK_N = 128  # the key tile (the recipe's P̃ tile is per key, so any tile works; 128 = the Triton kernel's)
ROWS = 64  # query rows per consumer warpgroup; a program covers 2·ROWS


@gluon.jit
def _loader(k_desc, v_desc, k_s, v_s, kready, vready, empty, k_row0, v_row, n_tiles):
    """One warp: K and Vᵀ tiles by TMA into the ring; a stage is refilled once both consumers released it.
    (Worker partitions take IR values only, so the sizes come from the buffers.)"""
    STAGES: gl.constexpr = k_s.shape[0]
    BN: gl.constexpr = k_s.shape[1]
    for t in range(n_tiles):
        s = t % STAGES
        # the ring's first pass needs no release: waiting on the parity before phase 0 passes at once
        mbarrier.wait(empty.index(s), ((t // STAGES) & 1) ^ 1, pred=t >= STAGES)
        mbarrier.expect(kready.index(s), k_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [k_row0 + t * BN, 0], kready.index(s), k_s.index(s))
        mbarrier.expect(vready.index(s), v_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(v_desc, [v_row, t * BN], vready.index(s), v_s.index(s))


@gluon.jit
def _consumer0(q_desc, q_s, qbar, k_s, v_s, kready, vready, empty, QS, KS, VS, O, q_row, m0, n_q, n_kv, n_tiles,
               c, so_n, P_SHIFT):
    _consumer(q_desc, q_s, qbar, k_s, v_s, kready, vready, empty, QS, KS, VS, O, q_row, m0, n_q, n_kv, n_tiles,
              c, so_n, P_SHIFT, 0)


@gluon.jit
def _consumer1(q_desc, q_s, qbar, k_s, v_s, kready, vready, empty, QS, KS, VS, O, q_row, m0, n_q, n_kv, n_tiles,
               c, so_n, P_SHIFT):
    _consumer(q_desc, q_s, qbar, k_s, v_s, kready, vready, empty, QS, KS, VS, O, q_row, m0, n_q, n_kv, n_tiles,
              c, so_n, P_SHIFT, 1)


@gluon.jit
def _tile(j, s_cur, acc, m_i, l_i, ks_next, c_row, qw, k_s, v_s, kready, vready, empty, KS, offs_k, offs_n0, n_kv,
          n_tiles, P_SHIFT, zero_s, zero_o, p_layout: gl.constexpr, col_s: gl.constexpr, row_o: gl.constexpr,
          MASKED: gl.constexpr):
    """Key tile j of one consumer: softmax of its logits s_cur, then QKᵀ(j+1) and P̃·V(j) issued, one wait."""
    STAGES: gl.constexpr = k_s.shape[0]
    BN: gl.constexpr = k_s.shape[1]
    st = j % STAGES
    nx = (j + 1) % STAGES
    ks = gl.convert_layout(ks_next, col_s)
    ks_next = gl.load(KS + offs_k + (j + 1) * BN, mask=offs_k + (j + 1) * BN < n_kv, other=0.0)
    # (the exact magic-number conversion bits(1.5·2^23 + s) − 1.5·2^23 instead of I2F measured no faster: call 8)
    qk = s_cur.to(gl.float32) * ks[None, :]
    if MASKED:
        qk = gl.where((j * BN + offs_n0 < n_kv)[None, :], qk, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(qk, axis=1) * c_row)
    if MASKED:
        m_use = gl.where(m_new == float("-inf"), 0.0, m_new)
    else:
        m_use = m_new
    alpha = gl.exp2(m_i - m_use)
    y = gl.exp2(qk * c_row[:, None] - (m_use - P_SHIFT)[:, None])  # P̃ · 2^P_SHIFT
    l_i = l_i * alpha + gl.sum(y, axis=1)
    p8 = gl.convert_layout(y.to(gl.float8e4nv), p_layout)
    has_next = j + 1 < n_tiles  # if not, the QKᵀ below reads a stale stage and its result is unused
    mbarrier.wait(kready.index(nx), ((j + 1) // STAGES) & 1, pred=has_next)
    s_tok = warpgroup_mma(qw, k_s.index(nx).permute((1, 0)), zero_s, use_acc=False, is_async=True)
    mbarrier.wait(vready.index(st), (j // STAGES) & 1)
    pv_tok = warpgroup_mma(p8, v_s.index(st).permute((1, 0)), zero_o, use_acc=False, is_async=True)
    s_cur, pv = warpgroup_mma_wait(0, deps=(s_tok, pv_tok))
    # the tile's FP8 product promoted into the rescaled fp32 accumulator (rescaled after the wait: fewer
    # registers live while the MMAs run)
    acc = acc * gl.convert_layout(alpha, row_o)[:, None] + pv
    mbarrier.arrive(empty.index(st))  # this warpgroup is done with tile j's stage
    return s_cur, acc, m_new, l_i, ks_next


@gluon.jit
def _consumer(q_desc, q_s, qbar, k_s, v_s, kready, vready, empty, QS, KS, VS, O, q_row, m0, n_q, n_kv, n_tiles,
              c, so_n, P_SHIFT, WG: gl.constexpr):
    """Rows m0 + 64·WG + [0, 64) against every key tile. Per tile j: softmax(j), then QKᵀ(j+1) and P̃·V(j)
    issued together, then one wait (the order ptxas keeps; the overlap is with the other warpgroup)."""
    BN: gl.constexpr = k_s.shape[1]
    D: gl.constexpr = k_s.shape[2]
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BN, 32])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, D, 32])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=4)
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    col_s: gl.constexpr = gl.SliceLayout(0, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)

    qw = q_s.index(WG)
    mbarrier.expect(qbar.index(WG), q_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [q_row + WG * 64, 0], qbar.index(WG), qw)
    offs_m = m0 + WG * 64 + gl.arange(0, 64, row_s)
    c_row = gl.load(QS + offs_m, mask=offs_m < n_q, other=0.0) * c  # q scale · sm_scale·log2 e
    m_i = gl.full([64], float("-inf"), gl.float32, row_s)
    l_i = gl.zeros([64], gl.float32, row_s)
    acc = gl.zeros([64, D], gl.float32, o_layout)
    zero_s = gl.zeros([64, BN], gl.int32, s_layout)
    zero_o = gl.zeros([64, D], gl.float32, o_layout)

    # the key scales of the next tile are loaded one iteration ahead (a load used at once stalls every tile),
    # one per thread (coalesced, one register), then spread onto the logits' columns when used
    ks_layout: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    offs_k = gl.arange(0, BN, ks_layout)
    offs_n0 = gl.arange(0, BN, col_s)
    ks_next = gl.load(KS + offs_k, mask=offs_k < n_kv, other=0.0)
    mbarrier.wait(qbar.index(WG), 0)
    mbarrier.wait(kready.index(0), 0)
    s_tok = warpgroup_mma(qw, k_s.index(0).permute((1, 0)), zero_s, use_acc=False, is_async=True)
    s_cur = warpgroup_mma_wait(0, deps=(s_tok,))
    # whole tiles unmasked, the ragged last one (if any) with its keys past n_kv dropped
    n_full = n_kv // BN
    for j in range(n_full):
        s_cur, acc, m_i, l_i, ks_next = _tile(j, s_cur, acc, m_i, l_i, ks_next, c_row, qw, k_s, v_s, kready, vready,
                                              empty, KS, offs_k, offs_n0, n_kv, n_tiles, P_SHIFT, zero_s, zero_o,
                                              p_layout, col_s, row_o, False)
    if n_full < n_tiles:
        s_cur, acc, m_i, l_i, ks_next = _tile(n_full, s_cur, acc, m_i, l_i, ks_next, c_row, qw, k_s, v_s, kready,
                                              vready, empty, KS, offs_k, offs_n0, n_kv, n_tiles, P_SHIFT, zero_s,
                                              zero_o, p_layout, col_s, row_o, True)

    l_safe = gl.where(l_i > 0, l_i, 1.0)
    offs_mo = m0 + WG * 64 + gl.arange(0, 64, row_o)
    offs_d = gl.arange(0, D, gl.SliceLayout(0, o_layout))
    vs = gl.load(VS + offs_d)
    out = acc / gl.convert_layout(l_safe, row_o)[:, None] * vs[None, :]
    ptrs = O + offs_mo[:, None] * so_n + offs_d[None, :]
    gl.store(ptrs, out.to(O.dtype.element_ty), mask=(offs_mo < n_q)[:, None])


# integer arguments equal to 1 would become constants, which worker partitions cannot take as arguments
@gluon.jit(do_not_specialize=["sqs_bh", "sks_bh", "svs_bh", "so_n", "H", "n_q", "n_kv", "q_rows_bh", "k_rows_bh"])
def sage_ws_fwd(q_desc, k_desc, v_desc, QS, KS, VS, O, sqs_bh, sks_bh, svs_bh, so_b, so_h, so_n, H,
                n_q, n_kv, q_rows_bh, k_rows_bh, c, P_SHIFT, STAGES: gl.constexpr, num_warps: gl.constexpr):
    """Grid (cdiv(n_q, 128), B·H). q_desc: INT8 Q as (B·H·q_rows_bh, D) in [64, D] blocks; k_desc: INT8 K
    (B·H·k_rows_bh, D) in [128, D]; v_desc: E4M3 Vᵀ (B·H·D, k_rows_bh) in [D, 128]. QS/KS fp32 per token,
    VS fp32 per channel (rows sqs_bh / sks_bh / svs_bh apart per b·h). O in the caller's layout (strides so_*;
    head_dim contiguous)."""
    pid_m = gl.program_id(0)
    bh = gl.program_id(1)
    D: gl.constexpr = k_desc.block_type.shape[1]
    BN: gl.constexpr = k_desc.block_type.shape[0]
    q_s = gl.allocate_shared_memory(gl.int8, [2, 64, D], q_desc.layout)
    k_s = gl.allocate_shared_memory(gl.int8, [STAGES, BN, D], k_desc.layout)
    v_s = gl.allocate_shared_memory(gl.float8e4nv, [STAGES, D, BN], v_desc.layout)
    qbar = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    kready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    vready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2):
        mbarrier.init(qbar.index(i), count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(kready.index(i), count=1)
        mbarrier.init(vready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)  # one release per consumer warpgroup
    fence_async_shared()  # the initialised barriers, visible to the TMA (async proxy)
    b = bh // H
    h = bh % H
    n_tiles = gl.cdiv(n_kv, BN)
    out = O + b.to(gl.int64) * so_b + h.to(gl.int64) * so_h
    args = (q_desc, q_s, qbar, k_s, v_s, kready, vready, empty, QS + bh.to(gl.int64) * sqs_bh,
            KS + bh.to(gl.int64) * sks_bh, VS + bh * svs_bh, out, bh * q_rows_bh + pid_m * 128, pid_m * 128, n_q,
            n_kv, n_tiles, c, so_n, P_SHIFT)
    gl.warp_specialize([
        (_consumer0, args),
        (_consumer1, args),
        (_loader, (k_desc, v_desc, k_s, v_s, kready, vready, empty, bh * k_rows_bh, bh * D, n_tiles)),
    ], [4, 1], [240, 24])


def descriptors(qq, kk, vv):
    """TMA descriptors of the sage2 pre-pass operands: qq, kk (B·H, N_pad, D) int8; vv (B·H, D, N_pad) E4M3."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    D = qq.shape[-1]
    q2, k2, v2 = qq.reshape(-1, D), kk.reshape(-1, D), vv.reshape(-1, vv.shape[-1])
    lay = gl.NVMMASharedLayout.get_default_for
    return (TensorDescriptor.from_tensor(q2, [ROWS, D], lay([ROWS, D], gl.int8)),
            TensorDescriptor.from_tensor(k2, [BLOCK_N, D], lay([BLOCK_N, D], gl.int8)),
            TensorDescriptor.from_tensor(v2, [D, BLOCK_N], lay([D, BLOCK_N], gl.float8e4nv)))


def launch(P, out, so, H, Nq, Nk, sm_scale_log2, stages: int = 2):
    """Run sage_ws_fwd on the pre-pass dict P of kernels.launch._prepare (MODE 2) into `out` (strides `so`
    (b, h, n, d) with d contiguous)."""
    if so[3] != 1:
        raise ValueError("the Gluon sage2 kernel writes outputs whose head_dim is contiguous")
    qd, kd, vd = descriptors(P["qq"], P["kk"], P["vv"])
    BH = P["qq"].shape[0]
    sage_ws_fwd[(triton.cdiv(Nq, 2 * ROWS), BH)](
        qd, kd, vd, P["qs"], P["ks"], P["vs"], out, P["sqs"], P["sks"], P["svs"], *so[:3], H, Nq, Nk,
        P["qq"].shape[1], P["kk"].shape[1], sm_scale_log2, P["p_shift"], STAGES=stages, num_warps=4)
    return out
