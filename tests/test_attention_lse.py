"""The log-sum-exp `attend(..., return_lse=True)` returns, off the GPU: what ring attention (context parallelism)
merges key chunks with.

The engines define it: m + log ℓ, the natural log of the normaliser the output was divided by (Σ P̂ for PNQ
recipes, Σ P̃ for direct placement and for the draft recipes, over the blocks they keep), plus q·mean(K)·scale
where K is smoothed. The CPU path returns the same; the kernels write it from their epilogue
(tests/test_kernels_lse.py) and `attend` runs them for it on CUDA (checked here with stand-ins)."""

import math

import pytest
import torch

from lowbit_video.attention import attend, exact_attention
from lowbit_video.attention import engines
from lowbit_video.draft.layout import VideoGeometry
from lowbit_video.kernels import dispatch
from lowbit_video.recipes import recipe_from_dict

from kernel_helpers import make_qkv, rel_l2, ring_merge

RECIPES = ["fp16", "mxattention", "mxfp4-ocp", "sage2-int8", "rotateattention-half", "int4-baseline", "nvfp4",
           "sage-nvfp4"]
# key chunks as ring attention sees them (uneven, not multiples of the 128-key tile)
SPLITS = {2: [0, 77, 200], 3: [0, 50, 129, 200]}


def fp32_floor(ref: torch.Tensor) -> torch.Tensor:
    """What float32 arithmetic leaves between two computations of one LSE: scores and the LSE itself rounded at
    the float32 unit (ulp(200) = 1.5e-5 with outlier-laden inputs), a few times over."""
    return 1e-5 + 2e-6 * ref.abs()


@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize("outliers", [False, True])
def test_cpu_path_lse_matches_the_engine(recipe, outliers):
    q, k, v = make_qkv(1, 2, 130, 300, 64, outliers=outliers, seed=1, dtype=torch.float32)
    _, lse = attend(q, k, v, recipe, return_lse=True)
    _, ref = attend(q, k, v, recipe, backend="reference", return_lse=True)
    assert lse.dtype == torch.float32 and lse.shape == (1, 2, 130)
    assert bool(((lse.double() - ref.double()).abs() <= fp32_floor(ref.double())).all())


@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize("chunks", [2, 3])
def test_ring_merge_of_cpu_path_key_chunks(recipe, chunks):
    """Per key chunk with its LSE, merged as diffusers' ring attention merges, against one call. Unquantized: equal
    to float32 rounding. Quantized: each chunk quantizes its own keys (K smoothed by its own mean, P̃ against its
    own running maximum), so the merge differs from one call by the recipe's own effect: it must be as close to
    exact attention as one call is (within 2x), output and LSE alike."""
    q, k, v = make_qkv(1, 2, 130, 200, 64, outliers=True, seed=2, dtype=torch.float32)
    edges = SPLITS[chunks]
    parts = [attend(q, k[:, :, a:b], v[:, :, a:b], recipe, return_lse=True) for a, b in zip(edges, edges[1:])]
    merged, merged_lse = ring_merge(parts)
    one, one_lse = attend(q, k, v, recipe, return_lse=True)
    exact = exact_attention(q, k, v)
    exact_lse = torch.logsumexp((q.double() @ k.double().transpose(-1, -2)) / 8.0, dim=-1)
    if recipe == "fp16":
        assert rel_l2(merged, one) < 1e-5
        assert bool(((merged_lse - one_lse.double()).abs() <= fp32_floor(exact_lse)).all())
    else:
        assert rel_l2(merged, exact) <= 2 * rel_l2(one, exact)
        assert rel_l2(merged_lse, exact_lse) <= 2 * rel_l2(one_lse, exact_lse)


# ------------------------------------------------------------------------------------------ draft recipes


def _draft(**draft):
    return recipe_from_dict({"name": "t", "attention": {"kind": "draft", "draft": draft}})


def test_draft_engine_lse_is_the_logsumexp_over_the_kept_keys():
    """Materialized: video query i over every prefix key and the video keys of the region pairs its head kept;
    prefix queries over every key (the engine's output normaliser, ℓ of the pre-conversion P̃)."""
    geometry = VideoGeometry(2, 8, 16, prefix=6)
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, geometry.tokens, 32, generator=g, dtype=torch.float64) for _ in range(3))
    out, diag, lse = attend(q, k, v, _draft(sparsity=0.9), geometry=geometry, return_diagnostics=True,
                            return_lse=True)
    route, p = diag.route, geometry.prefix
    layout = route.layout
    region = torch.empty(geometry.video_tokens, dtype=torch.long)
    region[layout.gather[layout.gather >= 0]] = (layout.gather >= 0).nonzero().squeeze(-1) // layout.block
    mask = torch.ones(1, 2, geometry.tokens, geometry.tokens, dtype=torch.bool)
    mask[:, :, p:, p:] = route.codes[:, :, region][:, :, :, region] != 0
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    expected = torch.logsumexp(s.masked_fill(~mask, -math.inf), dim=-1)
    assert route.summary()["skip_fraction"] > 0.85
    assert torch.allclose(lse.double(), expected, rtol=0, atol=1e-5)  # float32 of the float64 engine's
    assert torch.allclose(diag.lse, expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("recipe", ["draftattention2", "draftattention-sparse16"])
@pytest.mark.parametrize("geometry", [VideoGeometry(2, 8, 16, 6), VideoGeometry(3, 10, 14, 0)],
                         ids=["prefix", "ragged"])
def test_draft_cpu_path_lse_matches_the_engine(recipe, geometry):
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(1, 2, geometry.tokens, 64, generator=g) for _ in range(3))
    k[..., 5] *= 10.0
    _, lse = attend(q, k, v, recipe, geometry=geometry, return_lse=True)
    _, ref = attend(q, k, v, recipe, geometry=geometry, backend="reference", return_lse=True)
    assert lse.shape == (1, 2, geometry.tokens) and lse.dtype == torch.float32
    finite = torch.isfinite(ref)
    assert torch.equal(torch.isfinite(lse), finite)  # rows that kept nothing: −inf in both
    assert bool(((lse.double() - ref.double())[finite].abs() <= fp32_floor(ref.double()[finite])).all())


# ------------------------------------------------------------------------------- dispatch (stand-ins)


class _CudaLike:
    """What `dispatch.route` reads of a tensor, as a CUDA bf16 tensor would have it."""

    is_cuda = True
    device = "cuda"
    dtype = torch.bfloat16

    def __init__(self, tokens: int):
        self.shape = (1, 2, tokens, 64)


def test_the_route_for_return_lse_is_the_kernel_for_every_kernel_recipe(monkeypatch):
    """No recipe with a kernel is sent to the engine for its LSE; the unquantized recipe takes the 16-bit kernel
    for it (torch SDPA gives no LSE) and SDPA otherwise."""
    monkeypatch.setattr(dispatch, "supports", lambda spec, device=None, head_dim=None: (True, ""))
    geometry = VideoGeometry(2, 8, 8, 0)
    t = _CudaLike(geometry.tokens)
    names = dispatch.kernel_recipes()
    assert {"fp16", "mxattention", "sage2-int8", "rotateattention-half", "nvfp4", "draftattention2"} <= set(names)
    for name in names:
        spec = dispatch.attention_spec(name)
        assert dispatch.route(spec, t, t, geometry=geometry, return_lse=True).path == "kernel", name
    fp16 = dispatch.attention_spec("fp16")
    assert dispatch.route(fp16, t, t).path == "sdpa" and dispatch.route(fp16, t, t, return_lse=True).path == "kernel"


@pytest.mark.parametrize("recipe", ["fp16", "mxattention", "sage2-int8", "rotateattention-half", "nvfp4",
                                    "draftattention2"])
def test_attend_return_lse_takes_the_kernel_path(monkeypatch, recipe):
    """Where a kernel runs, attend(return_lse=True) returns the kernel's (out, lse), in the caller's layout, and
    runs no engine or CPU path."""
    asked = []

    def run_kernel(spec, q, k, v, *, return_lse=False, **kw):
        asked.append(return_lse)
        return torch.zeros_like(q), torch.arange(q.shape[2], dtype=torch.float32).expand(q.shape[:3])

    def refuse(*a, **kw):
        raise AssertionError("an engine ran")

    monkeypatch.setattr(dispatch, "kernel_refusal", lambda spec, q, k, geometry=None: "")
    monkeypatch.setattr(dispatch, "run_kernel", run_kernel)
    monkeypatch.setattr(engines, "ENGINES", {"reference": refuse, "draft": refuse})
    monkeypatch.setattr(engines, "CPU_PATHS", {"reference": refuse, "draft": refuse})
    geometry = VideoGeometry(1, 8, 8, 0)
    q = torch.randn(1, geometry.tokens, 2, 64, generator=torch.Generator().manual_seed(0))  # BNHD
    out, lse = attend(q, q, q, recipe, layout="BNHD", geometry=geometry, return_lse=True)
    assert asked == [True] and out.shape == q.shape
    assert torch.equal(lse, torch.arange(geometry.tokens, dtype=torch.float32)[None, :, None].expand(1, -1, 2))
