"""`attend(q, k, v, recipe, layout=...)`: the one call every model integration makes.

No global state: the recipe (a name, a path, or a loaded Recipe) and the backend are arguments.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

from ..errors import NonFiniteInputError, ShapeError
from ..recipes import Recipe, load_recipe
from .draft_layout import VideoGeometry
from .reference import AttentionDiagnostics, reference_attention

Layout = Literal["BHND", "BNHD"]
Backend = Literal["auto", "reference"]


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
            tensors are on CUDA and the kernels support the recipe (MXFP4 family, sage2-int8, INT4,
            NVFP4; draft recipes with fp16/bf16 tensors and 64-token blocks; not with
            return_diagnostics / return_lse), and otherwise through the exact reference engine;
            "reference" forces the engine (float64, the oracle kernels are tested against).
        return_diagnostics: also return AttentionDiagnostics (induced row sums, operand errors);
            implies the reference engine.
        rope_segments: the model's 3D-RoPE t/h/w channel split (e.g. Wan at head_dim 128: 44, 42,
            42); overrides the recipe's `rope_segments` for the "half" rotation.
        geometry: the video token layout (frames, height, width, prefix tokens) that
            `kind = "draft"` recipes (DraftAttention2) pool and pack by; required for them, ignored
            by the others.
        return_lse: also return the log-sum-exp of each query row's scores, float32, (B, H, Nq)
            for BHND and (B, Nq, H) for BNHD: what ring attention (context parallelism) needs to
            merge outputs over key chunks. Quantized recipes: the engine's own normalizer (for PNQ,
            of the quantized P̂). Unquantized SDPA: computed separately by torch ops in float32.
            Not available for draft recipes.

    Returns the output in q's layout and dtype; with return_diagnostics, (out, diagnostics); with
    return_lse, (out, lse); with both, (out, diagnostics, lse).
    """
    spec = load_recipe(recipe).attention
    if layout not in ("BHND", "BNHD"):
        raise ShapeError(f"layout must be 'BHND' or 'BNHD', got {layout!r}")
    _check_inputs(q, k, v, layout)
    if layout == "BNHD":
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    _check_recipe_fits(spec, q.shape[-1])
    if return_lse and spec.kind == "draft":
        raise ShapeError("return_lse is not available for draft recipes (block-sparse attention)")
    lse = None

    if spec.kind == "draft" and (backend == "auto" and not return_diagnostics and geometry is not None
                                 and q.shape[-2] == geometry.tokens == k.shape[-2]
                                 and q.dtype in (torch.float16, torch.bfloat16) and _kernel_supports(spec, q)):
        from ..kernels.draft import draft_attention as kernel_draft  # Triton block-sparse path

        out, diag = kernel_draft(q, k, v, spec, geometry, layout="BHND", scale=scale), None
    elif spec.kind == "draft":
        from .draft import draft_attention

        out, diag = draft_attention(q, k, v, spec.draft, geometry, scale=scale)
        out = out.to(q.dtype)
    elif (backend == "auto" and spec.quantized and not return_diagnostics and not return_lse
          and _kernel_supports(spec, q)):
        from ..kernels import attention as kernel_attention  # Triton fast path (kernels/)

        out, diag = kernel_attention(q, k, v, spec, layout="BHND", scale=scale, rope_segments=rope_segments), None
    elif spec.quantized or backend == "reference" or return_diagnostics:
        out, diag = reference_attention(q, k, v, spec, scale=scale, rope_segments=rope_segments,
                                        measure_errors=return_diagnostics)
        out = out.to(q.dtype)
        if return_lse:
            lse = diag.lse.to(torch.float32)
    else:
        out, diag = F.scaled_dot_product_attention(q, k, v, scale=scale), None
        if return_lse:
            lse = dense_lse(q, k, scale=scale)

    if layout == "BNHD":
        out = out.transpose(1, 2)
        lse = lse.transpose(1, 2) if lse is not None else None
    if return_lse:
        return (out, diag, lse) if return_diagnostics else (out, lse)
    return (out, diag) if return_diagnostics else out


def dense_lse(q: torch.Tensor, k: torch.Tensor, *, scale: float | None = None,
              max_elements: int = 1 << 26) -> torch.Tensor:
    """logsumexp over keys of (q kᵀ)·scale in float32, BHND in, (B, H, Nq) out; query rows in chunks
    so at most `max_elements` scores exist at once (the full score matrix of a long video would not
    fit)."""
    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    kf = k.to(torch.float32).transpose(-1, -2)
    b, h, n, _ = q.shape
    rows = max(1, max_elements // max(1, b * h * k.shape[-2]))
    out = torch.empty((b, h, n), dtype=torch.float32, device=q.device)
    for start in range(0, n, rows):
        s = (q[..., start:start + rows, :].to(torch.float32) @ kf) * scale
        out[..., start:start + rows] = torch.logsumexp(s, dim=-1)
    return out


def _check_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: str) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ShapeError(f"{name} must be 4-D ({layout}), got shape {tuple(t.shape)}")
        if not t.is_floating_point():
            raise ShapeError(f"{name} must be a floating-point tensor, got {t.dtype}")
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
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not bool(torch.isfinite(t).all()):
            raise NonFiniteInputError(f"attention input {name} contains NaN or Inf")


def _check_recipe_fits(spec, head_dim: int) -> None:
    need = spec.head_dim_multiple
    if head_dim % need:
        raise ShapeError(f"head_dim {head_dim} is not a multiple of {need}, the block size this recipe quantizes Q/K with")


def _kernel_supports(spec, q: torch.Tensor) -> bool:
    """Whether the Triton kernel family (lowbit_video.kernels) runs `spec` for q's device and head_dim."""
    if not q.is_cuda:
        return False
    try:
        from ..kernels import supports
    except ImportError:
        return False
    return supports(spec, q.device, q.shape[-1])[0]
