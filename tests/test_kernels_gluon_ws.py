"""The warp-specialized Gluon kernel (kernels/gluon_ws.py) against the reference engine and the Triton kernel: its
settings (DEFER, EARLY_QK, WORK_LOOP) change no output bit, it counts inexact P̃ blocks as the Triton kernel does,
and it gives way to the Triton kernel on the exact bf16 fallbacks; a traced launch changes no output bit. GPU only
(sm_90; the interpreter cannot run Gluon), but for the launch's alignment check. Criterion: tests/kernel_helpers.py."""

from __future__ import annotations

import pytest
import torch

from kernel_helpers import (
    HAS_TRITON, MX_RECIPES, needs_cuda, make_qkv, rel_l2, to_layout, from_layout, check_against_reference, SHAPES)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("recipe", ["sage2-int8"] + MX_RECIPES)
@pytest.mark.parametrize("outliers", [False, True])
@pytest.mark.parametrize("shape,layout", SHAPES + [((1, 1, 1, 130, 128), "BHND")])
def test_gluon_kernel_matches_reference(recipe, outliers, shape, layout):
    """config GLUON: the warp-specialized Gluon kernel (sage2-int8 and the MXFP4 recipes), held to the same bound
    against the reference engine as the Triton kernel (same operands and arithmetic; only fp32 rounding order may
    differ), and within a few output ulps of the Triton kernel (GLUON=false), which meets the bound too.
    Shapes: ragged tiles, q_len != kv_len, one query."""
    from lowbit_video.kernels.launch import KernelStats, attention, finalize_stats

    b, h, nq, nk, d = shape
    q, k, v = make_qkv(b, h, nq, nk, d, outliers=outliers, seed=nq + d)
    args = [to_layout(t, layout).cuda() for t in (q, k, v)]
    st = KernelStats()
    out = attention(*args, recipe, layout=layout, config={"GLUON": True}, stats=st)
    finalize_stats(st)
    assert st.kernel == "gluon" and not st.qk_fallback and not st.v_fallback  # the Gluon kernel itself ran
    check_against_reference(recipe, q, k, v, from_layout(out, layout))
    st_tri = KernelStats()
    tri = attention(*args, recipe, layout=layout, config={"GLUON": False}, stats=st_tri)
    assert st_tri.kernel == "triton"
    check_against_reference(recipe, q, k, v, from_layout(tri, layout))
    assert rel_l2(out.float().cpu(), tri.float().cpu()) < 4e-3  # bf16 output: ~1 ulp where rounding differs


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("recipe,stages", [("sage2-int8", 3), ("mxattention", 3), ("mxattention", 4)])
def test_gluon_deferred_stage_release_changes_no_bit(recipe, stages):
    """config DEFER moves when a consumer releases a K/V stage, EARLY_QK when it issues the next QKᵀ; neither
    changes what is computed: the output is the same bits, over enough key tiles (13, the last ragged) that every
    stage of the ring is refilled several times."""
    from lowbit_video.kernels.launch import KernelStats, attention

    q, k, v = (t.cuda() for t in make_qkv(1, 3, 300, 1600, 128, outliers=True, seed=7))
    outs = []
    for defer, early in ((False, False), (True, False), (True, True), (False, True)):
        st = KernelStats()
        config = {"DEFER": defer, "EARLY_QK": early, "NUM_STAGES": stages}
        outs.append(attention(q, k, v, recipe, config=config, stats=st))
        assert st.kernel == "gluon"
    assert all(torch.equal(outs[0], o) for o in outs[1:])


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("recipe,config", [("sage2-int8", {}), ("sage2-int8", {"EARLY_QK": False}),
                                           ("mxattention", {}), ("mxfp4-ocp", {}),
                                           ("rotateattention-half", {"GLUON": True})])
@pytest.mark.parametrize("b,h,nq,nk,layout", [(2, 40, 1000, 777, "BHND"), (1, 3, 300, 1600, "BNHD")])
def test_gluon_work_loop_changes_no_bit(recipe, config, b, h, nq, nk, layout):
    """config WORK_LOOP: the programs run their work tile inside a loop over work tiles rather than without one;
    the per-tile arithmetic is the same, so the output bits (and, for MXFP4, the inexact-block count) are too.
    (2, 40, 1000, 777): 640 work tiles, each of 7 key tiles (the last ragged) through a 3- or 4-stage ring, the
    last query tile ragged too. (1, 3, 300, 1600): a strided (BNHD) output."""
    from lowbit_video.kernels.launch import KernelStats, attention, finalize_stats

    q, k, v = (to_layout(t, layout).cuda() for t in make_qkv(b, h, nq, nk, 128, outliers=True, seed=nq + nk))
    outs, bads = [], []
    for loop in (False, True):
        st = KernelStats()
        outs.append(attention(q, k, v, recipe, layout=layout, config=dict(config, WORK_LOOP=loop), stats=st))
        finalize_stats(st)
        assert st.kernel == "gluon"
        bads.append(st.p_inexact_blocks)
    assert torch.equal(outs[0], outs[1])
    assert bads[0] == bads[1]


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("b,h,nq,nk,layout", [(2, 3, 300, 200, "BHND"), (1, 5, 1000, 777, "BNHD")])
def test_gluon_three_consumers_match_reference(b, h, nq, nk, layout):
    """config CONSUMERS=3 (sage2-int8 at head_dim 64): programs of three consumer warpgroups, 192 query rows, each
    row computed by the same per-tile arithmetic as with two, both held to the reference bound.
    (2, 3, 300, 200): the second program of each head has one ragged and one empty warpgroup (rows 320–383);
    (1, 5, 1000, 777): six programs per head, a ragged last key tile, a strided (BNHD) output."""
    from lowbit_video.kernels.launch import KernelStats, attention

    q, k, v = make_qkv(b, h, nq, nk, 64, outliers=True, seed=nq + nk)
    args = [to_layout(t, layout).cuda() for t in (q, k, v)]
    outs = []
    for consumers in (2, 3):
        st = KernelStats()
        outs.append(attention(*args, "sage2-int8", layout=layout, config={"CONSUMERS": consumers}, stats=st))
        assert st.kernel == "gluon"
        check_against_reference("sage2-int8", q, k, v, from_layout(outs[-1], layout))
    assert rel_l2(outs[1].float().cpu(), outs[0].float().cpu()) < 4e-3  # bf16 output: ~1 ulp where rounding differs


@pytest.mark.gpu
@needs_cuda
def test_gluon_mx_counts_inexact_p_blocks_as_the_triton_kernel():
    """Peaky rows put many P̃ blocks below what E4M3 holds; the Gluon kernel counts them as the Triton kernel
    does (equal up to the odd block whose fp32 exponent lands on the other side of a rule boundary)."""
    from lowbit_video.kernels.launch import KernelStats, attention, finalize_stats

    q, k, v = make_qkv(1, 2, 300, 512, 64, outliers=False, dtype=torch.float32)
    q = q * 4.0
    counts = []
    for config in ({"GLUON": True}, {"GLUON": False}):
        st = KernelStats()
        attention(q.cuda(), k.cuda(), v.cuda(), "mxattention", stats=st, config=config)
        counts.append(finalize_stats(st).p_inexact_blocks)
    assert counts[1] > 20, counts  # 52 measured on the H200 (Triton kernel)
    assert abs(counts[0] - counts[1]) <= max(2, counts[1] // 100), counts


@pytest.mark.gpu
@needs_cuda
def test_gluon_config_runs_the_triton_kernel_on_exact_bf16_fallbacks():
    """A K block E4M3 cannot hold sends the MXFP4 pre-pass to bf16 operands, which the Gluon kernel does not
    take: with config GLUON the Triton kernel runs them, and the result still meets the bound."""
    from lowbit_video.kernels.launch import KernelStats, attention, finalize_stats

    q, k, v = make_qkv(1, 2, 128, 256, 128, outliers=False, dtype=torch.float32)
    k[0, 0, 5, :32] *= 1e-7
    st = KernelStats()
    out = attention(q.cuda(), k.cuda(), v.cuda(), "mxfp4-ocp", stats=st, config={"GLUON": True})
    finalize_stats(st)
    assert st.qk_fallback and st.kernel == "triton"  # (every operand in bf16, V in token order)
    check_against_reference("mxfp4-ocp", q, k, v, out)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("recipe,d", [("sage2-int8", 128), ("sage2-int8", 64), ("mxattention", 128)])
def test_gluon_traced_call_changes_no_bit_and_stamps_each_work_tile_in_order(recipe, d):
    """A traced launch (the timeline of benchmarks/work_tile_timeline.py) computes the same output bits as a plain
    one, and every work tile's warpgroups leave their SM id and four clock stamps in order: start <= first QKᵀ <=
    key loop done <= output stored, the global timer's start before its end. (1, 5, 1000, 777): ragged last query
    and key tiles; at head_dim 64 sage2-int8 runs three consumers."""
    from lowbit_video.kernels.dispatch import attention_spec, merged_config, variant_of
    from lowbit_video.kernels.gluon_ws import TRACE_SLOTS
    from lowbit_video.kernels.launch import split_call

    q, k, v = (t.cuda() for t in make_qkv(1, 5, 1000, 777, d, outliers=True, seed=11))
    spec = attention_spec(recipe)
    consumers = merged_config(variant_of(spec).name, d, None, spec.placement).get("CONSUMERS", 2)
    n_work = 5 * -(-1000 // (64 * consumers))
    _, kernel, st = split_call(q, k, v, spec)
    plain = kernel()
    assert st.kernel == "gluon"
    trace = torch.zeros(n_work, consumers, TRACE_SLOTS, dtype=torch.int64, device="cuda")
    traced = kernel(trace=trace)
    assert torch.equal(plain, traced)
    t = trace.cpu()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    assert ((t[..., 0] >= 0) & (t[..., 0] < sms)).all()
    assert (t[..., 2] > 0).all()  # every work tile and warpgroup stamped
    assert ((t[..., 2] <= t[..., 3]) & (t[..., 3] <= t[..., 4]) & (t[..., 4] <= t[..., 5])).all()
    assert (t[..., 1] < t[..., 6]).all()
    assert (t[:, :, 0] == t[:, :1, 0]).all()  # a work tile's warpgroups share its SM
    with pytest.raises(ValueError, match="trace buffer"):
        kernel(trace=trace[1:])


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed (it is not a test dependency)")
@pytest.mark.parametrize("strides,offset", [((1280, 640, 68, 1), 0), ((1280, 640, 64, 1), 4)])
def test_gluon_sage_mode_refuses_output_rows_off_16_bytes(strides, offset):
    """sage2-int8's epilogue stores 16-byte pieces of each output row, so `launch` refuses an output whose row
    strides are not multiples of 8 elements or whose first row is not 16-byte aligned, before any launch (CPU)."""
    from lowbit_video.kernels.gluon_ws import launch
    from lowbit_video.kernels.modes import MODE_SAGE

    base = torch.empty(4096, dtype=torch.bfloat16)
    out = torch.as_strided(base, (2, 2, 10, 64), strides, storage_offset=offset)
    with pytest.raises(ValueError, match="16-byte aligned output rows"):
        launch({"mode": MODE_SAGE, "svs": 64}, out, strides, 2, 10, 10, 1.0, None)
