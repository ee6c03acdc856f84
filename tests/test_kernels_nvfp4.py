"""The NVFP4 variant (MODE 4 of kernels/_core.py): nvfp4 and sage-nvfp4 (Q/K smoothing, two-level P̃ scaling).
The kernel reads E2M1·s_b (<= 6 significant bits, every value a multiple of 2^-10 below 2688: exact in fp16 and
bf16), the fp32 tensor scales outside the MMA; P̃ is quantized in the kernel per 16 keys with the reference's
rules. What is left is fp32 vs float64 arithmetic (MMA accumulation, exp2, the ΔS table, the block-scale and
element quotients), which can move a P̃ code only at a rounding boundary: the criterion of
tests/kernel_helpers.py (measured ~1e-6 of the recipe's error). Its pre-pass: tests/test_kernels_prepass.py."""

from __future__ import annotations

import textwrap

import pytest

from kernel_helpers import (
    REPO, RATIO, NVFP4_RECIPES, HAS_TRITON, needs_cuda, interpreter_kernels, run_interpreted, make_qkv, to_layout,
    from_layout, check_against_reference, SHAPES, LONG)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("recipe", NVFP4_RECIPES)
@pytest.mark.parametrize("outliers", [False, True])
@pytest.mark.parametrize("shape,layout", SHAPES + [LONG])
def test_nvfp4_kernel_matches_reference(recipe, outliers, shape, layout):
    from lowbit_video.kernels.launch import attention

    b, h, nq, nk, d = shape
    q, k, v = make_qkv(b, h, nq, nk, d, outliers=outliers, seed=nq + d)
    out = attention(*(to_layout(t, layout).cuda() for t in (q, k, v)), recipe, layout=layout)
    check_against_reference(recipe, q, k, v, from_layout(out, layout))


_NVFP4_INTERP_SCRIPT = textwrap.dedent(
    """
    import dataclasses, json, sys, torch
    sys.path.insert(0, {tests!r})
    from kernel_helpers import make_qkv, rel_l2
    from lowbit_video.attention import exact_attention
    from lowbit_video.attention.reference import reference_attention
    from lowbit_video.kernels.launch import attention
    from lowbit_video.recipes import load_recipe
    res = {{}}
    for recipe, placement, layout, shape, outliers, dt in {cases!r}:
        dtype = getattr(torch, dt)
        spec = load_recipe(recipe).attention
        if placement != spec.placement:
            spec = dataclasses.replace(spec, placement=placement)
        b, h, nq, nk, d = shape
        q, k, v = make_qkv(b, h, nq, nk, d, outliers=outliers, dtype=dtype, seed=nq + nk)
        args = [t.transpose(1, 2).contiguous() if layout == "BNHD" else t for t in (q, k, v)]
        out = attention(*args, spec, layout=layout)
        if layout == "BNHD":
            out = out.transpose(1, 2)
        ref = reference_attention(q, k, v, spec, measure_errors=False)[0]
        floor = rel_l2(ref.to(dtype), ref)
        name = "/".join([recipe, placement, layout, str(shape), str(outliers), dt])
        res[name] = [rel_l2(out, ref), rel_l2(ref, exact_attention(q, k, v)), floor]
    print(json.dumps(res))
    """
)


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed (it is not a test dependency)")
@interpreter_kernels
def test_nvfp4_kernels_under_triton_interpreter_on_cpu():
    """The NVFP4 variant through TRITON_INTERPRET=1 on tiny shapes: both recipes (sage-nvfp4: Q/K smoothing with
    ΔS, two-level P̃ scaling), random and outlier-laden inputs, both layouts, ragged N (key tiles and P̃'s
    16-blocks), q_len != kv_len, head_dim 64 and 128, a PNQ placement each, fp32 and bf16 inputs."""
    cases = [("nvfp4", "direct", "BHND", (1, 2, 40, 150, 64), True, "float32"),
             ("nvfp4", "direct", "BNHD", (1, 1, 150, 260, 128), False, "float32"),
             ("nvfp4", "direct", "BNHD", (2, 1, 70, 33, 64), True, "float32"),
             ("nvfp4", "pnq", "BHND", (1, 1, 129, 200, 64), True, "float32"),
             ("nvfp4", "direct", "BHND", (1, 2, 50, 140, 64), True, "bfloat16"),
             ("sage-nvfp4", "direct", "BHND", (1, 2, 40, 150, 64), True, "float32"),
             ("sage-nvfp4", "direct", "BNHD", (1, 1, 150, 260, 128), False, "float32"),
             ("sage-nvfp4", "direct", "BNHD", (2, 1, 70, 33, 64), True, "float32"),
             ("sage-nvfp4", "direct", "BHND", (1, 1, 60, 140, 128), True, "float32"),
             ("sage-nvfp4", "pnq", "BNHD", (1, 2, 129, 200, 64), False, "float32"),
             ("sage-nvfp4", "direct", "BNHD", (1, 1, 150, 260, 64), False, "bfloat16")]
    script = _NVFP4_INTERP_SCRIPT.format(tests=str(REPO / "tests"), cases=cases)
    res = run_interpreted(script, timeout=900)
    assert len(res) == len(cases)
    for name, (diff, err, floor) in res.items():
        assert diff <= RATIO * err + floor, (name, diff, err, floor)
