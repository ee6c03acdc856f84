"""DraftAttention2 on the GPU: time, realised density and attention error, and the error–latency sweep.

A block-sparse recipe's error depends on the data: on i.i.d. Gaussian Q/K attention is nearly uniform and
any sparsity loses most of it. The benchmark therefore uses *structured* synthetic inputs with the locality
of video DiT attention: per head a shared content direction u in Q and K (q = a·u + noise, k = a·u +
noise, a² = strength/√D so the u·u part of the logit of two tokens at one position is `strength`, 48 by
default: at 8 or 24 attention is so diffuse on these grids that 50 % block sparsity loses most of the output) and Wan's 3D RoPE over the real
(frame, row, column) latent grid, so attention decays with distance in time and space. V is Gaussian.
The error is the relative L2 of the output against exact float64 softmax attention of the same bf16
inputs, over a sample of query rows (every head; `sample` rows spread over the sequence).

Timing: CUDA events, warm-up first, median of `reps` calls; `prepass_ms` (fused pre-pass), `route_ms`
(draft scores, allocation, per-region key lists) and `kernel_ms` are measured separately, `total_ms` as
one whole call (what the ratio to SDPA cuDNN bf16, measured in the same run, uses).
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch

from ..diagnostics.synthetic import apply_rope_3d
from ..kernels.dispatch import attention_spec
from .common import GEOMETRIES, SHAPES, draft_recipes, median_ms, shape_name

SWEEP_SPARSITY = (0.5, 0.7, 0.8, 0.9, 0.95)


def _grid(frames: int, height: int, width: int, device) -> torch.Tensor:
    """(N, 3) (t, h, w) positions of a row-major latent grid."""
    idx = torch.arange(frames * height * width, device=device)
    return torch.stack([idx // (height * width), (idx // width) % height, idx % width], dim=-1)


def structured_qkv(batch: int, heads: int, geometry: tuple[int, int, int], head_dim: int = 128, *, seed: int = 0,
                   strength: float = 48.0,
                   device="cuda", dtype=torch.bfloat16):
    """Q, K, V (B, H, N, D) with video-like locality (module docstring)."""
    frames, height, width = geometry
    n = frames * height * width
    g = torch.Generator(device=device).manual_seed(seed)
    a = math.sqrt(strength / math.sqrt(head_dim))
    u = torch.randn(1, heads, 1, head_dim, device=device, generator=g)
    q = a * u + torch.randn(batch, heads, n, head_dim, device=device, generator=g)
    k = a * u + torch.randn(batch, heads, n, head_dim, device=device, generator=g)
    v = torch.randn(batch, heads, n, head_dim, device=device, generator=g, dtype=dtype)
    pos = _grid(frames, height, width, device)
    q, k = (apply_rope_3d(t, pos).to(dtype) for t in (q, k))
    return q, k, v


def sampled_error(out: torch.Tensor, q, k, v, rows: torch.Tensor, scale: float) -> float:
    """rel_l2(out[..., rows, :], exact float64 attention of those query rows)."""
    num = den = 0.0
    for h in range(q.shape[1]):
        qs = q[:, h, rows].double()
        s = (qs @ k[:, h].double().transpose(-1, -2)) * scale
        ref = torch.softmax(s, dim=-1) @ v[:, h].double()
        num += float(((out[:, h, rows].double() - ref) ** 2).sum())
        den += float((ref**2).sum())
    return math.sqrt(num / den)


def bench_draft_point(q, k, v, spec, geometry, *, rows, reps=3, label=None, config=None, log=print) -> dict:
    """One draft spec at one shape: times, realised density and precision shares, sampled error."""
    from ..draft.layout import VideoGeometry
    from ..kernels.draft import split_draft

    geo = VideoGeometry(*geometry)
    scale = q.shape[-1] ** -0.5
    prep, rte, kern, box = split_draft(q, k, v, spec, geo, config=config)
    prep()
    rte()
    kern()
    prepass_ms = median_ms(prep, warmup=1, reps=reps)
    route_ms = median_ms(rte, warmup=1, reps=reps)
    kernel_ms = median_ms(kern, warmup=1, reps=reps)

    def whole():
        prep()
        rte()
        return kern()

    total_ms = median_ms(whole, warmup=1, reps=reps)
    out = box["out"]
    plan = box["plan"]
    d = spec if not hasattr(spec, "draft") else spec.draft
    row = {"recipe": label, "sparsity": d.sparsity, "split": {"16": d.fp16, "8": d.int8, "4": d.nvfp4},
           "density": plan.density(), "precision_fractions": plan.fractions(),
           "prepass_ms": prepass_ms, "route_ms": route_ms, "kernel_ms": kernel_ms, "total_ms": total_ms,
           "rel_l2": sampled_error(out, q, k, v, rows, scale)}
    log(f"  {label:34s} density {row['density']:.3f}  total {total_ms:8.2f} ms (pre {prepass_ms:.2f}, route "
        f"{route_ms:.2f}, kernel {kernel_ms:.2f})  rel_l2 {row['rel_l2']:.4f}")
    return row


def sweep_specs(base) -> dict:
    """The error–latency sweep: sparse-16, dense-8 (every retained pair INT8/FP8) and the recipe's mixed split,
    each at SWEEP_SPARSITY (plus sparsity 0 for the 16- and 8-bit series: dense attention through the
    block kernel)."""
    specs = {}
    for s in (0.0,) + SWEEP_SPARSITY:
        specs[f"sparse16@{s}"] = replace(base, sparsity=s, fp16=1.0, int8=0.0, nvfp4=0.0)
    for s in (0.0,) + SWEEP_SPARSITY:
        specs[f"int8@{s}"] = replace(base, sparsity=s, fp16=0.0, int8=1.0, nvfp4=0.0)
    for s in SWEEP_SPARSITY:
        specs[f"mixed@{s}"] = replace(base, sparsity=s)
    return specs


def bench_draft(shapes=("wan14b-720p",), *, recipes=None, sweep: bool = True, reps: int = 3, sample: int = 256,
                seed: int = 0, config: dict | None = None, log=print) -> dict:
    """Rows per shape: SDPA cuDNN bf16 baseline, each draft recipe (default every draft recipe a kernel runs), and
    (sweep) the error–latency series around the first of them."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    recipes = draft_recipes() if recipes is None else tuple(recipes)
    info = {"rows": [], "sweep": [], "baselines": [], "config": config}
    for name in map(shape_name, shapes):
        sh = SHAPES[name]
        geometry = GEOMETRIES[name]
        q, k, v = structured_qkv(sh.batch, sh.heads, geometry, sh.head_dim, seed=seed)
        n = q.shape[2]
        rows = torch.linspace(0, n - 1, sample, device=q.device).round().long()
        scale = sh.head_dim ** -0.5

        def cudnn():
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v)

        cudnn_ms = median_ms(cudnn, warmup=1, reps=reps)
        err = sampled_error(cudnn(), q, k, v, rows, scale)
        info["baselines"].append({"shape": name, "backend": "sdpa-cudnn", "ms": cudnn_ms, "rel_l2": err})
        log(f"{name}: SDPA cuDNN bf16 {cudnn_ms:.2f} ms, rel_l2 {err:.5f}")
        for recipe in recipes:
            spec = attention_spec(recipe)
            row = bench_draft_point(q, k, v, spec, geometry, rows=rows, reps=reps, label=recipe, config=config, log=log)
            row.update(shape=name, ratio_cudnn=cudnn_ms / row["total_ms"])
            info["rows"].append(row)
        # the sweep runs around the first mixed-precision draft recipe (its 16/8/4 split at every sparsity), of
        # those asked for, else of all
        pool = list(recipes) + [r for r in draft_recipes() if r not in recipes]
        base = next((d for d in (attention_spec(r).draft for r in pool) if d.int8 or d.nvfp4), None)
        if sweep and base is None:
            log(f"{name}: no mixed-precision draft recipe: no sweep")
        if sweep and base is not None:
            for label, spec in sweep_specs(base).items():
                row = bench_draft_point(q, k, v, spec, geometry, rows=rows, reps=reps, label=label, config=config, log=log)
                row.update(shape=name, series=label.split("@")[0], ratio_cudnn=cudnn_ms / row["total_ms"])
                info["sweep"].append(row)
        del q, k, v
        torch.cuda.empty_cache()
    return info


def equal_time_comparison(sweep_rows: list[dict], shape: str) -> list[dict]:
    """For each mixed point: sparse-16's error at the same measured time (log-log interpolation between the
    two sparse-16 points around it; None outside their range) beside mixed's own error."""
    s16 = sorted((r for r in sweep_rows if r["shape"] == shape and r["series"] == "sparse16"), key=lambda r: r["total_ms"])
    out = []
    for r in (r for r in sweep_rows if r["shape"] == shape and r["series"] == "mixed"):
        t = r["total_ms"]
        e16 = None
        for a, b in zip(s16, s16[1:]):
            if a["total_ms"] <= t <= b["total_ms"]:
                w = (math.log(t) - math.log(a["total_ms"])) / (math.log(b["total_ms"]) - math.log(a["total_ms"]))
                e16 = math.exp((1 - w) * math.log(a["rel_l2"]) + w * math.log(b["rel_l2"]))
        out.append({"mixed": r["recipe"], "ms": t, "mixed_rel_l2": r["rel_l2"], "sparse16_rel_l2_at_equal_time": e16})
    return out


def plot_sweep(info: dict, shape: str, path) -> None:
    """Error vs time (log-log): sparse-16, 8-bit and mixed series, the recipes, and SDPA cuDNN's time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for series, style in (("sparse16", "o-"), ("int8", "s-"), ("mixed", "^-")):
        pts = sorted((r for r in info["sweep"] if r["shape"] == shape and r["series"] == series), key=lambda r: r["total_ms"])
        if pts:
            ax.plot([p["total_ms"] for p in pts], [p["rel_l2"] for p in pts], style, label={
                "sparse16": "sparse, 16-bit", "int8": "sparse, INT8/FP8 (dense at sparsity 0)",
                "mixed": "mixed 16/8/4 ({})".format("/".join(f"{100 * pts[0]['split'][b]:.0f}"
                                                               for b in ("16", "8", "4")))}[series])
            for p in pts:
                ax.annotate(f"{1 - p['sparsity']:.2g}", (p["total_ms"], p["rel_l2"]), fontsize=7,
                            textcoords="offset points", xytext=(3, 3))
    for r, marker in zip((r for r in info["rows"] if r["shape"] == shape), "xP*DvH<>"):
        ax.plot([r["total_ms"]], [r["rel_l2"]], marker, ls="none", label=r["recipe"])
    for b in info["baselines"]:
        if b["shape"] == shape:
            ax.axvline(b["ms"], color="grey", ls="--", lw=1, label=f"SDPA cuDNN bf16 ({b['ms']:.0f} ms)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("time per attention call, ms (pre-pass + route + kernel)")
    ax.set_ylabel("relative L2 error vs exact attention")
    ax.set_title(f"DraftAttention2 on H200, {shape} (labels: retained density)", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


__all__ = ["GEOMETRIES", "bench_draft", "bench_draft_point", "equal_time_comparison", "plot_sweep",
           "structured_qkv", "sweep_specs"]
