"""The CPU path against the float64 reference engine, per attention call, for every quantized recipe.

Tolerance, from the rounding stated in cpu_path.py: the path computes scores, exponentials and sums in
float32, so away from quantization boundaries it agrees with the engine to about 1e-6 relative; an element
of P̃ (or, for NVFP4/INT/FP8 quantizers, of x / scale) that lies within that distance of a rounding boundary
of its format may land one grid step away. Such flips are rare (about 1e-6 of the elements) but each moves a
whole output row by up to a step of P̂ times |V|. So the checks are: the relative L2 error of the whole output
at most 1e-3, at least 99 % of the rows within 1e-5 · max|V| of the engine, and no row further than one P̂ grid
step (at most half the row's largest weight) times 2·max|V|. Without a flip the error is about 1e-6 relative;
1e-3 leaves room for one flipped row in the 1800 rows of `outlier_qkv` (sage-nvfp4 and the non-orthogonal
rotation control rotateattention-half-unconstrained each flip one: 7e-5 and 3e-4 relative).
"""

import pytest
import torch

from lowbit_video.attention import VideoGeometry, attend, reference_attention
from lowbit_video.attention.cpu_path import cpu_attention
from lowbit_video.attention.draft import draft_attention
from lowbit_video.attention.draft_cpu import cpu_draft_attention
from lowbit_video.formats import fast, fp8, intq, mxfp4, nvfp4
from lowbit_video.recipes import available_recipes, load_recipe

DENSE = sorted(n for n in available_recipes() if load_recipe(n).attention.kind != "draft"
               and load_recipe(n).attention.quantized)
DRAFT = sorted(n for n in available_recipes() if load_recipe(n).attention.kind == "draft")


def test_every_family_is_covered():
    assert {"mxattention", "mxattention-no-uos", "mxattention-no-pnq-uos", "mxfp4-ocp", "mxfp4-tfs", "sage2-int8",
            "nvfp4", "sage-nvfp4", "rotateattention-half", "rotateattention-interleaved", "rotateattention-full",
            "int4-baseline"} <= set(DENSE)
    assert {"draftattention2", "draftattention-sparse16"} <= set(DRAFT)


def outlier_qkv(b=2, h=3, nq=300, nk=333, d=64, seed=0):
    """Video-like: channel offsets on Q, a few outlier channels in K, one heavy key token, ragged lengths."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, h, n, d, generator=g) for n in (nq, nk, nk))
    q = q + 2.0 * torch.randn(d, generator=g)
    k[..., 5] *= 20.0
    k[..., 17] += 8.0
    k[:, :, 7] *= 6.0
    v[..., 3] *= 30.0
    return q, k, v


def assert_close_to_engine(out: torch.Tensor, ref: torch.Tensor, v: torch.Tensor):
    vmax = float(v.abs().max())
    err = (out.double() - ref).abs().amax(dim=-1)  # per row
    assert float((out.double() - ref).norm() / ref.norm()) <= 1e-3
    assert float((err <= 1e-5 * vmax).double().mean()) >= 0.99
    assert float(err.max()) <= vmax  # one flipped P̂ step: at most half the row max weight, times 2·max|V|


# ------------------------------------------------------------------------------- fast format kernels

def _inputs():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 3, 70, 96, generator=g, dtype=torch.float64) * torch.logspace(-4, 4, 96, dtype=torch.float64)
    x[0, 0, :5] = 0.0
    p = torch.rand(2, 3, 70, 128, generator=g, dtype=torch.float64) ** 6  # softmax-tile-like, in [0, 1]
    return x, p


KERNELS = [
    ("mxfp4-uos", lambda t, a: mxfp4.fake_quantize(t, rule="uos", axis=a), lambda t, a: fast.fake_mxfp4(t, rule="uos", axis=a)),
    ("mxfp4-ocp", lambda t, a: mxfp4.fake_quantize(t, rule="ocp", axis=a), lambda t, a: fast.fake_mxfp4(t, rule="ocp", axis=a)),
    ("mxfp4-tfs", lambda t, a: mxfp4.fake_quantize(t, rule="tfs", axis=a), lambda t, a: fast.fake_mxfp4(t, rule="tfs", axis=a)),
    ("nvfp4-tensor", lambda t, a: nvfp4.fake_quantize(t, axis=a), lambda t, a: fast.fake_nvfp4(t, axis=a)),
    ("nvfp4-none", lambda t, a: nvfp4.fake_quantize(t, axis=a, outer_scale="none"),
     lambda t, a: fast.fake_nvfp4(t, axis=a, outer_scale="none")),
    ("int8-sym", lambda t, a: intq.fake_quantize(t, bits=8, axis=a), lambda t, a: fast.fake_int(t, bits=8, axis=a)),
    ("int4-sym-block", lambda t, a: intq.fake_quantize(t, bits=4, block=32, axis=a),
     lambda t, a: fast.fake_int(t, bits=4, block=32, axis=a)),
    ("int4-affine", lambda t, a: intq.fake_quantize(t, bits=4, axis=a, scheme="affine"),
     lambda t, a: fast.fake_int(t, bits=4, axis=a, scheme="affine")),
    ("fp8", lambda t, a: fp8.fake_quantize(t, axis=a), lambda t, a: fast.fake_fp8(t, axis=a)),
    ("fp8-static", lambda t, a: fp8.fake_quantize(t, axis=a, scale=1 / 448), lambda t, a: fast.fake_fp8(t, axis=a, scale=1 / 448)),
]


@pytest.mark.parametrize("name, exact, fast_kernel", KERNELS, ids=[k[0] for k in KERNELS])
@pytest.mark.parametrize("axis", [-1, -2])
def test_fast_kernels_are_bit_identical_in_float64(name, exact, fast_kernel, axis):
    # axis -2 has 70 elements: a ragged last block for the 16/32-blocks.
    for t in _inputs():
        assert torch.equal(fast_kernel(t, axis), exact(t, axis))


@pytest.mark.parametrize("name, exact, fast_kernel", KERNELS, ids=[k[0] for k in KERNELS])
def test_fast_kernels_in_float32(name, exact, fast_kernel):
    # MXFP4: power-of-two scales, exact. The others divide by a non-power-of-two scale in float32 first:
    # rare one-step differences, and the float32 product code · scale.
    for t in _inputs():
        t32 = t.to(torch.float32)
        got, want = fast_kernel(t32, -1).double(), exact(t32, -1).double()
        if name.startswith("mxfp4"):
            assert torch.equal(got, want)
        else:
            close = (got - want).abs() <= 2.0**-23 * want.abs()
            assert float((~close).double().mean()) <= 1e-4
            step = want.abs().amax(dim=-1, keepdim=True) / 3  # the coarsest grid step of these formats per row
            assert bool(((got - want).abs() <= step).all())


def test_fast_mxfp4_rounds_ties_to_even():
    unit = 0.25
    x = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0, -0.25, -2.5], dtype=torch.float32) * unit
    x = torch.cat([x, torch.full((22,), 6.0 * unit)])  # the block max fixes the unit (OCP: 2^(2-2) · ... = unit)
    got = fast.fake_mxfp4(x, rule="ocp")
    assert got[:10].tolist() == [v * unit for v in (0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0, -0.0, -2.0)]


# ------------------------------------------------------------------------------- dense recipes

@pytest.mark.parametrize("recipe", DENSE)
def test_dense_recipes_match_the_engine_on_outlier_ragged_inputs(recipe):
    q, k, v = outlier_qkv()
    spec = load_recipe(recipe).attention
    ref, diag = reference_attention(q, k, v, spec, measure_errors=False)
    out, lse = cpu_attention(q, k, v, spec)
    assert_close_to_engine(out, ref, v)
    assert float((lse.double() - diag.lse).abs().max()) <= 1e-4


@pytest.mark.parametrize("recipe", ["mxattention", "rotateattention-half", "sage-nvfp4"])
def test_query_chunking_does_not_change_the_result(recipe):
    # Chunks of 7 rows cut through tiles and Q-smoothing groups; float32 matmuls may sum in another order.
    q, k, v = outlier_qkv(nq=150, nk=200)
    spec = load_recipe(recipe).attention
    big, _ = cpu_attention(q, k, v, spec)
    small, _ = cpu_attention(q, k, v, spec, chunk_elements=7 * 256)
    assert_close_to_engine(small, big, v)


def test_head_dim_128_and_a_scale_that_is_not_a_power_of_two():
    q, k, v = outlier_qkv(b=1, h=2, nq=130, nk=260, d=128)
    for recipe in ("mxattention", "sage2-int8"):
        spec = load_recipe(recipe).attention
        ref, _ = reference_attention(q, k, v, spec, scale=0.3, measure_errors=False)
        out, _ = cpu_attention(q, k, v, spec, scale=0.3)
        assert_close_to_engine(out, ref, v)


# ------------------------------------------------------------------------------- draft recipes

@pytest.mark.parametrize("recipe", DRAFT)
@pytest.mark.parametrize("geometry", [VideoGeometry(4, 16, 16, 0), VideoGeometry(3, 10, 14, 7)], ids=["square", "ragged-prefix"])
def test_draft_recipes_match_the_engine(recipe, geometry):
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 2, geometry.tokens, 64, generator=g) for _ in range(3))
    k[..., 5] *= 10.0
    v[..., 2] *= 20.0
    spec = load_recipe(recipe).attention.draft
    ref, _ = draft_attention(q, k, v, spec, geometry)
    out, _ = cpu_draft_attention(q, k, v, spec, geometry)
    assert_close_to_engine(out, ref, v)


# ------------------------------------------------------------------------------- dispatch

def test_attend_uses_the_cpu_path_on_cpu_and_the_engine_on_request():
    # The engine computes in float64 whatever the input dtype: on float64 inputs it is the oracle itself. The CPU
    # path rounds in float32, so on float64 inputs it lands near the engine, never on it: that tells the paths apart.
    q, k, v = outlier_qkv(b=1, h=2, nq=64, nk=200)
    q64, k64, v64 = (t.double() for t in (q, k, v))
    engine = attend(q64, k64, v64, "mxattention", backend="reference")
    assert engine.dtype == torch.float64
    for backend in ("auto", "cpu"):
        out = attend(q, k, v, "mxattention", backend=backend)
        assert out.dtype == torch.float32
        assert_close_to_engine(out, engine, v)
        out64 = attend(q64, k64, v64, "mxattention", backend=backend)
        assert_close_to_engine(out64, engine, v)
        assert not torch.equal(out64, engine)
    assert torch.equal(attend(q, k, v, "mxattention", backend="reference"), engine.to(torch.float32))
    out, diag = attend(q64, k64, v64, "mxattention", return_diagnostics=True)  # diagnostics: always the engine
    assert torch.equal(out, engine) and diag is not None


def test_attend_returns_the_cpu_path_lse_in_both_layouts():
    q, k, v = outlier_qkv(b=1, h=2, nq=64, nk=200)
    _, lse = attend(q, k, v, "sage2-int8", return_lse=True)
    _, diag = reference_attention(q, k, v, load_recipe("sage2-int8").attention, measure_errors=False)
    assert lse.dtype == torch.float32 and lse.shape == (1, 2, 64)
    assert float((lse.double() - diag.lse).abs().max()) <= 1e-4
    _, lse_bnhd = attend(*(t.transpose(1, 2) for t in (q, k, v)), "sage2-int8", layout="BNHD", return_lse=True)
    assert torch.equal(lse_bnhd, lse.transpose(1, 2))


def test_attend_draft_uses_the_cpu_path():
    # As above, with the draft engine: float64 inputs tell the float32 CPU path from the float64 engine.
    geometry = VideoGeometry(2, 16, 16, 0)
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(1, 2, geometry.tokens, 64, generator=g, dtype=torch.float64) for _ in range(3))
    engine = attend(q, k, v, "draftattention2", geometry=geometry, backend="reference")
    out = attend(q, k, v, "draftattention2", geometry=geometry)
    assert_close_to_engine(out, engine, v)
    assert not torch.equal(out, engine)
    out32 = attend(*(t.float() for t in (q, k, v)), "draftattention2", geometry=geometry)
    assert out32.dtype == torch.float32
    assert_close_to_engine(out32, engine, v)


def test_a_heads_numbers_do_not_depend_on_the_other_heads_in_the_call():
    # What splitting heads over ranks (Ulysses context parallelism) relies on.
    q, k, v = outlier_qkv(b=1, h=4, nq=300, nk=333)
    spec = load_recipe("mxattention").attention
    whole, _ = cpu_attention(q, k, v, spec)
    half, _ = cpu_attention(q[:, 2:], k[:, 2:], v[:, 2:], spec)
    assert torch.equal(whole[:, 2:], half)


def test_bfloat16_inputs_come_back_in_bfloat16():
    q, k, v = (t.to(torch.bfloat16) for t in outlier_qkv(b=1, h=1, nq=40, nk=90))
    out = attend(q, k, v, "rotateattention-half")
    assert out.dtype == torch.bfloat16 and out.shape == q.shape and bool(torch.isfinite(out).all())
