"""What differs between diffusers' video transformers, as data: one `FamilyFacts` row per class.

A recipe reaches every video transformer through the same hooks (attention_hook.py); what the hooks cannot
see from a call is read here:

* `name`: the family's name in messages and tables.
* `blocks`: the block lists (ModuleList attributes of the transformer), in the order their blocks are numbered
  by the precision policy (HunyuanVideo: the 20 dual-stream blocks are 0..19, the 40 single-stream 20..59).
  Attention modules outside them (HunyuanVideo's token refiner, Wan-VACE's hint blocks) keep diffusers' kernel.
* `patch`: the (t, h, w) patch sizes as config paths (`patch_size[1]`) or numbers, so the video token grid
  follows from the latent's (F, H, W).
* `rope`: the t/h/w channel split of the 3D RoPE per head (contiguous channel runs, in channel order), as config
  or attribute paths (a single path names a sequence of three), or a `RopeRule` computing it from the head size:
  `WAN_SPLIT` (h = w = 2·(D // 6), t = D − 2h), `COGVIDEOX_SPLIT` (t = D // 4, h = w = 3·(D // 8)),
  `THIRDS` (Allegro); `NO_SPLIT` where the model's RoPE has no such runs (LTX interleaves the axes pair by pair
  over the whole width, Mochi's learned frequencies mix all three in every pair, Cosmos rotates split halves,
  Latte has none): the recipes then use their default split. None: not known.
* `text`: where text tokens sit in joint (video + text) attention: "before", "after" or "none" (no joint
  attention: text comes in as cross-attention keys).
* `masks`: which masks the family passes to attention (documentation and the coverage table).
* `attention_classes`: module classes that compute softmax attention themselves, without a processor (SANA-WM's
  softmax blocks): their SDPA calls are taken over as the processors' are.
* `grid_kwargs`: for transformers that take packed tokens (LTX-Video), the forward's arguments that give the
  latent's frames, height and width.
* `latent`: the axis order of the transformer's latent input ("BCFHW", CogVideoX and ConsisID "BFCHW", Kandinsky
  "BFHWC"), or one order per rank the forward takes (JoyImage-Edit: 5-D "BCFHW" or 6-D "BNCFHW", whose N items, the
  target and its reference images, it folds into frames).
* `keep`: attention modules inside the blocks (paths within a block) that keep diffusers' kernel under every recipe,
  like the modules outside the block lists: Kandinsky 6's audio track (its self-attention, whose tokens are no
  video grid, and the attention between audio and video).
* `no_grid`: why draft recipes cannot lay this family's self-attention out by the video grid although its patch
  sizes are known (history frames before the grid, chunk-causal KV caches, several images of their own sizes,
  packed sequences without the grid's size); empty where they can.

A class without a row still gets every recipe that needs no video geometry on the attention of its block lists
(found as the ModuleList children holding attention modules); what is unknown is said once in `describe`.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from ..errors import UserError

TEXT_POSITIONS = ("before", "after", "none")


@dataclass(frozen=True)
class RopeRule:
    """A RoPE split computed from the size of one attention head: `split(D)`, D from the config by `head_dim`;
    `gate`: the config flag that switches the RoPE on (CogVideoX-2b has none: absolute position embeddings)."""

    split: Callable[[int], tuple[int, ...]]
    head_dim: Callable[[Any], int] = lambda config: config.attention_head_dim
    gate: str | None = None


def _wan_split(d: int) -> tuple[int, ...]:
    return (d - 4 * (d // 6), 2 * (d // 6), 2 * (d // 6))


WAN_SPLIT = RopeRule(_wan_split)
# diffusers' get_3d_rotary_pos_embed (CogVideoX, ConsisID, EasyAnimate)
COGVIDEOX_SPLIT = RopeRule(lambda d: (d // 4, 3 * (d // 8), 3 * (d // 8)))
THIRDS = RopeRule(lambda d: (d // 3,) * 3)  # get_3d_rotary_pos_embed_allegro
NO_SPLIT = ("no-split",)


@dataclass(frozen=True)
class FamilyFacts:
    name: str  # the family as users know it ("Wan", "HunyuanVideo")
    blocks: tuple[str, ...]
    patch: tuple[str | int, str | int, str | int] | None
    rope: tuple[str, ...] | RopeRule | None
    text: str | None
    masks: str = "none"
    latent: str | tuple[str, ...] = "BCFHW"  # the axis order of the latent the transformer takes (CogVideoX: "BFCHW")
    attention_classes: tuple[str, ...] = ()  # attention modules without a diffusers processor (calling SDPA)
    grid_kwargs: tuple[str, str, str] | None = None  # forward arguments giving the latent (F, H, W) of packed tokens
    keep: tuple[str, ...] = ()  # attention modules (paths within a block) left to diffusers' kernel
    no_grid: str = ""  # why draft recipes cannot run on the family although its patch sizes are known


_WAN = FamilyFacts("Wan", ("blocks",), ("config.patch_size[0]", "config.patch_size[1]", "config.patch_size[2]"),
                   WAN_SPLIT, "none")
_HUNYUAN = FamilyFacts("HunyuanVideo", ("transformer_blocks", "single_transformer_blocks"),
                       ("config.patch_size_t", "config.patch_size", "config.patch_size"), ("config.rope_axes_dim",),
                       "after", "key padding of the prompt's padded text tokens")
_LTX = FamilyFacts("LTX-Video", ("transformer_blocks",), ("config.patch_size_t", "config.patch_size", "config.patch_size"), NO_SPLIT,
                   "none", "key padding of the prompt (cross-attention)", grid_kwargs=("num_frames", "height", "width"))

# CogVideoX-5b's RoPE (CogVideoX-2b: absolute position embeddings instead)
_COGVIDEOX_ROPE = dataclasses.replace(COGVIDEOX_SPLIT, gate="use_rotary_positional_embeddings")

# class name -> facts. Read from diffusers 0.42.1's model sources.
FACTS: dict[str, FamilyFacts] = {
    "WanTransformer3DModel": _WAN,
    "WanVACETransformer3DModel": dataclasses.replace(_WAN, name="Wan-VACE"),
    "WanAnimateTransformer3DModel": dataclasses.replace(_WAN, name="Wan-Animate"),
    "SkyReelsV2Transformer3DModel": dataclasses.replace(_WAN, name="SkyReels-V2"),
    "ChronoEditTransformer3DModel": dataclasses.replace(_WAN, name="ChronoEdit"),
    "AnyFlowTransformer3DModel": FamilyFacts("AnyFlow", ("blocks",), _WAN.patch, WAN_SPLIT, "none", latent="BFCHW"),
    "HeliosTransformer3DModel": FamilyFacts("Helios", ("blocks",), _WAN.patch, ("config.rope_dim",), "none"),
    "HunyuanVideoTransformer3DModel": _HUNYUAN,
    "HunyuanVideoFramepackTransformer3DModel": FamilyFacts("HunyuanVideo-Framepack", _HUNYUAN.blocks, _HUNYUAN.patch, _HUNYUAN.rope, None,
                                                           _HUNYUAN.masks, no_grid="its joint calls put history "
                                                           "frames, on grids of their own, before the video grid"),
    "HunyuanVideo15Transformer3DModel": FamilyFacts("HunyuanVideo-1.5", ("transformer_blocks",), _HUNYUAN.patch, _HUNYUAN.rope, "after",
                                                    "key padding of the prompt's padded text tokens"),
    # joint calls: the grid, then image embeddings and text (a decoder block: then the encoder's output grid)
    "MotifVideoTransformer3DModel": FamilyFacts("Motif-Video", _HUNYUAN.blocks, _HUNYUAN.patch, _HUNYUAN.rope, "after",
                                                _HUNYUAN.masks),
    "LTXVideoTransformer3DModel": _LTX,
    "LTX2VideoTransformer3DModel": FamilyFacts("LTX-2", ("transformer_blocks",), _LTX.patch, NO_SPLIT, "none",
                                               "key padding of the prompt (cross-attention)",
                                               grid_kwargs=("num_frames", "height", "width")),
    "CogVideoXTransformer3DModel": FamilyFacts("CogVideoX", ("transformer_blocks",),
                                               ("config.patch_size_t", "config.patch_size", "config.patch_size"),
                                               _COGVIDEOX_ROPE, "before", latent="BFCHW"),
    "ConsisIDTransformer3DModel": FamilyFacts("ConsisID", ("transformer_blocks",),
                                              (1, "config.patch_size", "config.patch_size"), _COGVIDEOX_ROPE, "before",
                                              latent="BFCHW"),
    "MochiTransformer3DModel": FamilyFacts("Mochi", ("transformer_blocks",), (1, "config.patch_size", "config.patch_size"),
                                           NO_SPLIT, "after", "per-sample valid prompt length (each sample its own call)"),
    "AllegroTransformer3DModel": FamilyFacts("Allegro", ("transformer_blocks",), ("config.patch_size_t", "config.patch_size",
                                                                       "config.patch_size"), THIRDS, "none",
                                             "key padding of the prompt (cross-attention)"),
    "LatteTransformer3DModel": FamilyFacts("Latte", ("transformer_blocks", "temporal_transformer_blocks"), None, NO_SPLIT,
                                           "none",
                                           no_grid="its blocks attend within one frame (spatial) or along one "
                                           "position's frames (temporal), never over the whole grid"),
    "EasyAnimateTransformer3DModel": FamilyFacts("EasyAnimate", ("transformer_blocks",), (1, "config.patch_size",
                                                                           "config.patch_size"), COGVIDEOX_SPLIT,
                                                 "before"),
    # softmax self-attention heads of linear_head_dim channels (its camera attention rotates their second half
    # only, by Wan's split of that half)
    "SanaWMTransformer3DModel": FamilyFacts("SANA-WM", ("blocks",), _WAN.patch,
                                            dataclasses.replace(WAN_SPLIT, head_dim=lambda c: c.linear_head_dim), "none",
                                            "additive bias over padded frames' keys",
                                            attention_classes=("SanaWMSoftmaxAttention", "SanaWMSoftmaxCamAttention")),
    "CosmosTransformer3DModel": FamilyFacts("Cosmos", ("transformer_blocks",), ("config.patch_size[0]", "config.patch_size[1]",
                                                                      "config.patch_size[2]"), NO_SPLIT, "none"),
    # Kandinsky 5 / 6: text-only blocks first (text_transformer_blocks: their self-attention sees no video), then the
    # visual blocks (video self-attention, text by cross-attention); the latent is channels-last
    "Kandinsky5Transformer3DModel": FamilyFacts("Kandinsky 5", ("visual_transformer_blocks",), _WAN.patch,
                                                ("config.axes_dims",), "none",
                                                "none (attention_type 'nabla': a flex BlockMask per head over tokens "
                                                "reordered into 8x8 tiles, which every recipe leaves to diffusers)",
                                                latent="BFHWC"),
    "Kandinsky6Transformer3DModel": FamilyFacts("Kandinsky 6", ("visual_transformer_blocks",), _WAN.patch,
                                                ("config.axes_dims",), "none", "key padding of the prompt (cross-attention)",
                                                latent="BFHWC", keep=("audio_dec_block.self_attention",
                                                                      "audio_dec_block.cross_attention",
                                                                      "va_cross_attention", "av_cross_attention")),
    "Kandinsky6SRTransformer3DModel": FamilyFacts("Kandinsky 6 SR", ("visual_transformer_blocks",), _WAN.patch,
                                                  ("config.axes_dims",), "none",
                                                  "a flex BlockMask per head (NABLA) on every self-attention call",
                                                  latent="BFHWC", no_grid="its tokens are reordered into 8x8 tiles"),
    # the target (and reference images, N of them in a 6-D latent) folded into frames, text after the video
    "JoyImageEditTransformer3DModel": FamilyFacts("JoyImage-Edit", ("double_blocks",), _WAN.patch,
                                                  ("config.rope_dim_list",), "after",
                                                  latent=("BCFHW", "BNCFHW")),
    "JoyImageEditPlusTransformer3DModel": FamilyFacts(
        "JoyImage-Edit-Plus", ("double_blocks",), _WAN.patch, ("config.rope_dim_list",), "after",
        "key padding of the padded patches and of the prompt",
        no_grid="its joint calls hold several images, each a grid of its own size, then padding"),
    "AnyFlowFARTransformer3DModel": FamilyFacts(
        "AnyFlow-FAR", ("blocks",), _WAN.patch, WAN_SPLIT, "none",
        "a flex chunk-causal BlockMask (rollout, cache prefill); none in KV-cached steps", latent="BFCHW",
        no_grid="its self-attention sees earlier chunks on a coarser grid, padded to 128 tokens, or a KV cache"),
    "WanAnimate2Transformer3DModel": FamilyFacts(
        "Wan-Animate-2", ("blocks",), _WAN.patch, dataclasses.replace(WAN_SPLIT, head_dim=lambda c: c.dim // c.num_heads),
        "none",
        "a flex BlockMask over the padded [generation | reference] buffer (cached pass)",
        no_grid="its latents come as a list, and the generation pass attends a padded buffer of generated and "
                "reference frames"),
    "SanaWMLTX2RefinerTransformer3DModel": FamilyFacts(
        "SANA-WM refiner", ("transformer_blocks",), _LTX.patch, NO_SPLIT, "none",
        "additive key padding of the prompt (cross-attention)",
        no_grid="its packed tokens come without the grid's size, and its denoising calls attend a KV cache"),
    "MiniMaxH3Transformer3DModel": FamilyFacts(
        "MiniMax-H3", ("transformer_blocks",), _WAN.patch, NO_SPLIT, None,
        no_grid="its one packed sequence holds text, keyframe, audio and video rows, without the grid's size"),
    # linear (ReLU) self-attention; its only softmax attention is the cross-attention to the prompt
    "SanaVideoTransformer3DModel": FamilyFacts("SANA-Video", ("transformer_blocks",), _WAN.patch, WAN_SPLIT, "none",
                                               "key padding of the prompt (cross-attention, an additive bias)"),
}


def facts_for(transformer: torch.nn.Module) -> FamilyFacts | None:
    """The row of `transformer`'s class (or of the nearest diffusers class it derives from), None if none."""
    for cls in type(transformer).__mro__:
        if cls.__name__ in FACTS:
            return FACTS[cls.__name__]
    return None


def _resolve(transformer: torch.nn.Module, path: str | int) -> Any:
    """A number, or `config.x`, `config.x[i]`, `attr.sub` read from the transformer."""
    if isinstance(path, int):
        return path
    m = re.fullmatch(r"([\w.]+?)(?:\[(\d+)\])?", path)
    if m is None:
        raise ValueError(f"bad facts path {path!r}")
    obj: Any = transformer
    for part in m.group(1).split("."):
        obj = obj[part] if isinstance(obj, dict) else getattr(obj, part)
    if m.group(2) is not None:
        obj = obj[int(m.group(2))]
    return obj


def _is_attention(module: torch.nn.Module) -> bool:
    """diffusers attention modules: every kind (AttentionModuleMixin, legacy Attention, Mochi's own) holds the
    processor it calls."""
    return callable(getattr(module, "processor", None))


def block_lists(transformer: torch.nn.Module) -> tuple[str, ...]:
    """The facts' block lists, else every ModuleList child that holds attention modules, in definition order."""
    facts = facts_for(transformer)
    if facts is not None:
        return tuple(n for n in facts.blocks if isinstance(getattr(transformer, n, None), torch.nn.ModuleList))
    return tuple(name for name, child in transformer.named_children()
                 if isinstance(child, torch.nn.ModuleList) and any(_is_attention(m) for m in child.modules()))


@dataclass(frozen=True)
class Site:
    """One attention module a recipe may touch."""

    name: str  # module path in the transformer, e.g. "blocks.3.attn1"
    module: torch.nn.Module
    block: int  # global block index (the precision policy's)
    cross: bool  # declared cross-attention (Wan's is_cross_attention); else decided per call from shapes


def attention_sites(transformer: torch.nn.Module) -> list[Site]:
    """Every attention module inside the block lists (but the facts' `keep`), in block order; the block index counts
    across lists."""
    out, offset = [], 0
    facts = facts_for(transformer)
    extra = facts.attention_classes if facts is not None else ()
    keep = facts.keep if facts is not None else ()
    for list_name in block_lists(transformer):
        blocks = getattr(transformer, list_name)
        for i, block in enumerate(blocks):
            for sub, mod in block.named_modules():
                if sub in keep:
                    continue
                if _is_attention(mod) or type(mod).__name__ in extra:
                    out.append(Site(f"{list_name}.{i}.{sub}", mod, offset + i,
                                    bool(getattr(mod, "is_cross_attention", False))))
        offset += len(blocks)
    return out


def num_blocks(transformer: torch.nn.Module) -> int:
    return sum(len(getattr(transformer, n)) for n in block_lists(transformer))


def patch_sizes(transformer: torch.nn.Module) -> tuple[int, int, int] | None:
    facts = facts_for(transformer)
    if facts is None or facts.patch is None:
        return None
    return tuple(int(_resolve(transformer, p) or 1) for p in facts.patch)  # CogVideoX-2b: patch_size_t None = 1


def rope_segments(transformer: torch.nn.Module) -> tuple[int, ...] | None:
    """The t/h/w channel split of the model's 3D RoPE (per head), None where the facts do not say."""
    facts = facts_for(transformer)
    if facts is None or facts.rope is None or facts.rope == NO_SPLIT:
        return None
    if isinstance(facts.rope, RopeRule):
        cfg = transformer.config
        if facts.rope.gate is not None and not getattr(cfg, facts.rope.gate, False):
            return None
        d = int(facts.rope.head_dim(cfg))
        segs = facts.rope.split(d)  # a size the rule does not split into even runs (Allegro at 32) has no split
        return segs if sum(segs) == d and all(x > 0 and x % 2 == 0 for x in segs) else None
    if len(facts.rope) == 1:
        return tuple(int(d) for d in _resolve(transformer, facts.rope[0]))
    return tuple(int(_resolve(transformer, p)) for p in facts.rope)


def latent_order(facts: FamilyFacts, rank: int) -> str | None:
    """The family's latent axis order for an input of `rank` dimensions, None if it takes none of that rank."""
    orders = (facts.latent,) if isinstance(facts.latent, str) else facts.latent
    return next((o for o in orders if len(o) == rank), None)


def token_grid(transformer: torch.nn.Module, latent_shape: Sequence[int]) -> tuple[int, int, int] | None:
    """(frames, height, width) of the video tokens for a latent input (B, C, F, H, W in the family's axis order;
    N items folded into frames where the order has them); None without patch facts or for another rank."""
    patch = patch_sizes(transformer)
    order = latent_order(facts_for(transformer), len(latent_shape)) if patch is not None else None
    if order is None:
        return None
    axes = dict(zip(order, latent_shape))
    f, h, w = axes["F"] * axes.get("N", 1), axes["H"], axes["W"]
    return (f // patch[0], h // patch[1], w // patch[2])


def family_name(transformer: torch.nn.Module) -> str:
    facts = facts_for(transformer)
    return facts.name if facts is not None else type(transformer).__name__


def call_grid(transformer: torch.nn.Module, args: tuple, kwargs: dict) -> tuple[int, int, int] | None:
    """The video token grid of one forward call: from its 5-D latent, or from the facts' `grid_kwargs`."""
    hs = kwargs.get("hidden_states", args[0] if args else None)
    if isinstance(hs, torch.Tensor) and hs.dim() >= 5:
        return token_grid(transformer, hs.shape)
    facts, patch = facts_for(transformer), patch_sizes(transformer)
    if facts is None or facts.grid_kwargs is None or patch is None:
        return None
    dims = [kwargs.get(k) for k in facts.grid_kwargs]
    if not all(isinstance(d, int) for d in dims):
        return None
    return tuple(d // p for d, p in zip(dims, patch))


def text_position(transformer: torch.nn.Module) -> str | None:
    facts = facts_for(transformer)
    return facts.text if facts is not None else None


def grid_refusal(facts: FamilyFacts | None, text_needed: bool = True) -> str:
    """Why draft recipes, which lay each self/joint call out by the video token grid, cannot run on a family
    ("" where they can). text_needed=False leaves out the text position, which only joint calls need (the hooks
    refuse those when they come)."""
    if facts is None:
        return "class not in the facts table"
    if facts.no_grid:
        return facts.no_grid
    if facts.patch is None:
        return "patch sizes not in the facts table"
    if text_needed and facts.text is None:
        return "text position in joint attention not in the facts table"
    return ""


def unknown_facts(transformer: torch.nn.Module) -> list[str]:
    """What the table does not say about `transformer` (empty for a complete row)."""
    facts = facts_for(transformer)
    if facts is None:
        return ["block lists (found from the module tree)", "patch sizes", "RoPE split", "text position"]
    missing = [what for what, value in (("patch sizes", facts.patch), ("RoPE split", facts.rope),
                                        ("text position", facts.text)) if value is None]
    return missing


def describe(transformer: torch.nn.Module) -> dict[str, Any]:
    """JSON-ready facts of one transformer instance, with a one-line note of what is unknown."""
    unknown = unknown_facts(transformer)
    return {"class": type(transformer).__name__, "blocks": list(block_lists(transformer)),
            "num_blocks": num_blocks(transformer), "attention_modules": len(attention_sites(transformer)),
            "patch": patch_sizes(transformer), "rope_segments": rope_segments(transformer),
            "text": text_position(transformer), "draft": grid_refusal(facts_for(transformer)),
            "unknown": ("not in the facts table: " + ", ".join(unknown)) if unknown else None}


def check_transformer(transformer: Any) -> None:
    """UserError unless `transformer` is a diffusers model with attention modules in block lists."""
    if not isinstance(transformer, torch.nn.Module) or not attention_sites(transformer):
        raise UserError(f"no attention modules to put a recipe into in {type(transformer).__name__} (a diffusers "
                        "video transformer holds them in its block lists)")


__all__ = ["FACTS", "FamilyFacts", "Site", "TEXT_POSITIONS", "attention_sites", "block_lists", "call_grid", "check_transformer",
           "describe", "facts_for", "family_name", "grid_refusal", "latent_order", "num_blocks", "patch_sizes", "rope_segments", "text_position", "token_grid",
           "unknown_facts"]
