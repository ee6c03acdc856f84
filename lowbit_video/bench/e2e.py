"""`lowbit-video bench e2e`: one DiT forward of a Wan2.1-14B- or 1.3B-shaped transformer with random weights,
per recipe, against the same forward with every attention call on torch SDPA cuDNN (bf16), same run.

The model is diffusers' `WanTransformer3DModel` with the Wan2.1-T2V-14B configuration (40 blocks,
40 heads x 128, ffn 13824, 16 latent channels in/out, text_dim 4096, patch 1x2x2) or the Wan2.1-T2V-1.3B one
(30 blocks, 12 heads x 128, ffn 8960), random initialization, bf16, on the GPU. `blocks` below the model's
builds and times that many blocks (all blocks are identical in shape, so block time scales linearly; embeddings
and the output head are included once either way). Recipes run through the model adapters' attention hooks (`models.injection.use_recipe`,
the recipe's precision policy at a mid-schedule step); dense attention inside a recipe forward
(e.g. cross-attention, which the recipes leave at 16 bit) and the baseline both run under
`sdpa_kernel(CUDNN_ATTENTION)`. Timing: CUDA events around each forward, warm-up forwards first
(Triton compilation), median of `reps`.

Token counts (81 frames -> 21 latent frames): 480p (832x480, latent 104x60) 21x30x52 = 32760;
720p (1280x720, latent 160x90) 21x45x80 = 75600. Text: 512 tokens.
"""

from __future__ import annotations

import statistics

import torch

RESOLUTIONS = {"480p": (21, 60, 104), "720p": (21, 90, 160)}  # latent (frames, height, width)
WAN_14B = dict(patch_size=(1, 2, 2), num_attention_heads=40, attention_head_dim=128, in_channels=16,
               out_channels=16, text_dim=4096, freq_dim=256, ffn_dim=13824, num_layers=40, cross_attn_norm=True,
               qk_norm="rms_norm_across_heads", eps=1e-6)
# Wan2.1-T2V-1.3B's published transformer config: 30 blocks, 12 heads x 128, ffn 8960
WAN_1_3B = dict(WAN_14B, num_attention_heads=12, ffn_dim=8960, num_layers=30)
MODELS = {"wan2.1-t2v-14b": WAN_14B, "wan2.1-t2v-1.3b": WAN_1_3B}
BASELINE = "sdpa-cudnn"


def build_wan(blocks: int | None = None, *, config: dict = WAN_14B, seed: int = 0, device: str = "cuda",
              dtype=torch.bfloat16):
    """A random-init WanTransformer3DModel of `config` (default Wan2.1-14B) with `blocks` blocks
    (default: the config's), as diffusers loads it in `dtype`."""
    from diffusers import WanTransformer3DModel

    torch.manual_seed(seed)
    with torch.device(device):
        model = WanTransformer3DModel(**dict(config, num_layers=config["num_layers"] if blocks is None else blocks))
    model = model.to(dtype=dtype).eval()
    # as from_pretrained(torch_dtype=bf16) leaves them: the modules diffusers keeps in float32
    keep = set(getattr(model, "_keep_in_fp32_modules", None) or ())
    for name, p in list(model.named_parameters()) + list(model.named_buffers()):
        if keep & set(name.split(".")) and p.is_floating_point():
            p.data = p.data.float()
    return model


def _inputs(resolution: str, *, seed: int, device: str, dtype) -> dict:
    f, h, w = RESOLUTIONS[resolution]
    g = torch.Generator(device=device).manual_seed(seed)
    return dict(hidden_states=torch.randn(1, 16, f, h, w, generator=g, device=device, dtype=dtype),
                encoder_hidden_states=torch.randn(1, 512, 4096, generator=g, device=device, dtype=dtype),
                timestep=torch.tensor([500], device=device), return_dict=False)


def _time(fn, *, warmup: int, reps: int) -> list[float]:
    from .common import cuda_times

    return cuda_times(fn, warmup=warmup, reps=reps)


def bench_e2e(resolutions=("480p",), recipes=("sage2-int8", "mxattention"), *, model: str = "wan2.1-t2v-14b",
              blocks: int | None = None, reps: int = 3, warmup: int = 1, seed: int = 0, log=print) -> list[dict]:
    """Rows {model, resolution, recipe, tokens, blocks, params, ms, ms_all, x_cudnn, attention_calls}; `model` a
    name of MODELS, `blocks` default all of its blocks."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from ..models.injection import use_recipe
    from ..models.steps import StepTracker

    dev, dt = "cuda", torch.bfloat16
    name, config = model, MODELS[model]
    blocks = config["num_layers"] if blocks is None else blocks
    model = build_wan(blocks, config=config, seed=seed, device=dev, dtype=dt)
    n_params = sum(p.numel() for p in model.parameters())
    rows = []
    for res in resolutions:
        f, h, w = RESOLUTIONS[res]
        tokens = f * (h // 2) * (w // 2)
        inp = _inputs(res, seed=seed, device=dev, dtype=dt)
        base = None
        for recipe in (BASELINE, *recipes):
            with torch.inference_mode(), sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                if recipe == BASELINE:
                    times = _time(lambda: model(**inp), warmup=warmup, reps=reps)
                    calls = None
                else:
                    tracker = StepTracker()
                    tracker.num_steps, tracker.step = 50, 25  # mid-schedule: step policies do not apply
                    with use_recipe(model, recipe, tracker=tracker) as handle:
                        times = _time(lambda: model(**inp), warmup=warmup, reps=reps)
                        calls = handle.calls
                        calls = {k: calls[k] for k in ("quantized", "high", "fallback")}
            ms = statistics.median(times)
            if recipe == BASELINE:
                base = ms
            row = dict(model=name, resolution=res, recipe=recipe, tokens=tokens, blocks=blocks, params=n_params,
                       ms=round(ms, 2), ms_all=[round(t, 2) for t in times],
                       x_cudnn=round(base / ms, 3), attention_calls=calls)
            rows.append(row)
            log(f"e2e {name} {res} {recipe}: {ms:.1f} ms ({base / ms:.3f}x cuDNN) calls={calls}")
    return rows
