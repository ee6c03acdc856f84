"""`lowbit-video bench models`: one transformer forward per recipe on full-size, random-weight instances of video
transformers other than Wan (the hooks' other routes), against the same forward under the fp16 recipe (diffusers'
own attention call on every module: torch SDPA in bf16), same run.

Models (diffusers classes, published transformer configurations from the checkpoints' config.json):

* `cogvideox-5b`: CogVideoXTransformer3DModel, 42 blocks, 48 heads x 64, 3D RoPE, text first in joint attention
  (processors call SDPA themselves: the scoped TorchFunctionMode route). 720x480, 49 frames -> latent 13x60x90,
  13x30x45 = 17550 video tokens + 226 text.
* `ltx-video`: LTXVideoTransformer3DModel (0.9.x 2B), 28 blocks, 32 heads x 64, self + cross attention
  (`dispatch_attention_fn` route). 768x512, 121 frames -> latent 16x16x24 = 6144 tokens, 128 text.
* `hunyuanvideo-1.5`: HunyuanVideo15Transformer3DModel, 54 blocks, 16 heads x 128, joint attention with a
  query-and-key padding mask (`dispatch_attention_fn` route). 848x480, 121 frames -> latent 31x30x53 = 49290
  tokens, text padded to 256 + 256.

`blocks` below a model's builds that many blocks (identical in shape: block time scales linearly). Timing: CUDA
events around each forward after warm-up forwards (Triton compilation), median of `reps`. `tiny=True` runs the
same loop on the tiny random-weight instances of the coverage tests (lowbit_video/models/tiny_video_cases.py) on
the CPU, with wall-clock timing: what a CPU test exercises.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

BASELINE = "fp16"
DEFAULT_RECIPES = ("sage2-int8", "mxattention")
COMMAND = "lowbit-video bench models --random-weights --out results/models-h200.md"


@dataclass(frozen=True)
class BenchModel:
    cls: str  # diffusers class name
    config: dict[str, Any]
    inputs: Callable[[torch.Generator, str, torch.dtype], dict[str, Any]]
    tokens: str  # what one forward attends over, for the table
    tiny: str  # the tiny case of the same class


def _randn(g, *shape, device, dtype):
    return torch.randn(*shape, generator=g, device=device, dtype=dtype)


def _cogvideox_inputs(g, device, dtype):
    return dict(hidden_states=_randn(g, 1, 13, 16, 60, 90, device=device, dtype=dtype),
                encoder_hidden_states=_randn(g, 1, 226, 4096, device=device, dtype=dtype),
                timestep=torch.tensor([500], device=device), return_dict=False)


def _ltx_inputs(g, device, dtype):
    return dict(hidden_states=_randn(g, 1, 16 * 16 * 24, 128, device=device, dtype=dtype),
                encoder_hidden_states=_randn(g, 1, 128, 4096, device=device, dtype=dtype),
                timestep=torch.tensor([500], device=device),
                encoder_attention_mask=torch.ones(1, 128, device=device, dtype=dtype),
                num_frames=16, height=16, width=24, return_dict=False)


def _hunyuan15_inputs(g, device, dtype):
    mask = torch.zeros(1, 256, device=device)
    mask[:, :180] = 1  # a prompt of 180 tokens padded to 256
    return dict(hidden_states=_randn(g, 1, 65, 31, 30, 53, device=device, dtype=dtype),
                # in the model's dtype, as its pipeline passes it (the time embedding casts to the timestep's dtype)
                timestep=torch.tensor([500.0], device=device, dtype=dtype),
                encoder_hidden_states=_randn(g, 1, 256, 3584, device=device, dtype=dtype),
                encoder_attention_mask=mask,
                encoder_hidden_states_2=_randn(g, 1, 256, 1472, device=device, dtype=dtype),
                encoder_attention_mask_2=mask.clone(),
                image_embeds=torch.zeros(1, 729, 1152, device=device, dtype=dtype), return_dict=False)


MODELS: dict[str, BenchModel] = {
    "cogvideox-5b": BenchModel(
        "CogVideoXTransformer3DModel",
        dict(num_attention_heads=48, attention_head_dim=64, in_channels=16, out_channels=16, time_embed_dim=512,
             text_embed_dim=4096, num_layers=42, sample_width=90, sample_height=60, sample_frames=49, patch_size=2,
             temporal_compression_ratio=4, max_text_seq_length=226, use_rotary_positional_embeddings=True),
        _cogvideox_inputs, "17550 video + 226 text", "CogVideoXTransformer3DModel"),
    "ltx-video": BenchModel(
        "LTXVideoTransformer3DModel",
        dict(in_channels=128, out_channels=128, patch_size=1, patch_size_t=1, num_attention_heads=32,
             attention_head_dim=64, cross_attention_dim=2048, num_layers=28, caption_channels=4096),
        _ltx_inputs, "6144 video; 128 text (cross)", "LTXVideoTransformer3DModel"),
    "hunyuanvideo-1.5": BenchModel(
        "HunyuanVideo15Transformer3DModel",
        dict(in_channels=65, out_channels=32, num_attention_heads=16, attention_head_dim=128, num_layers=54,
             num_refiner_layers=2, patch_size=1, patch_size_t=1, text_embed_dim=3584, text_embed_2_dim=1472,
             image_embed_dim=1152, rope_axes_dim=(16, 56, 56), task_type="t2v"),
        _hunyuan15_inputs, "49290 video + 512 text (padded)", "HunyuanVideo15Transformer3DModel"),
}


def _build(spec: BenchModel, blocks: int | None, *, seed: int, device: str, dtype):
    import diffusers

    cfg = dict(spec.config)
    if blocks is not None:
        cfg["num_layers"] = min(blocks, cfg["num_layers"])
    torch.manual_seed(seed)
    with torch.device(device):
        model = getattr(diffusers, spec.cls)(**cfg)
    return model.to(dtype=dtype).eval(), cfg["num_layers"]


def _times(fn, *, cuda: bool, warmup: int, reps: int) -> list[float]:
    if cuda:
        from .common import cuda_times

        return cuda_times(fn, warmup=warmup, reps=reps)
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def bench_models(models=tuple(MODELS), recipes=DEFAULT_RECIPES, *, blocks: int | None = None, reps: int = 3,
                 warmup: int = 1, seed: int = 0, tiny: bool = False, log=print) -> list[dict]:
    """Rows {model, class, recipe, tokens, blocks, device, ms, ms_all, x_fp16, attention_calls (of one forward)}:
    the fp16 recipe first, then each of `recipes`, through `use_recipe` at a mid-schedule step."""
    from ..models.injection import use_recipe
    from ..models.steps import StepTracker
    from ..models.tiny_video_cases import build as build_tiny

    rows = []
    for name in models:
        spec = MODELS[name]
        if tiny:
            model, inp = build_tiny(spec.tiny, seed=seed)
            n_blocks, device, tokens = None, "cpu", "tiny"
        else:
            device, dtype = "cuda", torch.bfloat16
            model, n_blocks = _build(spec, blocks, seed=seed, device=device, dtype=dtype)
            inp, tokens = spec.inputs(torch.Generator(device=device).manual_seed(seed), device, dtype), spec.tokens
        base = None
        for recipe in (BASELINE, *recipes):
            tracker = StepTracker()
            tracker.num_steps, tracker.step = 50, 25  # mid-schedule: step policies do not apply
            with torch.inference_mode(), use_recipe(model, recipe, tracker=tracker) as handle:
                times = _times(lambda: model(**inp), cuda=device == "cuda", warmup=warmup, reps=reps)
                forwards = warmup + reps
                calls = {k: handle.calls[k] // forwards for k in ("quantized", "high", "fallback", "engine")}
            ms = statistics.median(times)
            base = ms if recipe == BASELINE else base
            rows.append(dict(model=name, cls=spec.cls, recipe=recipe, tokens=tokens, blocks=n_blocks, device=device,
                             ms=round(ms, 3), ms_all=[round(t, 3) for t in times], x_fp16=round(base / ms, 3),
                             attention_calls=calls))
            log(f"models {name} {recipe}: {ms:.2f} ms ({base / ms:.3f}x fp16) calls={calls}")
        del model
        if device == "cuda":
            torch.cuda.empty_cache()
    return rows


def models_markdown(rows: list[dict], command: str) -> str:
    import diffusers

    dev = torch.cuda.get_device_name() if torch.cuda.is_available() and rows and rows[0]["device"] == "cuda" \
        else "CPU"
    lines = ["# Recipes on other video transformers: one forward", "",
             f"Command: `{command}`", "",
             f"{dev}, bf16, random weights, diffusers {diffusers.__version__}, torch {torch.__version__}. One "
             "transformer forward per recipe through `use_recipe` (mid-schedule step), median of the timed "
             "forwards; x fp16: the fp16 recipe's time (diffusers' own attention call, torch SDPA) over the "
             "recipe's. Calls: quantized / kept 16-bit by the policy / fallback (run by diffusers' kernel) / "
             "engine (quantized but no kernel took them: float64 engine).", "",
             "| model | class | tokens | blocks | recipe | ms | x fp16 | calls q / h / f / engine |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        c = r["attention_calls"]
        lines.append(f"| {r['model']} | {r['cls']} | {r['tokens']} | {r['blocks'] or '-'} | {r['recipe']} | "
                     f"{r['ms']:.2f} | {r['x_fp16']:.3f} | {c['quantized']} / {c['high']} / {c['fallback']} / "
                     f"{c['engine']} |")
    return "\n".join(lines) + "\n"


__all__ = ["BASELINE", "COMMAND", "DEFAULT_RECIPES", "MODELS", "bench_models", "models_markdown"]
