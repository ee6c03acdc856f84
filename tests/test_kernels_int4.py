"""The INT4 variant (MODE 3 of kernels/_core.py and of kernels/gluon_ws.py): RotateAttention (rotateattention-half
/ -interleaved / -full) and int4-baseline. INT4 codes make QKᵀ and P̂·V̂ exact integer MMAs, so what is left between
kernel and reference is the fp32 (vs float64) arithmetic before each rounding: the rotation, the smoothing means,
amax/7 and the quotients of the pre-pass, exp2 and the P̃ scale in the kernel, and the ΔS term (3xTF32). It moves
a code only where a value lies within ~1e-7 (relative) of a rounding boundary, so the criterion of
tests/kernel_helpers.py holds with a wide margin (measured ~1e-6 of the recipe's error on the interpreter)."""

from __future__ import annotations

import textwrap

import pytest
import torch

from kernel_helpers import (
    REPO, RATIO, INT4_RECIPES, HAS_TRITON, needs_cuda, interpreter_kernels, run_interpreted, make_qkv, rel_l2,
    to_layout, from_layout, check_against_reference, SHAPES, LONG)
from test_kernels_prepass import _check_int4_prepass


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("recipe", INT4_RECIPES)
@pytest.mark.parametrize("outliers", [False, True])
@pytest.mark.parametrize("shape,layout", SHAPES + [LONG])
@pytest.mark.parametrize("kernel", ["triton", "gluon"])
def test_int4_kernel_matches_reference(recipe, outliers, shape, layout, kernel):
    """The INT4 kernels against the reference engine. kernel "gluon": the warp-specialized kernel's INT4 mode
    (the default on Hopper), held to the same bound and within a few output ulps of the Triton kernel (GLUON=false;
    the same codes; fp32 rounding order, Õ's unit and the V rotation's pass differ)."""
    from lowbit_video.kernels.launch import KernelStats, attention

    b, h, nq, nk, d = shape
    q, k, v = make_qkv(b, h, nq, nk, d, outliers=outliers, seed=nq + d)
    args = [to_layout(t, layout).cuda() for t in (q, k, v)]
    st = KernelStats()
    out = attention(*args, recipe, layout=layout, config={"GLUON": kernel == "gluon"}, stats=st)
    assert st.kernel == kernel
    check_against_reference(recipe, q, k, v, from_layout(out, layout))
    if kernel == "gluon":
        tri = attention(*args, recipe, layout=layout, config={"GLUON": False})
        assert rel_l2(out.float().cpu(), tri.float().cpu()) < 4e-3


@pytest.mark.gpu
@needs_cuda
def test_int4_kernels_agree_past_2_31_table_elements():
    """HunyuanVideo 720p's shape (24 heads × 119056 tokens): the ΔS table has 24·931·119168 > 2^31 elements, which
    the Triton kernel once addressed in int32 (an illegal memory access at this shape). The two kernels
    agree there (same bound as test_int4_kernel_matches_reference's) and the output is finite; a reference on the
    CPU would take too long at this size."""
    from lowbit_video.kernels.launch import KernelStats, attention

    g = torch.Generator(device="cuda").manual_seed(5)
    q, k, v = (torch.randn(1, 24, 119056, 128, device="cuda", generator=g, dtype=torch.bfloat16) for _ in range(3))
    st = KernelStats()
    tri = attention(q, k, v, "rotateattention-half", config={"GLUON": False}, stats=st)
    assert st.kernel == "triton" and torch.isfinite(tri).all()
    glu = attention(q, k, v, "rotateattention-half", config={"GLUON": True}, stats=st)
    assert st.kernel == "gluon" and torch.isfinite(glu).all()
    assert rel_l2(tri.float(), glu.float()) < 4e-3


def _int4_extreme_qkv(nq, nk, d, *, far: bool, seed: int = 0):
    """Q/K whose INT4 codes are all ±7 (every row ±a·u plus 1 % noise, u one ±1 pattern: the smoothing means
    leave rows of equal-magnitude entries), so |QKᵀ| reaches 128·49 = 6272 per score. far: K's first key tile
    along +u, the rest along −u, 3× as large, so every query row has key tiles > 200 nats (> 2^96 in the log2
    domain) below its best, the strong tile first for half the rows, last for the others."""
    g = torch.Generator().manual_seed(seed)
    u = torch.where(torch.rand(d, generator=g) < 0.5, -1.0, 1.0)
    sq = torch.where(torch.rand(nq, 1, generator=g) < 0.5, -1.0, 1.0)
    q = sq * u + 0.01 * torch.randn(nq, d, generator=g)
    if far:
        sk = torch.where(torch.arange(nk)[:, None] < 128, 3.0, -3.0)
        q = 3.0 * q
    else:
        sk = torch.where(torch.rand(nk, 1, generator=g) < 0.5, -1.0, 1.0)
    k = sk * u + 0.01 * torch.randn(nk, d, generator=g)
    v = torch.randn(nk, d, generator=g)
    return tuple(t.reshape(1, 1, *t.shape).expand(1, 2, *t.shape).contiguous().to(torch.bfloat16) for t in (q, k, v))


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("recipe", ["int4-baseline", "rotateattention-half"])
@pytest.mark.parametrize("gluon", [False, True])
@pytest.mark.parametrize("extreme", [False, True])
def test_int4_fp8_qk_changes_no_bit(recipe, gluon, extreme):
    """QK_FP8 (INT4 codes as E4M3, QKᵀ on the FP8 MMA) against the INT8 MMA: the same output bits, i.e. the FP8
    MMA's accumulator sums integer products exactly up to 128·49 (it keeps 14 significant bits, not 24: a
    hardware property this test pins down), including at that bound (extreme: every code ±7)."""
    from lowbit_video.kernels.launch import KernelStats, attention

    if extreme:
        q, k, v = _int4_extreme_qkv(300, 400, 128, far=False)
    else:
        q, k, v = make_qkv(1, 3, 300, 400, 128, outliers=True, seed=11)
    args = [t.cuda() for t in (q, k, v)]
    base = {"GLUON": gluon}
    st = KernelStats()
    fp8 = attention(*args, recipe, config=dict(base, QK_FP8=True), stats=st)
    assert st.kernel == ("gluon" if gluon else "triton")
    int8 = attention(*args, recipe, config=dict(base, QK_FP8=False))
    assert torch.equal(fp8, int8)
    check_against_reference(recipe, q, k, v, fp8)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("recipe", ["int4-baseline", "rotateattention-half"])
@pytest.mark.parametrize("gluon", [False, True])
def test_int4_key_tiles_far_below_the_maximum(recipe, gluon):
    """Key tiles > 2^96 (log2 domain) below a row's best, before and after it: the Gluon kernel keeps Õ in units
    of the last tile's P̃ scale and floors that scale there (else Õ would overflow); the output stays finite and
    within the reference bound, as the Triton kernel's."""
    from lowbit_video.kernels.launch import attention

    q, k, v = _int4_extreme_qkv(256, 512, 128, far=True)
    out = attention(*(t.cuda() for t in (q, k, v)), recipe, config={"GLUON": gluon})
    assert torch.isfinite(out).all()
    check_against_reference(recipe, q, k, v, out)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("outliers", [False, True])
@pytest.mark.parametrize("shape,layout", SHAPES[:1])
def test_int4_fused_delta_s_matches_reference(outliers, shape, layout):
    """ΔS formed in the kernel (3xTF32 MMA per key tile) instead of the pre-pass table: head_dim 64 only
    (at 128 the kernel needs 279552 B of shared memory, over the H200's 232448: a ValueError up front)."""
    from lowbit_video.kernels.launch import attention

    with pytest.raises(ValueError, match="head_dim 64"):
        attention(*(t.cuda() for t in make_qkv(1, 1, 64, 64, 128, outliers=False)), "rotateattention-half",
                  config={"DS": "fused"})
    b, h, nq, nk, d = shape
    q, k, v = make_qkv(b, h, nq, nk, d, outliers=outliers, seed=nq + d + 1)
    out = attention(*(to_layout(t, layout).cuda() for t in (q, k, v)), "rotateattention-half", layout=layout,
                    config={"DS": "fused"})
    check_against_reference("rotateattention-half", q, k, v, from_layout(out, layout))


_INT4_INTERP_SCRIPT = textwrap.dedent(
    """
    import json, sys, torch
    sys.path.insert(0, {tests!r})
    from test_kernels_prepass import _int4_prepass_vs_reference
    from kernel_helpers import make_qkv, rel_l2
    from lowbit_video.attention import attend, exact_attention
    from lowbit_video.kernels.launch import attention
    res = {{}}
    for recipe, layout, shape, outliers, segs, ds in {cases!r}:
        b, h, nq, nk, d = shape
        q, k, v = make_qkv(b, h, nq, nk, d, outliers=outliers, dtype=torch.float32, seed=nq + nk)
        args = [t.transpose(1, 2).contiguous() if layout == "BNHD" else t for t in (q, k, v)]
        out = attention(*args, recipe, layout=layout, rope_segments=segs, config={{"DS": ds}}).float()
        if layout == "BNHD":
            out = out.transpose(1, 2)
        ref = attend(q, k, v, recipe, backend="reference", rope_segments=segs).double()
        name = "/".join([recipe, layout, str(outliers), str(segs), ds])
        res[name] = [rel_l2(out, ref), rel_l2(ref, exact_attention(q, k, v))]
    pre = {{}}
    for recipe in {recipes!r}:
        q, k, v = make_qkv(1, 2, 150, 140, 64, outliers=True, dtype=torch.float32, seed=3)
        pre[recipe] = _int4_prepass_vs_reference(q, k, v, recipe)
        pre[recipe + "/fp16"] = _int4_prepass_vs_reference(q.half(), k.half(), v.half(), recipe)
    half = {{}}  # 16-bit inputs: the rotation as an fp16 MMA (the interpreter's bf16 dot is wrong)
    for recipe in ("rotateattention-half", "rotateattention-full"):
        q, k, v = make_qkv(1, 2, 140, 200, 64, outliers=True, dtype=torch.float16, seed=11)
        out = attention(q, k, v, recipe).double()
        ref = attend(q, k, v, recipe, backend="reference").double()
        half[recipe] = [rel_l2(out, ref), rel_l2(ref, exact_attention(q, k, v)), rel_l2(ref.half().double(), ref)]
    print(json.dumps({{"attn": res, "prepass": pre, "half": half}}))
    """
)


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed (it is not a test dependency)")
@interpreter_kernels
def test_int4_kernels_under_triton_interpreter_on_cpu():
    """The INT4 variant through TRITON_INTERPRET=1 on tiny shapes: all four recipes, random and outlier-laden
    inputs, both layouts, ragged tiles (N not a multiple of 128), q_len != kv_len, a non-default RoPE split
    for the half rotation; and the pre-pass codes against formats.intq on the reference's operands."""
    cases = [("rotateattention-half", "BHND", (1, 2, 40, 150, 64), True, None, "table"),
             ("rotateattention-half", "BNHD", (1, 1, 150, 260, 128), False, None, "table"),
             ("rotateattention-half", "BHND", (1, 1, 30, 140, 128), True, (64, 32, 32), "table"),
             ("rotateattention-half", "BNHD", (1, 1, 140, 200, 64), True, None, "fused"),
             ("rotateattention-interleaved", "BNHD", (1, 1, 70, 33, 64), True, None, "table"),
             ("rotateattention-interleaved", "BHND", (1, 2, 129, 200, 64), False, None, "table"),
             ("rotateattention-full", "BHND", (1, 1, 20, 129, 128), True, None, "table"),
             ("rotateattention-full", "BNHD", (2, 1, 60, 100, 64), False, None, "fused"),
             ("int4-baseline", "BNHD", (1, 2, 50, 140, 64), True, None, "table"),
             ("int4-baseline", "BHND", (1, 1, 200, 300, 128), False, None, "table")]
    script = _INT4_INTERP_SCRIPT.format(tests=str(REPO / "tests"), cases=cases, recipes=INT4_RECIPES)
    res = run_interpreted(script, timeout=900)
    assert len(res["attn"]) == len(cases)
    for name, (diff, err) in res["attn"].items():
        assert diff <= RATIO * err, (name, diff, err)  # fp32 outputs: no output-dtype rounding to add
    for recipe, pre in res["prepass"].items():
        _check_int4_prepass(pre)
    for recipe, (diff, err, floor) in res["half"].items():
        assert diff <= RATIO * err + floor, (recipe, diff, err, floor)
