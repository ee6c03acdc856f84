"""Warp-specialized Gluon attention (Hopper) for the recipes whose operands are 8-bit: sage2-int8 (MODE 2) and
the MXFP4 family folded into E4M3 (MODE 1: mxattention, its ablations, mxfp4-ocp, mxfp4-tfs). Two consumer
warpgroups (three for sage2-int8 at head_dim 64: config CONSUMERS), one TMA loader warp.

Why a second kernel beside `_core.attn_fwd` (results/kernels-h200.md): Triton 3.6 waits for every
wgmma group right after issuing it, so inside a warpgroup QKᵀ, the softmax and P̃·V run one after another. ptxas
keeps that serial order inside a warpgroup in Gluon too, but two warpgroups with their own 64 query rows, sharing
the K/Vᵀ stages a loader warp fills by TMA, run out of phase: one's softmax runs while the other's MMAs do. The
plain FP8 probe of that structure measured 1.39–1.41× cuDNN against 1.24–1.25× for the Triton kernel's plain core.

Numerics are `attn_fwd`'s for the same MODE with PROMOTE (the default), on the same pre-pass operands; only fp32
rounding order may differ (FMA contraction, MODE 1's row sums added as a tree, P̂·V̂ summed over a tile's keys
in the operand's key order). Each key tile's FP8 P̂·V̂ product goes into a zeroed fp32 tile that is added to the
rescaled accumulator (the per-tile promotion).
- MODE 2 (prepass.sage_prepass): INT8 Q, K with fp32 per-token scales, Vᵀ E4M3 with per-channel scales; exact
  INT8 QKᵀ (int32) → fp32 · k scale, P̃·2^P_SHIFT = exp2(·) cast to E4M3 (RNE).
- MODE 3 (prepass.int4_prepass; the INT4 recipes' default kernel on Hopper): INT4 codes of Q,
  K (per-token scales) as E4M3 (QK_FP8: an exact FP8 QKᵀ with fp32 output) or int8, Vᵀ's (per-channel) in int8
  (an exact INT8 P̂·V̂); the ΔS table row of the program's q group comes by TMA with each K tile; P̃ codes
  RNE(PLEV·2^(qk − tile row max)) as `_core._tile_update`; Õ and ℓ kept in units of the last tile's P̃ scale, so
  the int32 product joins Õ by one FMA; a rotated V (ROTV) is undone after the kernel by `unrotate` (the Triton
  kernel does it in its epilogue). Offline (Triton 3.6, sm_90): 758 instructions per 64×128 tile and warpgroup with
  the defaults (884 before QK_FP8 and the one-FMA update), no spills (Triton's MODE 3 key loop: 959 for the same 64
  scores per thread).
- MODE 1 (prepass.mx_rows / mx_cols): Q, K E2M1·2^(e_b − R) in E4M3 with one exponent R per 128-token tile, Vᵀ
  folded per channel; P̃·2^8 quantized in-kernel per 32 keys with the recipe's scale rule (`_core.mx_exponent`,
  `_core.e2m1_round_bits`: exact), PNQ or direct placement, P̃ blocks E4M3 cannot hold counted into BAD.

Launch: the default of `attention(...)` (config GLUON) for those recipes on sm_90 without a key padding mask, with
promote=True, head_dim 64/128, and 8-bit operands (an MXFP4 pre-pass that falls back to bf16 operands for
exactness runs the Triton kernel). Measured against the Triton kernel in the same run (results/kernels-h200.md):
mxattention 1.04× / 1.10× cuDNN at wan-480p / 720p (Triton 0.94× / 0.98×), sage2-int8 1.24× / 1.29×
(Triton 1.11× / 1.14×).
"""

import functools

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                               warpgroup_mma_wait)

from triton.language.core import _aggregate as aggregate

from . import _launcher
from ._core import MODE_INT4, MODE_MX, MODE_SAGE, _pow2, e2m1_round_bits, int4_p_codes, mx_exponent, row_lse
from ._launcher import Launcher
from .unrotate import unrotate

BLOCK_N = 128  # the key tile: 128 = the Triton kernel's; MXFP4's P̃ blocks (32 keys) and K's exponent tiles fit it
ROWS = 64  # query rows per consumer warpgroup; each warpgroup's rows lie in one MXFP4 Q exponent tile (128 rows)
KS_LAYOUT = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=2)  # one key tile's fp32 scales


@gluon.jit
def _loader(k_desc, v_desc, ks_desc, ds_desc, k_s, v_s, ks_s, ds_s, kready, vready, empty, n_m, n_work, k_rows_bh,
            ds_rows_bh, n_tiles, WORK_LOOP: gl.constexpr):
    """One warp: K and Vᵀ tiles by TMA into the ring; a stage is refilled once both consumers released it.
    With sage2's per-token key scales (MODE 2: ks_s holds one 128-key row per stage) each tile's scales come
    into the K stage on K's barrier: the consumers read them from shared memory in their logits' column layout,
    with no store, barrier and load of their own (a register layout conversion through shared memory
    otherwise, two warpgroup barriers per tile). (Worker partitions take IR values only, so the sizes and
    that choice come from the buffers.) The INT4 mode's ΔS table row (ds_s, one 128-key row per stage) comes the
    same way. The ring runs on across the program's work tiles (as `_consumer` walks them): ring count
    r = (work tiles done) · n_tiles + t."""
    pid = gl.program_id(0)
    if WORK_LOOP:
        nprog = gl.num_programs(0)
        i = 0
        for w in range(pid, n_work, nprog):
            _load_work_tile(k_desc, v_desc, ks_desc, ds_desc, k_s, v_s, ks_s, ds_s, kready, vready, empty, w, i, n_m,
                            k_rows_bh, ds_rows_bh, n_tiles)
            i += 1
    else:
        _load_work_tile(k_desc, v_desc, ks_desc, ds_desc, k_s, v_s, ks_s, ds_s, kready, vready, empty, pid, 0, n_m,
                        k_rows_bh, ds_rows_bh, n_tiles)


@gluon.jit
def ring_acquire(empty, r, STAGES: gl.constexpr, base=0):
    """The loader's wait for the ring's r-th tile: its stage base + r % STAGES once every consumer released the
    stage's previous tile. The ring's first pass needs no release: waiting on the parity before phase 0 passes at
    once. Returns the stage."""
    s = base + r % STAGES
    mbarrier.wait(empty.index(s), ((r // STAGES) & 1) ^ 1, pred=r >= STAGES)
    return s


@gluon.jit
def _load_work_tile(k_desc, v_desc, ks_desc, ds_desc, k_s, v_s, ks_s, ds_s, kready, vready, empty, w, i, n_m,
                    k_rows_bh, ds_rows_bh, n_tiles):
    """The loader's part of work tile w, the program's i-th: its K, Vᵀ (and scale / ΔS) tiles into the ring."""
    STAGES: gl.constexpr = k_s.shape[0]
    BN: gl.constexpr = k_s.shape[1]
    D: gl.constexpr = k_s.shape[2]
    KS_TILES: gl.constexpr = ks_s.shape[0] == STAGES and ks_s.shape[2] == BN
    DS_TILES: gl.constexpr = ds_s.shape[0] == STAGES and ds_s.shape[2] == BN
    bh = w // n_m
    k_row0 = bh * k_rows_bh
    v_row = bh * D
    ks_row = bh
    ds_row = bh * ds_rows_bh + w % n_m
    for t in range(n_tiles):
        s = ring_acquire(empty, i * n_tiles + t, STAGES)
        if DS_TILES:
            mbarrier.expect(kready.index(s), k_desc.block_type.nbytes + ks_desc.block_type.nbytes
                            + ds_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(ks_desc, [ks_row, t * BN], kready.index(s), ks_s.index(s))
            tma.async_copy_global_to_shared(ds_desc, [ds_row, t * BN], kready.index(s), ds_s.index(s))
        elif KS_TILES:
            mbarrier.expect(kready.index(s), k_desc.block_type.nbytes + ks_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(ks_desc, [ks_row, t * BN], kready.index(s), ks_s.index(s))
        else:
            mbarrier.expect(kready.index(s), k_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [k_row0 + t * BN, 0], kready.index(s), k_s.index(s))
        mbarrier.expect(vready.index(s), v_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(v_desc, [v_row, t * BN], vready.index(s), v_s.index(s))


@aggregate
class Consts:
    """A consumer's compile-time constants, its warpgroup index WG among them (constexprs in a plain argument
    tuple reach warp-specialized partitions as runtime values; an aggregate's constexpr fields stay constexpr)."""
    WG: gl.constexpr
    MODE: gl.constexpr
    RULE: gl.constexpr
    FLQ: gl.constexpr
    QMAX: gl.constexpr
    PNQ: gl.constexpr
    DEFER: gl.constexpr
    EARLY: gl.constexpr
    PLEV: gl.constexpr
    SMQ: gl.constexpr
    WORK_LOOP: gl.constexpr
    WRITE_LSE: gl.constexpr
    TRACE: gl.constexpr

    @gluon.constexpr_function
    def __init__(self, WG, MODE, RULE, FLQ, QMAX, PNQ, DEFER, EARLY, PLEV, SMQ, WORK_LOOP, WRITE_LSE, TRACE):
        self.WG = gl.constexpr(WG)
        self.MODE = gl.constexpr(MODE)
        self.RULE = gl.constexpr(RULE)
        self.FLQ = gl.constexpr(FLQ)
        self.QMAX = gl.constexpr(QMAX)
        self.PNQ = gl.constexpr(PNQ)
        self.DEFER = gl.constexpr(DEFER)
        self.EARLY = gl.constexpr(EARLY)
        self.PLEV = gl.constexpr(PLEV)
        self.SMQ = gl.constexpr(SMQ)
        self.WORK_LOOP = gl.constexpr(WORK_LOOP)
        self.WRITE_LSE = gl.constexpr(WRITE_LSE)
        self.TRACE = gl.constexpr(TRACE)


@gluon.jit
def _consumer_partition(q_desc, q_s, qbar, k_s, v_s, kready, vready, empty, ks_s, ds_s, QS, KS, VS, O, BAD, LSE,
                        TR, sqs_bh, sks_bh, svs_bh, so_b, so_h, so_n, H, n_m, n_work, q_rows_bh, n_q, n_kv, n_tiles, c,
                        P_SHIFT, consts):
    """One consumer warpgroup as a partition: `_consumer` with the constants unpacked."""
    _consumer(q_desc, q_s, qbar, k_s, v_s, kready, vready, empty, ks_s, ds_s, QS, KS, VS, O, BAD, LSE, TR, sqs_bh,
              sks_bh, svs_bh, so_b, so_h, so_n, H, n_m, n_work, q_rows_bh, n_q, n_kv, n_tiles, c, P_SHIFT, consts.WG,
              consts.MODE, consts.RULE, consts.FLQ, consts.QMAX, consts.PNQ, consts.DEFER, consts.EARLY,
              consts.PLEV, consts.SMQ, consts.WORK_LOOP, consts.WRITE_LSE, consts.TRACE)


@gluon.jit
def _thread_groups(x):
    """A 64×BN accumulator tile as (64, BN/8, 4, 2): axis 2 is the lane of its quad that holds an element (columns
    8i + 2t + e are lane t's), so the other axes are each lane's own registers."""
    return gl.reshape(x, [x.shape[0], x.shape[1] // 8, 4, 2])


@gluon.jit
def _key_scales(KS, j, n_tiles, MODE: gl.constexpr, like, BN: gl.constexpr):
    """Key tile j's scales, loaded a tile ahead of their use (a load used at once stalls every tile). MODE 1: its K
    exponent R_j (a scalar); MODE 2: the scales of its 4 per-thread key groups (group t's is token 2t's of the
    per-token array), one per lane of a quad, in `like`'s layout; otherwise 0."""
    if MODE == 1:
        return gl.load(KS + j, mask=j < n_tiles, other=0)
    elif MODE == 2:
        return gl.load(KS + j * BN + 2 * gl.arange(0, 4, like.type.layout), mask=j < n_tiles, other=1.0)
    else:
        return 0


@gluon.constexpr_function
def _quad_layout(M, NB):
    """(row, block, quad lane) of a 64×128 logits tile: rows as in `_block_layout`, the block in registers, the
    quad lane in lane bits 0–1. A reduction over the last axis is a butterfly over the quad."""
    assert M == 64 and NB == 4, "the quad layout assumes 64 rows, 4 warps and 128-key tiles"
    return gl.DistributedLinearLayout(reg_bases=[[8, 0, 0], [0, 1, 0], [0, 2, 0]],
                                      lane_bases=[[0, 0, 1], [0, 0, 2], [1, 0, 0], [2, 0, 0], [4, 0, 0]],
                                      warp_bases=[[16, 0, 0], [32, 0, 0]], block_bases=[], shape=[M, NB, NB])


@gluon.jit
def _diagonal(M: gl.constexpr, NB: gl.constexpr):
    """(1, NB, NB) in `_quad_layout`: True where the block index equals the quad lane."""
    q3: gl.constexpr = _quad_layout(M, NB)
    blk = gl.arange(0, NB, gl.SliceLayout(0, gl.SliceLayout(2, q3)))
    lane = gl.arange(0, NB, gl.SliceLayout(0, gl.SliceLayout(1, q3)))
    return blk[None, :, None] == lane[None, None, :]


@gluon.jit
def _to_quad(v, like: gl.constexpr):
    """v (row, block) with one element per thread (`_block_layout`) onto every lane of its quad, in `like`'s
    layout (the block maxima's): lane b of the quad holds block b, so selecting it on the diagonal of a
    (row, block, lane) grid and OR-reducing over the lanes is a butterfly (shuffles), with no shared memory and
    no warpgroup barrier. v is int32 (bit patterns); zero is the OR identity."""
    M: gl.constexpr = v.shape[0]
    NB: gl.constexpr = v.shape[1]
    q3: gl.constexpr = _quad_layout(M, NB)
    grid = gl.expand_dims(gl.convert_layout(v, gl.SliceLayout(1, q3)), 1)  # (row, 1, lane): lane's own block
    return gl.convert_layout(gl.reduce(gl.where(_diagonal(M, NB), grid, 0), 2, _or), like)


@gluon.jit
def _own_block(v):
    """v (row, block), replicated over each quad (the block maxima's layout) -> one element per thread
    (`_block_layout`): lane b of the quad keeps block b. A selection among the thread's own registers on the
    diagonal of a (row, block, lane) grid (convert_layout would go through shared memory and a barrier)."""
    M: gl.constexpr = v.shape[0]
    NB: gl.constexpr = v.shape[1]
    q3: gl.constexpr = _quad_layout(M, NB)
    grid = gl.expand_dims(gl.convert_layout(v, gl.SliceLayout(2, q3)), 2)  # (row, block, 1)
    return gl.convert_layout(gl.max(gl.where(_diagonal(M, NB), grid, float("-inf")), axis=1), _block_layout(M, NB))


@gluon.jit
def _or(a, b):
    return a | b


@gluon.constexpr_function
def _block_layout(M, NB):
    """The (row, 32-key block) grid of a 64×128 logits tile with one element per thread: rows as the wgmma
    accumulator lays them out (register bit +8, lane bits 2–4, warps +16), the block in lane bits 0–1, i.e. the
    quad of lanes that shares a row each takes one of its four blocks."""
    assert M == 64 and NB == 4, "the block layout assumes 64 rows, 4 warps and 128-key tiles"
    return gl.DistributedLinearLayout(reg_bases=[[8, 0]], lane_bases=[[0, 1], [0, 2], [1, 0], [2, 0], [4, 0]],
                                      warp_bases=[[16, 0], [32, 0]], block_bases=[], shape=[M, NB])


@gluon.jit
def _mx_p(qk, bmax, cj, m_use, P_SHIFT, n_bad, RULE: gl.constexpr, FLQ: gl.constexpr, QMAX: gl.constexpr):
    """MXFP4 P̃ of one tile (MODE 1), as `_core._tile_update`: y = P̃·2^P_SHIFT, its 32-key block maxima from the
    logits' block maxima bmax (1/32 of the work), the block exponents under the rule, RNE onto E2M1·2^kb.
    The per-block work runs once per block, not once per lane of the quad that holds the block's row (the
    reduction leaves bmax replicated there): in `_block_layout`, then the bits of 2^kb go back to the quad by
    shuffles. n_bad counts per (row, block) in that layout. Returns (p, y, n_bad)."""
    M: gl.constexpr = qk.shape[0]
    BN: gl.constexpr = qk.shape[1]
    s_layout: gl.constexpr = qk.type.layout
    one: gl.constexpr = n_bad.type.layout
    brow: gl.constexpr = gl.SliceLayout(1, one)
    mb = m_use - P_SHIFT
    y = gl.exp2(qk * cj[:, None] - mb[:, None])
    bm = _own_block(bmax)  # each lane keeps its own block's maximum (no data moves)
    cjb = gl.convert_layout(cj, brow)
    ymax = gl.exp2(bm * cjb[:, None] - gl.convert_layout(mb, brow)[:, None])
    # the block holding the row maximum has P̃ = 1 exactly in the reference: pin it (fp32 exp2 of an FMA residual
    # can land a hair below 2^P_SHIFT and flip floor(log2), the OCP rule)
    top = _pow2(P_SHIFT.to(gl.int32))  # 2^P_SHIFT exactly (P_SHIFT = 8 for MXFP4)
    ymax = gl.where(bm * cjb[:, None] >= gl.convert_layout(m_use, brow)[:, None], top, ymax)
    kb = mx_exponent(ymax, RULE, FLQ, QMAX, True)  # the Triton helpers run under Gluon too (elementwise ops)
    n_bad += ((kb < -8) & (ymax > 0)).to(gl.int32)
    # back to every lane of the quad (the bits of 2^kb; 6·2^kb from them there), then broadcast onto the tile
    # through the 3-D layout bmax came from
    quad: gl.constexpr = bmax.type.layout
    kbits = _to_quad((kb + 127) << 23, quad)
    satb = ((kbits + (2 << 23)) | 0x400000).to(gl.float32, bitcast=True)  # 6·2^kb = 1.5·2^(kb+2)
    blk: gl.constexpr = bmax.type.layout.parent
    kbits = gl.convert_layout(gl.reshape(gl.expand_dims(kbits, 2) + gl.zeros([M, BN // 32, 32], gl.int32, blk),
                                         [M, BN]), s_layout)
    satb = gl.convert_layout(gl.reshape(gl.expand_dims(satb, 2) + gl.zeros([M, BN // 32, 32], gl.float32, blk),
                                        [M, BN]), s_layout)
    p = e2m1_round_bits(y, kbits, satb)  # RNE onto E2M1·2^kb, saturated at 6·2^kb
    return p, y, n_bad


@gluon.jit
def row_sum_tree(x):
    """Row sums of a 64×N wgmma-layout tile (N a multiple of 32) as a short tree instead of one (N/4 − 1)-deep
    chain of dependent adds per row: a thread's N/4 values of a row are columns 32b + 8j + 2q + e (q its lane in
    the quad), so the adds run over e, then j, then b (in-thread), then the quad (shuffles). Same count; depth
    1 + 3 + 3 + 2 at N = 128."""
    M: gl.constexpr = x.shape[0]
    t = gl.sum(gl.reshape(x, [M, x.shape[1] // 32, 4, 4, 2]), axis=4)  # (row, b, j, q)
    t = gl.sum(t, axis=2)  # (row, b, q)
    t = gl.sum(t, axis=1)  # (row, q)
    row: gl.constexpr = gl.SliceLayout(1, x.type.layout)
    return gl.convert_layout(gl.sum(t, axis=1), row)  # the same registers and lanes: no data moves


@gluon.jit
def _as_operand(x, p_layout: gl.constexpr):
    """P̂ (64×128, the QKᵀ accumulator's layout) as the A operand of P̂·V̂, with no data moving between threads:
    a thread's accumulator holds keys 8a + 2q + e (+16h, +32c) of its rows, the 8-bit operand wants 4q + i there,
    so key 8a + 2q + e becomes operand column 4q + 2a + e (swap the a and q index bits). Vᵀ is stored with its
    keys in that order (`prepass.operand_key`), so P̂·V̂ is the same sum in another order. Without it the
    conversion is 16 SEL + 16 SHFL + 16 PRMT per thread and tile (offline SASS).

    x: the 8-bit codes, or fp32 values, rounded here to E4M3 (RNE, saturating) after the reordering, four keys
    of an operand register per asm block (two cvt.rn.satfinite.e4m3x2 and their merge): ptxas then writes the
    register's two halves with two F2FP, where converting before the reordering took a PRMT per register to
    merge them (16 of 599 key-loop instructions per tile for sage2-int8, offline SASS)."""
    M: gl.constexpr = x.shape[0]
    BN: gl.constexpr = x.shape[1]
    t = gl.permute(gl.reshape(x, [M, BN // 16, 2, 4, 2]), [0, 1, 3, 2, 4])  # (row, 16h+32c, q, a, e)
    t = gl.convert_layout(gl.reshape(t, [M, BN]), p_layout)
    if x.dtype == gl.float32:
        # PTX's e4m3x2 conversion puts its first source in the upper byte: element 0 is the lowest byte
        t = gl.inline_asm_elementwise(
            "{ .reg .b16 lo, hi; cvt.rn.satfinite.e4m3x2.f32 lo, $2, $1; cvt.rn.satfinite.e4m3x2.f32 hi, $4, $3; "
            "mov.b32 $0, {lo, hi}; }", "=r,r,r,r,r", [t], dtype=gl.float8e4nv, is_pure=True, pack=4)
    return t


@gluon.jit
def _tile(j, r, s_cur, acc, m_i, l_i, t_i, n_bad, ks_next, c_row, qw, k_s, v_s, kready, vready, empty, ks_s, ds_s, KS,
          offs_n0, n_kv, n_tiles, P_SHIFT, ds_scale, zero_s, zero_o, p_layout: gl.constexpr,
          col_s: gl.constexpr, row_o: gl.constexpr, MASKED: gl.constexpr, NEXT: gl.constexpr, MODE: gl.constexpr,
          RULE: gl.constexpr, FLQ: gl.constexpr, QMAX: gl.constexpr, PNQ: gl.constexpr, DEFER: gl.constexpr,
          EARLY: gl.constexpr, PLEV: gl.constexpr, SMQ: gl.constexpr):
    """Key tile j of one consumer: softmax of its logits s_cur, then QKᵀ(j+1) (if NEXT: not for the last tile)
    and P̃·V(j) issued, one wait. EARLY: QKᵀ(j+1) issued before the softmax instead, so that it runs during it
    (FlashAttention-3's intra-warpgroup overlap; one more 64×BN accumulator live during the softmax).
    MODE 3 keeps Õ and ℓ in units of its last tile's P̃ scale (t_i: that tile's reference exponent, see below)."""
    STAGES: gl.constexpr = k_s.shape[0]
    BN: gl.constexpr = k_s.shape[1]
    st = r % STAGES  # r: the ring's tile count (key tiles of this program's earlier work tiles included)
    nx = (r + 1) % STAGES
    if MODE == 2:
        # the logits as INT8 products; the key scales (one per lane of a quad: SageAttention2's per-thread groups)
        # join q's in the exp2 argument below, one multiply per row and lane instead of one per logit
        # (the exact magic-number conversion bits(1.5·2^23 + s) − 1.5·2^23 instead of I2F measured no faster)
        qk = s_cur.to(gl.float32)
        ks_cur = ks_next
    elif MODE == 3:
        # INT4: the logits in natural units here (c_row: q's scales), plus the Q-smoothing term ΔS from the
        # pre-pass table (SMQ 2) in the same FMA; sm_scale·log2 e (ds_scale) goes into the exp2 argument's FMA
        # (`int4_p_codes`): no per-column multiply of the table row, no separate subtraction of the row maximum
        qk = s_cur.to(gl.float32) * ks_s.index(st).reshape([BN]).load(col_s)[None, :]
        if SMQ == 2:
            qk = gl.fma(qk, c_row[:, None], ds_s.index(st).reshape([BN]).load(col_s)[None, :])
        else:
            qk = qk * c_row[:, None]
        cj = c_row
    else:
        qk = s_cur
        cj = c_row * _pow2(gl.maximum(ks_next, -126))  # q's and key tile j's exponents · sm_scale·log2 e
    ks_next = _key_scales(KS, j + 1, n_tiles, MODE, ks_next, BN)
    if EARLY:
        if DEFER:
            mbarrier.arrive(empty.index((r + STAGES - 1) % STAGES), pred=r > 0)  # as below
        if NEXT:
            mbarrier.wait(kready.index(nx), ((r + 1) // STAGES) & 1)
            s_tok = warpgroup_mma(qw, k_s.index(nx).permute((1, 0)), zero_s, use_acc=False, is_async=True)
    if MASKED:
        qk = gl.where((j * BN + offs_n0 < n_kv)[None, :], qk, float("-inf"))
    if MODE == 2:
        # each lane's maximum of its own logits, scaled, then the row's over the quad
        q4 = _thread_groups(qk)
        gmax = gl.max(gl.max(q4, axis=3), axis=1)  # (64, 4): row, lane
        sc = gl.convert_layout(c_row, gl.SliceLayout(1, gmax.type.layout))[:, None] * ks_cur[None, :]
        rmax = gl.convert_layout(gl.max(gmax * sc, axis=1), m_i.type.layout)  # in the log2 domain
    elif MODE == 3:
        rmax = gl.max(qk, axis=1)
    else:
        # the 32-key block maxima first, the row maximum from them (1/32 of the extra work)
        bmax = gl.max(gl.reshape(qk, [qk.shape[0], BN // 32, 32]), axis=2)
        rmax = gl.convert_layout(gl.max(bmax, axis=1), m_i.type.layout)
    if MODE == 3:
        m_new = gl.maximum(m_i, rmax * ds_scale)  # (ds_scale = sm_scale·log2 e: the log2 domain)
    elif MODE == 2:
        m_new = gl.maximum(m_i, rmax)
    else:
        m_new = gl.maximum(m_i, rmax * cj)
    if MASKED:
        m_use = gl.where(m_new == float("-inf"), 0.0, m_new)
    else:
        m_use = m_new
    if MODE == 3:
        # Õ and ℓ in units of this tile's P̃ scale 2^t_new / PLEV, t_new = the tile's row maximum (log2 domain):
        # the codes' own unit, so the tile's exact product joins Õ by one FMA, Õ·β + P̂·V̂ with β = 2^(t_i − t_new)
        # (the running maximum cancels), instead of a multiply by its scale and a rescale. A tile more than 2^96
        # below the running maximum (whose weights are then < 2^−96 of the row's largest) is taken at that floor
        # instead, so that Õ / 2^t stays finite (|Õ| <= 2^21 codes · 2^(m − t)); it is overstated by less than
        # 2^−96 · 128·15 of ℓ
        t_new = gl.maximum(rmax * ds_scale, m_use - 96.0)
        alpha = gl.exp2(t_i - t_new)  # β (0 on the first tile: t_i = −inf)
        t_i = t_new
        e, tm = int4_p_codes(qk, rmax, PLEV, MASKED, ds_scale)  # as the Triton kernel's codes
        if PNQ:
            l_i = l_i * alpha + gl.sum(tm - 12582912.0, axis=1)
        else:
            l_i = l_i * alpha + gl.sum(e, axis=1) * PLEV
        p8 = _as_operand(tm.to(gl.int32, bitcast=True).to(gl.int8), p_layout)  # the low byte is the code
    else:
        alpha = gl.exp2(m_i - m_use)
        if MODE == 2:
            # P̃ · 2^P_SHIFT = exp2(s · (q scale · key scale · sm_scale·log2 e) − (m − P_SHIFT))
            mm = gl.convert_layout(m_use - P_SHIFT, gl.SliceLayout(1, gmax.type.layout))
            y4 = gl.exp2(q4 * gl.expand_dims(gl.expand_dims(sc, 1), 3)
                         - gl.expand_dims(gl.expand_dims(gl.expand_dims(mm, 1), 1), 3))
            p = gl.reshape(y4, [qk.shape[0], BN])
        else:
            p, y, n_bad = _mx_p(qk, bmax, cj, m_use, P_SHIFT, n_bad, RULE, FLQ, QMAX)
        if PNQ:
            l_i = l_i * alpha + row_sum_tree(p)
        elif MODE == 1:
            l_i = l_i * alpha + row_sum_tree(y)
        elif MODE == 2:
            l_i = l_i * alpha + gl.convert_layout(gl.sum(gl.sum(gl.sum(y4, axis=3), axis=1), axis=1),
                                                  m_i.type.layout)
        else:
            l_i = l_i * alpha + gl.sum(y, axis=1)
        if MODE == 2 or k_s.shape[2] == 64:
            p8 = _as_operand(p, p_layout)  # rounded to E4M3 there
        else:
            # MXFP4 at head_dim 128: rounded before the reordering (5-6 % faster there for mxattention; the
            # rounding after it, 2-3 % faster at 64, kernel alone, benchmarks/kernel_ab.py)
            p8 = _as_operand(p.to(gl.float8e4nv), p_layout)
    if DEFER and not EARLY:
        # tile j−1's stage, free since the last tile's wait, released here rather than at that tile's end: the
        # release's warpgroup barrier then falls where this tile's waits need one anyway (2 barriers per tile
        # instead of 3 in sage2's offline SASS); needs STAGES >= 3 to keep the loader a tile ahead
        mbarrier.arrive(empty.index((r + STAGES - 1) % STAGES), pred=r > 0)
    # NEXT is a constexpr rather than a predicate on the wait: a predicated mbarrier wait costs a warpgroup
    # bar.sync per tile (offline PTX)
    if NEXT and not EARLY:
        mbarrier.wait(kready.index(nx), ((r + 1) // STAGES) & 1)
        s_tok = warpgroup_mma(qw, k_s.index(nx).permute((1, 0)), zero_s, use_acc=False, is_async=True)
    mbarrier.wait(vready.index(st), (r // STAGES) & 1)
    pv_tok = warpgroup_mma(p8, v_s.index(st).permute((1, 0)), zero_o, use_acc=False, is_async=True)
    if NEXT:
        s_cur, pv = warpgroup_mma_wait(0, deps=(s_tok, pv_tok))
    else:
        pv = warpgroup_mma_wait(0, deps=(pv_tok,))
    # the tile's FP8 product promoted into the rescaled fp32 accumulator (rescaled after the wait: fewer
    # registers live while the MMAs run)
    if MODE == 3:
        # the exact INT8 product (|Σ| <= 128·15·7), already in the accumulator's unit (above)
        acc = acc * gl.convert_layout(alpha, row_o)[:, None] + pv.to(gl.float32)
    else:
        acc = acc * gl.convert_layout(alpha, row_o)[:, None] + pv
    if not DEFER:
        mbarrier.arrive(empty.index(st))  # this warpgroup is done with tile j's stage
    return s_cur, acc, m_new, l_i, t_i, n_bad, ks_next


@gluon.jit
def _load_q(q_desc, qbar, qw, w, n_m, q_rows_bh, NWG: gl.constexpr, WG: gl.constexpr, pred):
    """This warpgroup's 64 Q rows of work tile w (query tile w % n_m of b·h w // n_m) into qw by TMA, on its Q
    barrier (if pred)."""
    mbarrier.expect(qbar.index(WG), q_desc.block_type.nbytes, pred=pred)
    tma.async_copy_global_to_shared(q_desc, [(w // n_m) * q_rows_bh + (w % n_m) * (64 * NWG) + WG * 64, 0],
                                    qbar.index(WG), qw, pred=pred)


TRACE_SLOTS = 8  # int64 slots per (work tile, warpgroup) of a traced launch (`_trace_point`)


def work_tiles(n_q: int, n_bh: int, consumers: int) -> int:
    """The work tiles (= programs) of a launch: 64·consumers query rows of one b·h each."""
    return triton.cdiv(n_q, consumers * ROWS) * n_bh


@gluon.jit
def _trace_point(TR, w, rows, WG: gl.constexpr, NWG: gl.constexpr, POINT: gl.constexpr):
    """Timeline instrumentation (TRACE launches only; compiled out otherwise): this warpgroup's SM clock at
    point POINT of work tile w, into TR[(w·NWG + WG)·8 + slot], written by the thread holding row 0 of `rows`
    (a 64-row tensor of the warpgroup). Points: 0 the work tile's start (also its SM id into slot 0 and the
    global timer into slot 1; the clock into slot 2), 1 its first QKᵀ waited for (slot 3), 2 its key loop done
    (slot 4), 3 its output stored (slot 5; the global timer into slot 6). The clock (%clock64) counts this SM's
    cycles, exact within one SM; the global timer (%globaltimer, ns) lines SMs up."""
    base = TR + (w.to(gl.int64) * NWG + WG) * 8
    first = rows == gl.min(rows, axis=0)
    clock = gl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l,r", [rows], dtype=gl.int64, is_pure=False,
                                      pack=1)
    if POINT == 0:
        sm = gl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r,r", [rows], dtype=gl.int32, is_pure=False, pack=1)
        gl.store(base + rows * 0, sm.to(gl.int64), mask=first)
        gtime = gl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r", [rows], dtype=gl.int64,
                                          is_pure=False, pack=1)
        gl.store(base + 1 + rows * 0, gtime, mask=first)
    gl.store(base + (2 + POINT) + rows * 0, clock, mask=first)
    if POINT == 3:
        gtime = gl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r", [rows], dtype=gl.int64,
                                          is_pure=False, pack=1)
        gl.store(base + 6 + rows * 0, gtime, mask=first)


@gluon.constexpr_function
def acc_layout(N, K=32):
    """A 64×N wgmma accumulator's register layout (one warpgroup: the logits for N = BLOCK_N, Õ for N = D) for
    MMAs with K-steps of K (32: 8-bit operands, 16: 16-bit; the register layout is the same)."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, N, K])


@gluon.jit
def _work_tile(w, i, nprog, n_work, q_desc, qw, qbar, k_s, v_s, kready, vready, empty, ks_s, ds_s, QS, KS, VS, O, BAD,
               LSE, TR, sqs_bh, sks_bh, svs_bh, so_b, so_h, so_n, H, n_m, q_rows_bh, n_q, n_kv, n_tiles, c, P_SHIFT,
               zero_s, zero_o, offs_n0, offs_d, WG: gl.constexpr, MODE: gl.constexpr, RULE: gl.constexpr,
               FLQ: gl.constexpr, QMAX: gl.constexpr, PNQ: gl.constexpr, DEFER: gl.constexpr, EARLY: gl.constexpr,
               PLEV: gl.constexpr, SMQ: gl.constexpr, WORK_LOOP: gl.constexpr, WRITE_LSE: gl.constexpr,
               TRACE: gl.constexpr):
    """Work tile w (query tile w % n_m of b·h w // n_m), the program's i-th: this warpgroup's 64 rows against
    every key tile, then its output. The ring's count starts at i·n_tiles. WORK_LOOP: more may follow, so the
    next one's Q load is issued before the epilogue."""
    BN: gl.constexpr = k_s.shape[1]
    D: gl.constexpr = k_s.shape[2]
    NWG: gl.constexpr = qbar.shape[0]
    s_layout: gl.constexpr = acc_layout(BN)
    o_layout: gl.constexpr = acc_layout(D)
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=4)
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    col_s: gl.constexpr = gl.SliceLayout(0, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    pid_m = w % n_m
    bh = w // n_m
    m0 = pid_m * (64 * NWG)
    qs_base = QS + bh.to(gl.int64) * sqs_bh
    ks_base = KS + bh.to(gl.int64) * sks_bh
    offs_m = m0 + WG * 64 + gl.arange(0, 64, row_s)
    if TRACE:
        _trace_point(TR, w, offs_m, WG, NWG, 0)
    if MODE == 2:
        c_row = gl.load(qs_base + offs_m, mask=offs_m < n_q, other=0.0) * c  # q scale · sm_scale·log2 e
    elif MODE == 3:
        c_row = gl.load(qs_base + offs_m, mask=offs_m < n_q, other=0.0)  # q scale (c: in the exp2 argument)
    else:
        # this warpgroup's 64 rows lie in one Q exponent tile (128 rows); past the last tile: unused rows
        qt = (m0 + WG * 64) // 128
        rq = gl.load(qs_base + qt, mask=qt * 128 < n_q, other=0)
        c_row = gl.full([64], 1.0, gl.float32, row_s) * (c * _pow2(gl.maximum(rq, -126)))
    m_i = gl.full([64], float("-inf"), gl.float32, row_s)
    l_i = gl.zeros([64], gl.float32, row_s)
    t_i = gl.full([64], float("-inf"), gl.float32, row_s)  # MODE 3: the last tile's reference exponent
    # MODE 1: P̃ blocks E4M3 cannot hold exactly, per (row, 32-key block)
    n_bad = gl.zeros([64, BN // 32], gl.int32, _block_layout(64, BN // 32))
    acc = gl.zeros([64, D], gl.float32, o_layout)
    g0 = i * n_tiles  # the ring's count at this work tile's first key tile
    if MODE == 2:
        # a (4,) tensor in the layout of the per-lane key scales (the layout is what `_key_scales` takes from it)
        ks_next = gl.max(gl.max(gl.max(_thread_groups(zero_s), axis=3), axis=1), axis=0)
    else:
        ks_next = 0
    ks_next = _key_scales(ks_base, 0, n_tiles, MODE, ks_next, BN)
    mbarrier.wait(qbar.index(WG), i & 1)
    mbarrier.wait(kready.index(g0 % k_s.shape[0]), (g0 // k_s.shape[0]) & 1)
    s_tok = warpgroup_mma(qw, k_s.index(g0 % k_s.shape[0]).permute((1, 0)), zero_s, use_acc=False,
                          is_async=True)
    s_cur = warpgroup_mma_wait(0, deps=(s_tok,))
    if TRACE:
        _trace_point(TR, w, offs_m, WG, NWG, 1)
    # every tile but the last is whole and has a next one; the last is masked (keys past n_kv dropped: a no-op
    # on a whole tile, whose rows all have keys)
    for j in range(n_tiles - 1):
        s_cur, acc, m_i, l_i, t_i, n_bad, ks_next = _tile(
            j, g0 + j, s_cur, acc, m_i, l_i, t_i, n_bad, ks_next, c_row, qw, k_s, v_s, kready, vready, empty, ks_s,
            ds_s, ks_base, offs_n0, n_kv, n_tiles, P_SHIFT, c, zero_s, zero_o, p_layout,
            col_s, row_o, False, True, MODE, RULE, FLQ, QMAX, PNQ, DEFER, EARLY, PLEV, SMQ)
    s_cur, acc, m_i, l_i, t_i, n_bad, ks_next = _tile(
        n_tiles - 1, g0 + n_tiles - 1, s_cur, acc, m_i, l_i, t_i, n_bad, ks_next, c_row, qw, k_s, v_s, kready,
        vready, empty, ks_s, ds_s, ks_base, offs_n0, n_kv, n_tiles, P_SHIFT, c, zero_s, zero_o,
        p_layout, col_s, row_o, True, False, MODE, RULE, FLQ, QMAX, PNQ, DEFER, EARLY, PLEV, SMQ)
    if TRACE:
        _trace_point(TR, w, offs_m, WG, NWG, 2)
    if WORK_LOOP:
        # Q's buffer is free (this tile's QKᵀ are all waited for): the next work tile's Q, under the epilogue
        wn = w + nprog
        more = wn < n_work
        _load_q(q_desc, qbar, qw, wn, n_m, q_rows_bh, NWG, WG, more)

    l_safe = gl.where(l_i > 0, l_i, 1.0)
    offs_mo = m0 + WG * 64 + gl.arange(0, 64, row_o)
    if MODE == 2:
        vs = gl.load(VS + bh * (svs_bh // 8 * 8) + offs_d)  # a multiple of 8 (`launch`): 8-byte loads
    elif MODE == 3:
        vs = gl.load(VS + bh * svs_bh + offs_d)
    else:
        vs = _pow2(gl.maximum(gl.load(VS + bh * svs_bh + offs_d), -126))
        bad_rows = gl.convert_layout(gl.sum(n_bad, axis=1), row_s)
        gl.atomic_add(BAD, gl.sum(gl.where(offs_m < n_q, bad_rows, 0), axis=0))
    out = acc / gl.convert_layout(l_safe, row_o)[:, None] * vs[None, :]
    b = bh // H
    h = bh % H
    if MODE == 2:
        # sage2-int8 stores from rows of 8 contiguous elements per thread (16-byte stores; the strides are
        # multiples of 8, `launch`) rather than from the accumulator's pairs (2-byte stores: the strides' alignment
        # is unknown to the compiler), the layout changed through shared memory once per work tile. The epilogue
        # took 5 µs of a 94 µs work tile at short before (benchmarks/work_tile_timeline.py); the MXFP4 and INT4
        # kernels measured slower with these stores and keep theirs (kernels/README.md, "Tried and lost")
        st_layout: gl.constexpr = gl.BlockedLayout([1, 8], [256 // D, D // 8], [4, 1], [1, 0])
        o_st = gl.convert_layout(out.to(O.dtype.element_ty), st_layout)
        rows = m0 + WG * 64 + gl.arange(0, 64, gl.SliceLayout(1, st_layout))
        cols = gl.arange(0, D, gl.SliceLayout(0, st_layout))
        ptrs = (O + b.to(gl.int64) * (so_b // 8 * 8) + h.to(gl.int64) * (so_h // 8 * 8)
                + rows[:, None] * (so_n // 8 * 8) + cols[None, :])
        gl.store(ptrs, o_st, mask=(rows < n_q)[:, None])
    else:
        ptrs = O + b.to(gl.int64) * so_b + h.to(gl.int64) * so_h + offs_mo[:, None] * so_n + offs_d[None, :]
        gl.store(ptrs, out.to(O.dtype.element_ty), mask=(offs_mo < n_q)[:, None])
    if WRITE_LSE:
        if MODE == 3:
            lse = row_lse(t_i, l_i / PLEV, 0.0)  # ℓ in units of the last tile's P̃ scale 2^t_i / PLEV (`_tile`)
        else:
            lse = row_lse(m_i, l_i, P_SHIFT)  # ℓ counts P̃·2^P_SHIFT
        gl.store(LSE + bh.to(gl.int64) * n_q + offs_m, lse, mask=offs_m < n_q)
    if TRACE:
        _trace_point(TR, w, offs_m, WG, NWG, 3)


@gluon.jit
def _consumer(q_desc, q_s, qbar, k_s, v_s, kready, vready, empty, ks_s, ds_s, QS, KS, VS, O, BAD, LSE, TR, sqs_bh,
              sks_bh, svs_bh, so_b, so_h, so_n, H, n_m, n_work, q_rows_bh, n_q, n_kv, n_tiles, c, P_SHIFT,
              WG: gl.constexpr, MODE: gl.constexpr, RULE: gl.constexpr, FLQ: gl.constexpr, QMAX: gl.constexpr,
              PNQ: gl.constexpr, DEFER: gl.constexpr, EARLY: gl.constexpr, PLEV: gl.constexpr, SMQ: gl.constexpr,
              WORK_LOOP: gl.constexpr, WRITE_LSE: gl.constexpr, TRACE: gl.constexpr):
    """One consumer warpgroup: work tile w = program, or with WORK_LOOP w = program, program + programs, ...
    (w -> query tile w % n_m of b·h w // n_m), each by `_work_tile`: this warpgroup's 64 rows against every key
    tile. Per key tile j: softmax(j), then QKᵀ(j+1) and P̃·V(j) issued together, then one wait (the order ptxas
    keeps; the overlap is with the other warpgroup). The K/Vᵀ ring runs on across a program's work tiles, and this
    warpgroup's next Q arrives while it writes the current tile's output."""
    BN: gl.constexpr = k_s.shape[1]
    D: gl.constexpr = k_s.shape[2]
    s_layout: gl.constexpr = acc_layout(BN)
    o_layout: gl.constexpr = acc_layout(D)
    col_s: gl.constexpr = gl.SliceLayout(0, s_layout)
    NWG: gl.constexpr = q_s.shape[0]
    if q_s.dtype == gl.int8:
        zero_s = gl.zeros([64, BN], gl.int32, s_layout)
    else:
        # E4M3 Q/K: MODE 1, or MODE 3's INT4 codes (integers |c| <= 7 are E4M3 values; |Σ| <= 128·49 < 2^13 is
        # exact in the FP8 MMA's accumulator, whose 14 significant bits hold every partial sum): fp32 logits
        # with no conversion per score
        zero_s = gl.zeros([64, BN], gl.float32, s_layout)
    if MODE == 3:
        zero_o = gl.zeros([64, D], gl.int32, o_layout)  # INT4 codes: an exact INT8 P̂·V̂
    else:
        zero_o = gl.zeros([64, D], gl.float32, o_layout)
    offs_n0 = gl.arange(0, BN, col_s)
    offs_d = gl.arange(0, D, gl.SliceLayout(0, o_layout))
    qw = q_s.index(WG)
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    # this warpgroup's first Q tile; each later one is issued as soon as the previous tile's last QKᵀ is done
    _load_q(q_desc, qbar, qw, pid, n_m, q_rows_bh, NWG, WG, True)
    if WORK_LOOP:
        i = 0
        for w in range(pid, n_work, nprog):
            _work_tile(w, i, nprog, n_work, q_desc, qw, qbar, k_s, v_s, kready, vready, empty, ks_s, ds_s, QS, KS, VS,
                       O, BAD, LSE, TR, sqs_bh, sks_bh, svs_bh, so_b, so_h, so_n, H, n_m, q_rows_bh, n_q, n_kv, n_tiles,
                       c, P_SHIFT, zero_s, zero_o, offs_n0, offs_d, WG, MODE, RULE, FLQ, QMAX, PNQ, DEFER, EARLY, PLEV,
                       SMQ, True, WRITE_LSE, TRACE)
            i += 1
    else:
        # one work tile per program, no loop around it: measured faster for the direct-placement MXFP4 kernels
        # (the loop for sage2-int8 and the PNQ ones)
        _work_tile(pid, 0, nprog, n_work, q_desc, qw, qbar, k_s, v_s, kready, vready, empty, ks_s, ds_s, QS, KS, VS, O,
                   BAD, LSE, TR, sqs_bh, sks_bh, svs_bh, so_b, so_h, so_n, H, n_m, q_rows_bh, n_q, n_kv, n_tiles, c,
                   P_SHIFT, zero_s, zero_o, offs_n0, offs_d, WG, MODE, RULE, FLQ, QMAX, PNQ, DEFER, EARLY, PLEV, SMQ,
                   False, WRITE_LSE, TRACE)


# integer arguments equal to 1 would become constants, which worker partitions cannot take as arguments
@gluon.jit(do_not_specialize=["sqs_bh", "sks_bh", "svs_bh", "so_b", "so_h", "so_n", "H", "n_bh", "n_q", "n_kv",
                              "q_rows_bh", "k_rows_bh", "ds_rows_bh"])
def attn_ws_fwd(q_desc, k_desc, v_desc, ks_desc, ds_desc, QS, KS, VS, O, BAD, LSE, TR, sqs_bh, sks_bh, svs_bh, so_b,
                so_h, so_n, H, n_bh, n_q, n_kv, q_rows_bh, k_rows_bh, ds_rows_bh, c, P_SHIFT, STAGES: gl.constexpr,
                MODE: gl.constexpr, RULE: gl.constexpr, FLQ: gl.constexpr, QMAX: gl.constexpr, PNQ: gl.constexpr,
                DEFER: gl.constexpr, EARLY: gl.constexpr, PLEV: gl.constexpr = 15.0,
                SMQ: gl.constexpr = 0,
                WORK_LOOP: gl.constexpr = False, WRITE_LSE: gl.constexpr = False, NWG: gl.constexpr = 2,
                TRACE: gl.constexpr = False, num_warps: gl.constexpr = 4):
    """Grid (programs,): the work tiles w = 0 .. cdiv(n_q, 64·NWG)·n_bh − 1 (query tile w % cdiv(n_q, 64·NWG) of
    b·h w // cdiv(n_q, 64·NWG)) go to the programs, one each (with WORK_LOOP inside a loop over the program's work
    tiles, w = program, program + programs, ...). NWG consumer warpgroups of 64 query rows each (2 or 3; MODE 3 with
    the ΔS table needs 2: one table row per 128-row program).
    q_desc: Q as (B·H·q_rows_bh, D) in [64, D] blocks; k_desc: K
    (B·H·k_rows_bh, D) in [128, D]; v_desc: Vᵀ (B·H·D, k_rows_bh) in [D, 128] (Q, K INT8 for MODE 2, E4M3 for
    MODE 1; Vᵀ E4M3). MODE 2: QS/KS fp32 per token (KS: each key's per-thread group scale, read once per group and
    tile), VS fp32 per channel; MODE 1: QS/KS int32 exponents per 128-token tile, VS int32 per channel (rows
    sqs_bh / sks_bh / svs_bh apart per b·h). O in the caller's layout (strides so_*; head_dim contiguous). BAD (MODE 1): the count of P̃ blocks E4M3 could not hold exactly.
    WRITE_LSE: each row's log-sum-exp (`_core.row_lse`, natural log) into LSE, fp32 (B·H, n_q).
    TRACE: each work tile's timeline into TR, int64 (work tiles, NWG, TRACE_SLOTS) (`_trace_point`).
    MODE 3 (INT4): Q, K INT4 codes in int8 or E4M3 with fp32 per-token scales, Vᵀ INT4
    codes in int8 (operand key order) with fp32 per-channel scales, P̃ codes with PLEV + 1 levels per row and
    tile; SMQ 2: ds_desc the ΔS table (B·H·ds_rows_bh, N_pad) fp32, one row per 128-row q group = program."""
    D: gl.constexpr = k_desc.block_type.shape[1]
    BN: gl.constexpr = k_desc.block_type.shape[0]
    q_s = gl.allocate_shared_memory(q_desc.dtype, [NWG, 64, D], q_desc.layout)
    k_s = gl.allocate_shared_memory(k_desc.dtype, [STAGES, BN, D], k_desc.layout)
    v_s = gl.allocate_shared_memory(v_desc.dtype, [STAGES, D, BN], v_desc.layout)
    qbar = gl.allocate_shared_memory(gl.int64, [NWG, 1], mbarrier.MBarrierLayout())  # one Q barrier per consumer
    kready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    vready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(NWG):
        mbarrier.init(qbar.index(i), count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(kready.index(i), count=1)
        mbarrier.init(vready.index(i), count=1)
        mbarrier.init(empty.index(i), count=NWG)  # one release per consumer warpgroup
    fence_async_shared()  # the initialised barriers, visible to the TMA (async proxy)
    n_tiles = gl.cdiv(n_kv, BN)
    n_m = gl.cdiv(n_q, 64 * NWG)
    n_work = n_m * n_bh
    if MODE == 3:
        ks_s = gl.allocate_shared_memory(gl.float32, [STAGES, 1, BN], ks_desc.layout)
    else:
        ks_s = gl.allocate_shared_memory(gl.float32, [1, 1, 16], gl.SwizzledSharedLayout(1, 1, 1, [2, 1, 0]))  # unused
    if MODE == 3 and SMQ == 2:
        ds_s = gl.allocate_shared_memory(gl.float32, [STAGES, 1, BN], ds_desc.layout)
    else:
        ds_s = gl.allocate_shared_memory(gl.float32, [1, 1, 16], gl.SwizzledSharedLayout(1, 1, 1, [2, 1, 0]))  # unused
    args = (q_desc, q_s, qbar, k_s, v_s, kready, vready, empty, ks_s, ds_s, QS, KS, VS, O, BAD, LSE, TR, sqs_bh,
            sks_bh, svs_bh, so_b, so_h, so_n, H, n_m, n_work, q_rows_bh, n_q, n_kv, n_tiles, c, P_SHIFT)
    largs = (k_desc, v_desc, ks_desc, ds_desc, k_s, v_s, ks_s, ds_s, kready, vready, empty, n_m, n_work, k_rows_bh,
             ds_rows_bh, n_tiles, WORK_LOOP)
    # registers of each worker consumer warpgroup (the first consumer, the default partition, gets what is left):
    # 2 consumers 2·128·240 + the loader's 32·24; 3 consumers 128·168 + 2·128·160 + the loader's warpgroup's 128·24
    if NWG == 3:
        gl.warp_specialize([(_consumer_partition, args + (Consts(0, MODE, RULE, FLQ, QMAX, PNQ, DEFER, EARLY, PLEV, SMQ, WORK_LOOP, WRITE_LSE, TRACE),)),
                            (_consumer_partition, args + (Consts(1, MODE, RULE, FLQ, QMAX, PNQ, DEFER, EARLY, PLEV, SMQ, WORK_LOOP, WRITE_LSE, TRACE),)),
                            (_consumer_partition, args + (Consts(2, MODE, RULE, FLQ, QMAX, PNQ, DEFER, EARLY, PLEV, SMQ, WORK_LOOP, WRITE_LSE, TRACE),)),
                            (_loader, largs)], [4, 4, 1], [160, 160, 24])
    else:
        gl.warp_specialize([(_consumer_partition, args + (Consts(0, MODE, RULE, FLQ, QMAX, PNQ, DEFER, EARLY, PLEV, SMQ, WORK_LOOP, WRITE_LSE, TRACE),)),
                            (_consumer_partition, args + (Consts(1, MODE, RULE, FLQ, QMAX, PNQ, DEFER, EARLY, PLEV, SMQ, WORK_LOOP, WRITE_LSE, TRACE),)),
                            (_loader, largs)], [4, 1], [240, 24])


_launch_attn_ws = Launcher(attn_ws_fwd)  # Triton's specialization once per argument signature, not per call


@functools.lru_cache(maxsize=64)
def shared_layout(block: tuple, dtype):
    """The TMA/wgmma shared-memory layout of a `block`-shaped tile of `dtype` (NVMMASharedLayout's default), made
    once per shape and dtype: built on every call, a call's five descriptors took 47–52 µs of host time (17–20 µs
    with the layouts cached), time the GPU spends waiting between the pre-pass and the kernel at short sequences."""
    return gl.NVMMASharedLayout.get_default_for(list(block), dtype)


def descriptors(qq, kk, vv, ks=None, ds=None):
    """TMA descriptors of the pre-pass operands: qq, kk (B·H, N_pad, D) int8 or E4M3; vv (B·H, D, N_pad) E4M3 or
    int8 (INT4 codes); ks (B·H, N_pad) fp32 per-token key scales (MODE 3, in shared memory with each K tile;
    otherwise K's descriptor stands in, unused); ds (B·H, q groups, N_pad) the INT4 mode's ΔS table (likewise)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    D = qq.shape[-1]
    q2, k2, v2 = qq.reshape(-1, D), kk.reshape(-1, D), vv.reshape(-1, vv.shape[-1])
    qk_dt = gl.float8e4nv if qq.dtype.is_floating_point else gl.int8
    v_dt = gl.float8e4nv if vv.dtype.is_floating_point else gl.int8
    kd = TensorDescriptor.from_tensor(k2, [BLOCK_N, D], shared_layout((BLOCK_N, D), qk_dt))
    ksd = kd if ks is None else TensorDescriptor.from_tensor(ks, [1, BLOCK_N], KS_LAYOUT)
    dsd = kd if ds is None else TensorDescriptor.from_tensor(ds.reshape(-1, ds.shape[-1]), [1, BLOCK_N], KS_LAYOUT)
    return (TensorDescriptor.from_tensor(q2, [ROWS, D], shared_layout((ROWS, D), qk_dt)), kd,
            TensorDescriptor.from_tensor(v2, [D, BLOCK_N], shared_layout((D, BLOCK_N), v_dt)), ksd, dsd)


def launch(P, out, so, H, Nq, Nk, sm_scale_log2, bad, stages: int = 2, defer: bool = False,
           early: bool = False, work_loop: bool = False, consumers: int = 2, lse=None, trace=None,
           run=_launcher.launch):
    """Run attn_ws_fwd on the pre-pass dict P of kernels.launch._prepare (MODE 1 with E4M3 operands, MODE 2, or
    MODE 3 with the ΔS table or no Q smoothing) into `out` (strides `so` (b, h, n, d) with d contiguous); MODE 1
    adds its inexact P̃ block count to `bad`. MODE 3 with V rotated (ROTV): the kernel writes fp32, then
    out = that · H / sqrt(D) by `unrotate.unrotate` (the Triton kernel does it in its epilogue). work_loop: the
    programs (one per work tile) run theirs inside a loop rather than without one: same arithmetic per tile, so the
    same output bits; only ptxas's schedule, and so the speed, differs. lse: an fp32 (B·H, Nq) tensor the rows'
    log-sum-exp is written to (None: not computed). trace: an int64 (work tiles, consumers, TRACE_SLOTS) tensor
    each work tile's timeline is written to (`_trace_point`; None: the kernel compiled without it). run: how the
    kernel is launched (`_launcher.launch`, or a call plan's recorder, kernels/plans.py)."""
    import torch

    mode = P["mode"]
    if so[3] != 1:
        raise ValueError("the Gluon kernel writes outputs whose head_dim is contiguous")
    if mode == MODE_SAGE and (any(s % 8 for s in so[:3]) or out.data_ptr() % 16 or P["svs"] % 8):
        raise ValueError("the Gluon kernel's sage2 mode writes 16-byte aligned output rows: strides in multiples of "
                         "8 elements")
    if mode not in (MODE_MX, MODE_SAGE, MODE_INT4):
        raise ValueError("the Gluon kernel runs the MXFP4, sage2-int8 and INT4 recipes only")
    if mode == MODE_INT4 and P["smq"] not in (0, 2):
        raise ValueError("the Gluon kernel's INT4 mode takes the ΔS table (DS=table), not DS=fused")
    smq = P["smq"] if mode == MODE_INT4 else 0
    qd, kd, vd, ksd, dsd = descriptors(P["qq"], P["kk"], P["vv"], P["ks"] if mode == MODE_INT4 else None,
                                       P["kf"] if smq == 2 else None)
    BH = P["qq"].shape[0]
    D = P["qq"].shape[-1]
    rot = mode == MODE_INT4 and P["rotv"]
    dst, sdst = out, so
    if rot:
        B = BH // H
        dst = torch.empty((B, H, Nq, D), device=out.device, dtype=torch.float32)
        sdst = dst.stride()
    n_work = work_tiles(Nq, BH, consumers)
    if trace is not None and tuple(trace.shape) != (n_work, consumers, TRACE_SLOTS):
        raise ValueError(f"trace buffer of shape {tuple(trace.shape)}: this launch needs "
                         f"{(n_work, consumers, TRACE_SLOTS)}")
    run(_launch_attn_ws, (n_work,),
        qd, kd, vd, ksd, dsd, P["qs"], P["ks"], P["vs"], dst, bad, bad if lse is None else lse,
        bad if trace is None else trace, P["sqs"], P["sks"],
        P["svs"], *sdst[:3], H, BH, Nq, Nk, P["qq"].shape[1], P["kk"].shape[1], P["kf"].shape[1] if smq == 2 else 0, sm_scale_log2,
        float(P["p_shift"]), STAGES=stages, MODE=mode, RULE=P["rule"], FLQ=P["flq"], QMAX=P["qmax"], PNQ=P["pnq"],
        DEFER=defer, EARLY=early, PLEV=float(P.get("plev", 15)), SMQ=smq, WORK_LOOP=work_loop,
        WRITE_LSE=lse is not None, NWG=consumers, TRACE=trace is not None, num_warps=4)
    if rot:
        # a 3xTF32 pass, as the Triton kernel's epilogue (faster than a float64 torch matmul)
        unrotate(dst, P["hv"], out, so, run=run)
    return out

