"""Quantized and draft attention is inference-only: a call autograd would record (grad mode on and q, k or v
requiring grad) raises InferenceOnlyError, one line naming torch.no_grad() / torch.inference_mode(), on every
backend and entry point: `attend` (reference and draft engines, the CPU paths, the kernels), the custom op, the
engine and the kernels called directly, and a model under `use_recipe`. The unquantized recipe on the default
backend is torch SDPA and keeps its gradients, checked against the analytic gradient of softmax attention.

GPU tests run the kernels (bf16, head_dim 64) and skip on CPU."""

from __future__ import annotations

import math

import pytest
import torch

from lowbit_video.attention import VideoGeometry, attend, reference_attention
from lowbit_video.attention.custom_op import spec_key
from lowbit_video.attention.draft import draft_attention
from lowbit_video.errors import InferenceOnlyError, UserError
from lowbit_video.kernels import dispatch
from lowbit_video.recipes import available_recipes, load_recipe

from kernel_helpers import HAS_TRITON, needs_cuda

HINT = r"inference-only.*torch\.no_grad\(\) or torch\.inference_mode\(\)"
KINDS = {name: load_recipe(name).attention.kind for name in available_recipes()}
QUANTIZED = sorted(name for name, kind in KINDS.items() if kind == "quantized")
DRAFT = sorted(name for name, kind in KINDS.items() if kind == "draft")
KERNEL_QUANTIZED = [name for name in dispatch.kernel_recipes("attention") if KINDS[name] == "quantized"]
KERNEL_DRAFT = list(dispatch.kernel_recipes("draft"))
GEOMETRY = VideoGeometry(2, 8, 8, prefix=3)  # 131 tokens: two frames of one 64-token block each, and text


def qkv(n=GEOMETRY.tokens, d=64, *, dtype=torch.float32, device="cpu", grad="qkv", seed=0):
    g = torch.Generator().manual_seed(seed)
    out = tuple(torch.randn(1, 2, n, d, generator=g, dtype=torch.float64).to(device=device, dtype=dtype)
                for _ in range(3))
    return tuple(t.requires_grad_(name in grad) for name, t in zip("qkv", out))


def assert_refused(run):
    """`run()` (a forward and its backward) stops with the one-line inference-only error, never reaching a
    backward."""
    with pytest.raises(InferenceOnlyError, match=HINT) as info:
        run()
    assert isinstance(info.value, UserError) and "\n" not in str(info.value)
    return str(info.value)


# ------------------------------------------------------------------------------- attend, per backend on CPU


@pytest.mark.parametrize("recipe", QUANTIZED)
@pytest.mark.parametrize("backend", ["auto", "cpu", "reference"])
def test_quantized_recipe_refuses_autograd_on_every_cpu_backend(recipe, backend):
    q, k, v = qkv()
    message = assert_refused(lambda: attend(q, k, v, recipe, backend=backend).square().sum().backward())
    assert f"recipe '{recipe}'" in message
    assert q.grad is None and k.grad is None and v.grad is None


@pytest.mark.parametrize("recipe", DRAFT)
@pytest.mark.parametrize("backend", ["auto", "cpu", "reference"])
def test_draft_recipe_refuses_autograd_on_the_draft_engine_and_its_cpu_path(recipe, backend):
    q, k, v = qkv()
    assert_refused(lambda: attend(q, k, v, recipe, backend=backend, geometry=GEOMETRY).sum().backward())


@pytest.mark.parametrize("extra", [dict(return_diagnostics=True), dict(return_lse=True),
                                   dict(return_lse=True, return_diagnostics=True), dict(layout="BNHD")])
def test_every_return_form_is_refused(extra):
    q, k, v = qkv()
    assert_refused(lambda: attend(q, k, v, "mxattention", **extra))


@pytest.mark.parametrize("grad", ["q", "k", "v"])
def test_one_input_requiring_grad_is_enough(grad):
    q, k, v = qkv(grad=grad)
    assert_refused(lambda: attend(q, k, v, "sage2-int8").sum().backward())


def test_a_loaded_recipe_and_a_bare_spec_are_named_in_the_error():
    q, k, v = qkv()
    recipe = load_recipe("mxattention")
    assert "recipe 'mxattention'" in assert_refused(lambda: attend(q, k, v, recipe))
    assert "the quantized recipe" in assert_refused(lambda: attend(q, k, v, recipe.attention))


@pytest.mark.parametrize("backend, extra", [("cpu", {}), ("reference", {}), ("auto", dict(return_diagnostics=True))])
def test_fp16_off_sdpa_is_refused_too(backend, extra):
    # the CPU path and the engine compute fp16 without a backward of their own: only SDPA has gradients
    q, k, v = qkv()
    assert_refused(lambda: attend(q, k, v, "fp16", backend=backend, **extra).sum().backward())


@pytest.mark.parametrize("context", [torch.no_grad, torch.inference_mode, lambda: torch.set_grad_enabled(False)])
@pytest.mark.parametrize("recipe, backend", [("mxattention", "auto"), ("mxattention", "reference"),
                                             ("draftattention2", "auto"), ("draftattention2", "reference")])
def test_inference_contexts_run_and_give_the_output_of_inputs_without_grad(context, recipe, backend):
    q, k, v = qkv()
    expected = attend(q.detach(), k.detach(), v.detach(), recipe, backend=backend, geometry=GEOMETRY)
    with context():
        out = attend(q, k, v, recipe, backend=backend, geometry=GEOMETRY)
    assert not out.requires_grad
    assert torch.equal(out, expected)


def test_inputs_that_do_not_require_grad_run_with_grad_mode_on():
    q, k, v = qkv(grad="")
    assert torch.is_grad_enabled()
    assert attend(q, k, v, "mxattention").shape == q.shape


# ------------------------------------------------------------------------------- entry points below attend


def test_the_custom_op_refuses_autograd_when_called_directly_on_cpu():
    q, k, v = qkv()
    spec = load_recipe("mxattention").attention
    message = assert_refused(
        lambda: torch.ops.lowbit_video.recipe_attention(q, k, v, spec_key(spec), None, None, None).sum().backward())
    assert "lowbit_video::recipe_attention" in message
    with torch.inference_mode():
        assert torch.ops.lowbit_video.recipe_attention(q, k, v, spec_key(spec), None, None, None).shape == q.shape


def test_attend_refuses_autograd_under_torch_compile():
    # dynamo traces the check and runs the frame eagerly, which raises the error itself
    q, k, v = qkv()
    recipe = load_recipe("mxattention")
    assert_refused(lambda: torch.compile(lambda a, b, c: attend(a, b, c, recipe), backend="aot_eager")(q, k, v))
    # fullgraph=True allows no eager frame: dynamo's own error then carries the message
    compiled = torch.compile(lambda a, b, c: attend(a, b, c, recipe) + 0, backend="aot_eager", fullgraph=True)
    with pytest.raises(Exception, match=HINT):
        compiled(q, k, v)
    with torch.no_grad():
        assert torch.equal(compiled(q, k, v), attend(q, k, v, recipe))


def test_the_engines_refuse_autograd_when_called_directly():
    q, k, v = qkv()
    assert "reference engine" in assert_refused(
        lambda: reference_attention(q, k, v, load_recipe("mxattention").attention)[0].sum().backward())
    spec = load_recipe("draftattention2").attention.draft
    assert "draft engine" in assert_refused(lambda: draft_attention(q, k, v, spec, GEOMETRY)[0].sum().backward())


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed (it is not a test dependency)")
def test_the_kernel_entry_refuses_autograd_before_looking_at_the_device():
    from lowbit_video.kernels import attention

    q, k, v = qkv(n=64)
    assert "lowbit_video.kernels.attention" in assert_refused(lambda: attention(q, k, v, "mxattention"))


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed (it is not a test dependency)")
def test_the_draft_kernel_entry_refuses_autograd_before_looking_at_the_device():
    from lowbit_video.kernels.draft import draft_attention as draft_kernel

    q, k, v = qkv(n=GEOMETRY.tokens)
    assert "draft_attention" in assert_refused(
        lambda: draft_kernel(q, k, v, load_recipe("draftattention2").attention, GEOMETRY))


# ------------------------------------------------------------------------------- a model under use_recipe


def test_a_model_training_under_use_recipe_fails_at_the_first_attention_call():
    pytest.importorskip("diffusers")
    from lowbit_video.models.injection import use_recipe
    from lowbit_video.models.steps import StepTracker
    from lowbit_video.models.tiny_shapes.model import TinyShapesModel
    from lowbit_video.models.tiny_shapes.sample import initial_noise

    model = TinyShapesModel.from_folder().train()
    ids = model.tokenize(["a red circle moving left on a black background"])
    x = initial_noise(model, [0])
    with use_recipe(model, "mxattention", tracker=StepTracker()):
        assert_refused(lambda: model(x, torch.tensor([0.5]), ids).square().mean().backward())
    assert all(p.grad is None for p in model.transformer.parameters())


# ------------------------------------------------------------------------------- fp16 keeps its gradients


def softmax_attention_grads(q, k, v, g_out, g_lse, scale):
    """Gradients of sum(out * g_out) + sum(lse * g_lse) for out = softmax(S) V, lse = logsumexp(S), S = q kᵀ·scale,
    written out by hand in float64: dV = Pᵀ G, dP = G Vᵀ, dS = P ⊙ (dP − rowsum(dP ⊙ P)) + P ⊙ g_lse,
    dQ = dS K·scale, dK = dSᵀ Q·scale."""
    q, k, v, g_out, g_lse = (t.detach().double() for t in (q, k, v, g_out, g_lse))
    p = torch.softmax(q @ k.transpose(-1, -2) * scale, dim=-1)
    dv = p.transpose(-1, -2) @ g_out
    dp = g_out @ v.transpose(-1, -2)
    ds = p * (dp - (dp * p).sum(-1, keepdim=True)) + p * g_lse.unsqueeze(-1)
    return ds @ k * scale, ds.transpose(-1, -2) @ q * scale, dv


@pytest.mark.parametrize("layout", ["BHND", "BNHD"])
@pytest.mark.parametrize("return_lse", [False, True])
def test_fp16_gradients_are_those_of_softmax_attention(layout, return_lse):
    q, k, v = qkv(n=50, d=32, dtype=torch.float64)
    q2, k2, v2 = (t.detach().transpose(1, 2).requires_grad_() if layout == "BNHD" else t for t in (q, k, v))
    g = torch.Generator().manual_seed(7)
    g_out = torch.randn(q.shape, generator=g, dtype=torch.float64)
    g_lse = torch.randn(q.shape[:-1], generator=g, dtype=torch.float64) if return_lse else torch.zeros(q.shape[:-1])
    res = attend(q2, k2, v2, "fp16", layout=layout, scale=0.3, return_lse=return_lse)
    out, lse = res if return_lse else (res, None)
    if layout == "BNHD":
        out, lse = out.transpose(1, 2), (lse.transpose(1, 2) if lse is not None else None)
    loss = (out * g_out).sum() + ((lse.double() * g_lse).sum() if return_lse else 0)
    loss.backward()
    expected = softmax_attention_grads(q, k, v, g_out, g_lse, 0.3)
    for got, want in zip((q2.grad, k2.grad, v2.grad), expected):
        got = got.transpose(1, 2) if layout == "BNHD" else got
        # float64 SDPA; the LSE is float32 (attend's contract), whose rounding reaches the gradient of q and k
        tol = 1e-6 if return_lse else 1e-12
        assert float((got - want).abs().max()) <= tol * float(want.abs().max())


# ------------------------------------------------------------------------------- GPU: the kernels


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("recipe", KERNEL_QUANTIZED)
def test_gpu_kernel_recipes_refuse_autograd(recipe):
    q, k, v = qkv(n=256, dtype=torch.bfloat16, device="cuda")
    assert dispatch.kernel_refusal(load_recipe(recipe).attention, q, k) == ""  # the kernel is what would run
    assert_refused(lambda: attend(q, k, v, recipe).float().sum().backward())
    assert_refused(lambda: attend(q, k, v, recipe, return_lse=True)[0].float().sum().backward())


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("recipe", KERNEL_DRAFT)
def test_gpu_draft_kernel_refuses_autograd(recipe):
    geometry = VideoGeometry(2, 8, 16, prefix=0)
    q, k, v = qkv(n=geometry.tokens, dtype=torch.bfloat16, device="cuda")
    assert dispatch.kernel_refusal(load_recipe(recipe).attention, q, k, geometry) == ""
    assert_refused(lambda: attend(q, k, v, recipe, geometry=geometry).float().sum().backward())
    with torch.no_grad():
        assert torch.isfinite(attend(q, k, v, recipe, geometry=geometry)).all()


@pytest.mark.gpu
@needs_cuda
def test_gpu_custom_op_and_kernel_entry_refuse_autograd():
    from lowbit_video.kernels import attention

    q, k, v = qkv(n=256, dtype=torch.bfloat16, device="cuda")
    spec = load_recipe("sage2-int8").attention
    assert_refused(lambda: torch.ops.lowbit_video.recipe_attention(q, k, v, spec_key(spec), None, None, None))
    for recipe in ("sage2-int8", "fp16"):  # the 16-bit kernel has no backward either
        assert_refused(lambda: attention(q, k, v, recipe))


@pytest.mark.gpu
@needs_cuda
def test_gpu_fp16_with_lse_keeps_its_gradients():
    # return_lse on bf16 CUDA tensors runs the 16-bit kernel without grad; with grad it must stay on torch ops
    q, k, v = qkv(n=256, dtype=torch.bfloat16, device="cuda")
    g = torch.Generator().manual_seed(7)
    g_out = torch.randn(q.shape, generator=g, dtype=torch.float64)
    g_lse = torch.randn(q.shape[:-1], generator=g, dtype=torch.float64)
    out, lse = attend(q, k, v, "fp16", return_lse=True)
    ((out.double() * g_out.cuda()).sum() + (lse.double() * g_lse.cuda()).sum()).backward()
    expected = softmax_attention_grads(q.cpu(), k.cpu(), v.cpu(), g_out, g_lse, 1 / math.sqrt(q.shape[-1]))
    for got, want in zip((q.grad, k.grad, v.grad), expected):
        assert float((got.cpu().double() - want).norm() / want.norm()) < 2e-2  # bf16 rounding of SDPA's backward
