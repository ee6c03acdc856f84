"""`lowbit-video bench kernels`: attention throughput on the GPU at the model zoo's shapes (bench/common.py SHAPES).

TFLOP/s counts 4·B·H·Nq·Nkv·D (non-causal forward, the two GEMMs). Every recipe row's `total_ms`, what the ratios
use, is the public call a user or a model processor makes, `attend(q, k, v, "recipe")` (bf16 BHND, the recipe by
name); the pre-pass (operand quantization, `prepass_ms`) and the kernel (`kernel_ms`) are also timed on their own
(`kernels.launch.split_call`). Extra `--config` rows time `kernels.attention(..., config=...)` (attend takes no
kernel settings). SDPA cuDNN / flash (bf16) and sageattention 1.0.6 are measured in the same run on the same
tensors. Timing: CUDA events around each call, each call starting on an idle GPU (so the host's Python and launch
work before the GPU starts counts), warm-up calls first, the median of `reps` calls (long shapes take 0.05–0.5 s a
call, so a few calls suffice). `queued_ms` (and `ratio_cudnn_queued`, against cuDNN timed the same way): `reps`
calls issued back to back, events around the run, as a model step issues them (the host runs ahead of the GPU).
`sustained_ms` (`ratio_cudnn_sustained`; cuDNN's the same way): calls back to back for `sustain_s` seconds, the
second half timed, once the GPU runs at the clock its power limit holds under that load, as through a whole
denoising loop (`common.sustained_ms`; `sustained_sm_mhz` the SM clock then).
"""

from __future__ import annotations

import torch

from ..kernels.dispatch import SETTINGS, attention_spec, variant_of
from .common import (GEOMETRIES, SHAPES, BenchShape, cuda_times, default_recipes, median_ms, queued_ms, shape_name,
                     sustained_ms)
from .draft import bench_draft_point, structured_qkv


def _reps_for(flop: float) -> tuple[int, int]:
    # ~0.05 s per call at 500 TFLOP/s for wan-480p; keep each measurement to a few seconds. Medians of 3 calls
    # at wan-720p / hunyuan-720p moved by 1-2 % between runs: 7 there.
    est = flop / 5e14
    return (1, 7) if est > 0.1 else (2, 7) if est > 0.02 else (3, 10)


def bench_kernels(shapes=("short", "wan1.3b-480p"), recipes=None, *, reps: int | None = None,
                  seed: int = 0, variants: dict | None = None, sustain_s: float = 2.0, log=print) -> dict:
    """Run the benchmark; returns {"gpu", "torch", "triton", "driver", "rows": [...], "baselines": [...]}.

    variants: optional {label: dict(recipe=..., promote=..., exact_p=..., config=...)} extra rows
    (e.g. ablations that leave a stage out); they appear with recipe=label. recipes: default every recipe a kernel
    runs (`common.default_recipes`). sustain_s: seconds of the sustained timing of cuDNN and of each row (0: none)."""
    import triton
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from ..attention import attend
    from ..kernels import plans
    from ..kernels.launch import attention, finalize_stats, split_call

    recipes = default_recipes() if recipes is None else tuple(recipes)

    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    info = {"gpu": props.name, "torch": torch.__version__, "triton": triton.__version__,
            "cuda": torch.version.cuda, "driver": _driver_version(), "rows": [], "baselines": [], "e2e": []}
    try:
        import sageattention  # noqa: F401
        from sageattention import sageattn
    except Exception:
        sageattn = None
    info["sageattention"] = getattr(__import__("sageattention"), "__version__", "1.0.6") if sageattn else None

    for name in map(shape_name, shapes):
        sh = SHAPES[name]
        B, H, N, D = sh.batch, sh.heads, sh.tokens, sh.head_dim
        flop = 4.0 * B * H * N * N * D
        warm, n = _reps_for(flop)
        n = reps or n
        g = torch.Generator(device=dev).manual_seed(seed)
        q, k, v = (torch.randn(B, H, N, D, device=dev, dtype=torch.bfloat16, generator=g) for _ in range(3))
        base, base_queued, base_sustained = {}, {}, {}
        for label, backend in (("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION), ("sdpa-flash", SDPBackend.FLASH_ATTENTION)):
            def f(backend=backend):
                with sdpa_kernel([backend]):
                    return torch.nn.functional.scaled_dot_product_attention(q, k, v)
            try:
                ms = median_ms(f, warmup=warm, reps=n)
            except Exception as exc:  # backend unavailable
                log(f"{name} {label}: unavailable ({exc})")
                continue
            base[label] = ms
            base_queued[label] = queued = queued_ms(f, reps=n)
            entry = {"shape": name, "backend": label, "ms": ms, "tflops": flop / ms / 1e9, "queued_ms": queued}
            sustained = ""
            if sustain_s and label == "sdpa-cudnn":  # the reference of the sustained ratios
                s_ms, s_mhz = sustained_ms(f, seconds=sustain_s)
                base_sustained[label] = s_ms
                entry.update(sustained_ms=s_ms, sustained_sm_mhz=s_mhz)
                sustained = f", sustained {s_ms:.2f} ms at {s_mhz or '?'} MHz"
            info["baselines"].append(entry)
            log(f"{name:13s} {label:24s} {ms:9.2f} ms {flop / ms / 1e9:7.1f} TFLOP/s "
                f"(queued {queued:.2f} ms{sustained})")
        if sageattn is not None:
            try:
                kk = k.clone()  # sageattention 1.0.6 subtracts K's mean in place
                ms = median_ms(lambda: sageattn(q, kk, v, tensor_layout="HND", is_causal=False), warmup=warm, reps=n)
                base["sageattention"] = ms
                info["baselines"].append({"shape": name, "backend": "sageattention-1.0.6", "ms": ms,
                                          "tflops": flop / ms / 1e9})
                log(f"{name:13s} {'sageattention-1.0.6':24s} {ms:9.2f} ms {flop / ms / 1e9:7.1f} TFLOP/s")
            except Exception as exc:
                log(f"{name} sageattention: failed ({exc})")
        rows = [(r, dict(recipe=r)) for r in recipes] + list((variants or {}).items())
        draft_rows = [r for r in recipes if _is_draft(r)]
        if draft_rows:
            info["rows"] += _draft_rows(name, sh, draft_rows, base, flop, reps=n, seed=seed, log=log)
        for label, opts in rows:
            recipe = opts["recipe"]
            if label in draft_rows:
                continue
            kw = {k2: opts[k2] for k2 in ("promote", "exact_p", "config") if k2 in opts}
            try:
                spec = attention_spec(recipe)
                table_row = variant_of(spec)
                pre, kern, st = split_call(q, k, v, spec, **kw)
                prepass_ms = median_ms(pre, warmup=1, reps=n) if table_row.prepass is not None else 0.0
                kernel_ms = median_ms(kern, warmup=warm, reps=n)
                if kw:  # a kernel setting: attend takes none
                    call = lambda: attention(q, k, v, spec, **kw)
                else:
                    call = lambda: attend(q, k, v, recipe)
                total_ms = median_ms(call, warmup=1, reps=n)
                queued = queued_ms(call, reps=n)
                s_ms, s_mhz = sustained_ms(call, seconds=sustain_s) if sustain_s else (None, None)
                finalize_stats(st)  # (the split calls' stats: which kernel ran, whether a fallback did)
            except Exception as exc:
                log(f"{name} {label}: failed ({type(exc).__name__}: {exc})")
                continue
            row = {"shape": name, "recipe": label, "base_recipe": recipe, "options": kw,
                   "tflops": flop / total_ms / 1e9, "kernel_tflops": flop / kernel_ms / 1e9,
                   "prepass_ms": prepass_ms, "kernel_ms": kernel_ms, "total_ms": total_ms,
                   "ratio_cudnn": base["sdpa-cudnn"] / total_ms if "sdpa-cudnn" in base else None,
                   "ratio_flash": base["sdpa-flash"] / total_ms if "sdpa-flash" in base else None,
                   "ratio_sageattention": base["sageattention"] / total_ms if "sageattention" in base else None,
                   "queued_ms": queued,
                   "ratio_cudnn_queued": base_queued["sdpa-cudnn"] / queued if "sdpa-cudnn" in base_queued else None,
                   "sustained_ms": s_ms, "sustained_sm_mhz": s_mhz,
                   "ratio_cudnn_sustained": (base_sustained["sdpa-cudnn"] / s_ms
                                             if s_ms and "sdpa-cudnn" in base_sustained else None),
                   "qk_fallback": st.qk_fallback, "v_fallback": st.v_fallback,
                   # attend runs unquantized recipes on torch SDPA; the kernel columns time the dense Triton kernel
                   "kernel": "sdpa" if table_row.plain_softmax and not kw else st.kernel,
                   "call": "kernels.attention" if kw else "attend", "B": B, "H": H, "N": N, "D": D}
            info["rows"].append(row)
            rc = row["ratio_cudnn"]
            log(f"{name:13s} {label:24s} {total_ms:9.2f} ms {row['tflops']:7.1f} TFLOP/s "
                f"({st.kernel} kernel {kernel_ms:.2f} ms = {row['kernel_tflops']:.1f}, pre-pass {prepass_ms:.2f} ms)"
                + (f"  x{rc:.2f} cuDNN" if rc else "")
                + (f" | queued {queued:.2f} ms x{row['ratio_cudnn_queued']:.2f}" if row["ratio_cudnn_queued"] else "")
                + (f" | sustained {s_ms:.2f} ms x{row['ratio_cudnn_sustained']:.2f} at {s_mhz or '?'} MHz"
                   if row["ratio_cudnn_sustained"] else ""))
        del q, k, v
        plans.clear()  # the shape's call plans keep buffers no later shape uses
        torch.cuda.empty_cache()
    return info


def parse_config(items, keys: dict | None = None) -> dict:
    """["PIPE=false", "NUM_STAGES=4"] -> {"PIPE": False, "NUM_STAGES": 4}, typed and checked against `keys`
    ({name: type}; default the attention kernels' settings, kernels.dispatch.SETTINGS); ValueError with a
    one-line reason."""
    if keys is None:
        keys = SETTINGS

    out = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key, raw = key.strip(), raw.strip()
        if not sep or not key or not raw:
            raise ValueError(f"--config wants KEY=VALUE, got {item!r}")
        typ = keys.get(key)
        if typ is None:
            raise ValueError(f"unknown kernel config key {key!r}; known: {', '.join(keys)}")
        if typ is bool:
            if raw.lower() not in ("true", "false", "1", "0"):
                raise ValueError(f"--config {key} must be true or false, got {raw!r}")
            out[key] = raw.lower() in ("true", "1")
        elif typ is int:
            try:
                out[key] = int(raw)
            except ValueError:
                raise ValueError(f"--config {key} must be an integer, got {raw!r}") from None
        else:
            out[key] = raw
    return out


def config_variants(recipes, items) -> dict:
    """The extra `bench_kernels` rows one --config setting adds: {"recipe[K=V,...]": {recipe, config}} for
    every recipe whose kernel takes these settings (the draft kernel has its own)."""
    cfg = parse_config(items)
    if not cfg:
        return {}
    tag = ",".join(f"{k}={v}" for k, v in cfg.items())
    return {f"{r}[{tag}]": dict(recipe=r, config=cfg) for r in recipes
            if set(cfg) <= set(variant_of(attention_spec(r)).settings)}


def _is_draft(recipe) -> bool:
    """Timed by `bench/draft.py` (block-sparse: structured inputs, realised density and error)."""
    return variant_of(attention_spec(recipe)).name == "draft"


def _draft_rows(name, sh, recipes, base, flop, *, reps, seed, log) -> list[dict]:
    """Draft recipes at this shape: block-sparse, so timed on the structured inputs of bench/draft.py (on
    Gaussian inputs any sparsity loses most of the output) with their realised density and sampled error;
    the ratios use the SDPA times measured above (data-independent). TFLOP/s is dense-equivalent."""
    if name not in GEOMETRIES:
        log(f"{name}: no video geometry for the draft recipes (have {', '.join(GEOMETRIES)})")
        return []
    q, k, v = structured_qkv(sh.batch, sh.heads, GEOMETRIES[name], sh.head_dim, seed=seed)
    rows_idx = torch.linspace(0, q.shape[2] - 1, 256, device=q.device).round().long()
    out = []
    for recipe in recipes:
        r = bench_draft_point(q, k, v, attention_spec(recipe), GEOMETRIES[name], rows=rows_idx,
                              reps=reps, label=recipe, log=log)
        r.update(shape=name, base_recipe=recipe, options={}, tflops=flop / r["total_ms"] / 1e9,
                 kernel_tflops=flop / r["kernel_ms"] / 1e9, prepass_ms=r["prepass_ms"] + r["route_ms"],
                 ratio_cudnn=base["sdpa-cudnn"] / r["total_ms"] if "sdpa-cudnn" in base else None,
                 ratio_flash=base["sdpa-flash"] / r["total_ms"] if "sdpa-flash" in base else None,
                 ratio_sageattention=base["sageattention"] / r["total_ms"] if "sageattention" in base else None,
                 qk_fallback=False, v_fallback=False, kernel="triton", B=sh.batch, H=sh.heads, N=q.shape[2],
                 D=sh.head_dim, inputs="structured (bench/draft.py)")
        out.append(r)
    del q, k, v
    return out


def _driver_version() -> str | None:
    try:
        import subprocess

        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip() or None
    except Exception:
        return None


def to_markdown(info: dict) -> str:
    lines = [f"GPU: {info['gpu']}, driver {info.get('driver')}, torch {info['torch']} (CUDA {info.get('cuda')}), "
             f"Triton {info['triton']}, sageattention {info.get('sageattention')}", "",
             "| shape | recipe / backend | runs on | TFLOP/s | × cuDNN | × flash | × sage 1.0.6 | pre-pass ms | kernel ms "
             "| total ms | queued ms | × cuDNN queued | sustained ms | × cuDNN sustained |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    fmt = lambda x, p=2: "—" if x is None else f"{x:.{p}f}"
    for b in info["baselines"]:
        lines.append(f"| {b['shape']} | {b['backend']} | | {b['tflops']:.1f} | | | | | | {b['ms']:.2f} | "
                     f"{fmt(b.get('queued_ms'))} | | {fmt(b.get('sustained_ms'))} | |")
    for r in info["rows"]:
        lines.append(f"| {r['shape']} | {r['recipe']} | {r.get('kernel', '')} | {r['tflops']:.1f} | {fmt(r['ratio_cudnn'])} | "
                     f"{fmt(r['ratio_flash'])} | {fmt(r['ratio_sageattention'])} | {r['prepass_ms']:.2f} | "
                     f"{r['kernel_ms']:.2f} | {r['total_ms']:.2f} | {fmt(r.get('queued_ms'))} | "
                     f"{fmt(r.get('ratio_cudnn_queued'))} | {fmt(r.get('sustained_ms'))} | "
                     f"{fmt(r.get('ratio_cudnn_sustained'))} |")
    draft = [r for r in info["rows"] if "density" in r]
    if draft:
        lines += ["", "Draft recipes (structured inputs; TFLOP/s dense-equivalent; pre-pass ms above includes the route):",
                  "", "| shape | recipe | density | 16 / 8 / 4-bit shares | route ms | rel. L2 error | × cuDNN |",
                  "|---|---|---|---|---|---|---|"]
        for r in draft:
            f = r["precision_fractions"]
            lines.append(f"| {r['shape']} | {r['recipe']} | {r['density']:.3f} | {f['16']:.3f} / {f['8']:.3f} / "
                         f"{f['4']:.3f} | {r['route_ms']:.2f} | {r['rel_l2']:.4f} | {fmt(r['ratio_cudnn'])} |")
    return "\n".join(lines) + "\n"


__all__ = ["SHAPES", "BenchShape", "bench_kernels", "config_variants", "cuda_times", "parse_config", "to_markdown"]
