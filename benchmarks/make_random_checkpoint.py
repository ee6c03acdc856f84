"""Write a full-size, random-weight Wan checkpoint folder in diffusers format.

No weights can be downloaded on the machines this project is measured on, but the architectures can
be built at their published sizes with random weights: that is enough for speed, memory, dispatch
and every mechanical failure of the real-checkpoint path (text encoder, CFG, scheduler, recipe
processors on every block, VAE decode, mp4). The folder is read by the same loader the CLI uses:

    python benchmarks/make_random_checkpoint.py --model wan2.1-t2v-1.3b --out /data/wan13-random
    lowbit-video generate --model wan2.1-t2v-1.3b --model-path /data/wan13-random --device cuda \\
        --recipe fp16 --recipe sage2-int8 --prompt "a cat surfing a wave at sunset" --steps 4

Components and their published configurations (the Wan-AI *-Diffusers repositories):
* transformer: WanTransformer3DModel, 1.3B (30 blocks, 12 heads x 128, FFN 8960) or 14B (40 blocks,
  40 heads x 128, FFN 13824); text_dim 4096, freq_dim 256, patch (1, 2, 2), 16 latent channels;
* vae: AutoencoderKLWan with diffusers' defaults, which are Wan2.1's VAE (4x8x8, z_dim 16);
* text_encoder: UMT5EncoderModel of umt5-xxl (24 layers, d_model 4096, 64 heads, FFN 10240, gated
  GELU, vocabulary 256384), about 5.7B parameters;
* tokenizer: a word-level tokenizer built here (no download), ids inside umt5's vocabulary;
* scheduler: UniPCMultistepScheduler, flow prediction, flow_shift 3.0 (Wan's 480p default).

Weights are drawn on `--device` (a GPU initialises the 5.7B-parameter text encoder in seconds) and
saved as safetensors in `--dtype`. The folder is written to `<out>.partial` and renamed at the end,
so an interrupted run leaves no folder that looks complete. Sizes on disk in bfloat16: 1.3B about
15 GB (11 GB of it the text encoder), 14B about 40 GB.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

import torch

TRANSFORMERS = {
    "wan2.1-t2v-1.3b": dict(num_attention_heads=12, ffn_dim=8960, num_layers=30),
    "wan2.1-t2v-14b": dict(num_attention_heads=40, ffn_dim=13824, num_layers=40),
}
WAN_TRANSFORMER = dict(patch_size=(1, 2, 2), attention_head_dim=128, in_channels=16, out_channels=16, text_dim=4096,
                       freq_dim=256, cross_attn_norm=True, qk_norm="rms_norm_across_heads", eps=1e-6,
                       image_dim=None, added_kv_proj_dim=None, rope_max_seq_len=1024)
UMT5_XXL = dict(vocab_size=256384, d_model=4096, d_kv=64, d_ff=10240, num_layers=24, num_decoder_layers=24,
                num_heads=64, relative_attention_num_buckets=32, relative_attention_max_distance=128,
                feed_forward_proj="gated-gelu", dense_act_fn="gelu_new", is_gated_act=True, layer_norm_epsilon=1e-6,
                tie_word_embeddings=False, scalable_attention=True, pad_token_id=0, eos_token_id=1,
                decoder_start_token_id=0)
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def build_pipeline(model: str, *, device: str, dtype: torch.dtype, seed: int = 0, num_layers: int | None = None):
    """The WanPipeline of `model` with random weights, built on `device` in `dtype`.
    `num_layers` overrides the transformer's depth (tests use 1-2 blocks of the full width)."""
    from diffusers import AutoencoderKLWan, UniPCMultistepScheduler, WanPipeline, WanTransformer3DModel
    from transformers import UMT5Config, UMT5EncoderModel

    from lowbit_video.models.tiny_checkpoints import word_tokenizer

    cfg = {**WAN_TRANSFORMER, **TRANSFORMERS[model]}
    if num_layers is not None:
        cfg["num_layers"] = int(num_layers)
    torch.manual_seed(seed)
    with torch.device(device):
        transformer = WanTransformer3DModel(**cfg).to(dtype)
        vae = AutoencoderKLWan().to(torch.float32)  # Wan runs its VAE in float32
        text_encoder = UMT5EncoderModel(UMT5Config(**UMT5_XXL)).to(dtype)
    tokenizer, _ = word_tokenizer()
    scheduler = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True,
                                        num_train_timesteps=1000, flow_shift=3.0)
    return WanPipeline(tokenizer=tokenizer, text_encoder=text_encoder, vae=vae, scheduler=scheduler,
                       transformer=transformer)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("--model", choices=sorted(TRANSFORMERS), default="wan2.1-t2v-1.3b")
    ap.add_argument("--out", required=True, help="folder to write (must not exist)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                    help="where weights are drawn (default: cuda when available)")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bf16", help="dtype of the saved transformer and "
                    "text encoder (the VAE is saved in float32)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--num-layers", type=int, default=None, help="transformer blocks (default: the published depth)")
    a = ap.parse_args(argv)
    out = Path(a.out)
    if out.exists():
        print(f"error: {out} exists; choose a new folder", file=sys.stderr)
        return 2
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    t0 = time.perf_counter()
    pipe = build_pipeline(a.model, device=a.device, dtype=DTYPES[a.dtype], seed=a.seed, num_layers=a.num_layers)
    t1 = time.perf_counter()
    pipe.save_pretrained(str(partial), safe_serialization=True)
    partial.rename(out)
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    params = {name: sum(p.numel() for p in getattr(pipe, name).parameters())
              for name in ("transformer", "text_encoder", "vae")}
    print(f"{a.model}: wrote {out} ({size / 2**30:.1f} GiB; parameters "
          + ", ".join(f"{k} {v / 1e9:.2f}B" for k, v in params.items())
          + f"; built in {t1 - t0:.0f} s, saved in {time.perf_counter() - t1:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
