"""`draft_attention(q, k, v, recipe, geometry)`: DraftAttention2 (draftattention2, draftattention-sparse16)
on the GPU, in three steps, each timed separately by `split_draft` for the benchmarks:

1. pre-pass (`draft_prepass`): one Triton pass over Q, K, V per region block → packed operands of every
   precision + pooled draft descriptors;
2. route (kernels/draft_route.py `route_plan`): the engine's decision without a sort or a host
   synchronisation — the float64 draft logits by torch matmul, one Triton pass for the mixed draft map, a
   radix select of the score at each quota boundary (equal scores across a boundary split in row-major
   order, as the engine's stable ranking does), then one pass per query region for its codes and its
   retained key blocks grouped by phase; the quotas are the engine's `head_quotas`;
3. `draft_fwd` (kernels/_core.py): block-sparse, NVFP4 → INT8/FP8 → 16-bit phases over one
   online-softmax state, prefix keys dense at 16 bit, normalised once; the packed output is restored to
   token order by the layout's inverse index. Prefix (text) queries attend densely (torch SDPA).
"""

from __future__ import annotations

import functools
import math
import os

import torch

from lowbit_video.draft.alloc import head_quotas
from lowbit_video.errors import refuse_autograd
from lowbit_video.draft.layout import pack_layout

from . import draft_ws
from ._core import LOG2E, draft_fwd
from .draft_prepass import draft_prepass
from .draft_route import DraftPlan, plan_from_codes, route_plan
from .dispatch import attention_spec, draft_config
from .launch import attention
_INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"  # the CPU interpreter's FP8 cast is not RNE
P_FP8_SCALE = float(torch.tensor(1.0 / 448.0, dtype=torch.float32))  # the engine's static P̃ scale, fp32


# exact fractions on the host: worth computing once, as a DiT routes one spec and region count in every block
_quotas = functools.lru_cache(maxsize=32)(head_quotas)


def route(pre: dict, spec, regions: int, scale: float) -> DraftPlan:
    """The engine's routing decision (codes (B, H, R, R)) and the kernel's lists, from the pre-pass's pooled
    descriptors."""
    return route_plan(pre["q_mean"], pre["q_max"], pre["k_mean"], pre["k_max"], scale=scale,
                      maxpool_weight=spec.maxpool_weight, quotas=_quotas(regions, spec))


__all__ = ["DraftPlan", "draft_attention", "plan_from_codes", "route", "split_draft"]


def _draft_spec(recipe):
    from lowbit_video.recipes import DraftSpec

    if isinstance(recipe, DraftSpec):
        return recipe
    spec = attention_spec(recipe)
    if spec.kind != "draft":
        raise ValueError(f"draft_attention runs kind = 'draft' recipes, got {spec.kind!r}")
    return spec.draft


def _check(q, k, v, layout, geometry, spec):
    if layout not in ("BHND", "BNHD"):
        raise ValueError(f"layout must be 'BHND' or 'BNHD', got {layout!r}")
    if q.dtype not in (torch.float16, torch.bfloat16) or k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError("the draft kernel takes fp16 or bf16 q, k, v of one dtype")
    D = q.shape[-1]
    if D not in (64, 128) or k.shape[-1] != D or v.shape[-1] != D:
        raise ValueError(f"the draft kernel supports head_dim 64 and 128 (q, k, v alike), got {D}")
    n = q.shape[1 if layout == "BNHD" else 2]
    if n != geometry.tokens or k.shape[1 if layout == "BNHD" else 2] != n:
        raise ValueError(f"draft attention is self-attention over the geometry's {geometry.tokens} tokens, got {n}")
    if spec.block != 64:
        raise ValueError(f"the draft kernel runs 64-token region blocks, recipe block {spec.block}")


@functools.lru_cache(maxsize=16)
def _layout_on(geometry, block: int, device: torch.device):
    """The packed layout and its index tensors on `device`, built once per (geometry, block, device): a DiT
    calls attention with one geometry in every block and step. (layout, gather int64, valid int8, inverse,
    gather int32, real tokens per block int32)"""
    lay = pack_layout(geometry, block)
    valid = (lay.gather >= 0).to(device=device, dtype=torch.int8)
    return (lay, lay.gather.to(device), valid, lay.inverse.to(device), lay.gather.to(device, torch.int32),
            lay.counts.to(device, torch.int32))


def _gluon_runs(cfg: dict, device: torch.device) -> bool:
    """The warp-specialized kernel (kernels/draft_ws.py) runs: config GLUON on a Hopper GPU (sm_90 code; the CPU
    interpreter runs no Gluon)."""
    return bool(cfg["GLUON"]) and device.type == "cuda" and torch.cuda.get_device_capability(device) == (9, 0)


def split_draft(q, k, v, recipe, geometry, *, layout: str = "BHND", scale: float | None = None,
                codes: torch.Tensor | None = None, config: dict | None = None, return_lse: bool = False):
    """(prepass, route, kernel) zero-argument callables whose sequence is one `draft_attention` call
    (each reuses the previous one's results), and the box they fill: "pre", "plan", "out" (and "lse")."""
    spec = _draft_spec(recipe)
    _check(q, k, v, layout, geometry, spec)
    lay, gather, valid, inverse, gather32, counts = _layout_on(geometry, spec.block, q.device)
    R, blk, P = lay.regions, lay.block, geometry.prefix
    D = q.shape[-1]
    B, H = (q.shape[0], q.shape[2]) if layout == "BNHD" else q.shape[:2]
    sm_scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    cfg = draft_config(config, D)
    dev = q.device
    box: dict = {}

    def bhnd(t):
        return t.transpose(1, 2) if layout == "BNHD" else t

    def run_prepass():
        box["pre"] = draft_prepass(q, k, v, layout, gather32, counts, blk, P, num_warps=cfg["prepass_warps"])

    def run_route():
        box["plan"] = route(box["pre"], spec, R, sm_scale) if codes is None else plan_from_codes(codes.to(dev))

    def run_kernel():
        pre, plan = box["pre"], box["plan"]
        S = R * blk
        if P:
            pk = bhnd(k)[:, :, :P, :].reshape(B * H, P, D).contiguous()
            pv = bhnd(v)[:, :, :P, :].reshape(B * H, P, D).contiguous()
        else:
            pk = pv = None
        # the rows' log-sum-exp, (B, H, N) in token order: the kernel's for the video rows, the dense kernel's for
        # the prefix rows
        lse = torch.empty((B, H, geometry.tokens), device=dev, dtype=torch.float32) if return_lse else None
        if _gluon_runs(cfg, dev):
            # video rows written in token order and the input dtype by the kernel itself
            out = torch.empty(q.shape, dtype=q.dtype, device=dev)
            ob = bhnd(out)
            draft_ws.launch(pre, plan, counts, gather32, pk, pv, ob, ob.stride(), H, P, sm_scale * LOG2E,
                            -math.log2(P_FP8_SCALE), stages=cfg["NUM_STAGES"], lse=lse)
        else:
            o = torch.empty((B * H, S, D), device=dev, dtype=torch.float32)
            packed_lse = torch.empty((B * H, S), device=dev, dtype=torch.float32) if return_lse else o
            draft_fwd[(R, B * H)](
                pre["q16"], pre["k16"], pre["v16"], pre["q8"], pre["k8"], pre["v8t"], pre["qs8"],
                pre["ks8"].repeat_interleave(blk, dim=1).contiguous(), pre["vs8"], pre["q4"], pre["k4"],
                pre["v4t"], pre["s4"], valid, plan.idx, plan.cnt, pre["k16"] if pk is None else pk,
                pre["v16"] if pv is None else pv, o, packed_lse, R, S, plan.idx.shape[-1], P, sm_scale * LOG2E,
                P_FP8_SCALE, HEAD_DIM=D, BLOCK=blk, P8_SHIFT=-math.log2(P_FP8_SCALE), PROMOTE=cfg["PROMOTE"],
                NUM_STAGES=cfg["NUM_STAGES"], num_warps=cfg["num_warps"], RNE_P=_INTERPRETED, WRITE_LSE=return_lse)
            out = torch.empty(q.shape, dtype=q.dtype, device=dev)
            ob = bhnd(out)
            ob[:, :, P:] = o.view(B, H, S, D).index_select(2, inverse).to(q.dtype)
            if return_lse:
                lse[:, :, P:] = packed_lse.view(B, H, S).index_select(2, inverse)
        if P:
            qb = bhnd(q)
            if return_lse:  # the dense kernel, for its LSE
                ob[:, :, :P], lse[:, :, :P] = attention(qb[:, :, :P], bhnd(k), bhnd(v), attention_spec("fp16"),
                                                        scale=sm_scale, return_lse=True)
            else:
                ob[:, :, :P] = torch.nn.functional.scaled_dot_product_attention(qb[:, :, :P], bhnd(k), bhnd(v),
                                                                                 scale=sm_scale)
        box["out"] = out
        if return_lse:
            box["lse"] = lse.transpose(1, 2) if layout == "BNHD" else lse
        return out

    return run_prepass, run_route, run_kernel, box


def draft_attention(q, k, v, recipe, geometry, *, layout: str = "BHND", scale: float | None = None,
                    codes: torch.Tensor | None = None, return_plan: bool = False, config: dict | None = None,
                    return_lse: bool = False):
    """DraftAttention2 of q, k, v (B, H, N, D) (or BNHD) laid out as `geometry` (prefix + video tokens),
    fp16/bf16, head_dim 64/128, 64-token region blocks. `codes` (B, H, R, R) overrides the router (tests
    compare kernel and engine on one routing decision). Returns the output in q's layout and dtype (and
    the DraftPlan with return_plan). return_lse: (out, lse[, plan]), lse fp32 (B, H, N) (BNHD: (B, N, H)) the
    engine's: the natural log of the normaliser each row was divided by (Σ P̃ over the blocks it kept, before
    quantization, as the engine's ℓ; −inf for a row that kept nothing); prefix queries attend densely."""
    refuse_autograd("lowbit_video.kernels.draft.draft_attention", q, k, v)
    prep, rte, kern, box = split_draft(q, k, v, recipe, geometry, layout=layout, scale=scale, codes=codes,
                                       config=config, return_lse=return_lse)
    prep()
    rte()
    out = kern()
    head = (out, box["lse"]) if return_lse else (out,)
    extra = (box["plan"],) if return_plan else ()
    return head + extra if return_lse or return_plan else out
