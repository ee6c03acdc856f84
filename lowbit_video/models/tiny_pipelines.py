"""Tiny random-weight text-to-video pipelines of the diffusers families without a named model, written to a folder.

The same pipeline and component classes as the real checkpoints (diffusers format: `model_index.json`, one
folder per component), with a few thousand parameters, random weights and the word-level tokenizer of
tiny_checkpoints.py, so that `generate --model-path DIR` is tested on each family offline. Nothing is downloaded.

    save_tiny_pipeline("mochi", dir)     # MochiPipeline (T5)
    TINY_PIPELINES                       # name -> builder of the pipeline in memory

Sizes follow diffusers' own fast tests (tests/pipelines/<family>/test_<family>.py) except head_dim: 32 (the MXFP4
block) where the family allows it, Allegro's 96 (its RoPE splits the head in thirds of even size). The tiny
Latte's temporal position embedding holds 4 frames (its pipeline's default is 16, so the tiny folder needs
--frames 4).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch

from .tiny_checkpoints import (_inference_mode, tiny_cogvideox_pipeline, tiny_t5, tiny_wan_pipeline, tiny_wan_vae,
                              word_tokenizer)

HEAD_DIM = 32
LATTE_FRAMES = 4


def tiny_mochi_pipeline(seed: int = 0):
    from diffusers import AutoencoderKLMochi, FlowMatchEulerDiscreteScheduler, MochiPipeline, MochiTransformer3DModel

    tokenizer, encoder = tiny_t5(seed, 32)
    torch.manual_seed(seed)
    transformer = MochiTransformer3DModel(patch_size=2, num_attention_heads=2, attention_head_dim=HEAD_DIM,
                                          num_layers=2, pooled_projection_dim=16, in_channels=12, qk_norm="rms_norm",
                                          text_embed_dim=32, time_embed_dim=4, activation_fn="swiglu",
                                          max_sequence_length=16)
    vae = AutoencoderKLMochi(latent_channels=12, out_channels=3, encoder_block_out_channels=(32,) * 4,
                             decoder_block_out_channels=(32,) * 4, layers_per_block=(1,) * 5)
    return MochiPipeline(scheduler=FlowMatchEulerDiscreteScheduler(), vae=vae, text_encoder=encoder,
                         tokenizer=tokenizer, transformer=transformer)


def tiny_allegro_pipeline(seed: int = 0):
    """Its pipeline computes height, width and frames from the transformer config: 16 x 8, 16 x 8, 6 x 4. Its VAE
    decodes only tiled, in tiles of 24 frames and sample_size pixels overlapping by 8 frames, 120 and 80 pixels
    (fixed in the class): sample_size 128 and a 24 x 128 x 128 clip make one tile."""
    from diffusers import AllegroPipeline, AllegroTransformer3DModel, AutoencoderKLAllegro, DDIMScheduler

    tokenizer, encoder = tiny_t5(seed, 24)
    torch.manual_seed(seed)
    transformer = AllegroTransformer3DModel(num_attention_heads=2, attention_head_dim=96, in_channels=4,
                                            out_channels=4, num_layers=1, cross_attention_dim=192, sample_width=16,
                                            sample_height=16, sample_frames=6, caption_channels=24)
    vae = AutoencoderKLAllegro(in_channels=3, out_channels=3, down_block_types=("AllegroDownBlock3D",) * 4,
                               up_block_types=("AllegroUpBlock3D",) * 4, block_out_channels=(8,) * 4,
                               latent_channels=4, layers_per_block=1, norm_num_groups=2, temporal_compression_ratio=4,
                               sample_size=128)
    return AllegroPipeline(tokenizer=tokenizer, text_encoder=encoder, vae=vae, transformer=transformer,
                           scheduler=DDIMScheduler())


def tiny_latte_pipeline(seed: int = 0):
    from diffusers import AutoencoderKL, DDIMScheduler, LattePipeline, LatteTransformer3DModel

    tokenizer, encoder = tiny_t5(seed, 32)
    torch.manual_seed(seed)
    transformer = LatteTransformer3DModel(sample_size=8, num_layers=1, patch_size=2, attention_head_dim=HEAD_DIM,
                                          num_attention_heads=2, caption_channels=32, in_channels=4,
                                          cross_attention_dim=2 * HEAD_DIM, out_channels=8, attention_bias=True,
                                          activation_fn="gelu-approximate", num_embeds_ada_norm=1000,
                                          norm_type="ada_norm_single", norm_elementwise_affine=False, norm_eps=1e-6,
                                          video_length=LATTE_FRAMES)
    vae = AutoencoderKL(block_out_channels=(8,), norm_num_groups=2, latent_channels=4)
    return LattePipeline(tokenizer=tokenizer, text_encoder=encoder, vae=vae, transformer=transformer,
                         scheduler=DDIMScheduler())


def _skyreels(pipeline_class: str, seed: int, image: bool = False):
    """image: the image-to-video layout (Wan2.1 I2V's): the image's CLIP features in every cross-attention, its
    latents and a frame mask in the transformer's input (16 + 16 + 4 channels)."""
    import diffusers
    from diffusers import SkyReelsV2Transformer3DModel, UniPCMultistepScheduler

    tokenizer, encoder = tiny_t5(seed, 32)
    torch.manual_seed(seed)
    vae = tiny_wan_vae()
    image_layout = dict(in_channels=36, image_dim=24, added_kv_proj_dim=2 * HEAD_DIM) if image else dict(in_channels=16)
    transformer = SkyReelsV2Transformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2,
                                               attention_head_dim=HEAD_DIM, out_channels=16,
                                               text_dim=32, freq_dim=256, ffn_dim=32, num_layers=2,
                                               cross_attn_norm=True, qk_norm="rms_norm_across_heads",
                                               rope_max_seq_len=32, **image_layout)
    scheduler = UniPCMultistepScheduler(flow_shift=8.0, use_flow_sigmas=True, prediction_type="flow_prediction")
    extra = {}
    if image:
        from transformers import CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModelWithProjection

        extra = dict(image_encoder=CLIPVisionModelWithProjection(CLIPVisionConfig(
            hidden_size=24, intermediate_size=37, num_hidden_layers=2, num_attention_heads=2, image_size=32,
            patch_size=8)), image_processor=CLIPImageProcessor(crop_size=32, size={"shortest_edge": 32}))
    return getattr(diffusers, pipeline_class)(tokenizer=tokenizer, text_encoder=encoder, transformer=transformer,
                                              vae=vae, scheduler=scheduler, **extra)


def tiny_skyreels_v2_pipeline(seed: int = 0):
    return _skyreels("SkyReelsV2Pipeline", seed)


def tiny_skyreels_v2_df_pipeline(seed: int = 0):
    """Diffusion forcing: each latent frame denoised on its own copy of the scheduler."""
    return _skyreels("SkyReelsV2DiffusionForcingPipeline", seed)


def tiny_helios_pipeline(seed: int = 0):
    """Renders whole chunks of (9 - 1) x 4 + 1 = 33 frames (its pipeline's num_latent_frames_per_chunk)."""
    from diffusers import HeliosPipeline, HeliosScheduler, HeliosTransformer3DModel

    tokenizer, encoder = tiny_t5(seed, 32)
    torch.manual_seed(seed)
    vae = tiny_wan_vae()
    transformer = HeliosTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=HEAD_DIM,
                                           in_channels=16, out_channels=16, text_dim=32, freq_dim=256, ffn_dim=32,
                                           num_layers=2, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
                                           rope_dim=(8, 12, 12), has_multi_term_memory_patch=True,
                                           guidance_cross_attn=True, zero_history_timestep=True,
                                           is_amplify_history=False)
    scheduler = HeliosScheduler(stage_range=[0, 1], stages=1, use_dynamic_shifting=True)
    return HeliosPipeline(tokenizer=tokenizer, text_encoder=encoder, vae=vae, scheduler=scheduler,
                          transformer=transformer)


def tiny_sana_video_pipeline(seed: int = 0):
    """A Gemma2 text encoder; sample_size 30 is the real 480p model's (the pipeline's resolution bins key on it)."""
    from diffusers import DPMSolverMultistepScheduler, SanaVideoPipeline, SanaVideoTransformer3DModel
    from transformers import Gemma2Config, Gemma2Model

    tokenizer, vocab = word_tokenizer(bos=True)
    torch.manual_seed(seed)
    vae = tiny_wan_vae()
    encoder = Gemma2Model(Gemma2Config(head_dim=16, hidden_size=8, intermediate_size=64, max_position_embeddings=8192,
                                       num_attention_heads=2, num_hidden_layers=1, num_key_value_heads=2,
                                       vocab_size=vocab, attn_implementation="eager", pad_token_id=0, bos_token_id=3,
                                       eos_token_id=1))
    transformer = SanaVideoTransformer3DModel(in_channels=16, out_channels=16, num_attention_heads=2,
                                              attention_head_dim=HEAD_DIM, num_layers=2, num_cross_attention_heads=2,
                                              cross_attention_head_dim=HEAD_DIM, cross_attention_dim=2 * HEAD_DIM,
                                              caption_channels=8, mlp_ratio=2.5, attention_bias=False, sample_size=30,
                                              patch_size=(1, 2, 2), norm_elementwise_affine=False, norm_eps=1e-6,
                                              qk_norm="rms_norm_across_heads", rope_max_seq_len=32)
    return SanaVideoPipeline(tokenizer=tokenizer, text_encoder=encoder, vae=vae, transformer=transformer,
                             scheduler=DPMSolverMultistepScheduler())


def tiny_motif_video_pipeline(seed: int = 0):
    """A T5Gemma2 text encoder; guidance from its guider (AdaptiveProjectedGuidance)."""
    from diffusers import FlowMatchEulerDiscreteScheduler, MotifVideoPipeline, MotifVideoTransformer3DModel
    from diffusers.guiders import AdaptiveProjectedGuidance
    from transformers import T5Gemma2Encoder, T5Gemma2EncoderConfig, T5Gemma2TextConfig

    tokenizer, vocab = word_tokenizer()
    torch.manual_seed(seed)
    vae = tiny_wan_vae()
    text = T5Gemma2TextConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                              vocab_size=vocab, max_position_embeddings=128, head_dim=16, num_key_value_heads=2,
                              dropout_rate=0.0)
    encoder = T5Gemma2Encoder(T5Gemma2EncoderConfig(text_config=text))
    transformer = MotifVideoTransformer3DModel(in_channels=33, out_channels=16, num_attention_heads=2,
                                               attention_head_dim=HEAD_DIM, num_layers=1, num_single_layers=1,
                                               mlp_ratio=4.0, patch_size=1, patch_size_t=1, qk_norm="rms_norm",
                                               text_embed_dim=32, rope_axes_dim=(8, 12, 12))
    return MotifVideoPipeline(scheduler=FlowMatchEulerDiscreteScheduler(shift=7.0), vae=vae, text_encoder=encoder,
                              tokenizer=tokenizer, transformer=transformer, guider=AdaptiveProjectedGuidance(),
                              feature_extractor=None)


# a chat template for the word-level tokenizer: the message texts, as EasyAnimate's encode_prompt formats them
_CHAT_TEMPLATE = "{% for m in messages %}{% for c in m['content'] %}{{ c['text'] }} {% endfor %}{% endfor %}"


def tiny_easyanimate_pipeline(seed: int = 0):
    """A Qwen2-VL text encoder (its second-to-last hidden states are the text embedding)."""
    from diffusers import (AutoencoderKLMagvit, EasyAnimatePipeline, EasyAnimateTransformer3DModel,
                           FlowMatchEulerDiscreteScheduler)
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    tokenizer, vocab = word_tokenizer()
    tokenizer.chat_template = _CHAT_TEMPLATE
    torch.manual_seed(seed)
    transformer = EasyAnimateTransformer3DModel(num_attention_heads=2, attention_head_dim=HEAD_DIM, in_channels=4,
                                                out_channels=4, time_embed_dim=2, text_embed_dim=16, num_layers=1,
                                                sample_width=16, sample_height=16, patch_size=2)
    vae = AutoencoderKLMagvit(in_channels=3, out_channels=3,
                              down_block_types=("SpatialDownBlock3D",) + ("SpatialTemporalDownBlock3D",) * 3,
                              up_block_types=("SpatialUpBlock3D",) + ("SpatialTemporalUpBlock3D",) * 3,
                              block_out_channels=(8,) * 4, latent_channels=4, layers_per_block=1, norm_num_groups=2,
                              spatial_group_norm=False)
    config = Qwen2VLConfig(
        text_config=dict(vocab_size=vocab, hidden_size=16, intermediate_size=37, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, pad_token_id=0, bos_token_id=3, eos_token_id=1,
                         rope_scaling={"type": "mrope", "mrope_section": [1, 1, 2]}),
        vision_config=dict(depth=1, embed_dim=16, hidden_size=16, num_heads=2, in_chans=3, patch_size=2,
                           spatial_merge_size=1, temporal_patch_size=1),
        vocab_size=vocab, hidden_size=16, pad_token_id=0)
    encoder = Qwen2VLForConditionalGeneration(config)
    return EasyAnimatePipeline(vae=vae, text_encoder=encoder, tokenizer=tokenizer, transformer=transformer,
                               scheduler=FlowMatchEulerDiscreteScheduler())


def tiny_hunyuan_video15_pipeline(seed: int = 0):
    """HunyuanVideo-1.5: a Qwen2.5-VL text model and a ByT5 glyph encoder; guidance from its guider. The pipeline
    drops the first 108 tokens of the chat-formatted prompt (Qwen's system message): the word-level tokenizer's
    chat template puts 108 <unk> in front of the prompt."""
    from diffusers import (AutoencoderKLHunyuanVideo15, FlowMatchEulerDiscreteScheduler, HunyuanVideo15Pipeline,
                           HunyuanVideo15Transformer3DModel)
    from diffusers.guiders import ClassifierFreeGuidance
    from transformers import ByT5Tokenizer, Qwen2_5_VLTextConfig, Qwen2_5_VLTextModel, T5Config, T5EncoderModel

    tokenizer, vocab = word_tokenizer()
    tokenizer.chat_template = ("{{ '<unk> ' * 108 }}{% for m in messages %}{% if m['role'] == 'user' %}"
                               "{{ m['content'] }}{% endif %}{% endfor %}")
    tokenizer_2 = ByT5Tokenizer()  # byte-level: no vocabulary file
    torch.manual_seed(seed)
    transformer = HunyuanVideo15Transformer3DModel(in_channels=9, out_channels=4, num_attention_heads=2,
                                                   attention_head_dim=HEAD_DIM, num_layers=1, num_refiner_layers=1,
                                                   mlp_ratio=2.0, patch_size=1, patch_size_t=1, text_embed_dim=16,
                                                   text_embed_2_dim=32, image_embed_dim=12, rope_axes_dim=(8, 12, 12),
                                                   target_size=16, task_type="t2v")
    vae = AutoencoderKLHunyuanVideo15(in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(16, 16),
                                      layers_per_block=1, spatial_compression_ratio=4, temporal_compression_ratio=2,
                                      downsample_match_channel=False, upsample_match_channel=False)
    encoder = Qwen2_5_VLTextModel(Qwen2_5_VLTextConfig(
        hidden_size=16, intermediate_size=16, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
        vocab_size=vocab, bos_token_id=3, eos_token_id=1, rope_theta=1e6,
        rope_scaling={"mrope_section": [1, 1, 2], "rope_type": "default", "type": "default"}))
    encoder_2 = T5EncoderModel(T5Config(vocab_size=tokenizer_2.vocab_size, d_model=32, d_ff=37, d_kv=8, num_heads=2,
                                        num_layers=2, feed_forward_proj="relu", pad_token_id=0, eos_token_id=1,
                                        decoder_start_token_id=0))
    return HunyuanVideo15Pipeline(transformer=transformer, vae=vae,
                                  scheduler=FlowMatchEulerDiscreteScheduler(shift=7.0), text_encoder=encoder,
                                  text_encoder_2=encoder_2, tokenizer=tokenizer, tokenizer_2=tokenizer_2,
                                  guider=ClassifierFreeGuidance(guidance_scale=6.0))


def tiny_hunyuan_video15_i2v_pipeline(seed: int = 0):
    """HunyuanVideo-1.5's image-to-video pipeline: the text-to-video components, an i2v transformer and a SigLIP
    image encoder (its features join the text tokens; the image's latents the transformer's input)."""
    from diffusers import HunyuanVideo15ImageToVideoPipeline, HunyuanVideo15Transformer3DModel
    from transformers import SiglipImageProcessor, SiglipVisionConfig, SiglipVisionModel

    components = tiny_hunyuan_video15_pipeline(seed).components
    torch.manual_seed(seed)
    components["transformer"] = HunyuanVideo15Transformer3DModel(
        in_channels=9, out_channels=4, num_attention_heads=2, attention_head_dim=HEAD_DIM, num_layers=1,
        num_refiner_layers=1, mlp_ratio=2.0, patch_size=1, patch_size_t=1, text_embed_dim=16, text_embed_2_dim=32,
        image_embed_dim=12, rope_axes_dim=(8, 12, 12), target_size=16, task_type="i2v")
    image_encoder = SiglipVisionModel(SiglipVisionConfig(hidden_size=12, intermediate_size=16, num_hidden_layers=1,
                                                         num_attention_heads=2, image_size=32, patch_size=8))
    return HunyuanVideo15ImageToVideoPipeline(**components, image_encoder=image_encoder,
                                              feature_extractor=SiglipImageProcessor(size={"height": 32, "width": 32}))


def char_tokenizer():
    """A character-level fast tokenizer over printable ASCII (one token per character, `</s>` appended), built
    offline; returns (tokenizer, vocabulary size). For pipelines that drop a fixed number of tokens of a prompt
    template, more than the word-level tokenizer makes of it."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "</s>", "<unk>", "<s>"]
    vocab = {w: i for i, w in enumerate(specials + [chr(c) for c in range(32, 127)] + ["\n"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("[\\s\\S]"), behavior="isolated")
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", vocab["</s>"])])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>",
                                   bos_token="<s>")
    return fast, len(vocab)


def tiny_kandinsky5_pipeline(seed: int = 0):
    """Kandinsky 5 T2V: a Qwen2.5-VL text encoder (its processor's tokenizer stands in as a character-level one: the
    pipeline drops the first 128 tokens of its prompt template) and a CLIP text model; HunyuanVideo's VAE."""
    from diffusers import (AutoencoderKLHunyuanVideo, FlowMatchEulerDiscreteScheduler, Kandinsky5T2VPipeline,
                           Kandinsky5Transformer3DModel)
    from transformers import CLIPTextConfig, CLIPTextModel, Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    tokenizer, vocab = char_tokenizer()
    tokenizer_2, vocab_2 = word_tokenizer(bos=True)
    torch.manual_seed(seed)
    vae = AutoencoderKLHunyuanVideo(act_fn="silu", block_out_channels=[8] * 4,
                                    down_block_types=["HunyuanVideoDownBlock3D"] * 4,
                                    up_block_types=["HunyuanVideoUpBlock3D"] * 4, in_channels=3, latent_channels=16,
                                    layers_per_block=1, mid_block_add_attention=False, norm_num_groups=4,
                                    out_channels=3, scaling_factor=0.476986, spatial_compression_ratio=8,
                                    temporal_compression_ratio=4)
    encoder = Qwen2_5_VLForConditionalGeneration(Qwen2_5_VLConfig(
        text_config={"hidden_size": 32, "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
                     "num_key_value_heads": 2, "vocab_size": vocab, "bos_token_id": 3, "eos_token_id": 1,
                     "rope_theta": 1e6,
                     "rope_scaling": {"mrope_section": [2, 2, 4], "rope_type": "default", "type": "default"}},
        vision_config={"depth": 1, "hidden_size": 32, "intermediate_size": 32, "num_heads": 2, "out_hidden_size": 32},
        hidden_size=32, vocab_size=vocab))
    encoder_2 = CLIPTextModel(CLIPTextConfig(bos_token_id=3, eos_token_id=1, pad_token_id=0, hidden_size=16,
                                             intermediate_size=16, num_attention_heads=2, num_hidden_layers=2,
                                             vocab_size=vocab_2, projection_dim=16))
    transformer = Kandinsky5Transformer3DModel(in_visual_dim=16, in_text_dim=32, in_text_dim2=16, time_dim=16,
                                               out_visual_dim=16, patch_size=(1, 2, 2), model_dim=2 * HEAD_DIM,
                                               ff_dim=32, num_text_blocks=1, num_visual_blocks=2, axes_dims=(8, 12, 12),
                                               visual_cond=False, attention_type="regular")
    # its modulation layers start at zero (every block's gates 0: attention would not reach the output); trained
    # weights are not zero
    with torch.no_grad():
        for p in transformer.parameters():
            if not p.any():
                p.normal_(0.0, 0.1)
    return Kandinsky5T2VPipeline(vae=vae, text_encoder=encoder, tokenizer=tokenizer, text_encoder_2=encoder_2,
                                 tokenizer_2=tokenizer_2, transformer=transformer,
                                 scheduler=FlowMatchEulerDiscreteScheduler(shift=7.0))


def tiny_ltx2_pipeline(seed: int = 0):
    """LTX-2: audio and video in one transformer, a Gemma 3 text encoder (with its vision tower, unused by text
    prompts) feeding the text connectors, the audio VAE and vocoder; one latent channel group per modality."""
    from diffusers import (AutoencoderKLLTX2Audio, AutoencoderKLLTX2Video, FlowMatchEulerDiscreteScheduler,
                           LTX2Pipeline, LTX2VideoTransformer3DModel)
    from diffusers.pipelines.ltx2 import LTX2TextConnectors, LTX2Vocoder
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration

    tokenizer, vocab = word_tokenizer(bos=True)
    torch.manual_seed(seed)
    hidden, layers = 32, 2  # the connectors' 4 heads x 8 read the text model's hidden states of every layer
    encoder = Gemma3ForConditionalGeneration(Gemma3Config(
        text_config=dict(vocab_size=vocab, hidden_size=hidden, intermediate_size=32, num_hidden_layers=layers,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=8, pad_token_id=0, bos_token_id=3,
                         eos_token_id=1, sliding_window=8),
        vision_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                           image_size=32, patch_size=8),
        mm_tokens_per_image=4, boi_token_index=3, eoi_token_index=3, image_token_index=2, pad_token_id=0))
    transformer = LTX2VideoTransformer3DModel(in_channels=4, out_channels=4, patch_size=1, patch_size_t=1,
                                              num_attention_heads=2, attention_head_dim=HEAD_DIM,
                                              cross_attention_dim=2 * HEAD_DIM, audio_in_channels=4,
                                              audio_out_channels=4, audio_num_attention_heads=2,
                                              audio_attention_head_dim=4, audio_cross_attention_dim=8, num_layers=2,
                                              qk_norm="rms_norm_across_heads", caption_channels=hidden,
                                              rope_double_precision=False, rope_type="split")
    connectors = LTX2TextConnectors(caption_channels=hidden, text_proj_in_factor=layers + 1,
                                    video_connector_num_attention_heads=4, video_connector_attention_head_dim=8,
                                    video_connector_num_layers=1, video_connector_num_learnable_registers=None,
                                    audio_connector_num_attention_heads=4, audio_connector_attention_head_dim=8,
                                    audio_connector_num_layers=1, audio_connector_num_learnable_registers=None,
                                    connector_rope_base_seq_len=32, rope_theta=10000.0, rope_double_precision=False,
                                    causal_temporal_positioning=False, rope_type="split")
    vae = AutoencoderKLLTX2Video(in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(8,),
                                 decoder_block_out_channels=(8,), layers_per_block=(1,),
                                 decoder_layers_per_block=(1, 1),
                                 spatio_temporal_scaling=(True,), decoder_spatio_temporal_scaling=(True,),
                                 decoder_inject_noise=(False, False), downsample_type=("spatial",),
                                 upsample_residual=(False,), upsample_factor=(1,), timestep_conditioning=False,
                                 patch_size=1, patch_size_t=1, encoder_causal=True, decoder_causal=False)
    audio_vae = AutoencoderKLLTX2Audio(base_channels=4, output_channels=2, ch_mult=(1,), num_res_blocks=1,
                                       attn_resolutions=None, in_channels=2, resolution=32, latent_channels=2,
                                       norm_type="pixel", causality_axis="height", dropout=0.0,
                                       mid_block_add_attention=False, sample_rate=16000, mel_hop_length=160,
                                       is_causal=True, mel_bins=8)
    vocoder = LTX2Vocoder(in_channels=2 * 8, hidden_channels=32, out_channels=2, upsample_kernel_sizes=[4, 4],
                          upsample_factors=[2, 2], resnet_kernel_sizes=[3], resnet_dilations=[[1, 3, 5]],
                          leaky_relu_negative_slope=0.1, output_sampling_rate=16000)
    return LTX2Pipeline(transformer=transformer, vae=vae, audio_vae=audio_vae,
                        scheduler=FlowMatchEulerDiscreteScheduler(), text_encoder=encoder, tokenizer=tokenizer,
                        connectors=connectors, vocoder=vocoder, processor=None, prompt_enhancer=None,
                        duration_head=None)


TINY_PIPELINES: dict[str, Callable[..., object]] = {
    "mochi": tiny_mochi_pipeline, "allegro": tiny_allegro_pipeline, "latte": tiny_latte_pipeline,
    "skyreels-v2": tiny_skyreels_v2_pipeline, "skyreels-v2-df": tiny_skyreels_v2_df_pipeline,
    "helios": tiny_helios_pipeline, "sana-video": tiny_sana_video_pipeline, "motif-video": tiny_motif_video_pipeline,
    "easyanimate": tiny_easyanimate_pipeline, "hunyuanvideo-1.5": tiny_hunyuan_video15_pipeline,
    "kandinsky5": tiny_kandinsky5_pipeline, "ltx2": tiny_ltx2_pipeline,
}


def tiny_ltx_i2v_pipeline(seed: int = 0):
    """LTX-Video's image-to-video pipeline: the text-to-video one's components (the image enters as its first
    latent frame)."""
    from diffusers import LTXImageToVideoPipeline

    from .tiny_checkpoints import tiny_ltx_pipeline

    return LTXImageToVideoPipeline(**tiny_ltx_pipeline(seed=seed).components)


def tiny_wan_ti2v_i2v_pipeline(seed: int = 0):
    """Wan2.2 TI2V-5B as an image-to-video pipeline: its image is the first latent frame (expand_timesteps), no
    image encoder."""
    from diffusers import WanImageToVideoPipeline

    from .tiny_checkpoints import tiny_wan_pipeline

    c = tiny_wan_pipeline(ti2v=True, seed=seed).components
    return WanImageToVideoPipeline(tokenizer=c["tokenizer"], text_encoder=c["text_encoder"], vae=c["vae"],
                                   scheduler=c["scheduler"], transformer=c["transformer"], image_encoder=None,
                                   image_processor=None, expand_timesteps=True)


def tiny_wan21_i2v_pipeline(seed: int = 0):
    """Wan2.1 I2V-14B's layout: the image's CLIP features enter every block's cross-attention beside the text
    (added K/V projections) and its latents and a frame mask the transformer's input (16 + 16 + 4 channels)."""
    import torch
    from diffusers import WanImageToVideoPipeline, WanTransformer3DModel
    from transformers import CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModel

    from .tiny_checkpoints import WAN_HEAD_DIM, WAN_HEADS, tiny_wan_pipeline, tiny_wan_transformer_config

    c = tiny_wan_pipeline(seed=seed).components
    torch.manual_seed(seed)
    transformer = WanTransformer3DModel(**tiny_wan_transformer_config(
        in_channels=36, out_channels=16, image_dim=24, added_kv_proj_dim=WAN_HEADS * WAN_HEAD_DIM))
    image_encoder = CLIPVisionModel(CLIPVisionConfig(hidden_size=24, intermediate_size=37, num_hidden_layers=2,
                                                     num_attention_heads=2, image_size=32, patch_size=8))
    return WanImageToVideoPipeline(tokenizer=c["tokenizer"], text_encoder=c["text_encoder"], vae=c["vae"],
                                   scheduler=c["scheduler"], transformer=transformer, image_encoder=image_encoder,
                                   image_processor=CLIPImageProcessor(crop_size=32, size={"shortest_edge": 32}))


def tiny_cogvideox_i2v_pipeline(seed: int = 0):
    """CogVideoX's image-to-video pipeline: the text-to-video components but the transformer, whose input is the
    noise and the image's latents side by side (twice the latent channels), with rotary and learned positions as
    CogVideoX-5B-I2V's."""
    import torch
    from diffusers import CogVideoXImageToVideoPipeline, CogVideoXTransformer3DModel

    from .tiny_checkpoints import COGVIDEOX_SAMPLE, HEAD_DIM, tiny_cogvideox_pipeline

    c = tiny_cogvideox_pipeline(seed=seed).components
    torch.manual_seed(seed)
    transformer = CogVideoXTransformer3DModel(
        num_attention_heads=2, attention_head_dim=HEAD_DIM, in_channels=8, out_channels=4, time_embed_dim=4,
        text_embed_dim=16, num_layers=2, patch_size=2, temporal_compression_ratio=4, max_text_seq_length=226,
        use_rotary_positional_embeddings=True, use_learned_positional_embeddings=True, **COGVIDEOX_SAMPLE)
    return CogVideoXImageToVideoPipeline(tokenizer=c["tokenizer"], text_encoder=c["text_encoder"], vae=c["vae"],
                                         transformer=transformer, scheduler=c["scheduler"])


def tiny_ltx_condition_pipeline(seed: int = 0):
    """LTX-Video's condition pipeline (0.9.5 and later): text-to-video, or conditioned on an image or a video
    (placed at frame 0), on the text-to-video pipeline's components."""
    from diffusers import LTXConditionPipeline

    from .tiny_checkpoints import tiny_ltx_pipeline

    return LTXConditionPipeline(**tiny_ltx_pipeline(seed=seed).components)


# image-to-video pipelines (generate --image)
TINY_I2V_PIPELINES: dict[str, Callable[..., object]] = {
    "ltx-i2v": tiny_ltx_i2v_pipeline, "wan2.2-ti2v-i2v": tiny_wan_ti2v_i2v_pipeline,
    "ltx-condition": tiny_ltx_condition_pipeline,
    "cogvideox-i2v": tiny_cogvideox_i2v_pipeline, "wan2.1-i2v": tiny_wan21_i2v_pipeline,
    "skyreels-v2-i2v": lambda seed=0: _skyreels("SkyReelsV2ImageToVideoPipeline", seed, image=True),
    "hunyuanvideo-1.5-i2v": tiny_hunyuan_video15_i2v_pipeline,
}


def _video_to_video(pipeline_class: str, text_to_video):
    """A video-to-video pipeline on a text-to-video one's components (the video's latents, noised by the strength,
    are where denoising starts)."""
    import diffusers

    def build(seed: int = 0):
        c = text_to_video(seed=seed).components
        return getattr(diffusers, pipeline_class)(**{k: c[k] for k in ("tokenizer", "text_encoder", "vae",
                                                                      "transformer", "scheduler")})
    return build


def tiny_wan_vace_pipeline(seed: int = 0):
    """Wan VACE: a video (here the only condition: no mask, no reference images) enters through VACE blocks beside
    the transformer's own (one here, at block 0; 96 = 16 latent channels x 2 (inactive and reactive) + 64 mask
    channels)."""
    from diffusers import WanVACEPipeline, WanVACETransformer3DModel

    from .tiny_checkpoints import tiny_wan_transformer_config

    c = tiny_wan_pipeline(seed=seed).components
    torch.manual_seed(seed)
    transformer = WanVACETransformer3DModel(**tiny_wan_transformer_config(vace_layers=[0], vace_in_channels=96))
    return WanVACEPipeline(tokenizer=c["tokenizer"], text_encoder=c["text_encoder"], vae=c["vae"],
                           scheduler=c["scheduler"], transformer=transformer)


# video-to-video pipelines (generate --video)
TINY_V2V_PIPELINES: dict[str, Callable[..., object]] = {
    "cogvideox-v2v": _video_to_video("CogVideoXVideoToVideoPipeline", tiny_cogvideox_pipeline),
    "wan-v2v": _video_to_video("WanVideoToVideoPipeline", tiny_wan_pipeline), "wan-vace": tiny_wan_vace_pipeline,
}


def save_tiny_pipeline(name: str, path: str | Path, *, seed: int = 0) -> Path:
    """Write the tiny pipeline `name` (a key of TINY_PIPELINES, TINY_I2V_PIPELINES or TINY_V2V_PIPELINES) to
    `path` in diffusers format; returns it."""
    path = Path(path)
    build = TINY_PIPELINES.get(name) or TINY_I2V_PIPELINES.get(name) or TINY_V2V_PIPELINES[name]
    _inference_mode(build(seed)).save_pretrained(str(path), safe_serialization=True)
    return path


__all__ = ["LATTE_FRAMES", "TINY_I2V_PIPELINES", "TINY_PIPELINES", "TINY_V2V_PIPELINES", "save_tiny_pipeline"]
