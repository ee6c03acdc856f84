"""`launch.attention` and `attend`'s dispatch to it (kernels/launch.py): key padding masks, promote=False, fully
masked rows, the exact bf16 fallbacks (decided on the device) and exact_p, which recipes run on CUDA only, `attend`
picking the kernel on CUDA, and its hot path: no host synchronisation, replayable in a CUDA graph. Criterion:
tests/kernel_helpers.py."""

from __future__ import annotations

import textwrap

import pytest
import torch

from lowbit_video.attention import attend, exact_attention
from kernel_helpers import (
    REPO, RATIO, INT4_RECIPES, NVFP4_RECIPES, HAS_TRITON, needs_cuda, interpreter_kernels, run_interpreted, make_qkv,
    rel_l2, to_layout, from_layout, check_against_reference)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("layout", ["BHND", "BNHD"])
def test_dense_kernel_matches_sdpa_with_mask(dtype, layout):
    from lowbit_video.kernels.launch import attention

    q, k, v = make_qkv(2, 3, 200, 333, 64, outliers=True, dtype=dtype)
    mask = torch.rand(2, 333, generator=torch.Generator().manual_seed(1)) > 0.3
    out = attention(*(to_layout(t, layout).cuda() for t in (q, k, v)), "fp16", layout=layout,
                    key_padding_mask=mask.cuda())
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.double(), k.double(), v.double(), attn_mask=mask[:, None, None, :].double().log())
    # 16-bit P̃ and output rounding: a few ulp of the 16-bit format
    assert rel_l2(from_layout(out, layout).cpu(), ref) < (4e-3 if dtype == torch.bfloat16 else 1e-3)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("recipe", ["mxattention", "sage2-int8"])
def test_key_padding_mask_equals_truncated_keys(recipe):
    """A padding mask over the key tail (valid length a multiple of 32, so V's token blocks and the
    key tiles of the kept keys are those of the truncated problem) equals the reference on the kept keys."""
    from lowbit_video.kernels.launch import KernelStats, attention

    q, k, v = make_qkv(2, 2, 130, 300, 128, outliers=True)
    mask = torch.zeros(2, 300, dtype=torch.bool)
    mask[:, :224] = True
    st = KernelStats()
    out = attention(q.cuda(), k.cuda(), v.cuda(), recipe, key_padding_mask=mask.cuda(), stats=st)
    assert st.kernel == "triton"  # the Gluon kernel has no key padding mask
    if recipe == "sage2-int8":
        # K smoothing and V's per-channel FP8 scale see all keys (operands are quantized as given),
        # so the masked call is a different quantization of the kept keys: as accurate as the recipe.
        qc, kc, vc = (t.float()[:, :, :224] if t is not q else t.float() for t in (q, k, v))
        exact = exact_attention(qc, kc, vc)
        ref = attend(qc, kc, vc, recipe, backend="reference")
        assert rel_l2(out.float().cpu(), exact) <= 1.5 * rel_l2(ref, exact)
    else:
        check_against_reference(recipe, q, k, v, out, nk_valid=224)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("recipe", ["mxattention", "sage2-int8"])
def test_promote_false_runs_the_triton_kernel(recipe):
    """promote=False (the running output kept inside the FP8 MMA) exists in the Triton kernel only: the default
    GLUON gives way to it, and a short sequence (3 key tiles) still meets the bound."""
    from lowbit_video.kernels.launch import KernelStats, attention

    q, k, v = make_qkv(1, 2, 200, 384, 128, outliers=False, seed=5)
    st = KernelStats()
    out = attention(q.cuda(), k.cuda(), v.cuda(), recipe, promote=False, stats=st)
    assert st.kernel == "triton"
    check_against_reference(recipe, q, k, v, out)


@pytest.mark.gpu
@needs_cuda
def test_fully_masked_rows_give_zero():
    from lowbit_video.kernels.launch import attention

    q, k, v = make_qkv(2, 1, 64, 100, 64, outliers=False)
    mask = torch.ones(2, 100, dtype=torch.bool)
    mask[1] = False
    out = attention(q.cuda(), k.cuda(), v.cuda(), "mxattention", key_padding_mask=mask.cuda()).cpu()
    assert torch.isfinite(out).all() and float(out[1].abs().max()) == 0.0


@pytest.mark.gpu
@needs_cuda
def test_wide_exponent_spread_falls_back_to_exact_bf16():
    """A K token whose 32-blocks span more than E4M3's 15 binades, and a V channel likewise: counted,
    run in bf16 (exact), and still within tolerance."""
    from lowbit_video.kernels.launch import KernelStats, attention, finalize_stats

    q, k, v = make_qkv(1, 2, 128, 256, 128, outliers=False, dtype=torch.float32)
    k[0, 0, 5, :32] *= 1e-7
    v[0, 1, :32, 7] *= 1e-7
    st = KernelStats()
    out = attention(q.cuda(), k.cuda(), v.cuda(), "mxfp4-ocp", stats=st)
    finalize_stats(st)
    assert st.qk_fallback and st.qk_inexact_blocks > 0
    assert st.v_fallback and st.v_inexact_blocks > 0
    check_against_reference("mxfp4-ocp", q, k, v, out)


@pytest.mark.gpu
@needs_cuda
def test_tiny_p_blocks_are_counted_and_exact_p_removes_them():
    from lowbit_video.kernels.launch import KernelStats, attention, finalize_stats

    q, k, v = make_qkv(1, 2, 128, 512, 64, outliers=False, dtype=torch.float32)
    q = q * 4.0  # peaky rows: most P̃ blocks far below the row maximum
    st = KernelStats()
    out = attention(q.cuda(), k.cuda(), v.cuda(), "mxattention", stats=st)
    finalize_stats(st)
    assert st.p_inexact_blocks > 0
    st2 = KernelStats()
    out2 = attention(q.cuda(), k.cuda(), v.cuda(), "mxattention", stats=st2, exact_p=True)
    finalize_stats(st2)
    assert st2.p_inexact_blocks >= 0 and not st2.v_fallback
    d1, _ = check_against_reference("mxattention", q, k, v, out)
    d2, _ = check_against_reference("mxattention", q, k, v, out2)
    assert d2 <= d1 * 1.5 + 1e-6


def _kernel_calls(monkeypatch) -> list[str]:
    """The variants of the kernel calls `attend` makes from now on (a spy around `dispatch.run_kernel`, which every
    kernel call goes through)."""
    from lowbit_video.kernels import dispatch

    calls, run_kernel = [], dispatch.run_kernel
    monkeypatch.setattr(dispatch, "run_kernel", lambda spec, *a, **kw: calls.append(dispatch.variant_of(spec).name)
                        or run_kernel(spec, *a, **kw))
    return calls


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("recipe", ["mxattention", "sage2-int8"])
def test_attend_dispatches_to_kernel_on_cuda(recipe, monkeypatch):
    from lowbit_video.kernels import attention as kattention

    q, k, v = make_qkv(1, 2, 200, 200, 64, outliers=False)
    qc, kc, vc = q.cuda(), k.cuda(), v.cuda()
    calls = _kernel_calls(monkeypatch)
    auto = attend(qc, kc, vc, recipe)
    assert len(calls) == 1  # the kernel ran
    assert torch.equal(auto, kattention(qc, kc, vc, recipe))
    ref = attend(qc, kc, vc, recipe, backend="reference")
    assert ref.device.type == "cuda" and len(calls) == 1  # the engine ran
    if recipe == "sage2-int8":
        return  # accuracy: test_kernel_matches_reference (bf16 output rounding is close to 5 % here)
    # bf16 outputs: the MXFP4 kernel is exact enough that most outputs round to the same bf16
    assert rel_l2(auto.cpu(), ref.cpu()) < 0.05 * rel_l2(ref.cpu(), exact_attention(q.float(), k.float(), v.float()))


@pytest.mark.gpu
@needs_cuda
def test_attend_dispatches_int4_to_kernel_with_rope_segments(monkeypatch):
    """attend(..., rope_segments=...) runs the kernel on CUDA with the model's split for the half rotation."""
    q, k, v = make_qkv(1, 2, 200, 300, 128, outliers=True, dtype=torch.float32)
    segs = (64, 32, 32)
    calls = _kernel_calls(monkeypatch)
    auto = attend(q.cuda(), k.cuda(), v.cuda(), "rotateattention-half", rope_segments=segs)
    assert calls == ["int4"]
    ref = attend(q, k, v, "rotateattention-half", backend="reference", rope_segments=segs).double()
    err = rel_l2(ref, exact_attention(q, k, v))
    assert rel_l2(auto.cpu(), ref) <= RATIO * err


@pytest.mark.parametrize("recipe", INT4_RECIPES + NVFP4_RECIPES)
def test_int4_and_nvfp4_recipes_are_supported_on_cuda_only(recipe):
    """Dispatched on CUDA (their GPU tests pass on the H200), never on CPU."""
    from lowbit_video.kernels import supports
    from lowbit_video.recipes import load_recipe

    spec = load_recipe(recipe).attention
    if HAS_TRITON:
        assert supports(spec) == (True, "")
    assert supports(spec, "cpu", 128) == (False, "kernels run on CUDA devices only")


def _spread_v(v: torch.Tensor) -> torch.Tensor:
    """V with one channel's first 32-token block 2^-23 times smaller: 23 binades below the channel's maximum, more
    than E4M3 holds (V is folded as it is; a K block would be mixed over head_dim by mxattention's Hadamard)."""
    v = v.clone()
    v[0, 1, :32, 7] *= 2.0 ** -23
    return v


_FALLBACK_SCRIPT = textwrap.dedent(
    """
    import json, sys, torch
    sys.path.insert(0, {tests!r})
    from kernel_helpers import make_qkv, rel_l2
    from lowbit_video.attention import attend, exact_attention
    from lowbit_video.kernels import launch
    res = {{}}
    q, k, v = make_qkv(1, 2, 130, 200, 64, outliers=False, dtype=torch.float32)
    spread = k.clone()
    spread[0, 0, 5, :32] *= 2.0 ** -23
    run_fallback = launch._run_fallback
    for name, kk in (("plain", k), ("spread", spread)):
        st = launch.KernelStats()
        out = launch.attention(q, kk, v, "mxfp4-ocp", stats=st).double()
        launch.finalize_stats(st)
        launch._run_fallback = lambda *a, **kw: None  # the E4M3 kernel's output alone
        e4m3 = launch.attention(q, kk, v, "mxfp4-ocp").double()
        launch._run_fallback = run_fallback
        ref = attend(q, kk, v, "mxfp4-ocp", backend="reference").double()
        res[name] = dict(diff=rel_l2(out, ref), err=rel_l2(ref, exact_attention(q, kk, v)), fallback=st.qk_fallback,
                         v_fallback=st.v_fallback, blocks=st.qk_inexact_blocks, kernel=st.kernel,
                         rewritten=not torch.equal(out, e4m3))
    print(json.dumps(res))
    """
)


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed (it is not a test dependency)")
@interpreter_kernels
def test_exact_fallback_is_decided_on_the_device_under_triton_interpreter():
    """The gated bf16 pre-pass and kernel after the E4M3 kernel: without a block E4M3 cannot hold they return at once
    (the output is the E4M3 kernel's, within the bound); with one (a K block 2^-23 below its tile) they rewrite the
    output, and the stats read afterwards say so. No host read decides it. (The values of the bf16 fallback are
    GPU-tested: the interpreter computes bf16 dots wrongly, see kernels/README.md.)"""
    res = run_interpreted(_FALLBACK_SCRIPT.format(tests=str(REPO / "tests")))
    plain, spread = res["plain"], res["spread"]
    assert not plain["fallback"] and plain["blocks"] == 0 and not plain["rewritten"], res
    assert plain["diff"] <= RATIO * plain["err"], res
    assert spread["fallback"] and spread["v_fallback"] and spread["blocks"] == 1 and spread["kernel"] == "triton", res
    assert spread["rewritten"], res


def _hot_path_recipes() -> list[str]:
    """Every recipe `attend` runs a kernel for but sage-nvfp4, whose pre-pass is formats.nvfp4 itself in float64 torch
    (the reference's code, which checks its scales on the host; NVFP4 runs on 16-bit MMAs, no speed target), and the
    draft recipes (their own kernel and tests); plus fp16 (torch SDPA)."""
    from lowbit_video.kernels import dispatch

    return [r for r in dispatch.kernel_recipes("attention") if r != "sage-nvfp4"] + ["fp16"]


@pytest.mark.gpu
@needs_cuda
def test_attend_never_waits_for_the_gpu():
    """After a first call (compilation, the recipe read, cached matrices), `attend` on CUDA only issues work: under
    torch's sync debug mode "error" any synchronising call (a device-to-host read, a pageable copy, a stream
    synchronisation) raises."""
    q, k, v = (t.cuda() for t in make_qkv(1, 2, 300, 300, 128, outliers=True))
    for recipe in _hot_path_recipes():
        for layout in ("BHND", "BNHD"):
            args = [to_layout(t, layout) for t in (q, k, v)]
            attend(*args, recipe, layout=layout)
            torch.cuda.synchronize()
            torch.cuda.set_sync_debug_mode("error")
            try:
                attend(*args, recipe, layout=layout)
            finally:
                torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("recipe", ["mxattention", "sage2-int8", "rotateattention-half", "mxfp4-ocp"])
def test_attend_replays_in_a_cuda_graph(recipe):
    """`attend` captured once in a CUDA graph replays on new inputs to the eager output bit for bit. For the MXFP4
    recipes the exact bf16 fallback is decided inside the replay: a V block E4M3 cannot hold, copied into the
    captured inputs, gives the eager fallback's output (and that meets the bound)."""
    from lowbit_video.kernels.launch import KernelStats, attention, finalize_stats

    q, k, v = (t.cuda() for t in make_qkv(1, 2, 300, 300, 128, outliers=True, seed=1))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        attend(q, k, v, recipe)  # compile and cache outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = attend(q, k, v, recipe)
    inputs = [make_qkv(1, 2, 300, 300, 128, outliers=seed == 3, seed=seed) for seed in (2, 3)]
    if recipe.startswith("mx"):
        a, b, c = make_qkv(1, 2, 300, 300, 128, outliers=False, seed=4)
        inputs.append((a, b, _spread_v(c)))
    for a, b, c in inputs:
        q.copy_(a), k.copy_(b), v.copy_(c)
        graph.replay()
        st = KernelStats()
        eager = attention(q, k, v, recipe, stats=st)
        assert torch.equal(out, eager), (recipe, (out.float() - eager.float()).abs().max().item())
        if finalize_stats(st).qk_fallback:
            check_against_reference(recipe, q, k, v, out)
    if recipe.startswith("mx"):
        assert st.qk_fallback and st.kernel == "triton"  # the last input took the fallback
