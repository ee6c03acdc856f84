"""DraftAttention2 on the CPU path: the engine's routing, then only the retained block pairs, batched.

Routing (packing, draft, allocation) is the engine's own (`draft.plan_route`), and so are the
operands of each precision (`draft_exec.prepare_operands`, float64, bit-identical fast kernels).
Execution differs in shape, not in arithmetic: the engine steps through the phases (4, 8, 16 bit)
and, inside each, the key blocks in order, updating one online-softmax state. Here all retained
(head, query region, key region) pairs of one precision are gathered into one batched float32
matmul; the running maximum each pair's P̃ was taken against in the engine is recovered from the
per-pair row maxima by a cumulative maximum along each query region's step order (phase, then key
region); and the pairs' w ⊙ P̂ V̂ and w · rowsum P̃ are summed into the query rows (w = exp(m_step −
m_final), as in cpu_path.py). Prefix keys come last at 16 bit, prefix queries are dense. The
float32 rounding is the dense path's (cpu_path.py): S and exp at the float32 unit, P̂ one grid step
away where P̃ lies within that of an NVFP4 / FP8 rounding boundary.
"""

from __future__ import annotations

import math

import torch

from ..draft.alloc import SKIP
from ..draft.layout import VideoGeometry
from ..recipes import DraftSpec
from .draft import plan_route
from .draft_exec import PHASES, prepare_operands


def cpu_draft_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    spec: DraftSpec,
    geometry: VideoGeometry | None,
    *,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """DraftAttention2 self-attention of BHND q, k, v laid out as `geometry`: float64 output and the rows'
    log-sum-exp, float32 (B, H, N), the engine's (m + log ℓ; −inf for a row that kept nothing)."""
    q, k, v = (t.to(torch.float64) for t in (q, k, v))
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    layout, (qv, kv, vv), _, _, codes = plan_route(q, k, v, spec, geometry, scale=scale)
    p = geometry.prefix
    lead, dv = q.shape[:-2], v.shape[-1]
    blk, regions = layout.block, layout.regions
    in_use = [c for c in PHASES if bool((codes == c).any())]
    ops = prepare_operands(qv, kv, vv, blk, set(in_use) | {16}, fast=True)

    def blocks(x: torch.Tensor) -> torch.Tensor:  # (..., R·blk, D) -> (BH·R, blk, D) float32
        return x.to(torch.float32).flatten(0, -3).unflatten(1, (regions, blk)).flatten(0, 1)

    # Every retained pair, ordered as the engine steps through them: per (head, query region),
    # phase by phase, key regions ascending. pair = (bh, a, c) flattened.
    flat = codes.flatten(0, -3)  # (BH, R, R)
    bh_n = flat.shape[0]
    phase_rank = torch.full_like(flat, len(PHASES))
    for rank, code in enumerate(PHASES):
        phase_rank[flat == code] = rank
    order_key = (phase_rank * regions + torch.arange(regions)).masked_fill(flat == SKIP, len(PHASES) * regions)
    step_of = torch.argsort(torch.argsort(order_key, dim=-1), dim=-1)  # step index of each (bh, a, c)

    key_valid = layout.valid.to(torch.float32)  # (R, blk)
    key_bias = torch.zeros_like(key_valid).masked_fill_(~layout.valid, -math.inf)
    pairs = []  # per precision: (query block index bh·R + a, key block index bh·R + c, step, S tile)
    for code in in_use:
        bh, a, c = (flat == code).nonzero(as_tuple=True)
        op = ops[code]
        qi, ki = bh * regions + a, bh * regions + c
        s = torch.matmul(blocks(op.q)[qi], blocks(op.k)[ki].transpose(-1, -2)).mul_(scale)
        s.add_(key_bias[c].unsqueeze(1))  # padding keys are no edges
        pairs.append((code, qi, ki, step_of[bh, a, c], s))

    # Running maxima: each pair's row maxima placed at its step, cummax along the steps.
    row_max = torch.full((bh_n * regions, regions, blk), -math.inf)
    for _, qi, _, step, s in pairs:
        row_max[qi, step] = s.amax(dim=-1)
    running = torch.cummax(row_max, dim=1).values  # (BH·R, steps, blk)
    m_final = running[:, -1]  # (BH·R, blk)
    q16 = blocks(ops[16].q)
    prefix_s = None
    if p:
        prefix_s = torch.matmul(q16, k[..., :p, :].to(torch.float32).flatten(0, -3).repeat_interleave(regions, 0).transpose(-1, -2))
        prefix_s.mul_(scale)
        m_final = torch.maximum(m_final, prefix_s.amax(dim=-1))
    m_ref = torch.where(torch.isfinite(m_final), m_final, torch.zeros_like(m_final))

    acc = torch.zeros((bh_n * regions, blk, dv), dtype=torch.float32)
    ell = torch.zeros((bh_n * regions, blk), dtype=torch.float32)
    for code, qi, ki, step, s in pairs:
        m_step = running[qi, step]  # (n, blk): the engine's m' at this pair's step
        m_step = torch.where(torch.isfinite(m_step), m_step, torch.zeros_like(m_step))
        p_tilde = s.sub_(m_step.unsqueeze(-1)).exp_()
        w = torch.exp(m_step - m_ref[qi])
        ell.index_add_(0, qi, p_tilde.sum(dim=-1).mul_(w))  # ℓ from the pre-conversion P̃
        p_hat = ops[code].p(p_tilde).mul_(w.unsqueeze(-1))
        acc.index_add_(0, qi, torch.matmul(p_hat, blocks(ops[code].v)[ki]))
    if p:
        p_tilde = prefix_s.sub_(m_ref.unsqueeze(-1)).exp_()
        ell.add_(p_tilde.sum(dim=-1))
        acc.add_(torch.matmul(p_tilde, v[..., :p, :].to(torch.float32).flatten(0, -3).repeat_interleave(regions, 0)))

    kept = ell > 0
    out = torch.where(kept.unsqueeze(-1), acc / torch.where(kept, ell, torch.ones_like(ell)).unsqueeze(-1), 0.0)
    lse = torch.where(kept, m_ref + torch.log(torch.where(kept, ell, torch.ones_like(ell))), -math.inf)

    def packed(x: torch.Tensor) -> torch.Tensor:  # (BH·R, blk, ·) -> (..., R·blk, ·)
        return x.unflatten(0, (bh_n, regions)).flatten(1, 2).unflatten(0, lead)

    video = layout.unpack(packed(out.to(torch.float64)))
    video_lse = layout.unpack(packed(lse).unsqueeze(-1)).squeeze(-1)
    if not p:
        return video, video_lse
    prefix_s = (q[..., :p, :] @ k.transpose(-1, -2)) * scale
    prefix_out = torch.softmax(prefix_s, dim=-1) @ v
    prefix_lse = torch.logsumexp(prefix_s, dim=-1).to(torch.float32)
    return torch.cat([prefix_out, video], dim=-2), torch.cat([prefix_lse, video_lse], dim=-1)
