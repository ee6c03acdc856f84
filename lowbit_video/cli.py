"""The `lowbit-video` command line. Thin: parse, call the library, render with rich.

Every reporting command takes --json and then prints exactly one JSON object on stdout. User
mistakes (bad recipe files, unknown names, unusable shapes, NaN/Inf inputs) are one line on stderr
and exit code 2, without a traceback.
"""

from __future__ import annotations

import functools
import json
import shutil
import sys
from pathlib import Path
from typing import Any, Callable, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from typer.core import TyperCommand

from . import __version__
from .errors import UserError

app = typer.Typer(
    help="4-bit and mixed-precision attention for video diffusion transformers: run recipes, "
    "inspect their numerics, score videos against paired FP16 runs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
recipes_app = typer.Typer(help="List attention recipes (recipes/*.toml), or validate recipe files.")
diagnose_app = typer.Typer(help="Numerical diagnostics that need no model.", no_args_is_help=True)
app.add_typer(recipes_app, name="recipes")
app.add_typer(diagnose_app, name="diagnose")

# Tables must not be squeezed to 80 columns when stdout is a pipe or a CI log.
_WIDTH = max(shutil.get_terminal_size((160, 24)).columns, 120)
out = Console(soft_wrap=True, width=_WIDTH)
err = Console(stderr=True, soft_wrap=True)

JsonOpt = typer.Option(False, "--json", help="Print exactly one JSON object on stdout instead of a table.")


def user_errors(fn: Callable) -> Callable:
    """Report UserError as one line on stderr with exit code 2 (no traceback for user mistakes)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except UserError as e:
            print(f"error: {e}", file=sys.stderr)
            raise typer.Exit(2) from None

    return wrapper


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, allow_nan=False) + "\n")


def version_callback(value: bool) -> None:
    if value:
        print(f"lowbit-video {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: bool = typer.Option(False, "--version", callback=version_callback, is_eager=True, help="Show the version and exit."),
) -> None:
    pass


# --------------------------------------------------------------------------------------- recipes


@recipes_app.callback(invoke_without_command=True)
@user_errors
def recipes(ctx: typer.Context, as_json: bool = JsonOpt) -> None:
    """List the recipes: name, one-line description, source file."""
    if ctx.invoked_subcommand is not None:
        return
    from .recipes import available_recipes, load_recipe

    rows = []
    for name, path in sorted(available_recipes().items()):
        recipe = load_recipe(path)
        rows.append({"name": recipe.name, "description": recipe.description, "file": str(path)})
    if as_json:
        print_json({"recipes": rows})
        return
    table = Table(title="recipes")
    for col in ("name", "description", "file"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(r["name"], r["description"], _short_path(r["file"]))
    out.print(table)


@recipes_app.command("validate")
@user_errors
def recipes_validate(
    paths: list[Path] = typer.Argument(..., help="Recipe TOML files to check."),
    as_json: bool = JsonOpt,
) -> None:
    """Check recipe files against the schema; one line per file, non-zero exit if any is invalid."""
    from .errors import RecipeError
    from .recipes import load_recipe

    results = []
    for path in paths:
        try:
            recipe = load_recipe(str(path) if str(path).endswith(".toml") else path)
            results.append({"file": str(path), "ok": True, "name": recipe.name, "error": None})
        except RecipeError as e:
            results.append({"file": str(path), "ok": False, "name": None, "error": str(e)})
    if as_json:
        print_json({"valid": all(r["ok"] for r in results), "files": results})
    else:
        for r in results:
            if r["ok"]:
                out.print(f"[green]ok[/green]    {r['file']} ({r['name']})", highlight=False)
            else:
                print(f"error: {r['error']}", file=sys.stderr)
    if not all(r["ok"] for r in results):
        raise typer.Exit(2)


# -------------------------------------------------------------------------------------- diagnose

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

    from .diagnostics.attention_report import attention_report
    from .recipes import available_recipes, load_recipe

    names = recipe or sorted(available_recipes())
    recipes = [load_recipe(n) for n in names]
    if dtype not in DTYPES:
        raise UserError(f"--dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    if tensors is not None:
        q, k, v = _load_qkv(tensors, layout)
        source = {"tensors": str(tensors), "layout": layout}
    else:
        from .diagnostics.synthetic import synthetic_qkv

        q, k, v = synthetic_qkv(
            seq=seq, kv_seq=kv_seq, heads=heads, head_dim=head_dim, batch=batch, seed=seed,
            outliers=outliers, dtype=getattr(torch, dtype),
        )
        source = {"synthetic": "outliers" if outliers else "gaussian", "seed": seed}
    inputs = {**source, "shape_q": list(q.shape), "shape_kv": list(k.shape), "dtype": str(q.dtype).replace("torch.", "")}
    geometry = _video_geometry(recipes, q, k, frames, height, width, prefix, synthetic=tensors is None)

    results = []
    with _progress(disable=as_json or len(recipes) == 1) as progress:
        task = progress.add_task("recipes", total=len(recipes))
        for r in recipes:
            progress.update(task, description=r.name)
            results.append(attention_report(q, k, v, r, geometry=geometry))
            progress.advance(task)

    if as_json:
        print_json({**results[0], "inputs": inputs} if len(results) == 1 else {"inputs": inputs, "results": results})
        return
    table = Table(title=f"attention vs float64 softmax · q {tuple(q.shape)} kv {tuple(k.shape)} · {source}")
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
    from .attention.draft import VideoGeometry
    from .diagnostics.synthetic import FRAME_SIDE

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
    from .analysis import uos

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
    from .diagnostics.outliers import outlier_report

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
        from .diagnostics.synthetic import synthetic_qkv

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
    table = Table(title=f"channel-wise incoherence Ψ = max|X − E[X]| · q {tuple(q.shape)} k {tuple(k.shape)} · {source}")
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


# ------------------------------------------------------------------------------------ train-tiny


@app.command("train-tiny")
@user_errors
def train_tiny(
    steps: int = typer.Option(..., "--steps", min=1, help="Train until this global step (a resumed run counts from its checkpoint)."),
    out_dir: Path = typer.Option(..., "--out", help="Run folder: checkpoint.pt, loss.jsonl, summary.json, model/ (EMA weights, fp16)."),
    resume: bool = typer.Option(False, "--resume", help="Continue from OUT/checkpoint.pt (model, EMA, optimizer, step, RNG)."),
    batch: int = typer.Option(64, "--batch", min=1, help="Clips per step."),
    lr: float = typer.Option(5e-4, "--lr", help="AdamW learning rate (after a linear warm-up)."),
    device: str = typer.Option("auto", "--device", help="cuda, cpu or auto."),
    minutes: Optional[float] = typer.Option(None, "--minutes", help="Stop (with a checkpoint) after this many minutes."),
    compile_: bool = typer.Option(False, "--compile", help="torch.compile the transformer blocks (regional)."),
    seed: int = typer.Option(0, "--seed"),
    workers: int = typer.Option(-1, "--workers", help="Clip-rendering processes (-1: cores - 1; 0: in-process)."),
    ckpt_every: float = typer.Option(60.0, "--ckpt-every", help="Seconds between checkpoints."),
    pool_chunks: int = typer.Option(64, "--pool-chunks", min=1, help="Data pool size in chunks of 1024 clips."),
    as_json: bool = JsonOpt,
) -> None:
    """Train the shipped tiny-shapes text-to-video model (rectified flow, Wan objective)."""
    from .models.tiny_shapes.train import TrainConfig, train

    cfg = TrainConfig(steps=steps, out=str(out_dir), batch=batch, lr=lr, device=device, minutes=minutes,
                      compile=compile_, seed=seed, workers=workers, ckpt_every_s=ckpt_every,
                      pool_chunks=pool_chunks)
    try:
        summary = train(cfg, resume=resume, log=(lambda m: print(m, file=sys.stderr, flush=True)) if as_json
                        else (lambda m: err.print(m, highlight=False)))
    except (FileNotFoundError, RuntimeError) as e:
        raise UserError(str(e)) from None
    if as_json:
        print_json(summary)


# ------------------------------------------------------------------------- generate, models, adherence


class _GreedyCommand(TyperCommand):
    """Lets list options take several values after one flag (`--seeds 0 1 2`, `--recipe fp16
    mxattention`) as well as repeated flags (`--seeds 0 --seeds 1`): each value after a listed option,
    up to the next argument starting with '-', is given to that option."""

    greedy: tuple[str, ...] = ("--seeds", "--recipe", "-r", "--prompt", "--capture-blocks", "--capture-steps")

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        out: list[str] = []
        opt, taken = None, 0
        for i, a in enumerate(args):
            if a == "--":
                out.extend(args[i:])
                break
            if a in self.greedy:
                opt, taken = a, 0
                out.append(a)
            elif a.startswith("-") and len(a) > 1:
                opt = None
                out.append(a)
            elif opt is not None:
                out.extend([a] if taken == 0 else [opt, a])
                taken += 1
            else:
                out.append(a)
        return super().parse_args(ctx, out)


class _RichReporter:
    """generate's progress on stderr: one bar over runs, one over the denoising steps of a batch."""

    def __init__(self, quiet: bool, prefix: str = "") -> None:
        self.quiet = quiet
        self.prefix = prefix  # "[rank 0/2] " under torchrun
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                                 TimeElapsedColumn(), console=err, transient=True, disable=not err.is_terminal)
        self.runs_task = self.steps_task = None
        self.steps_done = 0
        self.started = False

    def planned(self, runs: list, todo: int) -> None:
        done = len(runs) - todo
        if done and not self.quiet:
            err.print(f"{self.prefix}{done} of {len(runs)} runs already complete", highlight=False, markup=False)
        if todo:
            self.progress.start()
            self.started = True
            self.runs_task = self.progress.add_task("runs", total=todo)
            self.steps_task = self.progress.add_task("steps", total=1, visible=False)

    def loading(self, model: str) -> None:
        self.progress.update(self.runs_task, description=f"loading {model}")

    def loaded(self, model: str, seconds: float) -> None:
        self.progress.update(self.runs_task, description="runs")
        self.progress.console.print(f"{self.prefix}loaded {model} in {seconds:.1f} s", highlight=False, markup=False)

    def batch_started(self, recipe: str, prompt: str, seeds: list, steps: int) -> None:
        short = prompt if len(prompt) <= 32 else prompt[:31] + "…"
        self.progress.update(self.runs_task, description=f"{recipe} · seed {','.join(map(str, seeds))} · {short}")
        self.steps_done = 0
        self.progress.reset(self.steps_task, total=steps, completed=0, visible=True, description="steps")

    def step(self, step: int, total: int) -> None:
        # one call per finished step (the step index may count from 0 or 1, so it is not used)
        self.steps_done = min(self.steps_done + 1, total)
        self.progress.update(self.steps_task, total=total, completed=self.steps_done)

    def run_done(self, run: Any) -> None:
        self.progress.advance(self.runs_task)

    def close(self) -> None:
        if self.started:
            self.progress.stop()


@app.command("generate", cls=_GreedyCommand)
@user_errors
def generate(
    model: str = typer.Option("tiny-shapes", "--model", "-m", help="Model name (see `lowbit-video models`)."),
    recipe: Optional[list[str]] = typer.Option(None, "--recipe", "-r", help="Recipe name or TOML path; several: --recipe fp16 mxattention (default: fp16)."),
    prompts: Optional[Path] = typer.Option(None, "--prompts", help="Prompt file, one per line, '#' comments (default: prompts/smoke.txt)."),
    prompt: Optional[list[str]] = typer.Option(None, "--prompt", help="Prompt text instead of --prompts; several allowed."),
    seeds: Optional[list[int]] = typer.Option(None, "--seeds", help="Seeds, e.g. --seeds 0 1 2 (default: 0). A seed gives the same initial noise under every recipe."),
    steps: Optional[int] = typer.Option(None, "--steps", help="Denoising steps (default: the model's)."),
    out_dir: Path = typer.Option(Path("runs"), "--out", help="Output root: <out>/<model>/<recipe>/<prompt-slug>/seed-<s>/."),
    model_path: Optional[str] = typer.Option(None, "--model-path", help="Diffusers-format checkpoint folder (real models; offline)."),
    height: Optional[int] = typer.Option(None, "--height", help="Frame height in pixels (default: the model's)."),
    width: Optional[int] = typer.Option(None, "--width", help="Frame width in pixels (default: the model's)."),
    frames: Optional[int] = typer.Option(None, "--frames", help="Frames per clip (default: the model's)."),
    device: str = typer.Option("cpu", "--device", help="cpu or cuda."),
    guidance: Optional[float] = typer.Option(None, "--guidance", help="Classifier-free guidance scale (default: the model's)."),
    batch: Optional[int] = typer.Option(None, "--batch", help="Seeds of a prompt per model call (default 1: a run's frames then never depend on what else is in the grid; larger batches are faster on a GPU, not on a CPU)."),
    capture_qkv: Optional[str] = typer.Option(None, "--capture-qkv", help="Save post-RoPE Q, K, V (safetensors + index) under this folder."),
    capture_blocks: Optional[list[int]] = typer.Option(None, "--capture-blocks", help="Blocks to capture (default: all)."),
    capture_steps: Optional[list[int]] = typer.Option(None, "--capture-steps", help="Denoising steps to capture (default: all)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Regenerate runs that are already complete."),
    shard: Optional[str] = typer.Option(None, "--shard", help="Run only shard i of n of the grid (i counts from 0), e.g. --shard $SLURM_ARRAY_TASK_ID/8 in a cluster array job. Under torchrun the rank picks the shard by itself."),
    context_parallel: Optional[str] = typer.Option(None, "--context-parallel", help="ulysses or ring: split each video's tokens over the torchrun processes (diffusers context parallelism; Wan models)."),
    cp_degree: Optional[int] = typer.Option(None, "--cp-degree", help="Processes per video with --context-parallel (default and currently required: WORLD_SIZE)."),
    as_json: bool = JsonOpt,
) -> None:
    """Generate videos for prompts x seeds x recipes: video.mp4, frames.png, frames.npz and meta.json per run.

    Resumable: complete runs (meta.json present; it is written last, atomically) are skipped, so the same command again does nothing; an interrupted run is cleaned and generated again. <out>/manifest.json lists every run and whether it is complete.

    Many processes: `torchrun --nproc-per-node N -m lowbit_video generate ...` splits the grid over the N ranks (each run on exactly one; rank 0 writes the manifest when all are done); `--shard i/n` does the same for array jobs.
    """
    from .distributed import ShardSpec
    from .generate import GenerateConfig, Reporter, generate as run_grid

    if prompts is not None and prompt:
        raise UserError("pass --prompts FILE or --prompt TEXT, not both")
    cfg = GenerateConfig(
        model=model, recipes=recipe or ["fp16"], prompts=prompt or None,
        prompts_file=str(prompts) if prompts is not None else None, seeds=seeds or [0], steps=steps,
        guidance=guidance, height=height, width=width, frames=frames, out=out_dir, model_path=model_path,
        device=device, batch=batch, capture_dir=capture_qkv, capture_blocks=capture_blocks,
        capture_steps=capture_steps, overwrite=overwrite, context_parallel=context_parallel, cp_degree=cp_degree,
    )
    spec = ShardSpec.from_cli_or_env(shard)
    cfg.shard = spec
    prefix = f"[rank {spec}] " if spec.launched else (f"[shard {spec}] " if not spec.single else "")
    # Under torchrun only rank 0 draws progress and prints the result; the others print one line.
    reporter = _RichReporter(quiet=as_json, prefix=prefix) if spec.is_main or not spec.launched else None
    try:
        result = run_grid(cfg, reporter or Reporter())
    finally:
        if reporter is not None:
            reporter.close()
    if spec.launched and not spec.is_main:
        print(f"{prefix}generated {result['generated']}, {result['skipped']} already complete", file=sys.stderr)
        return
    if as_json:
        print_json(result)
        return
    n, done, skipped = len(result["runs"]), result["generated"], result["skipped"]
    if "shard" in result:
        mine = sum(r["status"] != "other-shard" for r in result["runs"])
        line = f"{prefix}generated {done} of this process's {mine} runs, {skipped} already complete"
        if result.get("manifest"):
            line += (f"; grid: {result['complete']} of {n} complete, {result['missing']} missing "
                     f"({_short_path(result['manifest'])})")
        out.print(line, highlight=False, markup=False)
        return
    if done == 0:
        out.print(f"{skipped} runs already complete; nothing to do ({_short_path(str(out_dir))})", highlight=False)
        return
    if n <= 24:
        table = Table(title=f"generate · {model} · {_short_path(str(out_dir))}")
        for col in ("recipe", "prompt", "seed", "status", "dir (under --out)"):
            table.add_column(col, overflow="fold")
        for r in result["runs"]:
            table.add_row(r["recipe"], r["prompt"], str(r["seed"]), r["status"], _relative(r["dir"], out_dir))
        out.print(table)
    out.print(f"generated {done} run{'s' * (done != 1)}, {skipped} already complete → {_short_path(str(out_dir))}",
              highlight=False)


@app.command("models")
@user_errors
def models(as_json: bool = JsonOpt) -> None:
    """List the models: name, family, where the weights come from, default steps and size."""
    from dataclasses import asdict

    from .models.registry import list_models

    rows = [asdict(m) for m in list_models()]
    if as_json:
        print_json({"models": rows})
        return
    table = Table(title="models")
    for col in ("name", "family", "weights", "steps", "size (frames x H x W)", "description"):
        table.add_column(col, overflow="fold")
    for m in rows:
        table.add_row(m["name"], m["family"], str(m["weights"]), str(m["default_steps"]),
                      f"{m['default_frames']} x {m['default_height']} x {m['default_width']}", m["description"])
    out.print(table)


@app.command("adherence")
@user_errors
def adherence(
    run_dirs: list[Path] = typer.Argument(..., help="Run directories, or folders above them (searched)."),
    as_json: bool = JsonOpt,
) -> None:
    """Prompt adherence of tiny-shapes runs (colour, motion, shape detected from the pixels).

    Reads each run's exact frames (frames.npz; else the PNG strip; else the decoded mp4) and the prompt in meta.json. Runs of other models and two-object prompts are skipped with a note on stderr.
    """
    from .generate import adherence as score_runs

    res = score_runs(run_dirs)
    for s in res["skipped"]:
        print(f"note: skipped {s['dir']}: {s['reason']}", file=sys.stderr)
    if res["n"] == 0:
        raise UserError(f"no tiny-shapes runs to score under {', '.join(map(str, run_dirs))} "
                        f"({len(res['skipped'])} skipped)")
    summary = {k: res[k] for k in ("color_accuracy", "motion_accuracy", "shape_accuracy", "n")}
    summary["skipped"] = len(res["skipped"])
    summary["by_recipe"] = res["by_recipe"]
    if as_json:
        print_json(summary)
        return
    table = Table(title=f"prompt adherence · {res['n']} runs")
    for col in ("recipe", "colour", "motion", "shape", "n"):
        table.add_column(col, justify="left" if col == "recipe" else "right")
    rows = list(res["by_recipe"].items()) + ([("all", summary)] if len(res["by_recipe"]) != 1 else [])
    for name, acc in rows:
        table.add_row(name, *(f"{100 * acc[k]:.1f}%" for k in ("color_accuracy", "motion_accuracy", "shape_accuracy")),
                      str(acc["n"]))
    out.print(table)


# ------------------------------------------------------------- commands that live in their own modules

# Each module defines register(app); imported here, after the helpers above exist, so a module can
# use user_errors / print_json / out / err from this one.
from . import cli_ablate, cli_bench, cli_compare, cli_evaluate  # noqa: E402

for _module in (cli_evaluate, cli_compare, cli_ablate, cli_bench):
    _module.register(app)


# ------------------------------------------------------------------------------------------ utils


def _progress(disable: bool) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                    TimeElapsedColumn(), console=err, transient=True, disable=disable)


def _relative(p: str, root: Path) -> str:
    try:
        return str(Path(p).relative_to(root))
    except ValueError:
        return p


def _short_path(p: str) -> str:
    try:
        return str(Path(p).resolve().relative_to(Path.cwd()))
    except ValueError:
        return p


def main() -> None:
    app()


if __name__ == "__main__":
    main()
