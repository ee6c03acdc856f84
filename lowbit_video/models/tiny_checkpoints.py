"""Tiny random-weight diffusers checkpoints of the real model families, written to a folder.

They have the same classes, folder layout and `model_index.json` as the real Wan2.x and
HunyuanVideo checkpoints (diffusers format), but a few thousand parameters, random weights and a
word-level tokenizer built here, so loading, recipe injection and the whole sampling loop can be
tested offline in seconds. Nothing is downloaded.

    save_tiny_wan(dir)                      # like Wan2.1-T2V (WanPipeline, one transformer)
    save_tiny_wan(dir, two_experts=True)    # like Wan2.2-T2V-A14B (transformer + transformer_2)
    save_tiny_wan(dir, ti2v=True)           # like Wan2.2-TI2V-5B (48-channel VAE 4x16x16, expand_timesteps)
    save_tiny_hunyuan(dir)                  # like HunyuanVideo (HunyuanVideoPipeline)
    save_tiny_cogvideox(dir)                # like CogVideoX-2b (CogVideoXPipeline, T5 text encoder)
    save_tiny_ltx(dir)                      # like LTX-Video (LTXPipeline, packed tokens, T5 text encoder)

Sizes follow diffusers' own fast tests (tests/pipelines/wan/test_wan.py,
tests/pipelines/hunyuan_video/test_hunyuan_video.py, tests/pipelines/cogvideo/test_cogvideox.py,
tests/pipelines/ltx/test_ltx.py) except head_dim, which is 32 here (the MXFP4
block) so that quantized recipes run on them.
"""

from __future__ import annotations

from pathlib import Path

import torch

# Wan: latent 16 channels (the tiny VAE's z_dim), VAE 4x8x8, patch (1, 2, 2).
WAN_HEAD_DIM = 32
WAN_HEADS = 2
WAN_LAYERS = 2
# HunyuanVideo: rope_axes_dim must sum to head_dim.
HUNYUAN_HEAD_DIM = 32
HUNYUAN_ROPE_AXES = (8, 12, 12)
# The other families: head_dim 32 (the MXFP4 block).
HEAD_DIM = 32

_WORDS = (
    "a an the red green blue yellow white black purple orange circle square triangle star cat dog bird "
    "moving left right up down static growing shrinking on in of with and background video scene small big"
).split()


def word_tokenizer(extra_special: tuple[str, ...] = (), bos: bool = False):
    """A word-level fast tokenizer (whitespace split, unknown words -> <unk>, `</s>` appended), built
    offline; returns (tokenizer, vocabulary size)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "</s>", "<unk>", "<s>", *extra_special]
    vocab = {w: i for i, w in enumerate(specials + [w for w in _WORDS if w not in specials])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    if bos:
        tok.post_processor = processors.TemplateProcessing(
            single="<s> $A </s>", special_tokens=[("<s>", vocab["<s>"]), ("</s>", vocab["</s>"])])
    else:
        tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", vocab["</s>"])])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>",
                                   bos_token="<s>")
    return fast, len(vocab)


def tiny_wan_transformer_config(**overrides) -> dict:
    cfg = dict(
        patch_size=(1, 2, 2), num_attention_heads=WAN_HEADS, attention_head_dim=WAN_HEAD_DIM, in_channels=16,
        out_channels=16, text_dim=32, freq_dim=32, ffn_dim=32, num_layers=WAN_LAYERS, cross_attn_norm=True,
        qk_norm="rms_norm_across_heads", rope_max_seq_len=32,
    )
    cfg.update(overrides)
    return cfg


def tiny_wan_vae():
    """Wan's VAE (4x8x8, 16 latent channels), tiny; also the VAE of SkyReels-V2, Helios, Sana-Video, Motif-Video."""
    from diffusers import AutoencoderKLWan

    return AutoencoderKLWan(base_dim=3, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                            temperal_downsample=[False, True, True])


def tiny_wan_pipeline(*, two_experts: bool = False, ti2v: bool = False, seed: int = 0):
    """A WanPipeline with tiny random components (in memory)."""
    from diffusers import AutoencoderKLWan, UniPCMultistepScheduler, WanPipeline, WanTransformer3DModel
    from transformers import UMT5Config, UMT5EncoderModel

    if two_experts and ti2v:
        raise ValueError("Wan2.2 TI2V-5B has one transformer")
    torch.manual_seed(seed)
    channels = 48 if ti2v else 16
    tcfg = tiny_wan_transformer_config(in_channels=channels, out_channels=channels)
    transformer = WanTransformer3DModel(**tcfg)
    transformer_2 = WanTransformer3DModel(**tcfg) if two_experts else None
    if ti2v:  # Wan2.2's VAE: residual, patchified (12 = 3 x 2 x 2 channels in), 16x spatial compression
        vae = AutoencoderKLWan(base_dim=8, z_dim=48, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                               temperal_downsample=[False, True, True], is_residual=True, in_channels=12,
                               out_channels=12, patch_size=2, scale_factor_spatial=16,
                               latents_mean=[0.0] * 48, latents_std=[1.0] * 48)
    else:
        vae = tiny_wan_vae()
    tokenizer, vocab_size = word_tokenizer()
    text_encoder = UMT5EncoderModel(UMT5Config(vocab_size=vocab_size, d_model=32, d_ff=37, d_kv=8, num_heads=4,
                                               num_layers=2, feed_forward_proj="relu", pad_token_id=0,
                                               eos_token_id=1, decoder_start_token_id=0))
    scheduler = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True,
                                        num_train_timesteps=1000, flow_shift=5.0 if ti2v else 3.0)
    kwargs = dict(tokenizer=tokenizer, text_encoder=text_encoder, vae=vae, scheduler=scheduler, transformer=transformer)
    if two_experts:
        kwargs.update(transformer_2=transformer_2, boundary_ratio=0.875)
    if ti2v:
        kwargs.update(expand_timesteps=True)
    return _inference_mode(WanPipeline(**kwargs))


def _inference_mode(pipe):
    """Modules built in memory start in training mode (the umT5 encoder's dropout would make every
    call random); from_pretrained returns them in eval mode, and so does this."""
    for component in pipe.components.values():
        if isinstance(component, torch.nn.Module):
            component.eval()
    return pipe


def save_tiny_wan(path: str | Path, *, two_experts: bool = False, ti2v: bool = False, seed: int = 0) -> Path:
    """Write a tiny WanPipeline checkpoint folder (diffusers format) to `path`; returns it."""
    path = Path(path)
    tiny_wan_pipeline(two_experts=two_experts, ti2v=ti2v, seed=seed).save_pretrained(str(path),
                                                                                      safe_serialization=True)
    return path


def tiny_hunyuan_transformer_config(**overrides) -> dict:
    cfg = dict(
        in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=HUNYUAN_HEAD_DIM, num_layers=1,
        num_single_layers=1, num_refiner_layers=1, patch_size=1, patch_size_t=1, guidance_embeds=True,
        text_embed_dim=16, pooled_projection_dim=8, rope_axes_dim=HUNYUAN_ROPE_AXES,
    )
    cfg.update(overrides)
    return cfg


def tiny_hunyuan_pipeline(*, seed: int = 0):
    """A HunyuanVideoPipeline with tiny random components (in memory)."""
    from diffusers import (AutoencoderKLHunyuanVideo, FlowMatchEulerDiscreteScheduler, HunyuanVideoPipeline,
                           HunyuanVideoTransformer3DModel)
    from transformers import CLIPTextConfig, CLIPTextModel, LlamaConfig, LlamaModel

    torch.manual_seed(seed)
    transformer = HunyuanVideoTransformer3DModel(**tiny_hunyuan_transformer_config())
    vae = AutoencoderKLHunyuanVideo(
        in_channels=3, out_channels=3, latent_channels=4,
        down_block_types=("HunyuanVideoDownBlock3D",) * 4, up_block_types=("HunyuanVideoUpBlock3D",) * 4,
        block_out_channels=(8, 8, 8, 8), layers_per_block=1, act_fn="silu", norm_num_groups=4,
        scaling_factor=0.476986, spatial_compression_ratio=8, temporal_compression_ratio=4,
        mid_block_add_attention=True,
    )
    scheduler = FlowMatchEulerDiscreteScheduler(shift=7.0)
    tokenizer, vocab = word_tokenizer(bos=True)
    text_encoder = LlamaModel(LlamaConfig(bos_token_id=3, eos_token_id=1, pad_token_id=0, hidden_size=16,
                                          intermediate_size=37, num_attention_heads=4, num_key_value_heads=4,
                                          num_hidden_layers=3, vocab_size=vocab, hidden_act="gelu"))
    tokenizer_2, vocab_2 = word_tokenizer(bos=True)
    text_encoder_2 = CLIPTextModel(CLIPTextConfig(bos_token_id=3, eos_token_id=1, pad_token_id=0, hidden_size=8,
                                                  intermediate_size=37, num_attention_heads=4, num_hidden_layers=2,
                                                  vocab_size=vocab_2, hidden_act="gelu", projection_dim=8,
                                                  max_position_embeddings=77))
    return _inference_mode(HunyuanVideoPipeline(text_encoder=text_encoder, tokenizer=tokenizer, transformer=transformer,
                                                vae=vae, scheduler=scheduler, text_encoder_2=text_encoder_2,
                                                tokenizer_2=tokenizer_2))


def save_tiny_hunyuan(path: str | Path, *, seed: int = 0) -> Path:
    """Write a tiny HunyuanVideoPipeline checkpoint folder (diffusers format) to `path`; returns it."""
    path = Path(path)
    tiny_hunyuan_pipeline(seed=seed).save_pretrained(str(path), safe_serialization=True)
    return path


def tiny_t5(seed: int, d_model: int = 16):
    """A word-level tokenizer and a 2-layer T5 encoder over its vocabulary."""
    from transformers import T5Config, T5EncoderModel

    tokenizer, vocab = word_tokenizer()
    torch.manual_seed(seed)
    encoder = T5EncoderModel(T5Config(vocab_size=vocab, d_model=d_model, d_ff=37, d_kv=8, num_heads=2, num_layers=2,
                                      feed_forward_proj="relu", pad_token_id=0, eos_token_id=1,
                                      decoder_start_token_id=0))
    return tokenizer, encoder


# CogVideoXPipeline leaves height, width and frames to the transformer config (sample_height x the VAE's 8,
# sample_frames): 32 x 32 pixels, 9 frames here. Its prompts are padded to 226 tokens (the pipeline's default
# max_sequence_length), which the text positional embedding must cover.
COGVIDEOX_SAMPLE = dict(sample_height=4, sample_width=4, sample_frames=9)


def tiny_cogvideox_pipeline(*, seed: int = 0):
    """A CogVideoXPipeline with tiny random components (in memory)."""
    from diffusers import AutoencoderKLCogVideoX, CogVideoXDDIMScheduler, CogVideoXPipeline, CogVideoXTransformer3DModel

    tokenizer, text_encoder = tiny_t5(seed)
    torch.manual_seed(seed)
    transformer = CogVideoXTransformer3DModel(
        num_attention_heads=2, attention_head_dim=HEAD_DIM, in_channels=4, out_channels=4, time_embed_dim=4,
        text_embed_dim=16, num_layers=2, patch_size=2, temporal_compression_ratio=4, max_text_seq_length=226,
        **COGVIDEOX_SAMPLE)
    vae = AutoencoderKLCogVideoX(in_channels=3, out_channels=3, down_block_types=("CogVideoXDownBlock3D",) * 4,
                                 up_block_types=("CogVideoXUpBlock3D",) * 4, block_out_channels=(8, 8, 8, 8),
                                 latent_channels=4, layers_per_block=1, norm_num_groups=2,
                                 temporal_compression_ratio=4)
    return _inference_mode(CogVideoXPipeline(tokenizer=tokenizer, text_encoder=text_encoder, vae=vae,
                                             transformer=transformer, scheduler=CogVideoXDDIMScheduler()))


def tiny_ltx_pipeline(*, seed: int = 0):
    """An LTXPipeline with tiny random components (in memory): VAE 4x4x4 (two scaling stages), patch 1."""
    from diffusers import AutoencoderKLLTXVideo, FlowMatchEulerDiscreteScheduler, LTXPipeline, LTXVideoTransformer3DModel

    tokenizer, text_encoder = tiny_t5(seed)
    torch.manual_seed(seed)
    transformer = LTXVideoTransformer3DModel(in_channels=8, out_channels=8, patch_size=1, patch_size_t=1,
                                             num_attention_heads=2, attention_head_dim=HEAD_DIM,
                                             cross_attention_dim=2 * HEAD_DIM, num_layers=2, caption_channels=16)
    vae = AutoencoderKLLTXVideo(in_channels=3, out_channels=3, latent_channels=8, block_out_channels=(8, 8, 8, 8),
                                decoder_block_out_channels=(8, 8, 8, 8), layers_per_block=(1, 1, 1, 1, 1),
                                decoder_layers_per_block=(1, 1, 1, 1, 1),
                                spatio_temporal_scaling=(True, True, False, False),
                                decoder_spatio_temporal_scaling=(True, True, False, False),
                                decoder_inject_noise=(False,) * 5, upsample_residual=(False,) * 4,
                                upsample_factor=(1,) * 4, timestep_conditioning=False, patch_size=1, patch_size_t=1,
                                encoder_causal=True, decoder_causal=False)
    return _inference_mode(LTXPipeline(tokenizer=tokenizer, text_encoder=text_encoder, vae=vae,
                                       transformer=transformer, scheduler=FlowMatchEulerDiscreteScheduler()))


def save_tiny_cogvideox(path: str | Path, *, seed: int = 0) -> Path:
    """Write a tiny CogVideoXPipeline checkpoint folder (diffusers format) to `path`; returns it."""
    path = Path(path)
    tiny_cogvideox_pipeline(seed=seed).save_pretrained(str(path), safe_serialization=True)
    return path


def save_tiny_ltx(path: str | Path, *, seed: int = 0) -> Path:
    """Write a tiny LTXPipeline checkpoint folder (diffusers format) to `path`; returns it."""
    path = Path(path)
    tiny_ltx_pipeline(seed=seed).save_pretrained(str(path), safe_serialization=True)
    return path


__all__ = ["save_tiny_cogvideox", "save_tiny_hunyuan", "save_tiny_ltx", "save_tiny_wan", "tiny_cogvideox_pipeline",
           "tiny_hunyuan_pipeline", "tiny_hunyuan_transformer_config", "tiny_ltx_pipeline", "tiny_t5", "tiny_wan_vae",
           "tiny_wan_pipeline", "tiny_wan_transformer_config",
           "word_tokenizer"]
