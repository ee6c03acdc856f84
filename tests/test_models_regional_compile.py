"""models/regional_compile.py: which blocks regional compilation compiles (diffusers' `_repeated_blocks`, else the
block lists a recipe numbers), the one-line refusal of a model with neither, and undoing it. A tiny Wan transformer
on the CPU, compiled with AOTAutograd (the same aten ops as eager, so its output is bit-equal to eager's)."""

import pytest
import torch

pytest.importorskip("diffusers")

from lowbit_video.errors import UserError  # noqa: E402
from lowbit_video.models.regional_compile import (compile_blocks, is_compiled,  # noqa: E402
                                                   uncompile_blocks)


def _wan():
    from diffusers import WanTransformer3DModel

    torch.manual_seed(0)
    model = WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=8, in_channels=4,
                                  out_channels=4, text_dim=16, freq_dim=16, ffn_dim=32, num_layers=3).eval()
    g = torch.Generator().manual_seed(1)
    inputs = dict(hidden_states=torch.randn(1, 4, 2, 8, 8, generator=g), timestep=torch.tensor([500]),
                  encoder_hidden_states=torch.randn(1, 5, 16, generator=g), return_dict=False)
    return model, inputs


def test_the_named_repeated_blocks_are_compiled_and_uncompiled():
    model, _ = _wan()
    assert type(model)._repeated_blocks == ["WanTransformerBlock"]
    blocks = compile_blocks(model, backend="aot_eager")
    assert blocks == list(model.blocks) and all(is_compiled(b) for b in blocks)
    assert not any(is_compiled(m) for m in model.modules() if m not in blocks)
    uncompile_blocks(blocks)
    assert not any(is_compiled(m) for m in model.modules())


def test_without_repeated_blocks_the_block_lists_are_compiled_and_equal_eager():
    model, inputs = _wan()
    model._repeated_blocks = []  # a model that names none (diffusers' compile_repeated_blocks would refuse it)
    with torch.no_grad():
        eager = model(**inputs)[0]
        torch._dynamo.reset()
        blocks = compile_blocks(model, backend="aot_eager")
        compiled = model(**inputs)[0]
    assert blocks == list(model.blocks) and all(is_compiled(b) for b in blocks)
    assert torch.equal(compiled, eager)


def test_a_model_with_no_blocks_is_refused_in_one_line():
    class PlainNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList([torch.nn.Linear(4, 4)])  # a list, but of no attention modules

    with pytest.raises(UserError) as e:
        compile_blocks(PlainNet())
    assert str(e.value) == ("cannot compile PlainNet: it names no repeated blocks (_repeated_blocks) and has no "
                            "block lists of attention modules")
