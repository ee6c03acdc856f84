"""Kernels on the inputs models really pass: views, not contiguous tensors.

diffusers hands attention BNHD slices of a fused QKV projection (a storage offset per operand, token stride
3·H·D), or their BHND transposes; Q may come from another projection than K and V (Nq ≠ Nk). Every kernel
reads its operands through the four strides and the data pointer it is given (kernels/prepass.py:
`_bhnd_strides`), so such views must give the output of contiguous copies, bit for bit, and the output
must stay within each recipe's stated tolerance of the reference engine:

* quantized recipes (MXFP4 family, sage2-int8, INT4, NVFP4): `check_against_reference` of
  tests/kernel_helpers.py -- kernel–reference ≤ 5 % of the recipe's own error against float64 attention,
  plus the rounding of the output to its dtype (that module says why);
* the dense 16-bit kernel: against float64 attention, 4e-3 (bf16) / 1e-3 (fp16) relative L2, a few ulp of the
  16-bit P̃ and output (test_dense_kernel_matches_sdpa_with_mask);
* draft recipes (through `attend`, which needs the video geometry): the kernel–engine floor 2u of the input
  dtype (test_kernels_draft.py: the kernel's route makes the engine's decisions, so only 16-bit rounding remains);
* with a key padding mask (the kernel API's `key_padding_mask`; `attend` takes none, and the model processors
  pass the kept keys instead of a mask): operands are quantized as given, masked keys included, so the
  masked call is another quantization of the kept keys. Where the recipe's operand statistics are local to a
  block (dense, the MXFP4 family, NVFP4) it is held to be as accurate as the recipe on the kept keys, within
  1.5× (test_key_padding_mask_equals_truncated_keys). Where they span the sequence (`smooth_k`: the K mean,
  and V's per-channel scale: sage2-int8, the INT4 recipes, sage-nvfp4) random masks with outlier tokens
  among the masked keys measured 1.7× (sage2-int8) to 3.8× (rotateattention-full) the recipe's own error on
  one H200, so no ratio is claimed: the check is that the mask takes effect (the masked output is closer to
  attention over the kept keys than the same kernel without the mask).

The GPU fuzz draws its cases from a seeded generator over view kind, batch, Nq/Nk (ragged, unequal), dtype,
head_dim, outliers and masks, after a fixed set that covers every value of each axis; it skips on CPU.
The interpreter test runs tiny cases on CPU under TRITON_INTERPRET=1 for the recipes the interpreter runs
(not sage2-int8: its FP8 dot converts E4M3 subnormals wrongly; not draft: covered by test_kernels_draft).
The CPU test checks the stride arithmetic every kernel launch relies on, and the reference dispatch.
"""

from __future__ import annotations

import random
import textwrap

import pytest
import torch

from lowbit_video.attention import attend, exact_attention
from lowbit_video.recipes import load_recipe

from kernel_helpers import (  # noqa: E402  (shared helpers and tolerances)
    HAS_TRITON, REPO, check_against_reference, interpreter_kernels, needs_cuda, rel_l2, run_interpreted)

DRAFT_FLOOR = {torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7}      # test_kernels_draft.FLOOR
DENSE_TOL = {torch.float16: 1e-3, torch.bfloat16: 4e-3}               # test_dense_kernel_matches_sdpa_with_mask
MASK_RATIO = 1.5                                                      # test_key_padding_mask_equals_truncated_keys
VIEWS = ("fused-bnhd", "fused-bhnd", "offset-bhnd", "contiguous")


def kernel_recipes() -> dict[str, str]:
    """Every shipped recipe a kernel runs (the dispatch table's list: recipes its rows refuse, such as the
    non-orthogonal rotation control, run on the engine only), by kind: "dense", "draft" or "quantized"."""
    from lowbit_video.kernels.dispatch import kernel_recipes as table_recipes

    out = {}
    for name in sorted(table_recipes()):
        a = load_recipe(name).attention
        out[name] = a.kind if a.kind in ("dense", "draft") else "quantized"
    return out


def fused_views(b, h, nq, nk, d, view, *, dtype, seed, outliers=False, device="cpu"):
    """(q, k, v, layout, contiguous copies) as a model's attention processor sees them.

    fused-bnhd: one (B, N, 3, H, D) projection (Nq == Nk) or Q (B, Nq, H, D) plus a fused (B, Nk, 2, H, D) K/V
    projection, sliced per operand: BNHD views with storage offsets and token strides of 3·H·D (or 2·H·D);
    fused-bhnd: their BHND transposes; offset-bhnd: BHND slices of a larger buffer (a storage offset, row
    stride wider than D); contiguous: plain BHND tensors (the control)."""
    g = torch.Generator().manual_seed(seed)
    base = [torch.randn(b, h, n, d, generator=g) for n in (nq, nk, nk)]
    if outliers:  # DiT-like: heavy channels in Q/K, a common K offset, outlier tokens in V
        ch = torch.randperm(d, generator=g)[:4]
        base[0][..., ch] *= 12.0
        base[1][..., ch] *= 12.0
        base[1] += 3.0 * torch.randn(1, 1, 1, d, generator=g)
        base[2][..., torch.randperm(nk, generator=g)[: max(1, nk // 50)], :] *= 20.0
    q, k, v = (t.to(dtype).to(device) for t in base)
    if view == "contiguous":
        return q, k, v, "BHND"
    if view == "offset-bhnd":
        buf = torch.zeros(b, h, max(nq, nk) + 3, d + 16, dtype=dtype, device=device)
        out = []
        for i, t in enumerate((q, k, v)):
            slot = buf.clone()[:, :, 1 + i: 1 + i + t.shape[2], 8: 8 + d]
            slot.copy_(t)
            out.append(slot)
        return (*out, "BHND")
    bnhd = [t.transpose(1, 2) for t in (q, k, v)]
    if nq == nk:
        fused = torch.stack(bnhd, dim=2).contiguous()               # (B, N, 3, H, D)
        views = [fused[:, :, i] for i in range(3)]
    else:
        kv = torch.stack(bnhd[1:], dim=2).contiguous()              # (B, Nk, 2, H, D)
        views = [bnhd[0].contiguous(), kv[:, :, 0], kv[:, :, 1]]
    if view == "fused-bnhd":
        return (*views, "BNHD")
    return (*(t.transpose(1, 2) for t in views), "BHND")


def as_bhnd(t, layout):
    return t.transpose(1, 2) if layout == "BNHD" else t


# ------------------------------------------------------------------------------------------- CPU


@pytest.mark.parametrize("view", VIEWS)
@pytest.mark.parametrize("nq,nk", [(40, 40), (33, 70)])
def test_kernel_strides_address_the_views_elements(view, nq, nk):
    """What every kernel launch passes for an operand -- its data pointer (storage offset included) and the
    four strides of `_bhnd_strides` in (b, h, n, d) order -- addresses exactly the view's elements."""
    from lowbit_video.kernels import prepass

    q, k, v, layout = fused_views(2, 3, nq, nk, 64, view, dtype=torch.float32, seed=1)
    for t in (q, k, v):
        B, H, N, D = prepass._dims(t, layout)
        strides = prepass._bhnd_strides(t, layout)
        flat = t.untyped_storage()
        storage = torch.empty(0, dtype=t.dtype).set_(flat, 0, (flat.nbytes() // t.element_size(),))
        read = torch.as_strided(storage, (B, H, N, D), strides, t.storage_offset())
        assert torch.equal(read, as_bhnd(t, layout))
    if view != "contiguous":  # (with Nq != Nk, Q is its own projection: contiguous BNHD)
        assert not k.is_contiguous() and not v.is_contiguous()
    if view.startswith("fused") and nq == nk:
        assert (q.storage_offset(), k.storage_offset(), v.storage_offset()) == (0, 3 * 64, 2 * 3 * 64)


@pytest.mark.parametrize("recipe", sorted(kernel_recipes()))
def test_reference_dispatch_gives_views_the_output_of_copies(recipe):
    """`attend` on CPU (the reference engine) with fused-projection views equals contiguous copies bit for bit."""
    from lowbit_video.draft.layout import VideoGeometry

    draft = kernel_recipes()[recipe] == "draft"
    geo = VideoGeometry(2, 8, 8, prefix=4) if draft else None
    n = geo.tokens if draft else 48
    for view in ("fused-bnhd", "fused-bhnd"):
        q, k, v, layout = fused_views(1, 2, n, n if draft else 40 + 2 * (view == "fused-bhnd"), 64, view,
                                      dtype=torch.float32, seed=2)
        got = attend(q, k, v, recipe, layout=layout, geometry=geo)
        want = attend(*(t.contiguous() for t in (q, k, v)), recipe, layout=layout, geometry=geo)
        assert torch.equal(got, want), (recipe, view)


# ------------------------------------------------------------------------------------------- GPU


def fuzz_cases(n_random: int, seed: int = 2026):
    """A fixed set covering every value of each axis, then `n_random` seeded draws."""
    axes = {"view": list(VIEWS), "b": [1, 2, 3], "nq_nk": [(128, 128), (200, 200), (77, 301), (300, 45)],
            "dtype": ["bfloat16", "float16"], "d": [64, 128], "outliers": [False, True], "mask": [False, True]}
    width = max(len(v) for v in axes.values())
    cases = [{k: v[i % len(v)] for k, v in axes.items()} for i in range(width)]
    rng = random.Random(seed)
    cases += [{k: rng.choice(v) for k, v in axes.items()} for _ in range(n_random)]
    return [dict(c, seed=i) for i, c in enumerate(cases)]


def _check_masked(recipe, kind, q, k, v, out, mask):
    """The masked kernel output against float64 attention over the kept keys, per batch element."""
    for i in range(q.shape[0]):
        keep = mask[i].cpu()
        qc, kc, vc = (t[i: i + 1].float().cpu() for t in (q, k, v))
        kc, vc = kc[:, :, keep], vc[:, :, keep]
        exact = exact_attention(qc, kc, vc)
        if kind == "dense":
            assert rel_l2(out[i: i + 1].cpu(), exact) < DENSE_TOL[out.dtype], (recipe, i)
            continue
        got = rel_l2(out[i: i + 1].float().cpu(), exact)
        if load_recipe(recipe).attention.smooth_k:  # sequence-wide operand statistics (module docstring)
            from lowbit_video.kernels.launch import attention

            unmasked = attention(q[i: i + 1], k[i: i + 1], v[i: i + 1], recipe)
            assert got < rel_l2(unmasked.float().cpu(), exact), (recipe, i, got)
            continue
        ref = attend(qc, kc, vc, recipe, backend="reference").double()
        floor = rel_l2(ref.to(out.dtype), ref)
        assert got <= MASK_RATIO * rel_l2(ref, exact) + floor, (recipe, i, got, rel_l2(ref, exact))


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("recipe", sorted(kernel_recipes()))
def test_kernels_on_model_views_fuzz(recipe):
    from lowbit_video.kernels import launch, supports

    kind = kernel_recipes()[recipe]
    for case in fuzz_cases(n_random=4):
        dtype = getattr(torch, case["dtype"])
        nq, nk, d, b = *case["nq_nk"], case["d"], case["b"]
        tag = (recipe, case)
        if kind == "draft":
            from lowbit_video.draft.layout import VideoGeometry

            geo = VideoGeometry(2, 8, 8 + 4 * (d == 128), prefix=5)
            q, k, v, layout = fused_views(b, 2, geo.tokens, geo.tokens, d, case["view"], dtype=dtype,
                                          seed=case["seed"], device="cuda")
            out = attend(q, k, v, recipe, layout=layout, geometry=geo)
            copies = attend(*(t.contiguous() for t in (q, k, v)), recipe, layout=layout, geometry=geo)
            assert torch.equal(out, copies), tag
            ref = attend(*(as_bhnd(t, layout).float().cpu() for t in (q, k, v)), recipe, geometry=geo,
                         backend="reference")
            assert rel_l2(as_bhnd(out, layout).cpu(), ref) <= DRAFT_FLOOR[dtype], tag
            continue
        ok, why = supports(load_recipe(recipe).attention, "cuda", d)
        assert ok, (recipe, why)
        q, k, v, layout = fused_views(b, 2, nq, nk, d, case["view"], dtype=dtype, seed=case["seed"],
                                      outliers=case["outliers"], device="cuda")
        mask = None
        if case["mask"]:
            g = torch.Generator().manual_seed(case["seed"])
            mask = torch.rand(b, nk, generator=g) > 0.3
            mask[:, 0] = True  # every row keeps a key (fully masked rows are tested on their own)
            mask = mask.cuda()
        out = launch.attention(q, k, v, recipe, layout=layout, key_padding_mask=mask)
        copies = launch.attention(*(t.contiguous() for t in (q, k, v)), recipe, layout=layout, key_padding_mask=mask)
        assert torch.equal(out, copies), tag
        qb, kb, vb, ob = (as_bhnd(t, layout) for t in (q, k, v, out))
        if mask is not None:
            _check_masked(recipe, kind, qb, kb, vb, ob, mask)
        elif kind == "dense":
            exact = exact_attention(*(t.double().cpu() for t in (qb, kb, vb)))
            assert rel_l2(ob.cpu(), exact) < DENSE_TOL[dtype], tag
        else:
            check_against_reference(recipe, qb, kb, vb, ob)
        if mask is None and kind == "quantized":  # the same views through attend's dispatch (the path models take)
            assert torch.equal(attend(q, k, v, recipe, layout=layout), out), tag


# ------------------------------------------------------------------------------ CPU (interpreter)

_INTERP_SCRIPT = textwrap.dedent(
    """
    import json, sys, torch
    sys.path.insert(0, {tests!r})
    from test_kernels_fuzz import fused_views, as_bhnd
    from kernel_helpers import rel_l2
    from lowbit_video.attention import attend, exact_attention
    from lowbit_video.kernels.launch import attention
    res = {{}}
    for recipe, view, (b, nq, nk, d), dtype in {cases!r}:
        dt = getattr(torch, dtype)
        q, k, v, layout = fused_views(b, 1, nq, nk, d, view, dtype=dt, seed=nq + nk, outliers=True)
        out = attention(q, k, v, recipe, layout=layout)
        same = bool(torch.equal(out, attention(*(t.contiguous() for t in (q, k, v)), recipe, layout=layout)))
        qb, kb, vb, ob = (as_bhnd(t, layout).float() for t in (q, k, v, out))
        exact = exact_attention(qb, kb, vb)
        if recipe == "fp16":
            diff, err = rel_l2(ob, exact), 0.0
        else:
            ref = attend(qb, kb, vb, recipe, backend="reference").double()
            diff, err = rel_l2(ob, ref), rel_l2(ref, exact)
        res[recipe + "/" + view] = [same, diff, err]
    print(json.dumps(res))
    """
)


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed (it is not a test dependency)")
@interpreter_kernels
def test_kernels_on_model_views_under_triton_interpreter():
    """Tiny fused-projection views (storage offsets, BNHD and transposed BHND strides, Nq ≠ Nk, ragged, batch 2)
    through the kernels on CPU: bit-identical to contiguous copies and within tolerance of the reference.
    Inputs as the other interpreter tests take them (float32; fp16 for the dense kernel)."""
    cases = [("mxattention", "fused-bnhd", (2, 40, 40, 64), "float32"),
             ("mxfp4-ocp", "fused-bhnd", (1, 33, 70, 64), "float32"),
             ("rotateattention-half", "fused-bnhd", (1, 50, 90, 64), "float32"),
             ("nvfp4", "offset-bhnd", (2, 30, 45, 64), "float32"),
             ("fp16", "fused-bhnd", (1, 40, 40, 64), "float16")]
    res = run_interpreted(_INTERP_SCRIPT.format(tests=str(REPO / "tests"), cases=cases))
    assert set(res) == {f"{c[0]}/{c[1]}" for c in cases}
    for name, (same, diff, err) in res.items():
        assert same, name
        if name.startswith("fp16"):
            assert diff < 2e-3, (name, diff)   # 16-bit P̃ and output (the interpreter test's dense bound)
        else:
            assert diff <= 0.05 * err, (name, diff, err)
