"""`attend(q, k, v, recipe, layout=...)`: the one call every model integration makes.

No global state: the recipe (a name, a path, or a loaded Recipe) and the backend are arguments. Which path runs a
call (a kernel, torch SDPA, the CPU path or an exact engine) is the kernel dispatch table's answer
(lowbit_video/kernels/dispatch.py `route`), which the custom op and the model hooks ask too; a recipe named by a
string is read once per process there. A call whose signature has a kernel call plan kept (kernels/plans.py: the
same recipe, shapes, strides, dtypes, devices and options were checked, routed to the kernel and recorded before)
replays it before the checks and the route, which could only answer as they did then; autograd is still checked.

NaN/Inf inputs: `attend` raises NonFiniteInputError (one line) wherever the check costs no host synchronisation
of its own: for CPU tensors, and wherever the reference or draft engine runs (they read results back on the host
anyway). The CUDA fast paths (the kernels, torch SDPA) do not check: a check there would be a full pass over Q, K
and V and a host sync on every call. Callers that take tensors from users on CUDA call `check_finite` once
(the CLI's diagnostics run the engine, which checks).

Autograd: only the unquantized recipe on the default backend (torch SDPA) has gradients. Every other call that
autograd would record (grad mode on and q, k or v requiring grad) raises InferenceOnlyError before anything runs:
the quantizers' rounding has zero gradient almost everywhere and the kernels, the CPU path and the custom op have
no backward, so recording them would give zero or wrong gradients. The check reads two flags (no host sync).
"""

from __future__ import annotations

import os
from typing import Literal

import torch

from ..errors import AttentionInputError, RecipeError, ShapeError, inference_only, records_autograd
from ..kernels import dispatch, plans
from ..recipes import AttentionSpec, Recipe
from ..draft.layout import VideoGeometry
from .custom_op import recipe_attention
from .engines import check_finite  # noqa: F401 (attention's public check, re-exported)
from .routes import run_route

Layout = Literal["BHND", "BNHD"]
Backend = Literal["auto", "cpu", "reference"]


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    recipe: Recipe | str,
    *,
    layout: Layout = "BHND",
    scale: float | None = None,
    backend: Backend = "auto",
    return_diagnostics: bool = False,
    rope_segments: tuple[int, ...] | list[int] | None = None,
    geometry: VideoGeometry | None = None,
    return_lse: bool = False,
) -> torch.Tensor | tuple:
    """Non-causal attention of q (B, H, Nq, D), k (B, H, Nk, D), v (B, H, Nk, Dv) under `recipe`.

    Args:
        layout: "BHND" (batch, heads, tokens, head_dim) or "BNHD" (batch, tokens, heads, head_dim,
            what diffusers' attention processors pass).
        scale: softmax scale; default 1/sqrt(D).
        backend: "auto" runs the unquantized recipe through torch SDPA in the input dtype, a
            quantized or draft recipe through the Triton kernels (lowbit_video.kernels) when the
            tensors are on CUDA and the dispatch table has a kernel for the recipe (MXFP4 family,
            sage2-int8, INT4, NVFP4; draft recipes with fp16/bf16 tensors and 64-token blocks; not
            with return_diagnostics; with return_lse the unquantized recipe too, on fp16/bf16
            tensors, through the 16-bit kernel), through the CPU path when the tensors are not on
            CUDA (cpu_path.py, draft_cpu.py: the engine's numbers vectorised in float32, within the
            tolerance stated there), and otherwise through the exact engine (the reference engine,
            or the draft engine for draft recipes); "cpu" forces the CPU path on any device;
            "reference" forces the engine (float64, the oracle the kernels and the CPU path are
            tested against).
        return_diagnostics: also return AttentionDiagnostics (induced row sums, operand errors);
            implies the reference engine.
        rope_segments: the model's 3D-RoPE t/h/w channel split (e.g. Wan at head_dim 128: 44, 42,
            42); overrides the recipe's `rope_segments` for the "half" rotation.
        geometry: the video token layout (frames, height, width, prefix tokens) that
            `kind = "draft"` recipes (DraftAttention2) pool and pack by; required for them, ignored
            by the others.
        return_lse: also return the log-sum-exp of each query row's scores, float32, (B, H, Nq)
            for BHND and (B, Nq, H) for BNHD: what ring attention (context parallelism) needs to
            merge outputs over key chunks: the natural log of the normaliser the recipe divided
            the row by, as the engine defines it (AttentionDiagnostics.lse): m + log ℓ with ℓ the
            sum of the quantized P̂ for PNQ recipes and of P̃ for direct placement (draft recipes:
            P̃ over the kept blocks), plus q·mean(K)·scale where K is smoothed. The kernels write
            it from their epilogue; the CPU path and the engines compute the same; unquantized
            SDPA (not fp16/bf16, or no kernel) by torch ops in float32.

    Returns the output in q's layout and dtype; with return_diagnostics, (out, diagnostics); with
    return_lse, (out, lse); with both, (out, diagnostics, lse).

    Inputs: q, k and v are torch tensors of one floating dtype on one device, for every recipe (torch SDPA's
    rule: a recipe that quantizes could take mixed dtypes, but then the unquantized recipe, the baseline every
    recipe is compared with, could not run the same call). Anything else raises AttentionInputError; a recipe
    that is not a name, a path, a Recipe or an AttentionSpec raises RecipeError.

    Autograd: inference-only except for the unquantized recipe on backend "auto" (torch SDPA, whose gradients are
    torch's). Any other call while autograd records (torch.is_grad_enabled() and q, k or v requiring grad)
    raises InferenceOnlyError; run it under torch.no_grad() or torch.inference_mode().
    NaN/Inf inputs raise NonFiniteInputError on CPU and in the engines, not on the CUDA fast paths (module docstring).
    """
    spec = _spec_of(recipe)
    if layout not in ("BHND", "BNHD"):
        raise ShapeError(f"layout must be 'BHND' or 'BNHD', got {layout!r}")
    kept = None
    # (torch.compile traces the custom op's node instead, and must not guard on the plan cache: asked first)
    if not torch.compiler.is_compiling() and backend == "auto" and not return_diagnostics and plans.PLANS:
        kept = _replay_kept(q, k, v, spec, layout, scale, rope_segments, return_lse)
    if kept is not None:
        out, diag, lse = (kept[0], None, kept[1]) if return_lse else (kept, None, None)
    else:
        out, diag, lse = _run(q, k, v, recipe, spec, layout, scale, backend, return_diagnostics, rope_segments,
                              geometry, return_lse)

    if layout == "BNHD":
        out = out.transpose(1, 2)
        lse = lse.transpose(1, 2) if lse is not None else None
    if return_lse:
        return (out, diag, lse) if return_diagnostics else (out, lse)
    return (out, diag) if return_diagnostics else out


def _run(q, k, v, recipe, spec, layout, scale, backend, return_diagnostics, rope_segments, geometry, return_lse):
    """(out, diagnostics, lse) of one call along its route (`dispatch.route`), q, k, v and the results BHND, after
    the checks of its inputs and of autograd."""
    _check_inputs(q, k, v, layout)
    if layout == "BNHD":
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    _check_recipe_fits(spec, q.shape[-1])
    records = records_autograd(q, k, v)
    route = dispatch.route(spec, q, k, backend=backend, geometry=geometry, return_lse=return_lse,
                           return_diagnostics=return_diagnostics, autograd=records)
    if records and route.path != "sdpa":
        raise inference_only(_subject(recipe, spec, route.row, backend))
    if route.op:
        # one custom op (custom_op.py): a single opaque node under torch.compile, running the route it is given
        out = recipe_attention(q, k, v, spec, scale=scale, rope_segments=rope_segments, geometry=geometry,
                               route=route)
        return out, None, None
    return run_route(route, q, k, v, spec, scale=scale, rope_segments=rope_segments, geometry=geometry,
                     return_lse=return_lse, measure_errors=return_diagnostics)


def _replay_kept(q, k, v, spec, layout, scale, rope_segments, return_lse):
    """The kernel's result (out, or with return_lse (out, lse); BHND) by the call plan kept for this call's
    signature (kernels/launch.py `replay_kept`: the checks and the route answered the same when it was recorded),
    or None where none is kept or the call must go the whole way: anything but 4-D CUDA tensors, autograd
    recording, a q whose head_dim is not contiguous (the op's output may then need a copy into q's layout,
    custom_op.py). The options go to the key as given: where the whole path passes them on converted (the custom
    op's scale to a float, an empty RoPE split to None) and the key differs, the call simply goes the whole way."""
    if not all(isinstance(t, torch.Tensor) and t.dim() == 4 for t in (q, k, v)):
        return None
    if not q.is_cuda or q.stride(-1) != 1 or records_autograd(q, k, v):
        return None
    if layout == "BNHD":
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    return dispatch.entry_function("launch:replay_kept")(q, k, v, spec, scale=scale, return_lse=return_lse,
                                                          rope_segments=rope_segments)


def _spec_of(recipe) -> AttentionSpec:
    """`dispatch.attention_spec`, with RecipeError for a recipe of the wrong type (looked at only when the lookup
    failed, so the hot path pays nothing)."""
    try:
        return dispatch.attention_spec(recipe)
    except TypeError:
        if isinstance(recipe, (str, os.PathLike, Recipe, AttentionSpec)):
            raise
        raise RecipeError(f"recipe must be a recipe name, a path, a Recipe or an AttentionSpec, "
                          f"got {_type_name(recipe)}") from None


def _subject(recipe, spec: AttentionSpec, row, backend: str) -> str:
    """What InferenceOnlyError names: the recipe where it quantizes, else what took the call off torch SDPA."""
    if not row.plain_softmax:
        if isinstance(recipe, AttentionSpec):
            return f"the {spec.kind} recipe"
        return f"recipe {recipe.name if isinstance(recipe, Recipe) else os.fspath(recipe)!r}"
    return f"attend(backend={backend!r})" if backend != "auto" else "attend(return_diagnostics=True)"


def _type_name(value) -> str:
    kind = type(value)
    return kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__name__}"


def _check_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: str) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise AttentionInputError(f"{name} must be a torch.Tensor, got {_type_name(t)}")
        if t.dim() != 4:
            raise ShapeError(f"{name} must be 4-D ({layout}), got shape {tuple(t.shape)}")
        if not t.is_floating_point():
            raise AttentionInputError(f"{name} must be a floating-point tensor, got {t.dtype}")
    if not q.dtype == k.dtype == v.dtype:
        raise AttentionInputError(f"q, k and v must have one dtype, got q {q.dtype}, k {k.dtype}, v {v.dtype}")
    if not q.device == k.device == v.device:
        raise AttentionInputError(f"q, k and v must be on one device, got q {q.device}, k {k.device}, v {v.device}")
    tok = 1 if layout == "BNHD" else 2
    hd = 2 if layout == "BNHD" else 1
    if q.shape[0] != k.shape[0] or k.shape[0] != v.shape[0]:
        raise ShapeError(f"batch sizes differ: q {q.shape[0]}, k {k.shape[0]}, v {v.shape[0]}")
    if q.shape[hd] != k.shape[hd] or k.shape[hd] != v.shape[hd]:
        raise ShapeError(f"head counts differ: q {q.shape[hd]}, k {k.shape[hd]}, v {v.shape[hd]}")
    if q.shape[-1] != k.shape[-1]:
        raise ShapeError(f"q and k head_dim differ: {q.shape[-1]} vs {k.shape[-1]}")
    if k.shape[tok] != v.shape[tok]:
        raise ShapeError(f"k and v token counts differ: {k.shape[tok]} vs {v.shape[tok]}")
    if k.shape[tok] == 0:
        raise ShapeError("k and v have no tokens")


def _check_recipe_fits(spec, head_dim: int) -> None:
    need = spec.head_dim_multiple
    if head_dim % need:
        raise ShapeError(f"head_dim {head_dim} is not a multiple of {need}, the block size this recipe quantizes Q/K with")

