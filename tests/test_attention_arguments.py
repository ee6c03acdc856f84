"""Wrong arguments to `attend` are the user's to fix: errors of the project's own types (lowbit_video/errors.py), one
line each, which the CLI prints as `error: ...`. One rule for dtypes on every recipe and backend: q, k and v share one
floating dtype (torch SDPA's rule), and one device."""

from __future__ import annotations

import pytest
import torch

from lowbit_video.attention import VideoGeometry, attend
from lowbit_video.errors import AttentionInputError, RecipeError, UserError
from lowbit_video.recipes import available_recipes, load_recipe

GEOMETRY = VideoGeometry(1, 8, 8)  # 64 video tokens, what the draft recipes need
RECIPES = sorted(available_recipes())


def qkv(n=GEOMETRY.tokens, d=64, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(1, 2, n, d, generator=g, dtype=torch.float64).to(dtype) for _ in range(3)]


def refused(error, match, *args, **kwargs) -> str:
    with pytest.raises(error, match=match) as info:
        attend(*args, geometry=GEOMETRY, **kwargs)
    message = str(info.value)
    assert isinstance(info.value, UserError) and "\n" not in message and message
    return message


@pytest.mark.parametrize("recipe, shown", [(None, "NoneType"), (3, "int"), (1.5, "float"), (["fp16"], "list"),
                                           (torch.float16, "torch.dtype")])
def test_a_recipe_of_the_wrong_type_is_a_recipe_error(recipe, shown):
    q, k, v = qkv()
    message = refused(RecipeError, "recipe must be a recipe name, a path, a Recipe or an AttentionSpec", q, k, v,
                      recipe)
    assert message.endswith(f"got {shown}")


def test_an_unknown_recipe_name_is_still_the_loader_s_recipe_error():
    q, k, v = qkv()
    refused(RecipeError, "no-such-recipe", q, k, v, "no-such-recipe")


@pytest.mark.parametrize("position", [0, 1, 2])
@pytest.mark.parametrize("recipe", ["fp16", "mxattention"])
def test_numpy_arrays_are_named_and_refused(position, recipe):
    args = qkv()
    args[position] = args[position].numpy()
    name = "qkv"[position]
    refused(AttentionInputError, rf"^{name} must be a torch\.Tensor, got numpy\.ndarray$", *args, recipe)


@pytest.mark.parametrize("value", [[[1.0]], 2.0, None])
def test_other_non_tensors_are_refused(value):
    q, k, v = qkv()
    refused(AttentionInputError, "k must be a torch.Tensor", q, value, v, "fp16")


@pytest.mark.parametrize("dtype", [torch.int32, torch.int8, torch.bool, torch.complex64])
@pytest.mark.parametrize("recipe", ["fp16", "sage2-int8", "draftattention2"])
def test_non_floating_dtypes_are_refused(dtype, recipe):
    q, k, v = (t.to(dtype) for t in qkv())
    refused(AttentionInputError, f"q must be a floating-point tensor, got {dtype}", q, k, v, recipe)


@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize("mixed", [(torch.float64, torch.float32, torch.float32),
                                   (torch.float32, torch.bfloat16, torch.float32),
                                   (torch.float32, torch.float32, torch.float16)])
@pytest.mark.parametrize("backend", ["auto", "cpu", "reference"])
def test_mixed_dtypes_are_refused_by_every_recipe_on_every_backend(recipe, mixed, backend):
    q, k, v = (t.to(dtype) for t, dtype in zip(qkv(), mixed))
    message = refused(AttentionInputError, "q, k and v must have one dtype", q, k, v, recipe, backend=backend)
    assert message.endswith(f"got q {mixed[0]}, k {mixed[1]}, v {mixed[2]}")


@pytest.mark.parametrize("recipe", ["fp16", "mxattention", "draftattention2"])
def test_one_shared_dtype_other_than_float32_runs(recipe):
    # the rule is "one dtype", not "float32": bfloat16 everywhere runs and returns bfloat16
    q, k, v = qkv(dtype=torch.bfloat16)
    out = attend(q, k, v, recipe, geometry=GEOMETRY)
    assert out.dtype == torch.bfloat16 and out.shape == q.shape and torch.isfinite(out).all()


@pytest.mark.parametrize("recipe", ["fp16", "mxattention", "draftattention2"])
@pytest.mark.parametrize("position", [0, 1, 2])
def test_tensors_on_different_devices_are_refused(recipe, position):
    # the meta device stands in for a second device on a machine without a GPU: the check needs no data
    args = qkv()
    args[position] = args[position].to("meta")
    devices = ["cpu", "cpu", "cpu"]
    devices[position] = "meta"
    message = refused(AttentionInputError, "q, k and v must be on one device", *args, recipe)
    assert message.endswith(f"got q {devices[0]}, k {devices[1]}, v {devices[2]}")


def test_a_loaded_recipe_and_its_spec_are_accepted():
    q, k, v = qkv()
    recipe = load_recipe("mxattention")
    assert torch.equal(attend(q, k, v, recipe), attend(q, k, v, recipe.attention))


def test_the_cli_prints_an_attention_argument_error_as_one_line(capsys):
    import typer

    from lowbit_video.cli.common import user_errors

    q, k, v = qkv()

    @user_errors
    def command():
        attend(q, k, v, 3)

    with pytest.raises(typer.Exit) as info:
        command()
    assert info.value.exit_code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: recipe must be") and err.count("\n") == 1
