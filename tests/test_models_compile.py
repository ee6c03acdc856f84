"""The recipe's attention hooks under torch.compile (fullgraph=True) and CUDA-graph capture: a block of a model
whose processors call `dispatch_attention_fn` (LTX-Video) and of one whose processors call SDPA themselves
(CogVideoX) trace without a graph break into one recipe-op call, and the compiled block equals the eager one. CPU
(AOTAutograd over the CPU path) and, on a GPU, Inductor over the kernels in bf16 and a captured CUDA graph."""

import pytest
import torch

pytest.importorskip("diffusers")

from lowbit_video.models.injection import use_recipe  # noqa: E402
from lowbit_video.models.steps import StepTracker  # noqa: E402

OP = torch.ops.lowbit_video.recipe_attention.default


def _op_calls(gm) -> int:
    return sum(1 for n in gm.graph.nodes if n.op == "call_function" and n.target in (OP, OP.overloadpacket))


def _models(head_dim: int, device: str, dtype: torch.dtype):
    """(name, model, inputs) of a tiny LTX-Video and a tiny CogVideoX (one block each)."""
    from diffusers import CogVideoXTransformer3DModel, LTXVideoTransformer3DModel

    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    heads = 2
    ltx = LTXVideoTransformer3DModel(in_channels=8, out_channels=8, num_attention_heads=heads,
                                     attention_head_dim=head_dim, cross_attention_dim=heads * head_dim, num_layers=1,
                                     caption_channels=16)
    ltx_in = dict(hidden_states=torch.randn(1, 2 * 8 * 8, 8, generator=g), encoder_hidden_states=torch.randn(
        1, 7, 16, generator=g), timestep=torch.tensor([500]), encoder_attention_mask=torch.ones(1, 7),
        num_frames=2, height=8, width=8, return_dict=False)
    cog = CogVideoXTransformer3DModel(num_attention_heads=heads, attention_head_dim=head_dim, in_channels=4,
                                      out_channels=4, time_embed_dim=4, text_embed_dim=16, num_layers=1,
                                      sample_width=16, sample_height=16, sample_frames=5, patch_size=2,
                                      max_text_seq_length=7)
    cog_in = dict(hidden_states=torch.randn(1, 2, 4, 16, 16, generator=g),
                  encoder_hidden_states=torch.randn(1, 7, 16, generator=g), timestep=torch.tensor([500]),
                  return_dict=False)
    out = []
    for name, model, inputs in (("ltx", ltx, ltx_in), ("cogvideox", cog, cog_in)):
        model = model.to(device=device, dtype=dtype).eval()
        inputs = {k: (v.to(device=device, dtype=dtype if v.is_floating_point() else v.dtype)
                      if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
        out.append((name, model, inputs))
    return out


def _block_inputs(model, inputs):
    seen = {}
    block = model.transformer_blocks[0]
    hook = block.register_forward_pre_hook(lambda m, a, kw: seen.update(args=a, kwargs=kw) and None, with_kwargs=True)
    try:
        with torch.no_grad():
            model(**inputs)
    finally:
        hook.remove()
    return block, seen["args"], seen["kwargs"]


def _first(out):
    return out[0] if isinstance(out, tuple) else out


def _eager_and_aot(block, args, kwargs):
    """The block's eager output and its AOTAutograd-compiled one, after checking that dynamo traces it without a
    graph break into one recipe-op call (the self-attention; cross-attention stays 16-bit)."""
    eager = block(*args, **kwargs)
    explained = torch._dynamo.explain(block)(*args, **kwargs)
    assert explained.graph_break_count == 0, explained.break_reasons
    assert [_op_calls(g) for g in explained.graphs] == [1]
    return _first(eager), _first(torch.compile(block, fullgraph=True, backend="aot_eager")(*args, **kwargs))


@pytest.mark.parametrize("recipe", ["sage2-int8", "mxattention"])
@pytest.mark.parametrize("family", ["ltx", "cogvideox"])
def test_a_block_compiles_fullgraph_into_one_op_call_and_equals_eager(family, recipe):
    (name, model, inputs), = [m for m in _models(32, "cpu", torch.float32) if m[0] == family]
    torch._dynamo.reset()
    with torch.no_grad(), use_recipe(model, recipe, tracker=StepTracker()) as handle:
        eager, compiled = _eager_and_aot(*_block_inputs(model, inputs))
    assert torch.equal(compiled, eager)
    assert handle.calls["quantized"] == 2  # the eager calls: the forward's and the block's


@pytest.mark.gpu
@pytest.mark.parametrize("recipe", ["sage2-int8", "mxattention"])
@pytest.mark.parametrize("family", ["ltx", "cogvideox"])
def test_gpu_block_compiles_with_inductor_over_the_kernels(family, recipe):
    """bf16 at head_dim 64 (LTX-Video's and CogVideoX's): no graph break, one op call, the AOTAutograd-compiled
    block bit-equal to eager (the same kernels on the same inputs) and no call left to the float64 engine."""
    (name, model, inputs), = [m for m in _models(64, "cuda", torch.bfloat16) if m[0] == family]
    torch._dynamo.reset()
    with torch.no_grad(), use_recipe(model, recipe, tracker=StepTracker()) as handle:
        block, args, kwargs = _block_inputs(model, inputs)
        eager, aot = _eager_and_aot(block, args, kwargs)
        torch._dynamo.reset()
        inductor = _first(torch.compile(block, fullgraph=True)(*args, **kwargs))
    assert torch.equal(aot, eager)
    rel = ((inductor.float() - eager.float()).norm() / eager.float().norm()).item()
    assert rel < 2e-2 and handle.calls["engine"] == 0


@pytest.mark.gpu
@pytest.mark.parametrize("recipe", ["sage2-int8", "mxattention"])
@pytest.mark.parametrize("family", ["ltx", "cogvideox"])
def test_gpu_cuda_graph_of_a_block_replays_to_the_eager_output(family, recipe):
    """A block under the hooks captured into a CUDA graph (no host sync may happen inside) and replayed on new
    inputs copied into the captured ones: bit-equal to eager on those inputs (the same kernels, the same data)."""
    (name, model, inputs), = [m for m in _models(64, "cuda", torch.bfloat16) if m[0] == family]
    with torch.no_grad(), use_recipe(model, recipe, tracker=StepTracker()) as handle:
        block, args, kwargs = _block_inputs(model, inputs)
        args, kwargs = list(args), dict(kwargs)
        if args:  # the graph reads its inputs from fixed addresses: copies to refill
            hidden = args[0] = args[0].clone()
        else:
            hidden = kwargs["hidden_states"] = kwargs["hidden_states"].clone()
        new_hidden = torch.randn_like(hidden)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up outside the capture (kernel compilation)
            block(*args, **kwargs)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = _first(block(*args, **kwargs))
        hidden.copy_(new_hidden)
        graph.replay()
        torch.cuda.synchronize()
        replayed = captured.clone()
        eager = _first(block(*args, **kwargs))
    assert torch.equal(replayed, eager) and handle.calls["engine"] == 0
