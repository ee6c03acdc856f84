"""`attention(q, k, v, recipe, ...)`: the launch wrapper of the kernel family.

Supported recipes (`supports(spec)` says which and why not):
- dense (kind "dense", e.g. fp16): the 16-bit variant (q's dtype, fp16 or bf16);
- MXFP4 (mxattention, mxattention-no-uos, mxattention-no-pnq-uos, mxfp4-ocp, mxfp4-tfs): rules ocp /
  tfs / uos (q in [4, 8)), rotation none or hadamard, PNQ or direct placement, tile_k 128;
- sage2-int8: K smoothing, INT8 per-token Q/K, FP8 per-channel V, FP8 P̃ with a static scale;
- INT4 (rotateattention-half, -interleaved, -full, int4-baseline): rotation none / interleaved / half /
  hadamard and Q/K smoothing in the pre-pass, INT4 per-token Q/K and per-channel V (optionally after
  V·H, undone after the kernel) as integer codes on exact MMAs (Q/K as E4M3 on the FP8 MMA with the Gluon
  kernel, config QK_FP8; otherwise int8), P̃ per row of each 128-key tile with 16 affine levels
  (range-rectified) or 8 symmetric ones.
- NVFP4 (nvfp4, sage-nvfp4): MODE 4 (exact fp16 MMAs on E2M1·E4M3 values), GPU-tested on the H200;
- draft (draftattention2, draftattention-sparse16, 64-token blocks): supported, but run through
  `kernels.draft.draft_attention` (it needs the video geometry); `attention()` refuses it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton

from ._core import LOG2E, MODE_DENSE, MODE_INT4, MODE_MX, MODE_NVFP4, MODE_SAGE, RULE_IDS, attn_fwd
from . import prepass

BLOCK_N = 128
INT4_BLOCK_M = 128  # the INT4 variant's query tile = its Q smoothing group (one q mean per program)
NVFP4_BLOCK_M = prepass.NVFP4_GROUP  # the NVFP4 variant's query tile = its Q smoothing group


@dataclass
class KernelStats:
    """What the last call did about exactness. `qk_fallback` / `v_fallback`: the E4M3 fold could not
    hold every block (`*_inexact_blocks` of them), so that operand ran in bf16 (exact) instead.
    `p_inexact_blocks`: P̃ blocks with exponent < −16 (each weight < 6·2^−17 of the row maximum) whose
    E4M3 encoding rounded (0 when exact_p=True)."""

    variant: str = ""
    qk_inexact_blocks: int = 0
    v_inexact_blocks: int = 0
    qk_fallback: bool = False
    v_fallback: bool = False
    p_inexact_blocks: int = 0
    prepass_ms: float = 0.0  # set by finalize_stats
    kernel: str = ""  # which kernel ran: "gluon" (kernels/gluon_ws.py) or "triton" (kernels/_core.py)


last_stats = KernelStats()


def _spec_and_variant(recipe):
    """The recipe's AttentionSpec and the kernel variant that runs it; NotImplementedError (with the
    reason) for a recipe the kernels do not cover."""
    from lowbit_video.recipes import AttentionSpec, load_recipe

    spec = recipe if isinstance(recipe, AttentionSpec) else load_recipe(recipe).attention
    variant, why = _variant(spec)
    if variant is None:
        raise NotImplementedError(why)
    return spec, variant


def _variant(spec) -> tuple[str | None, str]:
    """(variant, reason it is not supported)."""
    if spec.kind == "dense":
        return "dense", ""
    if spec.kind == "draft":
        if spec.draft.block != 64:
            return None, f"draft kernel: 64-token region blocks (recipe block {spec.draft.block})"
        return "draft", ""
    if spec.kind != "quantized":
        return None, f"kind {spec.kind!r} has no kernel yet"
    ops = [spec.operand(n) for n in ("q", "k", "v", "p")]
    fmts = [o.format for o in ops]
    if all(f == "mxfp4" for f in fmts):
        if any(o.granularity != "block" or o.block_size != 32 for o in ops):
            return None, "MXFP4 kernel needs 32-element blocks"
        if any(o.rule not in RULE_IDS for o in ops):
            return None, "unknown MX rule"
        for o in ops:
            if o.rule == "uos" and not (4.0 <= o.qmax < 8.0):
                return None, "UOS boundary outside [4, 8)"
        if spec.rotation not in ("none", "hadamard") or spec.rotate_v or spec.smooth_k or spec.smooth_q:
            return None, "MXFP4 kernel supports rotation none/hadamard, no smoothing, no V rotation"
        if spec.tile_k != BLOCK_N:
            return None, f"kernel key tile is {BLOCK_N}, recipe tile_k {spec.tile_k}"
        return "mx", ""
    if fmts == ["int8", "int8", "fp8_e4m3", "fp8_e4m3"]:
        q, k, v, p = ops
        ok = (q.granularity == "per_token" and k.granularity == "per_token" and q.scheme == "symmetric"
              and k.scheme == "symmetric" and v.granularity == "per_channel" and not v.static_scale
              and p.granularity == "per_row" and p.static_scale > 0 and spec.placement == "direct"
              and spec.rotation == "none" and not spec.rotate_v and not spec.smooth_q
              and spec.tile_k == BLOCK_N)
        return ("sage", "") if ok else (None, "only the sage2-int8 layout of INT8/FP8 is implemented")
    if fmts == ["int4"] * 4:
        q, k, v, p = ops
        if not (q.granularity == "per_token" and k.granularity == "per_token" and q.scheme == "symmetric"
                and k.scheme == "symmetric"):
            return None, "INT4 kernel: Q/K per token, symmetric"
        if not (v.granularity == "per_channel" and v.scheme == "symmetric"):
            return None, "INT4 kernel: V per channel, symmetric"
        if not (p.granularity == "per_row" and p.scheme in ("affine", "symmetric")):
            return None, "INT4 kernel: P̃ per row (affine or symmetric)"
        if spec.rotation not in ("none", "interleaved", "half", "hadamard"):
            return None, f"INT4 kernel: unknown rotation {spec.rotation!r}"
        if spec.rotation_sigma != 1.0:
            return None, "INT4 kernel: orthogonal rotations only (rotation_sigma = 1; the reference engine runs the control)"
        if spec.smooth_q and spec.smooth_q_group != INT4_BLOCK_M:
            return None, f"INT4 kernel: Q smoothing groups of {INT4_BLOCK_M} tokens (the query tile)"
        if spec.placement not in ("direct", "pnq") or spec.tile_k != BLOCK_N:
            return None, f"INT4 kernel: key tile {BLOCK_N}, direct or pnq placement"
        return "int4", ""
    if fmts == ["nvfp4"] * 4:
        q, k, v, p = ops
        if any(o.outer_scale not in ("tensor", "none") for o in (q, k, v)) or p.outer_scale not in ("none", "row"):
            return None, "NVFP4 kernel: Q/K/V outer scale tensor or none, P̃ none or row"
        if spec.rotation != "none" or spec.rotate_v:
            return None, "NVFP4 kernel: no rotation"
        if spec.smooth_q and spec.smooth_q_group != NVFP4_BLOCK_M:
            return None, f"NVFP4 kernel: Q smoothing groups of {NVFP4_BLOCK_M} tokens (the query tile)"
        if spec.placement not in ("direct", "pnq") or spec.tile_k != BLOCK_N:
            return None, f"NVFP4 kernel: key tile {BLOCK_N}, direct or pnq placement"
        return "nvfp4", ""
    return None, f"formats {fmts} have no kernel yet (NVFP4/draft: issue 7)"


def supports(spec, device: torch.device | str | None = None, head_dim: int | None = None) -> tuple[bool, str]:
    """Whether the kernel family runs `spec` (an AttentionSpec) on `device` with `head_dim`."""
    variant, why = _variant(spec)
    if variant is None:
        return False, why
    if device is not None and torch.device(device).type != "cuda":
        return False, "kernels run on CUDA devices only"
    if device is not None and torch.cuda.get_device_capability(device) < (8, 9) and variant != "dense":
        return False, "FP8 kernels need sm_89 or newer"
    if head_dim is not None and head_dim not in (64, 128):
        return False, f"head_dim {head_dim} (kernels: 64, 128)"
    return True, ""


def _config(variant: str, head_dim: int, placement: str = "pnq") -> dict:
    # Measured on one H200 (results/kernels-h200.md, "Software pipelining and tile sizes"); BLOCK_N is fixed
    # to the recipes' tile_k so the running maximum each P̃ tile is quantized against is the reference
    # engine's. PIPE: the next tile's QKᵀ is issued before this tile's softmax (pays off where the
    # per-element work is heavy: MXFP4 and INT4 P̃ quantization). BLOCK_M does not change any numerics of
    # mx / sage (scales are per token or per 128-token tile), it is the INT4 / NVFP4 Q-smoothing group.
    if variant == "dense":
        return dict(BLOCK_M=128, num_warps=8, NUM_STAGES=3, PIPE=False)
    # GLUON: the warp-specialized Gluon kernel (kernels/gluon_ws.py) where it applies (no key padding mask,
    # promote=True, 8-bit operands), measured faster than the Triton kernel for both (results/kernels-h200.md,
    # "Session 8"); the other keys tune the Triton kernel, which runs everything else.
    # DEFER: the Gluon kernel's deferred stage release ("Session 9": kernel 2–3 % faster for mxattention, up to
    # 2 % for sage2-int8). EARLY_QK: its next tile's QKᵀ issued before this tile's softmax ("Session 10": kernel
    # 4 % faster for mxattention, 1 % for sage2-int8, at both Wan shapes)
    # EARLY_QK made the direct-placement MXFP4 kernels (mxfp4-ocp, mxattention-no-pnq-uos) 9 % slower at both Wan
    # shapes ("Session 10", device call 6), the PNQ ones 0-4 % faster
    # WORK_LOOP: the Gluon programs loop over their work tiles (one each) instead of running one without a loop:
    # the same instructions per key tile, but ptxas schedules them differently ("Session 11", each against the
    # other in the same device calls): sage2-int8's kernel 3-5 % faster with it, mxattention-no-uos (PNQ) 6 %
    # faster, mxattention the same; the direct-placement MXFP4 kernels (mxfp4-ocp, -tfs, mxattention-no-pnq-uos)
    # 3-6 % slower: on with PNQ, as EARLY_QK
    if variant == "mx":
        return dict(BLOCK_M=128, num_warps=8, NUM_STAGES=4, PIPE=True, GLUON=True, DEFER=True,
                    EARLY_QK=placement == "pnq", WORK_LOOP=placement == "pnq")
    if variant == "sage":
        return dict(BLOCK_M=64, num_warps=4, NUM_STAGES=3, PIPE=False, GLUON=True, DEFER=True, EARLY_QK=True,
                    WORK_LOOP=True)
    if variant == "int4":
        # DS: how the Q-smoothing term ΔS = q_mean · K_smoothedᵀ is formed: "table" (pre-pass, fp32
        # GEMM into a (q group, key) table the kernel reads 4 bytes per key from) or "fused" (3xTF32 MMA
        # per key tile against an fp32 copy of K: 64 KB more per tile; head_dim 64 only, at 128 it
        # needs 279552 B of shared memory on the H200, over its 232448)
        # QK_FP8: the INT4 codes of Q and K stored as E4M3 (integers |c| <= 7 are E4M3 values), so QKᵀ runs on
        # the FP8 MMA, whose fp32 output needs no int -> float conversion per score; exact: |Σ| <= 128·49 < 2^13
        # fits the FP8 accumulator's 14 significant bits (GPU test: the same bits as the INT8 MMA). None: with the
        # Gluon kernel only (the Triton kernel measured 5 % slower with it, "Session 12").
        # GLUON with DEFER, EARLY_QK and WORK_LOOP: rotateattention-half 1.16× cuDNN at wan-720p against the
        # Triton kernel's 0.93–0.97× in the same run ("Session 12", call 1)
        return dict(BLOCK_M=INT4_BLOCK_M, num_warps=8, NUM_STAGES=3, DS="table", PIPE=True, QK_FP8=None,
                    GLUON=True, DEFER=True, EARLY_QK=True, WORK_LOOP=True)
    if variant == "nvfp4":
        return dict(BLOCK_M=NVFP4_BLOCK_M, num_warps=8, NUM_STAGES=3, PIPE=False)  # PIPE: out of shared memory
    raise ValueError(f"no kernel configuration for variant {variant!r}")


# Tuning keys a caller may override (config=...), with their types; anything else is a typo, refused.
CONFIG_KEYS = {"BLOCK_M": int, "num_warps": int, "NUM_STAGES": int, "PIPE": bool, "DS": str, "PQ": bool, "WS": bool,
               "TMA": bool, "maxnreg": int, "GLUON": bool, "DEFER": bool,
               "EARLY_QK": bool, "PINGPONG": bool, "WORK_LOOP": bool, "PERSIST": bool, "QK_FP8": bool}
# keys only the Triton kernel has: setting one selects it (GLUON off) unless GLUON=true is also given (refused)
TRITON_ONLY_KEYS = ("BLOCK_M", "num_warps", "PIPE", "PQ", "WS", "TMA", "maxnreg")


def with_overrides(defaults: dict, config: dict | None, types: dict, what: str) -> dict:
    """`defaults` updated by `config`, each key known to `types` and of exactly that type (a bool is no int)."""
    cfg = dict(defaults)
    for key, val in (config or {}).items():
        typ = types.get(key)
        if typ is None:
            raise ValueError(f"unknown {what} key {key!r}; known: {', '.join(types)}")
        if type(val) is not typ:
            raise ValueError(f"{what} {key} must be {typ.__name__}, got {val!r}")
        cfg[key] = val
    return cfg


def _knob_needs(cfg: dict, asked: dict, key: str, possible, message: str) -> None:
    """A boolean knob that only works where `possible` holds: a default gives way (turned off), one the caller
    asked for is refused with `message`."""
    if cfg.get(key) and not possible:
        if asked.get(key):
            raise ValueError(message)
        cfg[key] = False


def merged_config(variant: str, head_dim: int, config: dict | None, placement: str = "pnq") -> dict:
    """The variant's measured defaults with the caller's overrides, checked (unknown keys, wrong types,
    BLOCK_M / num_warps / NUM_STAGES out of range) so a misspelt knob cannot be silently ignored.
    placement: the recipe's P̃ placement (MXFP4 recipes), which one default depends on."""
    cfg = with_overrides(_config(variant, head_dim, placement), config, CONFIG_KEYS, "kernel config")
    asked = config or {}
    triton_keys = [key for key in asked if key in TRITON_ONLY_KEYS]
    if triton_keys and cfg.get("GLUON"):
        if asked.get("GLUON"):
            raise ValueError(f"kernel config {', '.join(triton_keys)} tune(s) the Triton kernel, not GLUON's; "
                             "drop GLUON=true")
        cfg["GLUON"] = False  # a Triton knob asks for the Triton kernel
    if cfg["BLOCK_M"] not in (16, 32, 64, 128, 256):
        raise ValueError(f"kernel config BLOCK_M must be a power of two in 16..256, got {cfg['BLOCK_M']}")
    if cfg["num_warps"] not in (1, 2, 4, 8, 16):
        raise ValueError(f"kernel config num_warps must be 1, 2, 4, 8 or 16, got {cfg['num_warps']}")
    if not 1 <= cfg["NUM_STAGES"] <= 8:
        raise ValueError(f"kernel config NUM_STAGES must be in 1..8, got {cfg['NUM_STAGES']}")
    if cfg.get("maxnreg", 0) and not 64 <= cfg["maxnreg"] <= 255:
        raise ValueError(f"kernel config maxnreg must be 0 (the compiler's choice) or in 64..255, got {cfg['maxnreg']}")
    if cfg.get("GLUON") and variant not in ("sage", "mx", "int4"):
        raise ValueError("kernel config GLUON (the warp-specialized Gluon kernel) exists for sage2-int8, the "
                         "MXFP4 and the INT4 recipes only")
    if cfg.get("GLUON") and variant == "int4" and cfg.get("DS", "table") != "table":
        # the Gluon kernel's INT4 mode reads the ΔS table; DS=fused is a Triton-kernel path
        if asked.get("GLUON"):
            raise ValueError("kernel config GLUON with the INT4 recipes reads the ΔS table: DS must be \"table\"")
        cfg["GLUON"] = False
    # its next tile's QKᵀ is issued while this tile's stage is in use: one stage would wait on itself
    _knob_needs(cfg, asked, "GLUON", cfg["NUM_STAGES"] >= 2, "kernel config GLUON needs NUM_STAGES >= 2")
    # the Gluon kernel's deferred stage release: with two stages the loader could not run a tile ahead
    _knob_needs(cfg, asked, "DEFER", cfg.get("GLUON") and cfg["NUM_STAGES"] >= 3,
                "kernel config DEFER (the Gluon kernel's deferred stage release) needs GLUON and NUM_STAGES >= 3")
    # the Gluon kernel issues the next tile's QKᵀ before this tile's softmax (FlashAttention-3's overlap within a
    # warpgroup): on by default, it gives way to the Triton kernel and to an explicit PINGPONG
    _knob_needs(cfg, asked, "EARLY_QK", cfg.get("GLUON") and not (asked.get("PINGPONG") and "EARLY_QK" not in asked),
                "kernel config EARLY_QK (the Gluon kernel's early QKᵀ issue) needs GLUON")
    # the two consumers take turns to issue their MMAs (FlashAttention-3's ping-pong): two more warpgroup barriers
    # per tile; "Session 10": slower than EARLY_QK, so off
    _knob_needs(cfg, asked, "PINGPONG", cfg.get("GLUON") and not cfg.get("EARLY_QK"),
                "kernel config PINGPONG (the Gluon consumers taking turns) needs GLUON, without EARLY_QK")
    _knob_needs(cfg, asked, "WORK_LOOP", cfg.get("GLUON"),
                "kernel config WORK_LOOP (the Gluon programs' loop over work tiles) needs GLUON")
    # one program per SM walking the work tiles: a Gluon-kernel grid
    _knob_needs(cfg, asked, "PERSIST", cfg.get("GLUON"), "kernel config PERSIST (the Gluon kernel's persistent grid) "
                "needs GLUON")
    _knob_needs(cfg, asked, "QK_FP8", variant == "int4", "kernel config QK_FP8 (INT4 codes of Q and K as E4M3) "
                "exists for the INT4 recipes only")
    if cfg.get("WS") and (cfg["num_warps"] < 8 or cfg.get("PIPE")):
        # Triton 3.6 on the H200: its warp-specialization pass asserts at 4 warps (results/kernels-h200.md)
        raise ValueError("kernel config WS (warp specialization) needs num_warps=8 and PIPE=false")
    return cfg


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, recipe, *, layout: str = "BHND",
              scale: float | None = None, key_padding_mask: torch.Tensor | None = None,
              exact_p: bool = False, promote: bool = True, stats: KernelStats | None = None,
              config: dict | None = None, rope_segments=None) -> torch.Tensor:
    """Attention of q (B, H, Nq, D), k, v (B, H, Nk, D) (or B, N, H, D with layout="BNHD") under
    `recipe` (name, path, Recipe or AttentionSpec), on CUDA. Returns the output in q's layout and dtype.

    key_padding_mask: bool (B, Nk), True = the key takes part (SDPA's convention); rows whose keys are
        all masked return 0. Masking acts on the scores; operands are quantized as given.
    exact_p: run P̂·V in bf16, exact for every P̃ block (default: E4M3, exact for blocks ≥ 2^−16).
    promote: add each key tile's FP8 P̂·V product to the fp32 output accumulator (Hopper's FP8 MMA
        accumulates with fewer than 32 bits); False keeps the running output inside the MMA.
    stats: filled with what was done about exactness (also kept in `last_stats`).
    rope_segments: the model's RoPE t/h/w split for the "half" rotation (as attend's; default the
        recipe's, else Wan's split of head_dim).
    """
    spec, variant = _spec_and_variant(recipe)
    if variant == "draft":
        raise ValueError("draft recipes need the video geometry: call lowbit_video.kernels.draft.draft_attention")
    if layout not in ("BHND", "BNHD"):
        raise ValueError(f"layout must be 'BHND' or 'BNHD', got {layout!r}")
    B, H, Nq, D = prepass._dims(q, layout)
    Nk = prepass._dims(k, layout)[2]
    if D not in (64, 128) or v.shape[-1] != D:
        raise ValueError(f"kernels support head_dim 64 and 128 (q, k and v alike), got {D}")
    sm_scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    st = stats if stats is not None else KernelStats()
    st.variant = variant
    cfg = merged_config(variant, D, config, spec.placement)
    dev = q.device

    if key_padding_mask is not None:
        if key_padding_mask.shape != (B, Nk):
            raise ValueError(f"key_padding_mask must be (B, Nk) = {(B, Nk)}, got {tuple(key_padding_mask.shape)}")
        kpm = key_padding_mask.to(device=dev, dtype=torch.int8).contiguous()
        skpm = kpm.stride(0)
    else:
        kpm, skpm = torch.zeros((1,), device=dev, dtype=torch.int8), 0

    if variant == "int4" and cfg["BLOCK_M"] != INT4_BLOCK_M:
        raise ValueError(f"the INT4 variant needs BLOCK_M = {INT4_BLOCK_M} (its Q smoothing group)")
    if variant == "nvfp4" and cfg["BLOCK_M"] != NVFP4_BLOCK_M:
        raise ValueError(f"the NVFP4 variant needs BLOCK_M = {NVFP4_BLOCK_M} (its Q smoothing group)")
    if cfg.get("DS", "table") not in ("table", "fused"):
        raise ValueError(f"config DS must be 'table' or 'fused', got {cfg['DS']!r}")
    if variant == "int4" and cfg.get("DS") == "fused" and spec.smooth_q and D > 64:
        # measured on the H200 (Triton 3.6): 279552 B of shared memory at head_dim 128 > 232448
        raise ValueError("DS='fused' fits in shared memory at head_dim 64 only; use DS='table'")
    gluon = _gluon(cfg, key_padding_mask is not None, promote, q.device)
    prep = _prepare(q, k, v, spec, variant, layout, exact_p, st, B, H, D, rope_segments, cfg.get("DS", "table"),
                    gluon=gluon, qk_fp8=_qk_fp8(cfg, gluon))
    return _launch(prep, q, layout, B, H, Nq, Nk, D, sm_scale, kpm, skpm, key_padding_mask is not None,
                   promote, cfg, st)


def _gluon(cfg: dict, has_kpm: bool, promote: bool, device: torch.device) -> bool:
    """Whether the Gluon kernel runs (given 8-bit operands): config GLUON, without a key padding mask, promoted,
    on a Hopper GPU (its wgmma/TMA code is sm_90's; the CPU interpreter does not run Gluon); otherwise the Triton
    kernel (same numerics) runs."""
    if not cfg.get("GLUON") or has_kpm or not promote or device.type != "cuda":
        return False
    return torch.cuda.get_device_capability(device) == (9, 0)


def _qk_fp8(cfg: dict, gluon: bool) -> bool:
    """INT4 Q/K codes as E4M3: as config QK_FP8 says, or (None, the default) where the Gluon kernel runs."""
    return bool(cfg["QK_FP8"]) if cfg.get("QK_FP8") is not None else gluon


def _prepare(q, k, v, spec, variant, layout, exact_p, st, B, H, D, rope_segments=None, ds="table", gluon=False,
             qk_fp8=False):
    """The operand pre-pass: what the kernel reads (a dict of tensors, strides and constexprs). gluon: the Gluon
    kernel will run if the operands are 8-bit, so 8-bit Vᵀ is written in its key order (`prepass.operand_key`).
    qk_fp8 (INT4): Q/K codes as E4M3 rather than int8 (the kernels pick their QKᵀ MMA by that dtype)."""
    dev = q.device
    dummy_f = torch.zeros((1,), device=dev, dtype=torch.float32)
    rule, flq, qmax = 0, 2, 6.0
    p_shift, p_fp8, pnq = 0.0, False, False
    kf = qm = hv = dummy_f
    skf = sqm = 0
    plev, smq, rotv, prow = 15, 0, False, False

    if variant == "dense":
        mode = MODE_DENSE
        if q.dtype not in (torch.float16, torch.bfloat16):
            raise ValueError("the dense kernel takes fp16 or bf16 tensors")
        qq, kk, vv = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
        sq = prepass._bhnd_strides(qq, layout)
        sk = prepass._bhnd_strides(kk, layout)
        sv4 = prepass._bhnd_strides(vv, layout)
        sv = (sv4[0], sv4[1], sv4[3], sv4[2])  # (b, h, d, n)
        qs = ks = vs = dummy_f
        sqs = sks = svs = 0
    else:
        timed = q.is_cuda
        if timed:
            t0 = torch.cuda.Event(enable_timing=True)
            t1 = torch.cuda.Event(enable_timing=True)
            t0.record()
        if variant == "mx":
            mode = MODE_MX
            had = spec.rotation == "hadamard"
            qq, qs, qbad = prepass.mx_rows(q, layout, spec.q, fp8=True, hadamard=had)
            kk, ks, kbad = prepass.mx_rows(k, layout, spec.k, fp8=True, hadamard=had)
            vv, vs, vbad = prepass.mx_cols(v, layout, spec.v, fp8=not exact_p, operand_order=gluon and not exact_p)
            # one device-to-host read (one sync) for the three counts: the fallback decision
            nq, nk, nv = torch.cat([qbad, kbad, vbad]).tolist()
            st.qk_inexact_blocks = nq + nk
            st.v_inexact_blocks = nv if not exact_p else 0
            st.qk_fallback = st.qk_inexact_blocks > 0
            if st.qk_fallback:
                qq, qs, _ = prepass.mx_rows(q, layout, spec.q, fp8=False, hadamard=had)
                kk, ks, _ = prepass.mx_rows(k, layout, spec.k, fp8=False, hadamard=had)
            st.v_fallback = st.v_inexact_blocks > 0
            if st.v_fallback:
                vv, vs, _ = prepass.mx_cols(v, layout, spec.v, fp8=False)
            elif st.qk_fallback and gluon and not exact_p:
                # bf16 Q/K run the Triton kernel, which reads Vᵀ in token order
                vv, vs, _ = prepass.mx_cols(v, layout, spec.v, fp8=True)
            p_fp8 = vv.dtype == torch.float8_e4m3fn
            rule, flq, qmax = prepass.rule_params(spec.p)
            p_shift, pnq = 8.0, spec.placement == "pnq"
        elif variant == "int4":
            mode = MODE_INT4
            qq, qs, qm, kk, ks, kf, vv, vs = prepass.int4_prepass(q, k, v, layout, spec, rope_segments, qk_fp8)
            smq, rotv = (0 if not spec.smooth_q else 2 if ds == "table" else 1), bool(spec.rotate_v)
            if smq == 2:
                kf = prepass.delta_s_table(qm, kf)
                skf, sqm = kf.stride(0), kf.stride(1)
            else:
                skf, sqm = (kf.stride(0) if smq else 0), qm.stride(0)
            plev = 15 if spec.p.scheme == "affine" else 7
            pnq = spec.placement == "pnq"
            if rotv:
                hv = prepass._sylvester_pm1(D, torch.float32, dev)
        elif variant == "nvfp4":
            mode = MODE_NVFP4
            qq, qs, qm, kk, ks, kf, vv, vs = prepass.nvfp4_prepass(q, k, v, layout, spec)
            if spec.smooth_q:
                smq = 2
                kf = prepass.delta_s_table(qm, kf)
                skf, sqm = kf.stride(0), kf.stride(1)
            else:
                kf = dummy_f
            pnq, prow = spec.placement == "pnq", spec.p.outer_scale == "row"
        else:
            mode = MODE_SAGE
            qq, qs, kk, ks, vv, vs = prepass.sage_prepass(q, k, v, layout, operand_order=gluon)
            p_fp8 = True
            p_shift = -math.log2(float(torch.tensor(spec.p.static_scale, dtype=torch.float32)))
        if timed:
            t1.record()
            st._events = (t0, t1)  # read by finalize_stats (no extra sync on the hot path)
        sq = (qq.stride(0) * H, qq.stride(0), qq.stride(1), 1)
        sk = (kk.stride(0) * H, kk.stride(0), kk.stride(1), 1)
        sv = (vv.stride(0) * H, vv.stride(0), vv.stride(1), vv.stride(2))
        sqs, sks, svs = qs.stride(0), ks.stride(0), vs.stride(0)

    use_gluon = (gluon and variant in ("mx", "sage", "int4") and qq.element_size() == 1 and vv.element_size() == 1
                 and smq != 1)
    return dict(gluon=use_gluon, qq=qq, kk=kk, vv=vv, qs=qs, ks=ks, vs=vs, sq=sq, sk=sk, sv=sv, sqs=sqs,
                sks=sks, svs=svs,
                mode=mode, pnq=pnq, p_fp8=p_fp8, rule=rule, flq=flq, qmax=qmax, p_shift=p_shift,
                kf=kf, qm=qm, hv=hv, skf=skf, sqm=sqm, plev=plev, smq=smq, rotv=rotv, prow=prow)


def _launch(prep, q, layout, B, H, Nq, Nk, D, sm_scale, kpm, skpm, has_kpm, promote, cfg, st):
    global last_stats
    out = torch.empty_like(q)
    if out.stride(-1) != 1:  # (a strided view's layout): the kernels write head_dim contiguously
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    so = prepass._bhnd_strides(out, layout)
    bad = torch.zeros((1,), device=q.device, dtype=torch.int32)
    P = prep
    if P["mode"] == MODE_MX and (P["qq"].element_size() > 1 or P["vv"].element_size() > 1):
        # the exact bf16 fallbacks double the K/V tile bytes: PIPE's 4 stages do not fit in shared memory
        # (327724 B > 232448 on the H200), the unpipelined 3-stage loop does
        cfg = dict(cfg, PIPE=False, NUM_STAGES=min(cfg["NUM_STAGES"], 3))
    # the warp-specialized Gluon kernel (kernels/gluon_ws.py) takes 8-bit operands only: an MXFP4 pre-pass that
    # fell back to bf16 operands for exactness (or exact_p) runs the Triton kernel, with the same numerics
    # the pre-pass wrote Vᵀ in the Gluon kernel's key order exactly when that kernel is to run
    if P.get("gluon"):
        from . import gluon_ws

        gluon_ws.launch(P, out, so, H, Nq, Nk, sm_scale * LOG2E, bad, stages=cfg["NUM_STAGES"],
                        defer=cfg.get("DEFER", False), early=cfg.get("EARLY_QK", False),
                        pingpong=cfg.get("PINGPONG", False), work_loop=cfg.get("WORK_LOOP", False),
                        persist=cfg.get("PERSIST", False))
        st.kernel = "gluon"
    else:
        st.kernel = "triton"
        grid = (triton.cdiv(Nq, cfg["BLOCK_M"]), B * H)
        _attn(grid, P, out, so, kpm, bad, skpm, H, Nq, Nk, D, sm_scale, has_kpm, promote, cfg, cfg["NUM_STAGES"])
    st._bad = bad if P["mode"] == MODE_MX else None
    last_stats = st
    return out


def _attn(grid, P, out, so, kpm, bad, skpm, H, Nq, Nk, D, sm_scale, has_kpm, promote, cfg, stages):
    # TMA (sage2 only, off by default): exact, measured no faster on the H200 (results/kernels-h200.md)
    tma = bool(cfg.get("TMA", False)) and P["mode"] == MODE_SAGE
    kd, vd = _descriptors(P, cfg) if tma else (P["kk"], P["vv"])
    attn_fwd[grid](
        P["qq"], P["kk"], P["vv"], out, P["qs"], P["ks"], P["vs"], kpm, bad, P["kf"], P["qm"], P["hv"], kd, vd,
        *P["sq"][:3], *P["sk"][:3], *P["sv"], *so, P["sqs"], P["sks"], P["svs"], skpm, H, Nq, Nk, sm_scale * LOG2E,
        P["skf"], P["sqm"], 1.0 / math.sqrt(D),
        MODE=P["mode"], HEAD_DIM=D, HAS_KPM=has_kpm, PNQ=P["pnq"], P_FP8=P["p_fp8"],
        RULE=P["rule"], FLQ=P["flq"], QMAX=P["qmax"], P_SHIFT=P["p_shift"], PROMOTE=promote, PQ=cfg.get("PQ", True),
        BLOCK_M=cfg["BLOCK_M"], BLOCK_N=BLOCK_N, NUM_STAGES=stages, num_warps=cfg["num_warps"],
        PLEV=P["plev"], SMQ=P["smq"], ROTV=P["rotv"], PROW=P.get("prow", False), PIPE=cfg.get("PIPE", False),
        WS=cfg.get("WS", False), TMA=tma,
        # a register cap per thread lets more CTAs share an SM (the kernels otherwise take all 255)
        **({"maxnreg": cfg["maxnreg"]} if cfg.get("maxnreg") else {}),
    )


def _descriptors(P, cfg):
    """TMA tensor descriptors of the pre-pass's K (B·H, N_pad, D) and Vᵀ (B·H, D, N_pad), as 2-D views whose
    tiles never cross a head (N_pad is whole key tiles); the kernel's masked tail keeps pointer loads."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    kk, vv = P["kk"], P["vv"]
    D = kk.shape[-1]
    kd = TensorDescriptor.from_tensor(kk.reshape(-1, D), block_shape=[BLOCK_N, D])
    vd = TensorDescriptor.from_tensor(vv.reshape(-1, vv.shape[-1]), block_shape=[D, BLOCK_N])
    return kd, vd


def finalize_stats(st: KernelStats) -> KernelStats:
    """Synchronize and read the device-side counters of `st` (P̃ inexact blocks, pre-pass time)."""
    bad = getattr(st, "_bad", None)
    if bad is not None:
        st.p_inexact_blocks = int(bad.item())
    ev = getattr(st, "_events", None)
    if ev is not None:
        ev[1].synchronize()
        st.prepass_ms = ev[0].elapsed_time(ev[1])
    return st


def split_call(q, k, v, recipe, *, layout: str = "BHND", scale: float | None = None,
               exact_p: bool = False, promote: bool = True, config: dict | None = None, rope_segments=None):
    """For benchmarks: (prepass, kernel) zero-argument callables whose sequence equals one
    `attention(...)` call; `kernel` reuses the operands of the last `prepass` (one is run here)."""
    spec, variant = _spec_and_variant(recipe)
    B, H, Nq, D = prepass._dims(q, layout)
    Nk = prepass._dims(k, layout)[2]
    sm_scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    cfg = merged_config(variant, D, config, spec.placement)
    st = KernelStats(variant=variant)
    kpm = torch.zeros((1,), device=q.device, dtype=torch.int8)
    box = {}

    def run_prepass():
        gluon = _gluon(cfg, False, promote, q.device)
        box["prep"] = _prepare(q, k, v, spec, variant, layout, exact_p, st, B, H, D, rope_segments,
                               cfg.get("DS", "table"), gluon=gluon, qk_fp8=_qk_fp8(cfg, gluon))

    def run_kernel():
        return _launch(box["prep"], q, layout, B, H, Nq, Nk, D, sm_scale, kpm, 0, False, promote, cfg, st)

    run_prepass()
    return run_prepass, run_kernel, st
