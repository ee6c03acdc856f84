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

`compiled`: the blocks compiled as `generate --compile` compiles them (models/regional_compile.py: regional,
fullgraph, Inductor; the baseline too, each recipe traced afresh), so the norms, RoPE and elementwise work around
the attention calls is fused for every row alike. `breakdown`: one more forward under torch.profiler, its GPU time
summed by kind of kernel (`kernel_kind`): where a recipe's forward gains and what it leaves; and the span of its GPU
work with the time the GPU sat idle in it (waiting for the host's launches), which the kinds' sum does not show.

Token counts (81 frames -> 21 latent frames): 480p (832x480, latent 104x60) 21x30x52 = 32760;
720p (1280x720, latent 160x90) 21x45x80 = 75600. Text: 512 tokens.
"""

from __future__ import annotations

import contextlib
import functools
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


# this package's attention kernels proper (kernels/_core.py, gluon_ws.py, draft_ws.py); its other Triton and
# Gluon functions are the pre-passes, the draft route and the epilogue passes around them
ATTENTION_KERNELS = frozenset({"attn_fwd", "attn_ws_fwd", "draft_fwd", "draft_ws_fwd"})
KINDS = ("quantized attention", "pre-pass and route", "SDPA (16-bit attention)", "GEMM",
         "Inductor (fused norms, RoPE, elementwise)", "other")


@functools.lru_cache(maxsize=1)
def project_kernel_names() -> frozenset:
    """The names of every Triton / Gluon function in lowbit_video.kernels: the names the profiler gives their
    launches."""
    import importlib
    import pkgutil

    from triton.runtime.jit import JITFunction

    from .. import kernels

    names = set()
    for info in pkgutil.iter_modules(kernels.__path__):
        module = importlib.import_module(f"{kernels.__name__}.{info.name}")
        names.update(n for n, obj in vars(module).items() if isinstance(obj, JITFunction))
    return frozenset(names)


def kernel_kind(name: str, ours: frozenset) -> str:
    """The kind (one of KINDS) of a GPU kernel, by its name: this package's (`ours`: `project_kernel_names`)
    attention kernels or their pre-passes, then Inductor's generated kernels (named triton_*, even where their
    name mentions the attention op they were fused next to), torch SDPA's (cuDNN, flash, memory-efficient),
    cuBLAS / CUTLASS GEMMs, and the rest (copies, memsets, eager elementwise kernels)."""
    if name in ATTENTION_KERNELS:
        return KINDS[0]
    if name in ours:
        return KINDS[1]
    if name.startswith("triton_"):
        return KINDS[4]
    low = name.lower()
    if any(s in low for s in ("fmha", "flash", "cudnn", "sdpa", "attention")):
        return KINDS[2]
    if any(s in low for s in ("gemm", "nvjet", "xmma", "cutlass", "cublas")) or low.startswith("sm90_"):
        return KINDS[3]
    return KINDS[5]


GPU_WORK = ("kernel", "gpu_memcpy", "gpu_memset")  # the chrome trace's categories of work on the GPU


def profile_forward(fn) -> tuple[dict, dict]:
    """One call of `fn` under torch.profiler (CUDA activity), read from its chrome trace: ({kind: {"ms", "kernels"}},
    the GPU work's time summed by `kernel_kind`, in KINDS order, kinds with no kernel left out; `gpu_busy` of that
    work)."""
    import json
    import tempfile
    from pathlib import Path

    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        work = gpu_work(json.loads(path.read_text()))
    ours = project_kernel_names()
    total = {kind: [0.0, 0] for kind in KINDS}
    for name, start, end in work:
        t = total[kernel_kind(name, ours)]
        t[0] += (end - start) / 1e3
        t[1] += 1
    kinds = {kind: {"ms": round(ms, 2), "kernels": n} for kind, (ms, n) in total.items() if n}
    return kinds, gpu_busy([(start, end) for _, start, end in work])


def gpu_work(trace: dict) -> list[tuple[str, float, float]]:
    """(name, start, end), times in µs, of every piece of GPU work (kernels, copies, memsets) in a chrome trace."""
    return [(e["name"], e["ts"], e["ts"] + e["dur"]) for e in trace.get("traceEvents", [])
            if e.get("ph") == "X" and e.get("cat") in GPU_WORK]


def gpu_busy(intervals) -> dict:
    """{"span_ms", "idle_ms"} of GPU work given as (start, end) µs intervals: from the first start to the last end,
    and the part of that no interval covers, the GPU waiting (for the host's launches, or a synchronisation).
    Overlapping intervals (several streams) count once. {} without any."""
    spans = sorted(intervals)
    if not spans:
        return {}
    busy, (start, end) = 0.0, spans[0]
    for s, e in spans[1:]:
        if s > end:
            busy += end - start
            start, end = s, e
        else:
            end = max(end, e)
    busy += end - start
    span = end - spans[0][0]
    return {"span_ms": round(span / 1e3, 2), "idle_ms": round((span - busy) / 1e3, 2)}


def _time(fn, *, warmup: int, reps: int) -> list[float]:
    from .common import cuda_times

    return cuda_times(fn, warmup=warmup, reps=reps)


def _mid_step():
    """A step tracker at a mid-schedule step: the recipes' step policies do not apply to the timed forwards."""
    from ..models.steps import StepTracker

    tracker = StepTracker()
    tracker.num_steps, tracker.step = 50, 25
    return tracker


def bench_e2e(resolutions=("480p",), recipes=("sage2-int8", "mxattention"), *, model: str = "wan2.1-t2v-14b",
              blocks: int | None = None, reps: int = 3, warmup: int = 1, seed: int = 0, compiled: bool = False,
              breakdown: bool = False, log=print) -> list[dict]:
    """Rows {model, resolution, recipe, tokens, blocks, params, ms, ms_all, x_cudnn, attention_calls}, with
    `compiled` (True) when compiled and, under `breakdown`, `gpu_ms_by_kind`, `gpu_span_ms` and `gpu_idle_ms`
    (`profile_forward`); `model` a name of
    MODELS, `blocks` default all of its blocks. Compiled rows count no attention calls (the compiled blocks' hooks
    run inside the graph)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from ..models import regional_compile
    from ..models.injection import use_recipe

    dev, dt = "cuda", torch.bfloat16
    name, config = model, MODELS[model]
    blocks = config["num_layers"] if blocks is None else blocks
    model = build_wan(blocks, config=config, seed=seed, device=dev, dtype=dt)
    n_params = sum(p.numel() for p in model.parameters())
    if compiled:
        regional_compile.compile_blocks(model)
        warmup = max(warmup, 2)  # the first forward of each row traces and compiles the blocks
    rows = []
    for res in resolutions:
        f, h, w = RESOLUTIONS[res]
        tokens = f * (h // 2) * (w // 2)
        inp = _inputs(res, seed=seed, device=dev, dtype=dt)
        base = None
        for recipe in (BASELINE, *recipes):
            if compiled:
                regional_compile.forget_graphs()  # traced afresh under this recipe's hooks (or none)
            installed = (contextlib.nullcontext() if recipe == BASELINE
                         else use_recipe(model, recipe, tracker=_mid_step()))
            with torch.inference_mode(), sdpa_kernel(SDPBackend.CUDNN_ATTENTION), installed as handle:
                times = _time(lambda: model(**inp), warmup=warmup, reps=reps)
                calls = None if handle is None else {k: handle.calls[k] for k in ("quantized", "high", "fallback")}
                kinds, timeline = profile_forward(lambda: model(**inp)) if breakdown else (None, {})
            ms = statistics.median(times)
            if recipe == BASELINE:
                base = ms
            row = dict(model=name, resolution=res, recipe=recipe, tokens=tokens, blocks=blocks, params=n_params,
                       ms=round(ms, 2), ms_all=[round(t, 2) for t in times],
                       x_cudnn=round(base / ms, 3), attention_calls=None if compiled else calls)
            if compiled:
                row["compiled"] = True
            if kinds is not None:
                row["gpu_ms_by_kind"] = kinds
            if timeline:
                row["gpu_span_ms"], row["gpu_idle_ms"] = timeline["span_ms"], timeline["idle_ms"]
            rows.append(row)
            log(f"e2e {name} {res} {recipe}{' (compiled)' if compiled else ''}: {ms:.1f} ms ({base / ms:.3f}x cuDNN) "
                f"calls={row['attention_calls']}")
            for kind, k in (kinds or {}).items():
                log(f"    {kind:42s} {k['ms']:9.2f} ms  {k['kernels']:5d} kernels")
            if timeline:
                log(f"    GPU work from first start to last end {timeline['span_ms']:9.2f} ms, "
                    f"idle in it {timeline['idle_ms']:.2f} ms")
    return rows
