"""The operand pre-pass of each attention-kernel variant: what `launch.attention` hands the kernel (kernels/_core.py
`attn_fwd`, or the Gluon kernel kernels/gluon_ws.py) for one recipe family. A dispatch row names its function
(kernels/dispatch.py `Variant.prepass`); the dense row has none (the kernel reads q, k and v as they are).

Every function takes (q, k, v, spec, layout) and the call's keywords (B, H, D, exact_p, gluon, qk_fp8, ds,
rope_segments, run: those a variant does not read it ignores) and returns the kernel's operands: qq, kk, vv (B·H,
N, D) (Vᵀ: (B·H, D, N)), their scales qs, ks, vs, and the settings of its mode that differ from
`launch.OPERAND_DEFAULTS` (P̃ rule and placement, Q smoothing, ΔS table, V rotation, ...). `run` launches each
kernel (`_launcher.launch`, or a call plan's recorder, kernels/plans.py, for the rows a plan may replay). The
kernels' strides are derived from the buffers by the launch. gluon: the Gluon kernel will run if the operands are
8-bit, so 8-bit Vᵀ is written in its key order (`prepass.operand_key`). qk_fp8 (INT4): Q/K codes as E4M3 rather
than int8 (the kernels pick their QKᵀ MMA by that dtype).
"""

from __future__ import annotations

import functools
import math

import torch
import triton

from . import prepass


@functools.lru_cache(maxsize=32)
def _p_shift(static_scale: float) -> float:
    """−log2 of sage2's static P̃ scale rounded to fp32 (the reference's fp32 scale)."""
    return -math.log2(float(torch.tensor(static_scale, dtype=torch.float32)))


def mx_operands(q, k, v, spec, layout, *, B, H, D, exact_p, gluon, run, **_):
    """The MXFP4 pre-pass without a host decision: Q, K and V folded into E4M3 (V in bf16 with exact_p), each in the
    first half of a bf16-sized buffer, and the plan of the exact bf16 fallback (`launch._run_fallback`), which
    overwrites those buffers on the device only if a fold counted a block it could not hold. The buffers cost one
    byte per operand element more than E4M3 alone; the decision costs no host synchronisation (one per call before).
    Every buffer is written by a launch (the counters too), so a call plan may replay the call (`prepass.mx_prepass`
    declines it where torch casts Q and K first)."""
    dev = q.device
    nq_pad = triton.cdiv(prepass._dims(q, layout)[2], prepass.TILE) * prepass.TILE
    nk_pad = triton.cdiv(prepass._dims(k, layout)[2], prepass.TILE) * prepass.TILE
    counts = prepass.zeroed_counters(4, dev, run)  # [Q/K, V fold, P̃ E4M3 kernel, P̃ fallback]
    qbuf = torch.empty((B * H, nq_pad, D), device=dev, dtype=torch.bfloat16)
    kbuf = torch.empty((B * H, nk_pad, D), device=dev, dtype=torch.bfloat16)
    vbuf = torch.empty((B * H, D, nk_pad), device=dev, dtype=torch.bfloat16)
    qq, kk = prepass.fp8_view(qbuf), prepass.fp8_view(kbuf)
    vv = vbuf if exact_p else prepass.fp8_view(vbuf)
    qs, ks, vs = prepass.mx_prepass(q, k, v, layout, spec, counts=counts, qk_out=(qq, kk), v_out=vv,
                                    operand_order=gluon and not exact_p, run=run)
    fallback = dict(q=q, k=k, v=v, layout=layout, spec=spec, counts=counts, qbuf=qbuf, kbuf=kbuf, vbuf=vbuf,
                    vs=vs, v_again=not exact_p)
    rule, flq, qmax = prepass.rule_params(spec.p)
    return dict(qq=qq, qs=qs, kk=kk, ks=ks, vv=vv, vs=vs, fallback=fallback, p_fp8=vv.dtype == torch.float8_e4m3fn,
                rule=rule, flq=flq, qmax=qmax, p_shift=8.0, pnq=spec.placement == "pnq")


def sage_operands(q, k, v, spec, layout, *, gluon, run, **_):
    """sage2-int8: INT8 Q per token and K in per-thread groups (K smoothed by its mean), Vᵀ FP8 per channel, P̃
    FP8 at the recipe's static scale."""
    qq, qs, kk, ks, vv, vs = prepass.sage_prepass(q, k, v, layout, operand_order=gluon, run=run)
    return dict(qq=qq, qs=qs, kk=kk, ks=ks, vv=vv, vs=vs, p_fp8=True, p_shift=_p_shift(spec.p.static_scale))


def int4_operands(q, k, v, spec, layout, *, D, ds, qk_fp8, rope_segments, run, **_):
    """The INT4 recipes: rotated INT4 codes of Q and K per token (int8, or E4M3 with qk_fp8), Vᵀ per channel (rotated
    by the Sylvester matrix with rotate_v); with Q smoothing ΔS from a table (ds "table") or fused in the kernel.
    Every buffer is written by a launch through `run` (the matrices are made once per device), so a call plan may
    replay the call (`prepass.int4_prepass` declines it where torch casts V first)."""
    if ds == "fused" and spec.smooth_q and D > 64:
        # measured on the H200 (Triton 3.6): 279552 B of shared memory at head_dim 128 > 232448
        raise ValueError("DS='fused' fits in shared memory at head_dim 64 only; use DS='table'")
    qq, qs, qm, kk, ks, kf, vv, vs = prepass.int4_prepass(q, k, v, layout, spec, rope_segments, qk_fp8, run=run)
    smq, rotv = (0 if not spec.smooth_q else 2 if ds == "table" else 1), bool(spec.rotate_v)
    if smq == 2:
        kf = prepass.delta_s_table(qm, kf, run=run)
        skf, sqm = kf.stride(0), kf.stride(1)
    else:
        skf, sqm = (kf.stride(0) if smq else 0), qm.stride(0)
    ops = dict(qq=qq, qs=qs, qm=qm, kk=kk, ks=ks, kf=kf, vv=vv, vs=vs, smq=smq, rotv=rotv, skf=skf, sqm=sqm,
               plev=15 if spec.p.scheme == "affine" else 7, pnq=spec.placement == "pnq")
    if rotv:
        ops["hv"] = prepass._sylvester_pm1(D, torch.float32, q.device)
    return ops


def nvfp4_operands(q, k, v, spec, layout, **_):
    """The NVFP4 recipes: E2M1·E4M3 values of Q, K and Vᵀ in fp16 for exact 16-bit MMAs; with Q smoothing ΔS from a
    table; P̃ per row where its outer scale is "row"."""
    qq, qs, qm, kk, ks, kf, vv, vs = prepass.nvfp4_prepass(q, k, v, layout, spec)
    ops = dict(qq=qq, qs=qs, qm=qm, kk=kk, ks=ks, vv=vv, vs=vs, pnq=spec.placement == "pnq",
               prow=spec.p.outer_scale == "row")
    if spec.smooth_q:
        kf = prepass.delta_s_table(qm, kf)
        ops.update(kf=kf, smq=2, skf=kf.stride(0), sqm=kf.stride(1))
    return ops


__all__ = ["int4_operands", "mx_operands", "nvfp4_operands", "sage_operands"]
