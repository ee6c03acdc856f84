"""A recipe's attention as one torch custom op, `torch.ops.lowbit_video.recipe_attention`, so that torch.compile
(`fullgraph=True`, diffusers' `compile_repeated_blocks`) and CUDA graphs see one opaque node per attention call
instead of tracing the pre-pass's Python and the Triton launches (which dynamo cannot: data-dependent branches, host
reads, device events).

The op takes BHND q, k, v, the recipe's AttentionSpec as a JSON string (`spec_key`: custom ops take only tensors,
numbers, strings and lists), the softmax scale, the model's RoPE split and the video geometry (frames, height,
width, prefix) of draft recipes. Inside it the call runs along its route (`dispatch.route`, the function `attend`
asks): the recipe's kernel where one takes the call, else the CPU path for CPU tensors or the exact engine on a
GPU, both after the NaN/Inf check (a one-line NonFiniteInputError, raised through the op unchanged). Eager calls run
that same function (`run_recipe`) without the op's dispatch (`recipe_attention`), along the route `attend` decided;
a call of the op itself (what torch.compile traces) asks for its route when it runs.

Autograd: the op is inference-only, like every quantized recipe (api.py). `attend` refuses a call autograd would
record before it gets here; a direct call of the op is refused by the op's autograd registration, as the op returns
and before its output enters the graph (torch's default for an op with no formula raises only at backward, after
the whole forward has been spent). `run_recipe` and `recipe_attention` are the plumbing between the two and do not
check again.

Its fake implementation, which compilers trace instead of the kernels, is `torch.empty_like(q)`: the output has q's
shape, dtype and strides. The real implementation keeps that promise: a kernel writes into `empty_like(q)`, any other
result is copied into one.
"""

from __future__ import annotations

import dataclasses
import functools
import json

import torch

from ..draft.layout import VideoGeometry
from ..errors import inference_only
from ..kernels import dispatch
from ..recipes import OPERANDS, AttentionSpec, DraftSpec, OperandQuant
from .routes import run_route

OP_NAME = "lowbit_video::recipe_attention"


# ------------------------------------------------------------------------------------------ the recipe as a string


def spec_key(spec: AttentionSpec) -> str:
    """`spec` as the op's string argument: JSON of every field in declaration order (equal specs give equal strings,
    so one compiled graph). Cached per spec in eager calls; under torch.compile the encoding is traced once per
    compilation into a constant (dynamo does not honour lru caches, and warns about them)."""
    if torch.compiler.is_compiling():
        return _json(spec)
    return _cached_key(spec)


def _json(value) -> str:
    """JSON of a recipe dataclass, written out by hand because dynamo cannot trace `json.dumps` (its C encoder).
    Recipe values are strings the loader checked against fixed choices, finite numbers, booleans, None and
    tuples of integers."""
    if dataclasses.is_dataclass(value):
        return "{" + ",".join(f'"{f.name}":{_json(getattr(value, f.name))}' for f in dataclasses.fields(value)) + "}"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)  # the shortest string that reads back as the same float
    if isinstance(value, str):
        if '"' in value or "\\" in value:
            raise ValueError(f"recipe value {value!r} cannot be passed to the attention op")
        return f'"{value}"'
    return "[" + ",".join(_json(item) for item in value) + "]"


@functools.lru_cache(maxsize=256)
def _cached_key(spec: AttentionSpec) -> str:
    return _json(spec)


@functools.lru_cache(maxsize=256)
def spec_from_key(key: str) -> AttentionSpec:
    """The AttentionSpec `spec_key` wrote (floats round-trip exactly through JSON's repr)."""
    fields = json.loads(key)
    operands = {name: OperandQuant(**fields.pop(name)) for name in OPERANDS}
    draft = fields.pop("draft")
    return AttentionSpec(**dict(fields, rope_segments=tuple(fields["rope_segments"])), **operands,
                         draft=DraftSpec(**draft) if draft is not None else None)


# --------------------------------------------------------------------------------------------------------- the op


def run_recipe(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, recipe: AttentionSpec, scale: float | None,
               rope: tuple[int, ...] | None, grid: VideoGeometry | None,
               route: dispatch.Route | None = None) -> torch.Tensor:
    """What the op computes: the call along `route` (None: `dispatch.route`'s for it, as the op's own calls ask
    when they run): the recipe's kernel where one takes the call, else the CPU path or the engine (after the NaN/Inf
    check); the result in the layout of `torch.empty_like(q)`."""
    if route is None:
        route = dispatch.route(recipe, q, k, geometry=grid)
    out = run_route(route, q, k, v, recipe, scale=scale, rope_segments=rope, geometry=grid)[0]
    return _like(q, out)


# the schema written out (not inferred from the annotations, whose inference differs across torch releases)
@torch.library.custom_op(OP_NAME, mutates_args=(), schema="(Tensor q, Tensor k, Tensor v, str spec, float? scale, "
                         "SymInt[]? rope_segments, SymInt[]? geometry) -> Tensor")
def _recipe_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, spec: str, scale: float | None,
                      rope_segments: list[int] | None, geometry: list[int] | None) -> torch.Tensor:
    return run_recipe(q, k, v, spec_from_key(spec), scale, tuple(rope_segments) if rope_segments else None,
                      VideoGeometry(*geometry) if geometry else None)


@_recipe_attention.register_fake
def _recipe_attention_fake(q, k, v, spec, scale, rope_segments, geometry):
    return torch.empty_like(q)


def _refuse_autograd(ctx, inputs, output):
    # autograd runs this right after the forward, only when grad mode is on and an input requires grad
    raise inference_only(f"the {OP_NAME} op")


def _no_backward(ctx, grad):
    raise inference_only(f"the {OP_NAME} op")  # unreachable: _refuse_autograd stops every recorded call


_recipe_attention.register_autograd(_no_backward, setup_context=_refuse_autograd)


def _like(q: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """`out` in the layout of `torch.empty_like(q)` (the fake's), copied only where it is not already."""
    if out.stride() == torch.empty_like(q, device="meta").stride():
        return out
    return torch.empty_like(q).copy_(out)


def recipe_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, spec: AttentionSpec, *,
                     scale: float | None = None, rope_segments=None, geometry: VideoGeometry | None = None,
                     route: dispatch.Route | None = None) -> torch.Tensor:
    """Attention of BHND q, k, v under `spec` (the caller checked shapes, recipe and autograd): through the custom op while
    torch.compile traces, directly otherwise. Both run `run_recipe`; an eager call skips the op's dispatch and its
    output-aliasing check, host time that showed at short sequences (the GPU waits for the launches), and a CUDA
    graph captured eagerly records the same launches. route: the call's route where the caller has it (eager calls;
    the op asks for its own when it runs)."""
    if not torch.compiler.is_compiling():
        return run_recipe(q, k, v, spec, None if scale is None else float(scale),
                          tuple(rope_segments) if rope_segments else None, geometry, route)
    grid = [geometry.frames, geometry.height, geometry.width, geometry.prefix] if geometry is not None else None
    return torch.ops.lowbit_video.recipe_attention(q, k, v, spec_key(spec), None if scale is None else float(scale),
                                                   list(rope_segments) if rope_segments else None, grid)


__all__ = ["OP_NAME", "recipe_attention", "run_recipe", "spec_from_key", "spec_key"]
