"""`lowbit-video diagnose attention | uos | outliers`: numerical diagnostics that need no model."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer
from rich.table import Table

from ..errors import UserError
from .common import JsonOpt, out, print_json, progress_bar, user_errors

diagnose_app = typer.Typer(help="Numerical diagnostics that need no model.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(diagnose_app, name="diagnose")


DTYPES = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16", "float64": "float64"}


@diagnose_app.command("attention")
@user_errors
def diagnose_attention(
    recipe: Optional[list[str]] = typer.Option(None, "--recipe", "-r", help="Recipe name or TOML path; repeat for several. Default: every recipe."),
    seq: int = typer.Option(1024, "--seq", min=1, help="Query tokens."),
    kv_seq: Optional[int] = typer.Option(None, "--kv-seq", min=1, help="Key/value tokens (default: --seq)."),
    heads: int = typer.Option(2, "--heads", min=1),
    head_dim: int = typer.Option(128, "--head-dim", min=1),
    batch: int = typer.Option(1, "--batch", min=1),
    seed: int = typer.Option(0, "--seed"),
    outliers: bool = typer.Option(False, "--outliers", help="Video-DiT-like Q/K: heavy per-channel outliers, K offset, 3D RoPE."),
    dtype: str = typer.Option("float32", "--dtype", help="Input dtype: float32, float16, bfloat16, float64."),
    tensors: Optional[Path] = typer.Option(None, "--tensors", help="Use q, k, v from a .safetensors file instead of synthetic data."),
    layout: str = typer.Option("BHND", "--layout", help="Layout of --tensors: BHND or BNHD."),
    frames: Optional[int] = typer.Option(None, "--frames", min=1, help="Draft recipes' video layout: frames (default: the tokens left after --prefix / (height x width))."),
    height: Optional[int] = typer.Option(None, "--height", min=1, help="Draft recipes' video layout: token rows per frame (synthetic default 16)."),
    width: Optional[int] = typer.Option(None, "--width", min=1, help="Draft recipes' video layout: token columns per frame (synthetic default 16)."),
    prefix: int = typer.Option(0, "--prefix", min=0, help="Draft recipes' video layout: text/prefix tokens before the video tokens (kept dense)."),
    as_json: bool = JsonOpt,
) -> None:
    """Run recipes on Q/K/V and report the output's error against float64 softmax attention.

    Reports relative L2 error and cosine similarity of the output, and the mean and max of |row sum − 1| of the attention weights the recipe actually applies to V (exactly 0 with pre-normalization quantization). Draft recipes also report the realised skip fraction and the share of blocks at each precision.
    """
    import torch

    from ..diagnostics.attention_report import attention_report
    from ..recipes import available_recipes, load_recipe

    names = recipe or sorted(available_recipes())
    recipes = [load_recipe(n) for n in names]
    if dtype not in DTYPES:
        raise UserError(f"--dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    if tensors is not None:
        q, k, v = _load_qkv(tensors, layout)
        source = {"tensors": str(tensors), "layout": layout}
    else:
        from ..diagnostics.synthetic import synthetic_qkv

        q, k, v = synthetic_qkv(
            seq=seq, kv_seq=kv_seq, heads=heads, head_dim=head_dim, batch=batch, seed=seed,
            outliers=outliers, dtype=getattr(torch, dtype),
        )
        source = {"synthetic": "outliers" if outliers else "gaussian", "seed": seed}
    inputs = {**source, "shape_q": list(q.shape), "shape_kv": list(k.shape), "dtype": str(q.dtype).replace("torch.", "")}
    geometry = _video_geometry(recipes, q, k, frames, height, width, prefix, synthetic=tensors is None)

    results = []
    with progress_bar(disable=as_json or len(recipes) == 1) as progress:
        task = progress.add_task("recipes", total=len(recipes))
        for r in recipes:
            progress.update(task, description=r.name)
            results.append(attention_report(q, k, v, r, geometry=geometry))
            progress.advance(task)

    if as_json:
        print_json({**results[0], "inputs": inputs} if len(results) == 1 else {"inputs": inputs, "results": results})
        return
    table = Table(title=f"attention vs float64 softmax · q {tuple(q.shape)} kv {tuple(k.shape)} · {_describe(source)}")
    for col in ("recipe", "rel L2", "cosine", "|rowsum−1| mean", "|rowsum−1| max", "err Q", "err K", "err V", "err P̃"):
        table.add_column(col, justify="left" if col == "recipe" else "right", no_wrap=True)
    for r in results:
        e = r["operand_rel_l2"]
        table.add_row(
            r["recipe"], f"{r['rel_l2']:.4g}", f"{r['cosine']:.6f}", f"{r['rowsum_dev_mean']:.3g}",
            f"{r['rowsum_dev_max']:.3g}", *(f"{e[o]:.3g}" for o in "qkvp"),
        )
    out.print(table)


def _video_geometry(recipes, q, k, frames, height, width, prefix, *, synthetic: bool):
    """The video token layout (VideoGeometry) draft recipes pool and pack by; None if no selected
    recipe is a draft recipe. Synthetic inputs are frames of FRAME_SIDE x FRAME_SIDE tokens."""
    drafts = [r.name for r in recipes if r.attention.kind == "draft"]
    if not drafts or q.dim() != 4 or k.dim() != 4:
        return None  # (non-4-D tensors are reported by attend's shape check)
    from ..attention.draft import VideoGeometry
    from ..diagnostics.synthetic import FRAME_SIDE

    need = f"draft recipe {drafts[0]} needs the video token layout"
    if q.shape[2] != k.shape[2]:
        raise UserError(f"{need}: it is self-attention, so query and key token counts must match ({q.shape[2]} vs {k.shape[2]})")
    if not synthetic and (height is None or width is None):
        raise UserError(f"{need}: pass --height and --width (and --frames, --prefix) for --tensors inputs")
    height, width = height or FRAME_SIDE, width or FRAME_SIDE
    video = q.shape[2] - prefix
    frames = frames or max(video // (height * width), 1)
    if prefix + frames * height * width != q.shape[2]:
        raise UserError(
            f"{need}: {q.shape[2]} tokens are not --prefix {prefix} + --frames {frames} x --height {height} x "
            f"--width {width} (synthetic inputs: --seq a multiple of {FRAME_SIDE * FRAME_SIDE})"
        )
    return VideoGeometry(frames, height, width, prefix)


def _load_qkv(path: Path, layout: str):
    if layout not in ("BHND", "BNHD"):
        raise UserError(f"--layout must be BHND or BNHD, got {layout!r}")
    if not path.is_file():
        raise UserError(f"{path}: no such file")
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        data = load_file(str(path))
    except (SafetensorError, OSError) as e:
        raise UserError(f"{path}: not a readable safetensors file ({e})") from None
    missing = [n for n in ("q", "k", "v") if n not in data]
    if missing:
        raise UserError(f"{path}: missing tensors {', '.join(missing)} (need q, k, v)")
    q, k, v = data["q"], data["k"], data["v"]
    if layout == "BNHD":
        q, k, v = (t.transpose(1, 2) for t in (q, k, v)) if all(t.dim() == 4 for t in (q, k, v)) else (q, k, v)
    return q, k, v


@diagnose_app.command("uos")
@user_errors
def diagnose_uos(as_json: bool = JsonOpt) -> None:
    """The UOS analysis of the MXAttention paper: the objective's minimiser (7.25), the OCP
    overflow-rounding probability (19.27%) and Table 1's normalized-maximum ranges."""
    from ..analysis import uos

    summary = uos.summary()
    if as_json:
        print_json(summary)
        return
    out.print(f"UOS objective minimiser q* = {summary['argmin_q']:.6f}   (paper: 29/4 = 7.25)", highlight=False)
    out.print(f"stationary boundary Δ(q)=0 at q = {summary['stationary_boundary']:.6f}", highlight=False)
    out.print(f"OCP overflow-rounding probability = {100 * summary['ocp_overflow_probability']:.4f}%   (paper: 19.27%)", highlight=False)
    table = Table(title="Table 1: normalized block maximum per scale rule")
    for col in ("rule", "exponent", "range (analytic)", "range (observed)", "overflow interval", "P(overflow)"):
        table.add_column(col)
    for row in summary["table1"]:
        seen = row.get("empirical_range") or {}
        table.add_row(
            row["rule"], row["exponent"], _interval(row["normalized_max_range"]),
            f"[{seen['min']:.6g}, {seen['max']:.6g}]" if seen else "n/a",
            _interval(row["overflow_interval"]), f"{100 * row['overflow_probability']:.2f}%",
        )
    out.print(table)


def _interval(iv: dict | None) -> str:
    """{"lo", "hi", "lo_closed", "hi_closed"} as [lo, hi) notation; None as 'none'."""
    if iv is None:
        return "none"
    return f"{'[' if iv['lo_closed'] else '('}{iv['lo']:g}, {iv['hi']:g}{']' if iv['hi_closed'] else ')'}"


def _fmt_cell(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_fmt_cell(v) for v in value) + "]"
    if isinstance(value, dict):
        return ", ".join(f"{k}={_fmt_cell(v)}" for k, v in value.items())
    return str(value)


@diagnose_app.command("outliers")
@user_errors
def diagnose_outliers(
    seq: int = typer.Option(1024, "--seq", min=1, help="Tokens of the synthetic Q and K."),
    heads: int = typer.Option(2, "--heads", min=1),
    head_dim: int = typer.Option(128, "--head-dim", min=2),
    seed: int = typer.Option(0, "--seed"),
    tensors: Optional[Path] = typer.Option(None, "--tensors", help="Use q, k (and v) from a .safetensors file instead of synthetic data."),
    layout: str = typer.Option("BHND", "--layout", help="Layout of --tensors: BHND or BNHD."),
    rope_segments: Optional[str] = typer.Option(None, "--rope-segments", help="t/h/w RoPE channel split, e.g. 44,42,42 (default: Wan's split of head_dim; synthetic data is always RoPE'd with Wan's split)."),
    as_json: bool = JsonOpt,
) -> None:
    """RotateAttention's channel-wise incoherence Ψ = max |X − E[X]| of Q and K (E: per-channel token
    mean), overall and per 3D-RoPE segment, without rotation and after the interleaved, half and full
    (Hadamard) rotations. Default input: synthetic 3D-RoPE'd, outlier-heavy Q/K."""
    from ..diagnostics.outliers import outlier_report

    segments = None
    if rope_segments:
        try:
            segments = [int(x) for x in rope_segments.replace("/", ",").split(",") if x.strip()]
        except ValueError:
            raise UserError(f"--rope-segments must be comma-separated integers, got {rope_segments!r}") from None
    if tensors is not None:
        q, k, _ = _load_qkv(tensors, layout)
        source = {"tensors": str(tensors), "layout": layout}
    else:
        from ..diagnostics.synthetic import synthetic_qkv

        if head_dim % 2:
            raise UserError(f"--head-dim must be even (3D RoPE rotates channel pairs), got {head_dim}")
        q, k, _ = synthetic_qkv(seq=seq, heads=heads, head_dim=head_dim, seed=seed, outliers=True)
        source = {"synthetic": "outliers", "seed": seed}
    report = outlier_report(q, k, segments)
    report["inputs"] = {**source, "shape_q": list(q.shape), "shape_k": list(k.shape)}
    if as_json:
        print_json(report)
        return
    segs = report["rope_segments"]
    table = Table(title=f"channel-wise incoherence Ψ = max|X − E[X]| · q {tuple(q.shape)} k {tuple(k.shape)} · {_describe(source)}")
    cols = ["rotation", "Ψ (max Q, K)", "Ψ Q", "Ψ K", *(f"Ψ {n} ({d})" for n, d in segs.items()), "Ψ none / Ψ", "token max/RMS"]
    for col in cols:
        table.add_column(col, justify="left" if col == "rotation" else "right", no_wrap=True)
    for rot in report["psi"]:
        table.add_row(
            rot, *(f"{report[key][rot]:.4g}" for key in ("psi", "q", "k")),
            *(f"{report['segments'][n][rot]:.4g}" for n in segs),
            _fmt_cell(report["reduction_vs_none"][rot]), f"{report['token_incoherence'][rot]:.4g}",
        )
    out.print(table)


def _describe(source: dict) -> str:
    """The inputs in words for a table title: "tensors qkv.safetensors (BNHD)" or "synthetic outliers, seed 0"."""
    if "tensors" in source:
        return f"tensors {source['tensors']} ({source['layout']})"
    return f"synthetic {source['synthetic']}, seed {source['seed']}"
