"""The log-sum-exp every kernel writes from its epilogue (`row_lse` in kernels/_core.py), which ring attention
(context parallelism) merges key chunks with: against the engine's on the same inputs, and ring attention done on
one GPU (the keys split into uneven chunks, the kernel per chunk with its LSE, merged as diffusers merges) against
the one-call kernel.

Tolerances and why:
- LSE against the engine: the kernel's scores, exp2 and sums are fp32 (the engine's float64), and a P̃ element
  whose fp32 value lies on the other side of a rounding boundary can flip one P̂ code (PNQ: one term of ℓ). As the
  outputs (tests/kernel_helpers.py), the quantized recipes are held to RATIO (5 %) of the recipe's own LSE error
  (engine against the exact float64 logsumexp of the unquantized scores) plus the fp32 floor; the 16-bit kernel
  and the draft kernel (whose ℓ sums P̃ before quantization, on exactly quantized operands) to the fp32 floor:
  1e-5 + 1e-5·|lse| (the interpreter measures 3e-7·|lse|).
- Ring merge against one call: a chunk quantizes its own keys (K smoothed by its own mean, MXFP4's K exponent
  tiles and P̃ blocks, P̃ against the chunk's running maximum), so the merged result differs from one call by the
  recipe's own effect: it must be as close to exact attention as one call (within 2x, output and LSE), plus the
  bf16 rounding of the outputs. The 16-bit kernel: merged equals one call to bf16 output rounding.

GPU tests skip on CPU; the Triton kernel's LSE also runs on CPU under TRITON_INTERPRET=1 (the Gluon kernel and
the FP8 recipes only on the GPU: the interpreter runs no Gluon and its FP8 dot is wrong on subnormals).
"""

import math
import textwrap

import pytest
import torch

from kernel_helpers import (HAS_TRITON, INT4_RECIPES, MX_RECIPES, NVFP4_RECIPES, RATIO, REPO, interpreter_kernels,
                            make_qkv, needs_cuda, rel_l2, ring_merge, run_interpreted)

KERNEL_RECIPES = ["fp16"] + MX_RECIPES + ["sage2-int8"] + INT4_RECIPES + NVFP4_RECIPES
GLUON_RECIPES = MX_RECIPES + ["sage2-int8"] + INT4_RECIPES
SPLITS = {2: [0, 170, 460], 3: [0, 100, 301, 460]}  # uneven key chunks, not multiples of the 128-key tile


def fp32_floor(ref: torch.Tensor) -> torch.Tensor:
    return 1e-5 + 1e-5 * ref.abs()


def rms(x: torch.Tensor) -> float:
    return float(x.double().pow(2).mean().sqrt())


def exact_lse(q, k, scale=None):
    q, k = q.double().cpu(), k.double().cpu()
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    return torch.logsumexp((q @ k.transpose(-1, -2)) * scale, dim=-1)


def check_lse(recipe, lse, q, k, v):
    """lse (BHND rows) of `recipe` against the engine's on the same inputs (module docstring); returns the
    figures."""
    from lowbit_video.attention import attend

    qc, kc, vc = (t.float().cpu() for t in (q, k, v))
    _, ref = attend(qc, kc, vc, recipe, backend="reference", return_lse=True)
    ref, lse = ref.double(), lse.double().cpu()
    diff = rms(lse - ref)
    if recipe == "fp16":
        assert bool(((lse - ref).abs() <= fp32_floor(ref)).all()), (recipe, float((lse - ref).abs().max()))
        return diff, 0.0
    err = rms(ref - exact_lse(q, k))
    assert diff <= RATIO * err + rms(fp32_floor(ref)), (recipe, diff, err)
    return diff, err


# ------------------------------------------------------------------------------------- CPU (interpreter)

_SCRIPT = textwrap.dedent(
    """
    import json, sys, torch
    sys.path.insert(0, {tests!r})
    from kernel_helpers import make_qkv
    from lowbit_video.attention import attend
    from lowbit_video.kernels.launch import attention
    res = {{}}

    def worst(lse, q, k, v, recipe):  # max |kernel − engine| / (1e-5 + 1e-5·|engine|): the fp32 floor's share
        _, ref = attend(q.float(), k.float(), v.float(), recipe, backend="reference", return_lse=True)
        return float(((lse.double() - ref.double()).abs() / (1e-5 + 1e-5 * ref.double().abs())).max())

    for recipe in {recipes!r}:
        for outliers, layout in ((False, "BHND"), (True, "BNHD")):
            q, k, v = make_qkv(1, 2, 70, 300, 64, outliers=outliers, seed=1, dtype=torch.float32)
            if recipe == "fp16":
                q, k, v = (t.half() for t in (q, k, v))
            args = [t.transpose(1, 2).contiguous() if layout == "BNHD" else t for t in (q, k, v)]
            _, lse = attention(*args, recipe, layout=layout, return_lse=True)
            res[recipe + "/" + layout] = worst(lse.transpose(1, 2) if layout == "BNHD" else lse, q, k, v, recipe)
    # a key padding mask: the rows' LSE over the kept keys (a masked tail, whole masked tiles included)
    q, k, v = make_qkv(1, 1, 70, 300, 64, outliers=True, seed=2, dtype=torch.float32)
    mask = torch.zeros(1, 300, dtype=torch.bool)
    mask[:, :101] = True
    _, lse = attention(q, k, v, "mxattention", key_padding_mask=mask, return_lse=True)
    res["mxattention/masked"] = worst(lse, q, k[:, :, :101], v[:, :, :101], "mxattention")
    print(json.dumps(res))
    """
)


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed (it is not a test dependency)")
@interpreter_kernels
def test_triton_kernel_lse_matches_engine_under_triton_interpreter():
    """The Triton kernel's arithmetic on the interpreter is fp32 throughout: within the fp32 floor (measured
    3e-7·|lse|), both layouts, ragged tiles, a key padding mask."""
    recipes = ["fp16", "mxattention", "mxfp4-ocp", "rotateattention-half", "int4-baseline", "nvfp4", "sage-nvfp4"]
    res = run_interpreted(_SCRIPT.format(tests=str(REPO / "tests"), recipes=recipes))
    assert len(res) == 2 * len(recipes) + 1
    assert all(share <= 1.0 for share in res.values()), res


# --------------------------------------------------------------------------------------------------- GPU


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("recipe", KERNEL_RECIPES)
@pytest.mark.parametrize("outliers", [False, True])
def test_kernel_lse_matches_engine_on_gpu(recipe, outliers):
    """Both kernels where the recipe has both (Gluon by default, GLUON=false the Triton one)."""
    from lowbit_video.kernels import launch

    q, k, v = (t.cuda() for t in make_qkv(1, 2, 300, 460, 128, outliers=outliers, seed=11))
    configs = [None, {"GLUON": False}] if recipe in GLUON_RECIPES else [None]
    for config in configs:
        st = launch.KernelStats()
        _, lse = launch.attention(q, k, v, recipe, return_lse=True, config=config, stats=st)
        assert lse.shape == (1, 2, 300) and lse.dtype == torch.float32
        assert st.kernel == ("gluon" if config is None and recipe in GLUON_RECIPES else "triton"), st.kernel
        check_lse(recipe, lse, q, k, v)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("recipe", KERNEL_RECIPES)
def test_attend_return_lse_runs_the_kernel_on_cuda(recipe):
    """attend(return_lse=True) on CUDA is the kernel's call (bit for bit, both layouts), and writing the LSE changes
    no output bit."""
    from lowbit_video.attention import attend
    from lowbit_video.kernels import launch

    q, k, v = (t.cuda() for t in make_qkv(1, 2, 200, 333, 64, outliers=True, seed=12))
    out, lse = attend(q, k, v, recipe, return_lse=True)
    want, want_lse = launch.attention(q, k, v, recipe, return_lse=True)
    assert torch.equal(out, want) and torch.equal(lse, want_lse)
    assert torch.equal(launch.attention(q, k, v, recipe), want)
    bn = [t.transpose(1, 2) for t in (q, k, v)]
    out_bn, lse_bn = attend(*bn, recipe, layout="BNHD", return_lse=True)
    assert torch.equal(out_bn.transpose(1, 2), out) and torch.equal(lse_bn.transpose(1, 2), lse)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("recipe", KERNEL_RECIPES)
@pytest.mark.parametrize("chunks", [2, 3])
def test_ring_merge_of_kernel_key_chunks_on_gpu(recipe, chunks, monkeypatch):
    """Ring attention on one GPU: the kernel per key chunk with its LSE (through attend, as the ring processor calls
    it), merged as diffusers merges, against the one-call kernel (module docstring)."""
    from lowbit_video.attention import attend, exact_attention
    from lowbit_video.kernels import dispatch

    q, k, v = (t.cuda() for t in make_qkv(1, 2, 300, 460, 128, outliers=True, seed=13))
    edges = SPLITS[chunks]
    parts, lse_calls, run_kernel = [], [], dispatch.run_kernel
    # a spy around the one function every kernel call goes through
    monkeypatch.setattr(dispatch, "run_kernel", lambda *a, return_lse=False, **kw: lse_calls.append(return_lse)
                        or run_kernel(*a, return_lse=return_lse, **kw))
    for a, b in zip(edges, edges[1:]):
        parts.append(attend(q, k[:, :, a:b], v[:, :, a:b], recipe, return_lse=True))
    assert lse_calls == [True] * chunks, "a key chunk ran no kernel"
    merged, merged_lse = (t.cpu() for t in ring_merge(parts))
    one, one_lse = (t.double().cpu() for t in attend(q, k, v, recipe, return_lse=True))
    exact = exact_attention(*(t.double().cpu() for t in (q, k, v)))
    exact_l = exact_lse(q, k)
    bf16 = rel_l2(exact.to(torch.bfloat16), exact)  # the outputs' own rounding
    if recipe == "fp16":
        assert rel_l2(merged, one) <= 2 * bf16, (rel_l2(merged, one), bf16)
        assert bool(((merged_lse - one_lse).abs() <= fp32_floor(exact_l)).all())
        return
    assert rel_l2(merged, exact) <= 2 * rel_l2(one, exact) + bf16, (rel_l2(merged, exact), rel_l2(one, exact))
    assert rms(merged_lse - exact_l) <= 2 * rms(one_lse - exact_l) + rms(fp32_floor(exact_l))


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("recipe", ["draftattention2", "draftattention-sparse16"])
def test_draft_kernel_lse_matches_engine_on_gpu(recipe):
    """On the engine's routing decision; prefix queries (dense, the 16-bit kernel) included. attend on CUDA is
    the kernel's call."""
    from lowbit_video.attention import attend
    from lowbit_video.attention.draft import draft_attention as engine
    from lowbit_video.draft.layout import VideoGeometry
    from lowbit_video.kernels.draft import draft_attention
    from lowbit_video.recipes import load_recipe

    geo = VideoGeometry(2, 8, 12, prefix=4)
    q, k, v = (t.cuda() for t in make_qkv(1, 2, geo.tokens, geo.tokens, 64, outliers=True, seed=14))
    _, diag = engine(*(t.double().cpu() for t in (q, k, v)), load_recipe(recipe).attention.draft, geo)
    out, lse = draft_attention(q, k, v, recipe, geo, codes=diag.route.codes.cuda(), return_lse=True)
    ref, lse = diag.lse, lse.double().cpu()
    finite = torch.isfinite(ref)
    assert torch.equal(torch.isfinite(lse), finite)
    assert bool(((lse - ref)[finite].abs() <= fp32_floor(ref[finite])).all()), float((lse - ref)[finite].abs().max())
    got, got_lse = attend(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), recipe, layout="BNHD",
                          geometry=geo, return_lse=True)
    want, want_lse = draft_attention(q, k, v, recipe, geo, return_lse=True)
    assert torch.equal(got.transpose(1, 2), want) and torch.equal(got_lse.transpose(1, 2), want_lse)
    assert math.isfinite(float(want_lse[:, :, : geo.prefix].max()))
