"""DraftAttention2 (arXiv 2609.32628) in the reference engine: draft-guided sparsity + mixed precision.

One call, `draft_attention`, in four steps, each its own module:

1. packing (`lowbit_video.draft.layout`): each frame's video tokens -> connected regions -> contiguous blocks of
   B = 64 or 128 slots, with the inverse map; prefix (text) tokens stay outside.
2. draft (`lowbit_video.draft.scores`): mean- and max-pooled Q/K per region -> a region-pair attention map per head.
3. allocation (`lowbit_video.draft.alloc`): per-head quotas of 16-bit / 8-bit / 4-bit / skipped pairs from the
   recipe's budget (largest remainder), handed out down one ranking of the draft scores.
4. execution (`draft_exec`): NVFP4, INT8/FP8 and 16-bit phases over one online-softmax state,
   normalised once; prefix keys and prefix queries are dense 16 bit.

Everything is float64 and deterministic: with no sparsity and every pair at 16 bit it is softmax
attention to roundoff (tests/test_attention_draft.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import torch

from ..errors import ShapeError, refuse_autograd
from ..recipes import DraftSpec
from ..draft.alloc import CODES, SKIP, allocate, budget_fractions, head_quotas
from .draft_exec import NVFP4_BLOCK, empty_query_regions, run_phases
from ..draft.layout import PackedLayout, VideoGeometry, pack_layout
from ..draft.scores import draft_map
from .reference import AttentionDiagnostics

__all__ = ["DraftDiagnostics", "DraftRoute", "VideoGeometry", "draft_attention"]


@dataclass(frozen=True, eq=False)
class DraftRoute:
    """What the router decided: `codes` (B, H, R, R) precision per region pair (16, 8, 4, or 0 =
    skipped), the per-head `quotas`, the recipe's exact `budget` fractions, and the draft `scores`."""

    codes: torch.Tensor
    quotas: dict[int, int]
    budget: dict[int, Fraction]
    scores: torch.Tensor
    layout: PackedLayout

    @property
    def pairs_per_head(self) -> int:
        return self.layout.regions**2

    def fraction(self, code: int) -> float:
        """Realised share of the video region pairs (over all batch elements and heads) at `code`."""
        return float((self.codes == code).double().mean())

    def summary(self) -> dict:
        """The report's view: realised skip/precision fractions next to the recipe's budget."""
        label = {16: "16", 8: "8", 4: "4"}
        return {
            "skip_fraction": self.fraction(SKIP),
            "precision_fractions": {label[c]: self.fraction(c) for c in CODES if c != SKIP},
            "budget": {
                "skip_fraction": float(self.budget[SKIP]),
                "precision_fractions": {label[c]: float(self.budget[c]) for c in CODES if c != SKIP},
                "block": self.layout.block,
                "regions": self.layout.regions,
                "pairs_per_head": self.pairs_per_head,
                "quotas_per_head": {("skip" if c == SKIP else label[c]): self.quotas[c] for c in CODES},
            },
            "empty_query_regions": float(empty_query_regions(self.codes).double().mean()),
        }


@dataclass(frozen=True)
class DraftDiagnostics(AttentionDiagnostics):
    """AttentionDiagnostics plus the routing decision. Operand errors: per format ("q_int8",
    "v_nvfp4", "p_fp8", ...) and, under "q"/"k"/"v"/"p", the worst format this call used (0 when
    everything ran at 16 bit)."""

    route: DraftRoute | None = None


def plan_route(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, spec: DraftSpec, geometry: VideoGeometry | None,
               *, scale: float):
    """Steps 1-3 (shared with the CPU path): check the shapes, pack the video tokens of q, k, v,
    draft, allocate. Returns (layout, (packed q, k, v), draft scores, per-head quotas, codes)."""
    if geometry is None:
        raise ShapeError("draft recipes need the video token layout: pass geometry=VideoGeometry(frames, height, width, prefix)")
    n = geometry.tokens
    if q.shape[-2] != n or k.shape[-2] != n:
        raise ShapeError(
            f"draft attention is self-attention over the geometry's {n} tokens "
            f"({geometry.prefix} prefix + {geometry.frames}x{geometry.height}x{geometry.width} video); "
            f"got {q.shape[-2]} query and {k.shape[-2]} key tokens"
        )
    if spec.nvfp4 > 0 and q.shape[-1] % NVFP4_BLOCK:
        raise ShapeError(f"head_dim {q.shape[-1]} is not a multiple of {NVFP4_BLOCK}, the NVFP4 block this recipe quantizes Q/K with")
    p = geometry.prefix
    layout = pack_layout(geometry, spec.block)
    qv, kv, vv = (layout.pack(t[..., p:, :]) for t in (q, k, v))
    scores = draft_map(qv, kv, layout, scale=scale, maxpool_weight=spec.maxpool_weight)
    quotas = head_quotas(layout.regions, spec)
    return layout, (qv, kv, vv), scores, quotas, allocate(scores, quotas)


def draft_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    spec: DraftSpec,
    geometry: VideoGeometry | None,
    *,
    scale: float | None = None,
) -> tuple[torch.Tensor, DraftDiagnostics]:
    """DraftAttention2 self-attention of BHND q, k, v laid out as `geometry`, in float64. Inference-only, as
    `reference_attention`: InferenceOnlyError where autograd records."""
    refuse_autograd("the draft engine", q, k, v)
    q, k, v = (t.to(torch.float64) for t in (q, k, v))
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    p = geometry.prefix if geometry is not None else 0
    layout, (qv, kv, vv), scores, quotas, codes = plan_route(q, k, v, spec, geometry, scale=scale)
    out_packed, row_sums_packed, lse_packed, errors = run_phases(
        qv, kv, vv, codes, layout, scale=scale, prefix_k=k[..., :p, :], prefix_v=v[..., :p, :]
    )

    # Prefix queries attend to everything, densely, at 16 bit.
    prefix_s = (q[..., :p, :] @ k.transpose(-1, -2)) * scale
    prefix_out = torch.softmax(prefix_s, dim=-1) @ v
    out = torch.cat([prefix_out, layout.unpack(out_packed)], dim=-2)
    # LSE: the normaliser each row was divided by (video rows: ℓ of the pre-conversion P̃ over the kept blocks)
    video_lse = layout.unpack(lse_packed.unsqueeze(-1)).squeeze(-1)
    lse = torch.cat([torch.logsumexp(prefix_s, dim=-1), video_lse], dim=-1)
    row_sums = torch.cat(
        [torch.ones(q.shape[:-2] + (p,), dtype=q.dtype, device=q.device), layout.unpack(row_sums_packed.unsqueeze(-1)).squeeze(-1)],
        dim=-1,
    )
    for name in "qkvp":
        errors[name] = max((e for key, e in errors.items() if key.startswith(name + "_")), default=0.0)
    route = DraftRoute(codes, quotas, budget_fractions(spec), scores, layout)
    return out, DraftDiagnostics(row_sums=row_sums, quant_rel_l2=errors, lse=lse, route=route)
