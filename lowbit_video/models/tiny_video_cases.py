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
    inputs: Callable[[torch.Generator], Any]  # the forward's kwargs, or a function of the model giving them


def build(name: str, seed: int = 0) -> tuple[torch.nn.Module, dict[str, Any]]:
    """A tiny instance of `name` (random weights from `seed`, eval mode) and inputs for its forward."""
    import diffusers

    case = CASES[name]
    torch.manual_seed(seed)
    model = getattr(diffusers, name)(**case.config).eval()
    with torch.no_grad():  # zero-initialised layers (output heads, gates) made live, so attention shows at the output
        for p in model.parameters():
            if p.numel() and p.is_floating_point() and not p.any():
                p.normal_(std=0.05)
    inputs = case.inputs(torch.Generator().manual_seed(seed + 1))
    return model, inputs(model) if callable(inputs) else inputs  # a case whose inputs come from the model


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
    "WanAnimateTransformer3DModel": TinyCase(
        dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=HEAD_DIM, in_channels=12,
             latent_channels=4, out_channels=4, text_dim=16, freq_dim=32, ffn_dim=32, num_layers=2,
             cross_attn_norm=True, qk_norm="rms_norm_across_heads", image_dim=16, rope_max_seq_len=32,
             motion_encoder_channel_sizes={"4": 16, "8": 16, "16": 16}, motion_encoder_size=16, motion_style_dim=8,
             motion_dim=4, motion_encoder_dim=16, face_encoder_hidden_dim=16, face_encoder_num_heads=2,
             inject_face_latents_blocks=2),
        lambda g: dict(hidden_states=_r(g, 1, 12, 5, 8, 8), timestep=torch.tensor([500]),
                       encoder_hidden_states=_r(g, 1, 7, 16), encoder_hidden_states_image=_r(g, 1, 5, 16),
                       pose_hidden_states=_r(g, 1, 4, 4, 8, 8), face_pixel_values=_r(g, 1, 3, 13, 16, 16),
                       return_dict=False)),
    "AnyFlowFARTransformer3DModel": TinyCase(
        dict(_WAN, in_channels=4, out_channels=4, compressed_patch_size=(1, 4, 4), full_chunk_limit=3),
        lambda g: dict(hidden_states=_r(g, 1, 4, 4, 8, 8), timestep=torch.full((1, 4), 500.0),
                       r_timestep=torch.full((1, 4), 250.0), encoder_hidden_states=_r(g, 1, 7, 32),
                       chunk_partition=[2, 2], return_dict=False)),
    "JoyImageEditTransformer3DModel": TinyCase(
        dict(patch_size=[1, 2, 2], in_channels=16, hidden_size=2 * HEAD_DIM, num_attention_heads=2, text_dim=16,
             num_layers=2, rope_dim_list=[8, 12, 12], theta=256),
        lambda g: dict(hidden_states=_r(g, 1, 16, 1, 8, 8), encoder_hidden_states=_r(g, 1, 7, 16),
                       timestep=torch.tensor([1.0]), return_dict=False)),
    "Kandinsky6Transformer3DModel": TinyCase(
        dict(in_visual_dim=4, out_visual_dim=4, in_text_dim=8, in_text_dim2=8, time_dim=16, patch_size=(1, 2, 2),
             model_dim=2 * HEAD_DIM, ff_dim=64, num_text_blocks=1, num_visual_blocks=2, axes_dims=(8, 12, 12),
             visual_cond=True, in_audio_dim=4, out_audio_dim=4),
        lambda g: dict(hidden_states=_r(g, 1, 2, 8, 8, 9), encoder_hidden_states=_r(g, 1, 6, 8),  # (B, F, H, W, C)
                       pooled_projections=_r(g, 1, 8), timestep=torch.tensor([500.0]), return_dict=False)),
    "LTX2VideoTransformer3DModel": TinyCase(
        dict(in_channels=4, out_channels=4, patch_size=1, patch_size_t=1, num_attention_heads=2,
             attention_head_dim=HEAD_DIM, cross_attention_dim=64, audio_in_channels=4, audio_out_channels=4,
             audio_num_attention_heads=2, audio_attention_head_dim=HEAD_DIM, audio_cross_attention_dim=64, num_layers=1,
             qk_norm="rms_norm_across_heads", caption_channels=16, rope_double_precision=False),
        lambda g: dict(hidden_states=_r(g, 1, 2 * 4 * 4, 4), audio_hidden_states=_r(g, 1, 9, 4),  # packed tokens
                       encoder_hidden_states=_r(g, 1, 7, 16), audio_encoder_hidden_states=_r(g, 1, 7, 16),
                       timestep=torch.tensor([500.0]), encoder_attention_mask=torch.ones(1, 7).bool(),
                       num_frames=2, height=4, width=4, audio_num_frames=9, fps=25.0, return_dict=False)),
    "MiniMaxH3Transformer3DModel": TinyCase(
        dict(num_attention_heads=2, attention_head_dim=HEAD_DIM, hidden_size=24, num_layers=2, num_refiner_layers=1,
             ffn_dim=32, in_channels=4, audio_in_channels=6, patch_size=(1, 2, 2), text_dim=8, freq_dim=8,
             time_embed_hidden_dim=24, time_embed_dim=16, rope_freq_dim=2),
        lambda g: _minimax_inputs(g)),
    "WanAnimate2Transformer3DModel": TinyCase(
        dict(patch_size=(1, 2, 2), text_len=16, in_dim=36, dim=4 * HEAD_DIM, ffn_dim=64, freq_dim=64, text_dim=32,
             out_dim=16, num_heads=4, num_layers=2, cross_attn_norm=True, use_img_emb=True),
        lambda g: _wan_animate2_inputs(g)),
    "SanaWMTransformer3DModel": TinyCase(
        dict(in_channels=4, num_layers=2, hidden_size=2 * HEAD_DIM, num_attention_heads=2, patch_size=(1, 1, 1),
             softmax_every_n=2, linear_head_dim=16, t_kernel_size=3, conv_kernel_size=4, caption_channels=8,
             mlp_ratio=2.0, chunk_plucker_channels=8, chunk_plucker_post_attn_blocks=2),
        lambda g: _sana_wm_inputs(g)),
    "SanaWMLTX2RefinerTransformer3DModel": TinyCase(
        dict(in_channels=4, out_channels=4, patch_size=1, patch_size_t=1, num_attention_heads=2,
             attention_head_dim=HEAD_DIM, cross_attention_dim=64, audio_in_channels=4, audio_out_channels=4,
             audio_num_attention_heads=2, audio_attention_head_dim=4, audio_cross_attention_dim=8, num_layers=2,
             qk_norm="rms_norm_across_heads", caption_channels=16, rope_double_precision=False),
        lambda g: _refiner_inputs(g)),
    "JoyImageEditPlusTransformer3DModel": TinyCase(
        dict(patch_size=[1, 2, 2], in_channels=16, hidden_size=2 * HEAD_DIM, num_attention_heads=2, text_dim=16,
             num_layers=2, rope_dim_list=[8, 12, 12], theta=256),
        # one patch per row (C, 1, 2, 2); two images of 3 x 3 patches
        lambda g: dict(hidden_states=_r(g, 1, 18, 16, 1, 2, 2), encoder_hidden_states=_r(g, 1, 7, 16),
                       timestep=torch.tensor([1.0]), shape_list=[[(1, 3, 3), (1, 3, 3)]], return_dict=False)),
    "Kandinsky5Transformer3DModel": TinyCase(
        dict(in_visual_dim=4, in_text_dim=8, in_text_dim2=8, time_dim=16, out_visual_dim=4, patch_size=(1, 2, 2),
             model_dim=2 * HEAD_DIM, ff_dim=64, num_text_blocks=1, num_visual_blocks=2, axes_dims=(8, 12, 12)),
        lambda g: dict(hidden_states=_r(g, 1, 2, 8, 8, 4), encoder_hidden_states=_r(g, 1, 6, 8),  # (B, F, H, W, C)
                       timestep=torch.tensor([500.0]), pooled_projections=_r(g, 1, 8),
                       visual_rope_pos=[torch.arange(2), torch.arange(4), torch.arange(4)],
                       text_rope_pos=torch.arange(6), return_dict=False)),
    "Kandinsky6SRTransformer3DModel": TinyCase(
        dict(in_visual_dim=4, out_visual_dim=8, time_dim=16, patch_size=(1, 2, 2), model_dim=2 * HEAD_DIM, ff_dim=32,
             num_visual_blocks=2, axes_dims=(8, 12, 12)),
        lambda g: dict(hidden_states=_r(g, 1, 2, 16, 16, 9), timestep=torch.tensor([500.0]), return_dict=False)),
}


def _refiner_inputs(g, frames=2, h=4, w=4, n_text=8):
    hs, text = _r(g, 1, frames * h * w, 4), _r(g, 1, n_text, 16)

    def with_model(model):  # the refiner takes its video RoPE from the caller
        rope = model.build_rotary_emb_for_absolute_positions(batch_size=1, frame_positions=list(range(frames)),
                                                             height=h, width=w, device=hs.device, fps=24.0)
        return dict(hidden_states=hs, encoder_hidden_states=text, timestep=torch.full((1, hs.shape[1]), 500.0),
                    video_rotary_emb=rope, encoder_attention_mask=torch.ones(1, n_text), return_dict=False)

    return with_model


def _wan_animate2_inputs(g, frames=2, h=4, w=4):
    """The reference pass (`kv_cache_mode="extract"`): dense self-attention over one segment's latents, each sample
    a list entry (C, F, H, W)."""
    from diffusers.models.transformers.transformer_wan_animate_2 import WanAnimate2KVCache

    return dict(hidden_states=[_r(g, 16, frames, h, w)], timestep=torch.tensor([1.0]),
                encoder_hidden_states=[_r(g, 8, 32)], condition_latents=[_r(g, 20, frames, h, w)],
                encoder_hidden_states_image=_r(g, 1, 4, 1280), kv_cache=WanAnimate2KVCache(2),
                kv_cache_mode="extract", seq_len=frames * (h // 2) * (w // 2),
                offset_grid_sizes=torch.tensor([[frames, h // 2, w // 2]]), return_dict=False)


def _sana_wm_inputs(g, frames=4, h=8, w=8, n_text=16):
    c2w = torch.eye(4).repeat(1, frames, 1, 1)
    c2w[..., 2, 3] = torch.arange(frames, dtype=torch.float32) * 0.1
    intrinsics = torch.tensor([float(w), float(h), w / 2, h / 2]).expand(1, frames, 4)
    return dict(hidden_states=_r(g, 1, 4, frames, h, w), timestep=torch.full((1, 1, frames), 500.0),
                encoder_hidden_states=_r(g, 1, 1, n_text, 8), encoder_attention_mask=torch.ones(1, n_text).long(),
                camera_conditions=torch.cat([c2w.flatten(start_dim=-2), intrinsics], dim=-1),
                chunk_plucker=_r(g, 1, 8, frames, h, w), return_dict=False)


def _minimax_inputs(g, n_text=4, n_audio=6, n_video=8):
    """MiniMax-H3 takes one packed sequence: text rows, then audio rows, then video rows, tagged by the caller."""
    n = n_text + n_audio + n_video
    text, audio, video = torch.arange(n_text), torch.arange(n_text, n_text + n_audio), torch.arange(n_text + n_audio, n)
    tags = torch.empty(n, dtype=torch.long)
    tags[text], tags[audio], tags[video] = 1, 2, 0
    t_idx = torch.zeros(n, dtype=torch.long)
    t_idx[audio] = 1
    pos = torch.zeros(n, 3)
    pos[:, 0] = torch.arange(n, dtype=torch.float32)
    pos[video, 1] = torch.arange(n_video, dtype=torch.float32) % 4
    pos[video, 2] = torch.arange(n_video, dtype=torch.float32) % 2
    return dict(hidden_states=_r(g, 1, n_video, 16), audio_hidden_states=_r(g, 1, n_audio, 6),
                encoder_hidden_states=_r(g, 1, n_text, 8), timestep=torch.tensor([0.7, 0.3]), timestep_indices=t_idx,
                token_tags=tags, position_ids=pos, video_indices=video, audio_indices=audio, text_indices=text,
                return_dict=False)
