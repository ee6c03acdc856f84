"""`attention(q, k, v, recipe, ...)`: the launch wrapper of the attention kernels: the operand pre-pass
(kernels/prepass.py), then the Gluon kernel (kernels/gluon_ws.py) or the Triton kernel (`_core.attn_fwd`).

Which recipes it runs, with which settings, and why it refuses the others is the dispatch table's
(kernels/dispatch.py): dense (the 16-bit variant), MXFP4, sage2-int8, INT4 and NVFP4. Draft recipes need the
video geometry and run through `kernels.draft.draft_attention`; `attention()` refuses them.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
import triton

from lowbit_video.errors import refuse_autograd
from . import _launcher, dispatch, plans, prepass
from ._core import LOG2E, attn_fwd
from .dispatch import merged_config

BLOCK_N = dispatch.KEY_TILE
ENTRY = "launch:attention"  # this module's entry in the dispatch table
# what a variant's pre-pass (kernels/operands.py) leaves unset: no P̃ rule, P̃ not FP8 and placed directly, no Q
# smoothing or ΔS table, 15 P̃ levels (affine INT4), no V rotation, P̃ not scaled per row, no exact fallback to run
OPERAND_DEFAULTS = dict(rule=0, flq=2, qmax=6.0, p_shift=0.0, p_fp8=False, pnq=False, skf=0, sqm=0, plev=15, smq=0,
                        rotv=False, prow=False, fallback=None)


@dataclass
class KernelStats:
    """What one call did about exactness and which kernel ran, for the caller that passes it to `attention(...,
    stats=)` (nothing is kept otherwise); the device's counts are read by `finalize_stats` (the call itself never
    waits for the GPU). MXFP4: `qk_inexact_blocks` / `v_inexact_blocks` blocks the E4M3 fold could not hold; when
    there are any, the call's output is the exact bf16 fallback's (every operand in bf16, the Triton
    kernel): `qk_fallback` and `v_fallback` (V only when it was 8-bit, i.e. not exact_p), and `kernel` says
    "triton". `p_inexact_blocks`: P̃ blocks with exponent < −16 (each weight < 6·2^−17 of the row maximum) whose
    E4M3 encoding rounded in the kernel whose output stands (0 when exact_p=True or in the fallback).
    Pass `stats` to `attention` to have the pre-pass timed as well (`prepass_ms`)."""

    variant: str = ""
    qk_inexact_blocks: int = 0
    v_inexact_blocks: int = 0
    qk_fallback: bool = False
    v_fallback: bool = False
    p_inexact_blocks: int = 0
    prepass_ms: float = 0.0  # set by finalize_stats
    kernel: str = ""  # which kernel ran: "gluon" (kernels/gluon_ws.py) or "triton" (kernels/_core.py)
    timed: bool = False  # record CUDA events around the pre-pass (set when the caller passes stats)



@functools.lru_cache(maxsize=32)
def _placeholder(device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """One zero element for the kernel arguments a variant does not read (no key padding mask, no ΔS table, ...):
    made once per device and dtype, never written, so a call allocates only what its kernel uses."""
    return torch.zeros((1,), device=device, dtype=dtype)


def _spec_and_row(recipe):
    """The recipe's AttentionSpec (read once per name, `dispatch.attention_spec`) and the dispatch row that runs it;
    NotImplementedError (with the reason) for a recipe no kernel runs, ValueError for one whose kernel is another
    entry point's (draft recipes need the video geometry)."""
    spec = dispatch.attention_spec(recipe)
    row = dispatch.variant_of(spec)
    why = dispatch.refusal(spec)
    if why:
        raise NotImplementedError(why)
    if row.entry != ENTRY:
        raise ValueError(f"{row.name} recipes run through lowbit_video.kernels.{row.entry.replace(':', '.')}")
    return spec, row


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, recipe, *, layout: str = "BHND",
              scale: float | None = None, key_padding_mask: torch.Tensor | None = None,
              exact_p: bool = False, promote: bool = True, stats: KernelStats | None = None,
              config: dict | None = None, rope_segments=None, return_lse: bool = False):
    """Attention of q (B, H, Nq, D), k, v (B, H, Nk, D) (or B, N, H, D with layout="BNHD") under
    `recipe` (name, path, Recipe or AttentionSpec), on CUDA. Returns the output in q's layout and dtype.

    key_padding_mask: bool (B, Nk), True = the key takes part (SDPA's convention); rows whose keys are
        all masked return 0. Masking acts on the scores; operands are quantized as given.
    exact_p: run P̂·V in bf16, exact for every P̃ block (default: E4M3, exact for blocks ≥ 2^−16).
    promote: add each key tile's FP8 P̂·V product to the fp32 output accumulator (Hopper's FP8 MMA
        accumulates with fewer than 32 bits); False keeps the running output inside the MMA.
    stats: a KernelStats to fill with what was done about exactness and which kernel ran (`finalize_stats` reads
        the device's counts); nothing is kept after the call otherwise.
    rope_segments: the model's RoPE t/h/w split for the "half" rotation (as attend's; default the
        recipe's, else Wan's split of head_dim).
    return_lse: also return each query row's log-sum-exp, fp32 (B, H, Nq) (or (B, Nq, H) for BNHD): the natural
        log of the normaliser the kernel divided the row by, i.e. of Σ P̂ for PNQ recipes and Σ P̃ for direct
        placement, with P̃ = exp(S − m) over the scores S = Q̂K̂ᵀ·scale (+ ΔS) as the kernel quantized them, plus
        q·mean(K)·scale where K was smoothed: the reference engine's `AttentionDiagnostics.lse`. Returns
        (out, lse).

    Inference-only: the kernels have no backward, so a call autograd would record raises InferenceOnlyError.

    A call without stats, key padding mask or config, of a row whose launches a plan may replay (sage2-int8, the
    MXFP4 family, the INT4 recipes), records its launches as a call plan; later calls of the same signature replay
    them (kernels/plans.py).
    """
    refuse_autograd("lowbit_video.kernels.attention", q, k, v)
    spec, row = _spec_and_row(recipe)
    plannable = (row.replay and stats is None and key_padding_mask is None and not config and q.is_cuda
                 and plans.available())
    if plannable:
        plan_key = _plan_key(spec, q, k, v, layout, scale, exact_p, promote, return_lse, rope_segments)
        kept = _replay(plans.PLANS.get(plan_key, spec), q, k, v, layout, return_lse)
        if kept is not None:
            return kept
    if layout not in ("BHND", "BNHD"):
        raise ValueError(f"layout must be 'BHND' or 'BNHD', got {layout!r}")
    B, H, Nq, D = prepass._dims(q, layout)
    Nk = prepass._dims(k, layout)[2]
    if D not in (64, 128) or v.shape[-1] != D:
        raise ValueError(f"kernels support head_dim 64 and 128 (q, k and v alike), got {D}")
    sm_scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    st = stats if stats is not None else KernelStats()
    st.variant = row.name
    st.timed = stats is not None
    cfg = merged_config(row.name, D, config, spec.placement)
    dev = q.device

    if key_padding_mask is not None:
        if key_padding_mask.shape != (B, Nk):
            raise ValueError(f"key_padding_mask must be (B, Nk) = {(B, Nk)}, got {tuple(key_padding_mask.shape)}")
        kpm = key_padding_mask.to(device=dev, dtype=torch.int8).contiguous()
        skpm = kpm.stride(0)
    else:
        kpm, skpm = _placeholder(dev, torch.int8), 0

    if cfg.get("DS", "table") not in ("table", "fused"):
        raise ValueError(f"config DS must be 'table' or 'fused', got {cfg['DS']!r}")
    gluon = dispatch.gluon_runs(cfg, key_padding_mask is not None, promote, q.device)
    recorder = plans.Recorder() if plannable else None
    run = recorder if recorder is not None else _launcher.launch
    prep = _prepare(q, k, v, spec, row, layout, exact_p, st, B, H, D, rope_segments, cfg.get("DS", "table"),
                    gluon=gluon, qk_fp8=_qk_fp8(cfg, gluon), run=run)
    lse = _new_lse(q, B, H, Nq, return_lse)
    out = _launch(prep, q, layout, B, H, Nq, Nk, D, sm_scale, kpm, skpm, key_padding_mask is not None,
                  promote, cfg, st, lse, run=run)
    smooth = row.smooths_k or spec.smooth_k  # the pre-pass smoothed K
    if recorder is not None:
        plans.PLANS.put(plan_key, recorder.plan(spec, q, k, v, out, lse, extra=(B, H, Nq, sm_scale, smooth)))
    return _result(out, lse, q, k, layout, B, H, Nq, sm_scale, smooth)


def replay_kept(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, spec, *, layout: str = "BHND",
                scale: float | None = None, exact_p: bool = False, promote: bool = True, return_lse: bool = False,
                rope_segments=None):
    """What `attention(q, k, v, spec, ...)` returns, by replaying the call plan kept for the call's signature; None
    where none is kept or plans are off now (kernels/plans.py). `spec`: the recipe's AttentionSpec as
    `dispatch.attention_spec` gives it (plans are keyed by its identity). Why callers that hold the spec ask this
    first (`attend`): a kept plan means a call of this signature passed every check, took the kernel route and
    recorded its launches, and those checks and the route depend on nothing the key does not hold (shapes, strides,
    dtypes, devices, the spec, the options), so a hit issues its first launch without going through them again
    (at the short shapes the GPU waits for that host time on a call from an idle GPU)."""
    if not plans.available():
        return None
    key = _plan_key(spec, q, k, v, layout, scale, exact_p, promote, return_lse, rope_segments)
    return _replay(plans.PLANS.get(key, spec), q, k, v, layout, return_lse)


def _plan_key(spec, q, k, v, layout, scale, exact_p, promote, return_lse, rope_segments) -> tuple:
    """The call's signature as kernels/plans.py keys it (the RoPE split as a tuple, hashable)."""
    return plans.key(spec, q, k, v, layout, scale, exact_p, promote, return_lse,
                     None if rope_segments is None else tuple(rope_segments))


def _replay(plan, q, k, v, layout, return_lse):
    """`attention`'s result by replaying `plan` on these tensors; None where no plan is given."""
    if plan is None:
        return None
    B, H, Nq, sm_scale, smooth = plan.extra
    out, lse = _new_output(q), _new_lse(q, B, H, Nq, return_lse)
    plan.replay(q, k, v, out, lse)
    return _result(out, lse, q, k, layout, B, H, Nq, sm_scale, smooth)


def _new_output(q: torch.Tensor) -> torch.Tensor:
    """The output of a call: q's shape, dtype and, where head_dim is contiguous in it, strides (the kernels write
    head_dim contiguously)."""
    out = torch.empty_like(q)
    if out.stride(-1) != 1:  # (a strided view's layout)
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    return out


def _new_lse(q: torch.Tensor, B: int, H: int, Nq: int, wanted: bool) -> torch.Tensor | None:
    """The rows' log-sum-exp buffer of a call, (B·H, Nq) fp32 on q's device, or None when not asked for."""
    return torch.empty((B * H, Nq), device=q.device, dtype=torch.float32) if wanted else None


def _result(out, lse, q, k, layout, B, H, Nq, sm_scale, smooth):
    """What `attention` returns: out, or with an LSE buffer (B·H, Nq) (out, lse) in the call's layout, the K mean's
    share of each score added back where the pre-pass smoothed K."""
    if lse is None:
        return out
    lse = lse.view(B, H, Nq)
    if smooth:
        lse += smoothing_shift(q, k, layout, sm_scale)
    return out, (lse.transpose(1, 2) if layout == "BNHD" else lse)


def smoothing_shift(q: torch.Tensor, k: torch.Tensor, layout: str, sm_scale: float,
                    max_elements: int = 1 << 26) -> torch.Tensor:
    """q·mean(K)·scale per query row, fp32 (B, H, Nq): what subtracting K's mean over tokens took off every score
    of the row, which the LSE adds back (the engine's `Operands.shift_lse`; a rotation shared by Q and K leaves
    the product unchanged). The mean in fp64 (`prepass.token_mean64`), the products in fp32, query rows in chunks
    of at most `max_elements` values."""
    B, H, Nq, D = prepass._dims(q, layout)
    kmean = prepass.token_mean64(k, layout).to(torch.float32).view(B, H, D, 1)
    qb = q.transpose(1, 2) if layout == "BNHD" else q
    shift = torch.empty((B, H, Nq), device=q.device, dtype=torch.float32)
    rows = max(1, max_elements // max(1, B * H * D))
    for r0 in range(0, Nq, rows):
        shift[:, :, r0:r0 + rows] = torch.matmul(qb[:, :, r0:r0 + rows].to(torch.float32), kmean).squeeze(-1)
    return shift.mul_(sm_scale)


def _qk_fp8(cfg: dict, gluon: bool) -> bool:
    """INT4 Q/K codes as E4M3: as config QK_FP8 says, or (None, the default) where the Gluon kernel runs."""
    return bool(cfg["QK_FP8"]) if cfg.get("QK_FP8") is not None else gluon


def _run_fallback(fb, P, out, so, kpm, skpm, H, Nq, Nk, D, sm_scale, has_kpm, promote, cfg, lse=None,
                  run=_launcher.launch):
    """The exact bf16 fallback of an MXFP4 call, after its E4M3 kernel: the gated pre-pass rewrites Q, K (and an
    8-bit V) in bf16 into the same buffers, then the gated Triton kernel overwrites `out` (and `lse`); each launch returns at
    once when no fold counted a block (the usual case: a few microseconds)."""
    qs, ks, vs = prepass.mx_prepass(fb["q"], fb["k"], fb["v"], fb["layout"], fb["spec"], counts=fb["counts"],
                                    qk_out=(fb["qbuf"], fb["kbuf"]), v_out=fb["vbuf"] if fb["v_again"] else None,
                                    gated=True, run=run)
    qq, kk, vv = fb["qbuf"], fb["kbuf"], fb["vbuf"]
    vs = vs if fb["v_again"] else fb["vs"]  # (exact_p: V was bf16 already, its exponents 0)
    ops = dict(qq=qq, kk=kk, vv=vv, qs=qs, ks=ks, vs=vs)
    P2 = dict(P, **ops, p_fp8=False, **_buffer_strides(ops, H))
    cfg = _bf16_tiles(cfg)
    grid = (triton.cdiv(Nq, cfg["BLOCK_M"]), P["qq"].shape[0])
    _attn(grid, P2, out, so, kpm, fb["counts"], skpm, H, Nq, Nk, D, sm_scale, has_kpm, promote, cfg,
          cfg["NUM_STAGES"], gated=True, lse=lse, run=run)


def _prepare(q, k, v, spec, row, layout, exact_p, st, B, H, D, rope_segments=None, ds="table", gluon=False,
             qk_fp8=False, run=_launcher.launch):
    """The operands of the row's kernel (a dict of tensors, strides and constexprs): its pre-pass's
    (kernels/operands.py, timed when `st.timed`), or q, k and v as they are where the row has none. gluon: the Gluon
    kernel will run if the operands are 8-bit; qk_fp8 (INT4): Q/K codes as E4M3 (kernels/operands.py); run: how the
    pre-pass launches its kernels."""
    why = dispatch.refuse_call(row, q, k)  # the input dtypes the row's kernel takes
    if why:
        raise ValueError(why)
    dummy_f = _placeholder(q.device, torch.float32)
    if row.prepass is None:
        ops = _as_given(q, k, v, layout, dummy_f)
    else:
        timed = q.is_cuda and st.timed
        if timed:
            t0 = torch.cuda.Event(enable_timing=True)
            t1 = torch.cuda.Event(enable_timing=True)
            t0.record()
        ops = dispatch.entry_function(row.prepass)(q, k, v, spec, layout, B=B, H=H, D=D, exact_p=exact_p,
                                                   gluon=gluon, qk_fp8=qk_fp8, ds=ds, rope_segments=rope_segments,
                                                   run=run)
        if timed:
            t1.record()
            st._events = (t0, t1)  # read by finalize_stats (no extra sync on the hot path)
        ops.update(_buffer_strides(ops, H))
    P = {**OPERAND_DEFAULTS, "kf": dummy_f, "qm": dummy_f, "hv": dummy_f, "mode": row.mode, **ops}
    P["gluon"] = (gluon and row.gluon and P["qq"].element_size() == 1 and P["vv"].element_size() == 1
                  and P["smq"] != 1)
    return P


def _as_given(q, k, v, layout, dummy_f):
    """The dense kernel's operands: q, k and v themselves (head_dim made contiguous where it is not), no scales."""
    qq, kk, vv = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    sv4 = prepass._bhnd_strides(vv, layout)
    return dict(qq=qq, kk=kk, vv=vv, qs=dummy_f, ks=dummy_f, vs=dummy_f, sq=prepass._bhnd_strides(qq, layout),
                sk=prepass._bhnd_strides(kk, layout), sv=(sv4[0], sv4[1], sv4[3], sv4[2]),  # (b, h, d, n)
                sqs=0, sks=0, svs=0)


def _buffer_strides(ops: dict, H: int) -> dict:
    """The (b, h, n, d) strides of a pre-pass's (B·H, N, D) buffers (Vᵀ: (b, h, d, n)) and of its scales."""
    qq, kk, vv = ops["qq"], ops["kk"], ops["vv"]
    return dict(sq=(qq.stride(0) * H, qq.stride(0), qq.stride(1), 1),
                sk=(kk.stride(0) * H, kk.stride(0), kk.stride(1), 1),
                sv=(vv.stride(0) * H, vv.stride(0), vv.stride(1), vv.stride(2)),
                sqs=ops["qs"].stride(0), sks=ops["ks"].stride(0), svs=ops["vs"].stride(0))


def _bf16_tiles(cfg: dict) -> dict:
    """The Triton kernel's settings for bf16 K/V tiles (the MXFP4 fallback's, exact_p's V): twice the bytes of 8-bit
    ones, so PIPE's 4 stages do not fit in shared memory (327724 B > 232448 on the H200); the unpipelined 3-stage
    loop does."""
    return dict(cfg, PIPE=False, NUM_STAGES=min(cfg["NUM_STAGES"], 3))


def _launch(prep, q, layout, B, H, Nq, Nk, D, sm_scale, kpm, skpm, has_kpm, promote, cfg, st, lse=None,
            run=_launcher.launch, trace=None):
    """The kernel on the pre-pass operands into a new output (and, given `lse` (B·H, Nq) fp32, the rows'
    log-sum-exp into it, as the kernel scaled the scores), launched by `run`. trace: the Gluon kernel's work-tile
    timeline buffer (`gluon_ws.launch`); ValueError where the Triton kernel runs."""
    out = _new_output(q)
    so = prepass._bhnd_strides(out, layout)
    P = prep
    fb = P["fallback"]
    # MXFP4's count of inexact P̃ blocks (the kernels add to it): the E4M3 kernel's slot of the pre-pass counters;
    # the other variants never touch it
    bad = fb["counts"][2:] if fb is not None else _placeholder(q.device, torch.int32)
    # the warp-specialized Gluon kernel (kernels/gluon_ws.py) takes 8-bit operands only (exact_p's bf16 V runs the
    # Triton kernel, with the same numerics); the pre-pass wrote Vᵀ in its key order exactly when it is to run
    if P.get("gluon"):
        from . import gluon_ws

        gluon_ws.launch(P, out, so, H, Nq, Nk, sm_scale * LOG2E, bad, stages=cfg["NUM_STAGES"],
                        defer=cfg.get("DEFER", False), early=cfg.get("EARLY_QK", False),
                        work_loop=cfg.get("WORK_LOOP", False), consumers=cfg.get("CONSUMERS", 2), lse=lse,
                        trace=trace, run=run)
        st.kernel = "gluon"
    elif trace is not None:
        raise ValueError("a work-tile timeline comes from the Gluon kernel only; this call runs the Triton kernel")
    else:
        st.kernel = "triton"
        tcfg = cfg
        if P["vv"].element_size() > 1:  # exact_p's bf16 V: as the fallback's tiles (`_run_fallback`)
            tcfg = _bf16_tiles(cfg)
        grid = (triton.cdiv(Nq, tcfg["BLOCK_M"]), B * H)
        _attn(grid, P, out, so, kpm, bad, skpm, H, Nq, Nk, D, sm_scale, has_kpm, promote, tcfg, tcfg["NUM_STAGES"],
              lse=lse, run=run)
    if fb is not None:
        _run_fallback(fb, P, out, so, kpm, skpm, H, Nq, Nk, D, sm_scale, has_kpm, promote, cfg, lse, run=run)
    st._counts = fb["counts"] if fb is not None else None
    st._exact_p = fb is not None and not fb["v_again"]
    return out


def _attn(grid, P, out, so, kpm, bad, skpm, H, Nq, Nk, D, sm_scale, has_kpm, promote, cfg, stages, gated=False,
          lse=None, run=_launcher.launch):
    run(attn_fwd, grid,
        P["qq"], P["kk"], P["vv"], out, P["qs"], P["ks"], P["vs"], kpm, bad,
        _placeholder(out.device, torch.float32) if lse is None else lse, P["kf"], P["qm"], P["hv"],
        *P["sq"][:3], *P["sk"][:3], *P["sv"], *so, P["sqs"], P["sks"], P["svs"], skpm, H, Nq, Nk, sm_scale * LOG2E,
        P["skf"], P["sqm"], 1.0 / math.sqrt(D),
        MODE=P["mode"], HEAD_DIM=D, HAS_KPM=has_kpm, PNQ=P["pnq"], P_FP8=P["p_fp8"],
        RULE=P["rule"], FLQ=P["flq"], QMAX=P["qmax"], P_SHIFT=P["p_shift"], PROMOTE=promote, PQ=cfg.get("PQ", True),
        BLOCK_M=cfg["BLOCK_M"], BLOCK_N=BLOCK_N, NUM_STAGES=stages, num_warps=cfg["num_warps"],
        PLEV=P["plev"], SMQ=P["smq"], ROTV=P["rotv"], PROW=P.get("prow", False), PIPE=cfg.get("PIPE", False),
        GATED=gated, WRITE_LSE=lse is not None,
    )


def finalize_stats(st: KernelStats) -> KernelStats:
    """Synchronize and read the device-side counters of `st`: the MXFP4 fold counts and so whether the exact
    fallback's output stands, P̃ inexact blocks, the pre-pass time (when timed)."""
    counts = getattr(st, "_counts", None)
    if counts is not None:
        nqk, nv, p_e4m3, p_fallback = counts.tolist()
        fallback = nqk + nv > 0
        st.qk_inexact_blocks, st.v_inexact_blocks = nqk, nv
        st.qk_fallback = fallback
        st.v_fallback = fallback and not st._exact_p
        st.p_inexact_blocks = 0 if st._exact_p or fallback else p_e4m3
        if fallback:
            st.kernel = "triton"
    ev = getattr(st, "_events", None)
    if ev is not None:
        ev[1].synchronize()
        st.prepass_ms = ev[0].elapsed_time(ev[1])
    return st


def split_call(q, k, v, recipe, *, layout: str = "BHND", scale: float | None = None,
               exact_p: bool = False, promote: bool = True, config: dict | None = None, rope_segments=None):
    """For benchmarks: (prepass, kernel) callables whose sequence equals one `attention(...)` call; `kernel` reuses
    the operands of the last `prepass` (one is run here). kernel(trace=buffer) also writes the Gluon kernel's
    work-tile timeline (`gluon_ws.launch`; benchmarks/work_tile_timeline.py)."""
    spec, row = _spec_and_row(recipe)
    B, H, Nq, D = prepass._dims(q, layout)
    Nk = prepass._dims(k, layout)[2]
    sm_scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    cfg = merged_config(row.name, D, config, spec.placement)
    st = KernelStats(variant=row.name)
    kpm = _placeholder(q.device, torch.int8)
    box = {}

    def run_prepass():
        gluon = dispatch.gluon_runs(cfg, False, promote, q.device)
        box["prep"] = _prepare(q, k, v, spec, row, layout, exact_p, st, B, H, D, rope_segments,
                               cfg.get("DS", "table"), gluon=gluon, qk_fp8=_qk_fp8(cfg, gluon))

    def run_kernel(trace=None):
        return _launch(box["prep"], q, layout, B, H, Nq, Nk, D, sm_scale, kpm, 0, False, promote, cfg, st,
                       trace=trace)

    run_prepass()
    return run_prepass, run_kernel, st
