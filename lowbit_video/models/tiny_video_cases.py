"""Tiny random-weight instances of diffusers' video transformers and valid inputs for them (test data).

`video_transformer_classes()` lists what the installed diffusers exports as a video transformer: every class
`diffusers.<Name>Transformer3DModel` (diffusers names its video/3D transformers so; a new one in a later release
shows up here, and in the coverage table, without an entry below). `CASES[name]` builds a tiny instance (head_dim
32, the MXFP4 block, so quantized recipes run; one or two blocks) and its forward's keyword arguments. Sizes follow
diffusers' own fast tests where they exist (tests/models/transformers/test_models_transformer_*.py), shrunk.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

HEAD_DIM = 32
SUFFIX = "Transformer3DModel"


def video_transformer_classes() -> list[str]:
    """Names of the video transformer classes the installed diffusers exports, sorted."""
    import diffusers

    out = []
    for name in dir(diffusers):
        if not name.endswith(SUFFIX):
            continue
        try:
            cls = getattr(diffusers, name)
        except Exception:  # noqa: BLE001 - a class whose optional dependency is missing
            continue
        if isinstance(cls, type) and issubclass(cls, torch.nn.Module):
            out.append(name)
    return sorted(out)


@dataclass(frozen=True)
class TinyCase:
    config: dict[str, Any]
    inputs: Callable[[torch.Generator], dict[str, Any]]


def build(name: str, seed: int = 0) -> tuple[torch.nn.Module, dict[str, Any]]:
    """A tiny instance of `name` (random weights from `seed`, eval mode) and inputs for its forward."""
    import diffusers

    case = CASES[name]
    torch.manual_seed(seed)
    model = getattr(diffusers, name)(**case.config).eval()
    return model, case.inputs(torch.Generator().manual_seed(seed + 1))


def _r(g, *shape):
    return torch.randn(*shape, generator=g)


# -- Wan and the families built on its blocks: latent (B, 16, F, H, W), patch 1x2x2, text (B, 7, 32)

_WAN = dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=HEAD_DIM, in_channels=16, out_channels=16,
            text_dim=32, freq_dim=32, ffn_dim=32, num_layers=2, cross_attn_norm=True, rope_max_seq_len=32)


def _wan_inputs(g, **extra):
    return dict(hidden_states=_r(g, 1, 16, 2, 8, 8), timestep=torch.tensor([500.0]),
                encoder_hidden_states=_r(g, 1, 7, 32), return_dict=False, **extra)


_HY = dict(in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=HEAD_DIM, num_layers=1,
           num_single_layers=1, num_refiner_layers=1, patch_size=1, patch_size_t=1, text_embed_dim=16,
           rope_axes_dim=(8, 12, 12))


def _hy_inputs(g):
    return dict(hidden_states=_r(g, 2, 4, 2, 8, 8), timestep=torch.tensor([500.0, 500.0]),
                encoder_hidden_states=_r(g, 2, 6, 16),
                encoder_attention_mask=torch.tensor([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1]]),
                pooled_projections=_r(g, 2, 8), guidance=torch.tensor([6000.0, 6000.0]), return_dict=False)


def _framepack_inputs(g):
    d = _hy_inputs(g)
    d.update(image_embeds=_r(g, 2, 3, 16), indices_latents=torch.arange(2),
             latents_clean=_r(g, 2, 4, 1, 8, 8), indices_latents_clean=torch.arange(2, 3),
             latents_history_2x=_r(g, 2, 4, 2, 8, 8), indices_latents_history_2x=torch.arange(3, 5),
             latents_history_4x=_r(g, 2, 4, 4, 8, 8), indices_latents_history_4x=torch.arange(5, 9))
    return d


def _cogvideox_inputs(g):  # latent (B, F, C, H, W)
    return dict(hidden_states=_r(g, 1, 2, 4, 8, 8), encoder_hidden_states=_r(g, 1, 7, 16),
                timestep=torch.tensor([500]), return_dict=False)


_COG = dict(num_attention_heads=2, attention_head_dim=HEAD_DIM, in_channels=4, out_channels=4, time_embed_dim=4,
            text_embed_dim=16, num_layers=1, sample_width=8, sample_height=8, sample_frames=5, patch_size=2,
            temporal_compression_ratio=4, max_text_seq_length=7)

CASES: dict[str, TinyCase] = {
    "WanTransformer3DModel": TinyCase(dict(_WAN, qk_norm="rms_norm_across_heads"), _wan_inputs),
    "WanVACETransformer3DModel": TinyCase(
        dict(_WAN, qk_norm="rms_norm_across_heads", vace_layers=[0], vace_in_channels=16),
        lambda g: _wan_inputs(g, control_hidden_states=_r(g, 1, 16, 2, 8, 8))),
    "SkyReelsV2Transformer3DModel": TinyCase(dict(_WAN, qk_norm="rms_norm_across_heads"), _wan_inputs),
    "ChronoEditTransformer3DModel": TinyCase(dict(_WAN, qk_norm="rms_norm_across_heads"), _wan_inputs),
    "AnyFlowTransformer3DModel": TinyCase(dict(_WAN), lambda g: dict(  # latent (B, F, C, H, W), per-frame timesteps
        hidden_states=_r(g, 1, 2, 16, 8, 8), timestep=torch.tensor([[500.0, 500.0]]),
        r_timestep=torch.tensor([[300.0, 300.0]]), encoder_hidden_states=_r(g, 1, 7, 32), return_dict=False)),
    "HeliosTransformer3DModel": TinyCase(
        {**{k: v for k, v in _WAN.items() if k != "rope_max_seq_len"}, "qk_norm": "rms_norm_across_heads",
         "rope_dim": (12, 10, 10), "has_multi_term_memory_patch": False}, _wan_inputs),
    "HunyuanVideoTransformer3DModel": TinyCase(dict(_HY, guidance_embeds=True, pooled_projection_dim=8),
                                               _hy_inputs),
    "HunyuanVideoFramepackTransformer3DModel": TinyCase(
        dict(_HY, patch_size=2, guidance_embeds=True, pooled_projection_dim=8, has_image_proj=True, image_proj_dim=16,
             has_clean_x_embedder=True), _framepack_inputs),
    "HunyuanVideo15Transformer3DModel": TinyCase(
        {**{k: v for k, v in _HY.items() if k != "num_single_layers"}, "text_embed_2_dim": 16, "image_embed_dim": 16,
         "task_type": "t2v"},
        lambda g: dict(hidden_states=_r(g, 1, 4, 2, 8, 8), timestep=torch.tensor([500.0]),
                       encoder_hidden_states=_r(g, 1, 6, 16), encoder_attention_mask=torch.tensor([[1, 1, 1, 1, 0, 0]]),
                       encoder_hidden_states_2=_r(g, 1, 5, 16), encoder_attention_mask_2=torch.ones(1, 5),
                       image_embeds=_r(g, 1, 3, 16), return_dict=False)),
    "MotifVideoTransformer3DModel": TinyCase(
        {k: v for k, v in _HY.items() if k != "num_refiner_layers"},
        lambda g: dict(hidden_states=_r(g, 1, 4, 2, 8, 8), timestep=torch.tensor([500.0]),
                       encoder_hidden_states=_r(g, 1, 6, 16), encoder_attention_mask=torch.tensor([[1, 1, 1, 1, 0, 0]]),
                       return_dict=False)),
    "LTXVideoTransformer3DModel": TinyCase(
        dict(in_channels=8, out_channels=8, patch_size=1, patch_size_t=1, num_attention_heads=2,
             attention_head_dim=HEAD_DIM, cross_attention_dim=64, num_layers=1, caption_channels=16),
        lambda g: dict(hidden_states=_r(g, 1, 2 * 4 * 4, 8), encoder_hidden_states=_r(g, 1, 7, 16),  # packed tokens
                       timestep=torch.tensor([500]), encoder_attention_mask=torch.tensor([[1, 1, 1, 1, 1, 0, 0]]),
                       num_frames=2, height=4, width=4, return_dict=False)),
    "ConsisIDTransformer3DModel": TinyCase(
        {k: v for k, v in _COG.items()}, _cogvideox_inputs),
    "MochiTransformer3DModel": TinyCase(
        dict(patch_size=2, num_attention_heads=2, attention_head_dim=HEAD_DIM, num_layers=1, pooled_projection_dim=16,
             in_channels=4, text_embed_dim=16, time_embed_dim=4, max_sequence_length=7),
        lambda g: dict(hidden_states=_r(g, 1, 4, 2, 8, 8), encoder_hidden_states=_r(g, 1, 7, 16),
                       timestep=torch.tensor([500]), encoder_attention_mask=torch.tensor([[1, 1, 1, 1, 1, 0, 0]]),
                       return_dict=False)),
    "AllegroTransformer3DModel": TinyCase(
        dict(patch_size=2, patch_size_t=1, num_attention_heads=2, attention_head_dim=HEAD_DIM, in_channels=4,
             out_channels=4, num_layers=1, cross_attention_dim=64, sample_height=8, sample_width=8, sample_frames=2,
             caption_channels=16),
        lambda g: dict(hidden_states=_r(g, 1, 4, 2, 8, 8), encoder_hidden_states=_r(g, 1, 7, 16),
                       timestep=torch.tensor([500]), return_dict=False)),
    "LatteTransformer3DModel": TinyCase(
        dict(num_attention_heads=2, attention_head_dim=HEAD_DIM, in_channels=4, out_channels=4, num_layers=1,
             cross_attention_dim=64, sample_size=8, patch_size=2, caption_channels=16, video_length=2,
             norm_type="ada_norm_single", num_embeds_ada_norm=1000),
        lambda g: dict(hidden_states=_r(g, 1, 4, 2, 8, 8), timestep=torch.tensor([500]),
                       encoder_hidden_states=_r(g, 1, 7, 16), enable_temporal_attentions=True, return_dict=False)),
    "EasyAnimateTransformer3DModel": TinyCase(
        dict(num_attention_heads=2, attention_head_dim=HEAD_DIM, in_channels=4, out_channels=4, patch_size=2,
             sample_width=8, sample_height=8, num_layers=1, mmdit_layers=1, time_embed_dim=4, text_embed_dim=16),
        lambda g: dict(hidden_states=_r(g, 1, 4, 2, 8, 8), timestep=torch.tensor([500]),
                       encoder_hidden_states=_r(g, 1, 7, 16), return_dict=False)),
    "CosmosTransformer3DModel": TinyCase(
        dict(in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=HEAD_DIM, num_layers=1,
             mlp_ratio=2.0, text_embed_dim=16, adaln_lora_dim=4, max_size=(4, 16, 16), patch_size=(1, 2, 2),
             rope_scale=(2.0, 1.0, 1.0), concat_padding_mask=True, extra_pos_embed_type="learnable"),
        lambda g: dict(hidden_states=_r(g, 1, 4, 2, 8, 8), timestep=torch.tensor([500]),
                       encoder_hidden_states=_r(g, 1, 7, 16), padding_mask=torch.zeros(1, 1, 8, 8),
                       return_dict=False)),
    "SanaVideoTransformer3DModel": TinyCase(
        dict(in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=HEAD_DIM, num_layers=1,
             num_cross_attention_heads=2, cross_attention_head_dim=HEAD_DIM, cross_attention_dim=64,
             caption_channels=16, sample_size=8, patch_size=(1, 2, 2), rope_max_seq_len=32),
        lambda g: dict(hidden_states=_r(g, 1, 4, 2, 8, 8), encoder_hidden_states=_r(g, 1, 7, 16),
                       timestep=torch.tensor([500]), return_dict=False)),
    "CogVideoXTransformer3DModel": TinyCase(dict(_COG), _cogvideox_inputs),
}
