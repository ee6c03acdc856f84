"""DraftAttention2's block-sparse kernel, warp-specialized (Gluon, Hopper): the default draft kernel on sm_90.

Structure (the dense kernel's, kernels/gluon_ws.py, whose pieces it shares: the ring protocol, the wgmma
layouts, the row-sum tree): a program holds two query regions of one b·h, one per consumer warpgroup (64 rows
each); each warpgroup has its own loader warp and its own K/V ring, because the two regions retain different
key blocks. A loader walks its region's block list (the route's `DraftPlan.idx`: NVFP4 blocks, then INT8/FP8,
then 16-bit, each in column order, then the prefix keys) and brings each key block's K and V tiles by TMA; the
key-block index comes from that list instead of a counter. The consumer runs the phases over one online-softmax
state (m, ℓ, Õ in the unshifted units of every phase), each phase pipelined as the dense kernel's key loop
(QKᵀ of the next block issued with P̂·V̂ of this one, one wait), and writes its rows normalised once, in token
order (the packed slots' `gather`), in the input dtype. The two warpgroups run out of phase, so one's softmax
runs under the other's MMAs.

Numerics are `_core.draft_fwd`'s, phase by phase, on the same pre-pass operands; only fp32 rounding order may
differ (a block's INT8 key scale folded into the exp2 factor, row sums as a tree, the 16-bit products accumulated
in the MMA), and NVFP4's quotient P̃ / s_b, which both kernels form in fp32 (here P̃ times MUFU.RCP's reciprocal,
within 1 ulp; an element flips only within fp32 rounding of an E2M1 midpoint):
- NVFP4 (Hopper has no FP4 MMA): Q̂, K̂, V̂ are E2M1·s_b in fp16 (exact), so QKᵀ and P̂·V̂ are fp16 MMAs, at
  the 16-bit rate, P̂·V̂ accumulated by the MMA in units of V's outer scale, applied once after the phase (the
  first, on a zero accumulator); P̃ is quantized in registers per 16 keys (`_nvfp4_p`: block maximum, E4M3 block
  scale, E2M1 rounding, then the saturation and the product with s_b on fp16 pairs, exact).
- INT8/FP8: exact INT8 QKᵀ (int32) times the block scales, P̃·448 cast to E4M3 (RNE), FP8 P̂·V̂ into a
  zeroed fp32 tile (the per-tile promotion) times V's channel scales / 448.
- 16 bit: the input dtype's MMAs, P̃ rounded to it (the prefix keys likewise, the ragged last tile masked).
Padding key slots (past a region block's real-token count, always a block's tail) are masked out.

Cost per 64×64 key tile and warpgroup (offline SASS, Triton 3.6, head_dim 128, bf16:
`python benchmarks/sass_key_loop.py draft`): 16-bit 372 instructions,
INT8/FP8 492 (the int → float conversion of the logits and the FP8 P̂'s move into the operand layout), NVFP4 686
(the per-16-key quantization of P̃ on top of 16-bit MMAs). Measured at wan-720p an NVFP4 pair costs 1.44× a
16-bit one, an INT8/FP8 pair 0.79× (results/kernels-h200.md): Hopper's missing FP4 MMA is paid in ALU
instructions, not saved in tensor time.
"""

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                               warpgroup_mma_wait)
from triton.language.core import _aggregate as aggregate

from ._launcher import Launcher
from .gluon_ws import acc_layout, ring_acquire, row_sum_tree, shared_layout

BLOCK = gl.constexpr(64)  # the recipe's region block: one key block per tile, one query region per warpgroup
# the phases, in the order a consumer runs them (the prefix keys last)
PH_NVFP4, PH_INT8, PH_16, PH_PREFIX = gl.constexpr(4), gl.constexpr(8), gl.constexpr(16), gl.constexpr(0)


@aggregate
class Role:
    """A partition's warpgroup (and ring) index and whether the rows' LSE is written, as constexprs (plain
    constexpr arguments reach warp-specialized partitions as runtime values)."""
    WG: gl.constexpr
    WRITE_LSE: gl.constexpr

    @gluon.constexpr_function
    def __init__(self, WG, WRITE_LSE):
        self.WG = gl.constexpr(WG)
        self.WRITE_LSE = gl.constexpr(WRITE_LSE)


@gluon.jit
def _view(buf, s, desc):
    """Stage s of a ring (or Q) buffer as `desc`'s tile: its dtype, block shape and shared layout. The buffers
    are allocated for the largest tile (16-bit, 64 × D); an 8-bit tile uses the first half of its stage, read as
    twice the tile's rows and sliced, since a reinterpretation keeps the byte size (Triton 3.8 refuses one that
    halves it; under 3.6 both forms give the same SASS)."""
    shape: gl.constexpr = desc.block_type.shape
    rows: gl.constexpr = shape[0] * (buf.dtype.primitive_bitwidth // desc.dtype.primitive_bitwidth)
    stage = buf.index(s)._reinterpret(desc.dtype, [rows] + shape[1:], desc.layout)
    if rows == shape[0]:
        return stage
    return stage.slice(0, shape[0])


@gluon.jit
def _block_list(IDX, CNT, R, W, a, bh):
    """Query region a of b·h: its block counts per phase (NVFP4, INT8, 16-bit) and its block list."""
    cnt = CNT + (bh * R + a) * 3
    return gl.load(cnt), gl.load(cnt + 1), gl.load(cnt + 2), IDX + (bh.to(gl.int64) * R + a) * W


@gluon.jit
def _load_listed(k_desc, v_desc, k_s, v_s, kready, vready, empty, lst, n, r, k_row0, v_row, V_T: gl.constexpr,
                 base, STAGES: gl.constexpr):
    """The loader's part of one phase: the n key blocks listed at lst (block b: K rows k_row0 + 64·b; Vᵀ
    columns 64·b of rows v_row (V_T), or V rows k_row0 + 64·b) into the ring from its count r on."""
    for t in range(n):
        blk = gl.load(lst + t)
        s = ring_acquire(empty, r + t, STAGES, base)
        mbarrier.expect(kready.index(s), k_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [k_row0 + blk * BLOCK, 0], kready.index(s), _view(k_s, s, k_desc))
        mbarrier.expect(vready.index(s), v_desc.block_type.nbytes)
        if V_T:
            tma.async_copy_global_to_shared(v_desc, [v_row, blk * BLOCK], vready.index(s), _view(v_s, s, v_desc))
        else:
            tma.async_copy_global_to_shared(v_desc, [k_row0 + blk * BLOCK, 0], vready.index(s),
                                            _view(v_s, s, v_desc))
    return r + n


@gluon.jit
def _loader(q4d, q8d, q16d, k4d, k8d, k16d, v4d, v8d, v16d, pkd, pvd, q4_s, q8_s, q16_s, qbar, k_s, v_s, kready,
            vready, empty, IDX, CNT, R, S, W, n_pre, role):
    """One warp per consumer: its region's three Q tiles, then the K/V tiles of its listed blocks phase by phase,
    then the prefix keys'."""
    WG: gl.constexpr = role.WG
    STAGES: gl.constexpr = k_s.shape[0] // 2
    D: gl.constexpr = k16d.block_type.shape[1]
    a = gl.program_id(0) * 2 + WG
    bh = gl.program_id(1)
    if a < R:
        n4, n8, n16, lst = _block_list(IDX, CNT, R, W, a, bh)
        row0 = bh * S
        qrow = row0 + a * BLOCK
        mbarrier.expect(qbar.index(WG), q4d.block_type.nbytes + q8d.block_type.nbytes + q16d.block_type.nbytes)
        tma.async_copy_global_to_shared(q4d, [qrow, 0], qbar.index(WG), q4_s.index(WG))
        tma.async_copy_global_to_shared(q8d, [qrow, 0], qbar.index(WG), q8_s.index(WG))
        tma.async_copy_global_to_shared(q16d, [qrow, 0], qbar.index(WG), q16_s.index(WG))
        base = WG * STAGES
        r = _load_listed(k4d, v4d, k_s, v_s, kready, vready, empty, lst, n4, 0, row0, bh * D, True, base, STAGES)
        r = _load_listed(k8d, v8d, k_s, v_s, kready, vready, empty, lst + n4, n8, r, row0, bh * D, True, base,
                         STAGES)
        r = _load_listed(k16d, v16d, k_s, v_s, kready, vready, empty, lst + n4 + n8, n16, r, row0, 0, False, base,
                         STAGES)
        # prefix keys (B·H·n_pre rows): the last tile runs into the next head's rows or past the end (zeros),
        # which the consumer masks
        for t in range(gl.cdiv(n_pre, BLOCK)):
            s = ring_acquire(empty, r + t, STAGES, base)
            mbarrier.expect(kready.index(s), pkd.block_type.nbytes)
            tma.async_copy_global_to_shared(pkd, [bh * n_pre + t * BLOCK, 0], kready.index(s), _view(k_s, s, pkd))
            mbarrier.expect(vready.index(s), pvd.block_type.nbytes)
            tma.async_copy_global_to_shared(pvd, [bh * n_pre + t * BLOCK, 0], vready.index(s), _view(v_s, s, pvd))


@gluon.jit
def _rcp(x):
    """1 / x (x a normal fp32) within 1 ulp: one MUFU.RCP, where `1.0 / x` costs a dozen instructions for the
    range checks of an IEEE-style quotient."""
    return gl.inline_asm_elementwise("rcp.approx.ftz.f32 $0, $1;", "=r,r", [x], dtype=gl.float32, is_pure=True,
                                     pack=1)


@gluon.jit
def _nvfp4_p(y):
    """P̃ (64×64, fp32, ≤ 1) quantized as formats/nvfp4 with no outer scale, as `_core._tile_update` (MODE 4,
    PROW off): per 16 keys of a row s_b = E4M3_RNE(amax / 6), elements E2M1_RNE(P̃ / s_b) (saturated at 6),
    returned as E2M1·s_b in fp16 (exact: the product of a 2-bit and a 4-bit significand, 2^-10 to 2688). A
    block whose scale rounds to 0 gives zeros."""
    M: gl.constexpr = y.shape[0]
    N: gl.constexpr = y.shape[1]
    yb = gl.reshape(y, [M, N // 16, 16])
    # s_b = E4M3_RNE(amax / 6) as `_core.e4m3_round`, without its saturation (P̃ ≤ 1: s_b ≤ 1/6)
    t = gl.max(yb, axis=2) / 6.0
    cb = (gl.maximum(t.to(gl.int32, bitcast=True) & 0x7F800000, (-6 + 127) << 23) + (20 << 23)).to(gl.float32,
                                                                                                   bitcast=True)
    sb = (t + cb) - cb
    # 1 / s_b; a zero scale (every element rounds to 0) takes E4M3's least scale 2^-9 instead: finite codes,
    # which the product with s_b = 0 below turns into zeros
    z = yb * gl.expand_dims(_rcp(gl.maximum(sb, 0.001953125)), 2)
    # E2M1_RNE(z) as `_core.e2m1_round_bits` (k = 0), saturated at 6 after the product with s_b, on pairs of fp16
    # (E2M1·s_b and 6·s_b are exact in fp16: ≤ 6 significant bits, 2^-10 to 2688; z < 9 even where s_b is an
    # E4M3 subnormal, rounded down by up to half its step, so the unsaturated code is at most 8); 0 where s_b = 0
    c0 = gl.maximum(z.to(gl.int32, bitcast=True) & 0x7F800000, 127 << 23).to(gl.float32, bitcast=True)
    e = gl.fma(c0, -4194304.0, gl.fma(c0, 4194304.0, z))
    sb16 = gl.expand_dims(sb.to(gl.float16), 2)
    p = gl.minimum(e.to(gl.float16) * sb16, sb16 * 6.0)
    return gl.convert_layout(gl.reshape(p, [M, N]), y.type.layout)


@gluon.jit
def _tile(PH: gl.constexpr, j, r, n, s_cur, acc, m_i, l_i, kc, ksc, blk_next, qv, k_s, v_s, kd, vd, kready, vready,
          empty, lst, COUNTS, KS8, ks_row, c, pvs, p8_shift, p8_inv, n_pre, base, zero_s, zero_o, offs_n0,
          NEXT: gl.constexpr):
    """Key tile j (the ring's r-th) of a phase: mask, softmax step, then QKᵀ of tile j+1 (NEXT) and P̂·V̂ issued
    together, one wait. kc: this block's real-key count, ksc its INT8 key scale (PH 8), both loaded a tile ahead;
    blk_next: block j+1's index."""
    STAGES: gl.constexpr = k_s.shape[0] // 2
    st = base + r % STAGES
    nx = base + (r + 1) % STAGES
    o_layout: gl.constexpr = zero_o.type.layout  # this phase's P̂·V̂ accumulator (the state's registers)
    row_o: gl.constexpr = gl.SliceLayout(1, acc.type.layout)
    if PH != PH_PREFIX:
        # block j+1's count and scale, and block j+2's index, ahead of their use (a load used at once stalls
        # every tile)
        nb = gl.load(lst + j + 2, mask=j + 2 < n, other=0)
        nkc = gl.load(COUNTS + blk_next)
        if PH == PH_INT8:
            nks = gl.load(KS8 + ks_row + blk_next)
        else:
            nks = ksc
    else:
        nb = blk_next
        nkc = kc
        nks = ksc
    if PH == PH_INT8:
        qk = s_cur.to(gl.float32)
        cj = c * ksc  # q's block scale · sm_scale·log2 e · this key block's scale
    else:
        qk = s_cur
        cj = c
    if PH == PH_PREFIX:
        qk = gl.where((j * BLOCK + offs_n0 < n_pre)[None, :], qk, float("-inf"))
    else:
        qk = gl.where((offs_n0 < kc)[None, :], qk, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(qk, axis=1) * cj)
    m_use = gl.where(m_new == float("-inf"), 0.0, m_new)  # a row with no key yet
    alpha = gl.exp2(m_i - m_use)
    if PH == PH_INT8:
        y = gl.exp2(qk * cj - (m_use - p8_shift)[:, None])  # P̃·448
        l_i = l_i * alpha + row_sum_tree(y) * p8_inv
        p = gl.convert_layout(y.to(gl.float8e4nv), gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=4))
    else:
        y = gl.exp2(qk * cj - m_use[:, None])
        l_i = l_i * alpha + row_sum_tree(y)
        if PH == PH_NVFP4:
            p = _nvfp4_p(y)
        else:
            p = y.to(qv.dtype)
        p = gl.convert_layout(p, gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2))
    if NEXT:
        mbarrier.wait(kready.index(nx), ((r + 1) // STAGES) & 1)
        s_tok = warpgroup_mma(qv, _view(k_s, nx, kd).permute((1, 0)), zero_s, use_acc=False, is_async=True)
    mbarrier.wait(vready.index(st), (r // STAGES) & 1)
    if PH == PH_INT8:
        pv_tok = warpgroup_mma(p, _view(v_s, st, vd).permute((1, 0)), zero_o, use_acc=False, is_async=True)
        if NEXT:
            s_cur, pv = warpgroup_mma_wait(0, deps=(s_tok, pv_tok))
        else:
            pv = warpgroup_mma_wait(0, deps=(pv_tok,))
        # the tile's FP8 product promoted into the rescaled fp32 accumulator, in the unshifted unit
        acc = acc * gl.convert_layout(alpha, row_o)[:, None] + gl.convert_layout(pv, acc.type.layout) * pvs[None, :]
    else:
        # 16-bit MMAs accumulate in fp32 themselves (NVFP4: in units of V's outer scale, applied by the caller
        # once the phase, which runs first, is done)
        acc = acc * gl.convert_layout(alpha, row_o)[:, None]
        if PH == PH_NVFP4:
            v_op = _view(v_s, st, vd).permute((1, 0))
        else:
            v_op = _view(v_s, st, vd)
        pv_tok = warpgroup_mma(p, v_op, acc, use_acc=True, is_async=True)
        if NEXT:
            s_cur, acc = warpgroup_mma_wait(0, deps=(s_tok, pv_tok))
        else:
            acc = warpgroup_mma_wait(0, deps=(pv_tok,))
    mbarrier.arrive(empty.index(st))  # this stage's tile is done with
    return s_cur, acc, m_new, l_i, nkc, nks, nb


@gluon.jit
def _phase(PH: gl.constexpr, n, r, acc, m_i, l_i, qv, k_s, v_s, kd, vd, kready, vready, empty, lst, COUNTS, KS8,
           ks_row, c, pvs, p8_shift, p8_inv, n_pre, base):
    """n key tiles (n > 0) of one phase from the ring's count r on: the first QKᵀ, then every tile but the last
    with the next one's QKᵀ, then the last."""
    STAGES: gl.constexpr = k_s.shape[0] // 2
    BN: gl.constexpr = BLOCK
    D: gl.constexpr = acc.shape[1]
    if PH == PH_INT8:
        # 8-bit MMAs take K-steps of 32: their accumulators' layouts (the same registers as the state's)
        s_layout: gl.constexpr = acc_layout(BN, 32)
        zero_s = gl.zeros([64, BN], gl.int32, s_layout)
        zero_o = gl.zeros([64, D], gl.float32, acc_layout(D, 32))
    else:
        s_layout: gl.constexpr = acc_layout(BN, 16)
        zero_s = gl.zeros([64, BN], gl.float32, s_layout)
        zero_o = gl.zeros([64, D], gl.float32, acc_layout(D, 16))
    row_state: gl.constexpr = m_i.type.layout
    offs_n0 = gl.arange(0, BN, gl.SliceLayout(0, s_layout))
    m_i = gl.convert_layout(m_i, gl.SliceLayout(1, s_layout))
    l_i = gl.convert_layout(l_i, gl.SliceLayout(1, s_layout))
    if PH == PH_PREFIX:
        blk = gl.to_tensor(0)
        kc = gl.to_tensor(BLOCK)
        ksc = gl.to_tensor(1.0)
    else:
        blk = gl.load(lst)
        kc = gl.load(COUNTS + blk)
        if PH == PH_INT8:
            ksc = gl.load(KS8 + ks_row + blk)
        else:
            ksc = gl.to_tensor(1.0)
        blk = gl.load(lst + 1, mask=n > 1, other=0)
    st = base + r % STAGES
    mbarrier.wait(kready.index(st), (r // STAGES) & 1)
    s_tok = warpgroup_mma(qv, _view(k_s, st, kd).permute((1, 0)), zero_s, use_acc=False, is_async=True)
    s_cur = warpgroup_mma_wait(0, deps=(s_tok,))
    for j in range(n - 1):
        s_cur, acc, m_i, l_i, kc, ksc, blk = _tile(
            PH, j, r + j, n, s_cur, acc, m_i, l_i, kc, ksc, blk, qv, k_s, v_s, kd, vd, kready, vready, empty, lst,
            COUNTS, KS8, ks_row, c, pvs, p8_shift, p8_inv, n_pre, base, zero_s, zero_o, offs_n0, True)
    s_cur, acc, m_i, l_i, kc, ksc, blk = _tile(
        PH, n - 1, r + n - 1, n, s_cur, acc, m_i, l_i, kc, ksc, blk, qv, k_s, v_s, kd, vd, kready, vready, empty,
        lst, COUNTS, KS8, ks_row, c, pvs, p8_shift, p8_inv, n_pre, base, zero_s, zero_o, offs_n0, False)
    return acc, gl.convert_layout(m_i, row_state), gl.convert_layout(l_i, row_state)


@gluon.jit
def _consumer(q4d, q8d, q16d, k4d, k8d, k16d, v4d, v8d, v16d, pkd, pvd, q4_s, q8_s, q16_s, qbar, k_s, v_s, kready,
              vready, empty, IDX, CNT, COUNTS, QS8, KS8, VS8, S4, GATHER, O, LSE, so_b, so_h, so_n, sl_b, sl_h, sl_n,
              H, R, S, W, n_pre, c, p8_shift, role):
    """One consumer warpgroup: query region a = 2·program + WG of b·h, its phases over one state, its output."""
    WG: gl.constexpr = role.WG
    STAGES: gl.constexpr = k_s.shape[0] // 2
    D: gl.constexpr = k16d.block_type.shape[1]
    s_layout: gl.constexpr = acc_layout(BLOCK, 16)  # the state's layouts (those of the 16-bit MMAs)
    o_layout: gl.constexpr = acc_layout(D, 16)
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    col_o: gl.constexpr = gl.SliceLayout(0, o_layout)
    a = gl.program_id(0) * 2 + WG
    bh = gl.program_id(1)
    if a < R:
        n4, n8, n16, lst = _block_list(IDX, CNT, R, W, a, bh)
        offs_d = gl.arange(0, D, col_o)
        p8_inv = gl.exp2(-p8_shift)
        base = WG * STAGES
        m_i = gl.full([64], float("-inf"), gl.float32, row_s)
        l_i = gl.zeros([64], gl.float32, row_s)
        acc = gl.zeros([64, D], gl.float32, o_layout)
        ones = gl.full([D], 1.0, gl.float32, col_o)  # the product scale of the 16-bit MMA phases (no promotion)
        mbarrier.wait(qbar.index(WG), 0)
        r = 0
        if n4 > 0:
            c4 = gl.load(S4 + bh * 3) * gl.load(S4 + bh * 3 + 1) * c  # Q's and K's outer scales
            acc, m_i, l_i = _phase(PH_NVFP4, n4, r, acc, m_i, l_i, q4_s.index(WG), k_s, v_s, k4d, v4d, kready,
                                   vready, empty, lst, COUNTS, KS8, bh * R, c4, ones, p8_shift, p8_inv, n_pre, base)
            acc = acc * gl.load(S4 + bh * 3 + 2)  # V's outer scale
        r += n4
        if n8 > 0:
            c8 = gl.load(QS8 + bh * R + a) * c
            pvs8 = gl.load(VS8 + bh * D + offs_d) * p8_inv
            acc, m_i, l_i = _phase(PH_INT8, n8, r, acc, m_i, l_i, q8_s.index(WG), k_s, v_s, k8d, v8d, kready,
                                   vready, empty, lst + n4, COUNTS, KS8, bh * R, c8, pvs8, p8_shift, p8_inv, n_pre,
                                   base)
        r += n8
        if n16 > 0:
            acc, m_i, l_i = _phase(PH_16, n16, r, acc, m_i, l_i, q16_s.index(WG), k_s, v_s, k16d, v16d, kready,
                                   vready, empty, lst + n4 + n8, COUNTS, KS8, bh * R, c, ones, p8_shift, p8_inv,
                                   n_pre, base)
        r += n16
        if n_pre > 0:
            acc, m_i, l_i = _phase(PH_PREFIX, gl.cdiv(n_pre, BLOCK), r, acc, m_i, l_i, q16_s.index(WG), k_s, v_s,
                                   pkd, pvd, kready, vready, empty, lst, COUNTS, KS8, bh * R, c, ones, p8_shift,
                                   p8_inv, n_pre, base)
        # normalised once; rows that kept nothing give 0; written in token order (padding slots nowhere)
        l_o = gl.convert_layout(l_i, row_o)
        out = gl.where((l_o > 0)[:, None], acc / gl.where(l_o > 0, l_o, 1.0)[:, None], 0.0)
        tok = gl.load(GATHER + a * BLOCK + gl.arange(0, BLOCK, row_o))
        b = bh // H
        h = bh % H
        ptrs = (O + b.to(gl.int64) * so_b + h.to(gl.int64) * so_h + (n_pre + tok).to(gl.int64)[:, None] * so_n
                + offs_d[None, :])
        gl.store(ptrs, out.to(O.dtype.element_ty), mask=(tok >= 0)[:, None])
        if role.WRITE_LSE:
            # the natural log of the normaliser each row was divided by (ℓ counts P̃ before quantization, in the
            # unshifted unit, in every phase; −inf for a row that kept nothing), as `_core.row_lse`
            tok_s = gl.convert_layout(tok, row_s)
            lse = gl.where(l_i > 0, (m_i + gl.log2(gl.where(l_i > 0, l_i, 1.0))) * 0.6931471805599453,
                           float("-inf"))
            gl.store(LSE + b.to(gl.int64) * sl_b + h.to(gl.int64) * sl_h + (n_pre + tok_s).to(gl.int64) * sl_n, lse,
                     mask=tok_s >= 0)


# integer arguments equal to 1 would become constants, which worker partitions cannot take as arguments
@gluon.jit(do_not_specialize=["so_b", "so_h", "so_n", "sl_b", "sl_h", "sl_n", "H", "R", "S", "W", "n_pre"])
def draft_ws_fwd(q4d, q8d, q16d, k4d, k8d, k16d, v4d, v8d, v16d, pkd, pvd, IDX, CNT, COUNTS, QS8, KS8, VS8, S4, GATHER,
                 O, LSE, so_b, so_h, so_n, sl_b, sl_h, sl_n, H, R, S, W, n_pre, c, p8_shift, STAGES: gl.constexpr,
                 WRITE_LSE: gl.constexpr = False, num_warps: gl.constexpr = 4):
    """Grid (cdiv(R, 2), B·H): program p holds query regions 2p and 2p + 1 of b·h.

    Descriptors over the pre-pass operands (S = R·64 packed slots per b·h): q4d/k4d (B·H·S, D) fp16 E2M1·s_b,
    v4d their Vᵀ (B·H·D, S); q8d/k8d INT8 (B·H·S, D), v8d Vᵀ E4M3 (B·H·D, S); q16d/k16d/v16d (B·H·S, D) in the
    input dtype; pkd/pvd the prefix keys and values (B·H·n_pre, D) (any 16-bit descriptor when n_pre = 0); every
    tile 64 keys (Vᵀ: D × 64). IDX (B·H, R, W) int32 / CNT (B·H, R, 3): the route's block lists by phase
    (NVFP4, INT8, 16-bit). COUNTS (R,) int32 real tokens per region block (a block's real slots come first).
    QS8, KS8 (B·H, R) fp32 INT8 block scales; VS8 (B·H, D) V's FP8 channel scales; S4 (B·H, 3) NVFP4 outer
    scales of Q, K, V. GATHER (S,) int32: each slot's video token (−1: padding). O: the output, strides
    (so_b, so_h, so_n) (head_dim contiguous), video token t at row n_pre + t; WRITE_LSE: each row's log-sum-exp
    into LSE (fp32, strides (sl_b, sl_h, sl_n), rows as O's). c = sm_scale·log2 e,
    p8_shift = log2 of the FP8 P̃ scale's inverse (448)."""
    D: gl.constexpr = k16d.block_type.shape[1]
    q4_s = gl.allocate_shared_memory(q4d.dtype, [2, BLOCK, D], q4d.layout)
    q8_s = gl.allocate_shared_memory(q8d.dtype, [2, BLOCK, D], q8d.layout)
    q16_s = gl.allocate_shared_memory(q16d.dtype, [2, BLOCK, D], q16d.layout)
    # one ring per warpgroup (stages WG·STAGES ..), each stage sized for the 16-bit tiles
    k_s = gl.allocate_shared_memory(k16d.dtype, [2 * STAGES, BLOCK, D], k16d.layout)
    v_s = gl.allocate_shared_memory(v16d.dtype, [2 * STAGES, BLOCK, D], v16d.layout)
    qbar = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    kready = gl.allocate_shared_memory(gl.int64, [2 * STAGES, 1], mbarrier.MBarrierLayout())
    vready = gl.allocate_shared_memory(gl.int64, [2 * STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [2 * STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2):
        mbarrier.init(qbar.index(i), count=1)
    for i in gl.static_range(2 * STAGES):
        mbarrier.init(kready.index(i), count=1)
        mbarrier.init(vready.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)
    fence_async_shared()  # the initialised barriers, visible to the TMA (async proxy)
    descs = (q4d, q8d, q16d, k4d, k8d, k16d, v4d, v8d, v16d, pkd, pvd, q4_s, q8_s, q16_s, qbar, k_s, v_s, kready,
             vready, empty)
    cargs = descs + (IDX, CNT, COUNTS, QS8, KS8, VS8, S4, GATHER, O, LSE, so_b, so_h, so_n, sl_b, sl_h, sl_n, H, R,
                     S, W, n_pre, c, p8_shift)
    largs = descs + (IDX, CNT, R, S, W, n_pre)
    gl.warp_specialize([(_consumer, cargs + (Role(0, WRITE_LSE),)), (_consumer, cargs + (Role(1, WRITE_LSE),)),
                        (_loader, largs + (Role(0, WRITE_LSE),)), (_loader, largs + (Role(1, WRITE_LSE),))], [4, 1, 1],
                       [240, 24, 24])


_launch_draft_ws = Launcher(draft_ws_fwd)  # Triton's specialization once per argument signature, not per call


def _descriptor(t, block, dtype):
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    return TensorDescriptor.from_tensor(t, block, shared_layout(tuple(block), dtype))


def _gl_dtype(t):
    import torch

    return {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16, torch.int8: gl.int8,
            torch.float8_e4m3fn: gl.float8e4nv}[t.dtype]


def launch(pre: dict, plan, counts, gather, pk, pv, out, so, H: int, n_pre: int, sm_scale_log2: float,
           p8_shift: float, stages: int = 2, lse=None):
    """Run draft_ws_fwd on the pre-pass dict `pre` (kernels/draft_prepass.py) and the route's `plan` into `out`
    (strides `so` (b, h, n, d), d contiguous; video token t at n_pre + t). pk, pv (B·H, n_pre, D): the prefix
    keys and values (None when n_pre = 0). lse: a (B, H, N) fp32 view (any strides) for the rows' log-sum-exp,
    or None."""
    BH, S, D = pre["q16"].shape
    blk = BLOCK.value
    R = S // blk

    def rows(t):  # (B·H, S, D) -> descriptor of (B·H·S, D) in 64 × D tiles
        x = t.reshape(-1, D)
        return _descriptor(x, [blk, D], _gl_dtype(x))

    def cols(t):  # Vᵀ (B·H, D, S) -> (B·H·D, S) in D × 64 tiles
        x = t.reshape(-1, t.shape[-1])
        return _descriptor(x, [D, blk], _gl_dtype(x))

    k16 = rows(pre["k16"])
    v16 = rows(pre["v16"])
    pkd, pvd = (rows(pk), rows(pv)) if n_pre else (k16, v16)
    grid = (triton.cdiv(R, 2), BH)
    _launch_draft_ws(grid,
        rows(pre["q4"]), rows(pre["q8"]), rows(pre["q16"]), rows(pre["k4"]), rows(pre["k8"]), k16, cols(pre["v4t"]),
        cols(pre["v8t"]), v16, pkd, pvd, plan.idx, plan.cnt, counts, pre["qs8"], pre["ks8"], pre["vs8"], pre["s4"],
        gather, out, out if lse is None else lse, so[0], so[1], so[2], *((0, 0, 0) if lse is None else lse.stride()), H,
        R, S, plan.idx.shape[-1], n_pre, sm_scale_log2, p8_shift, STAGES=stages, WRITE_LSE=lse is not None,
        num_warps=4)
    return out
