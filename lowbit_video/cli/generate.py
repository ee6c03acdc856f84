"""`lowbit-video generate`: videos for prompts x seeds x recipes."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from ..errors import UserError
from .common import DEVICE_HELP, GreedyCommand, JsonOpt, RichReporter, out, print_json, relative, short_path, user_errors


def register(app: typer.Typer) -> None:
    app.command("generate", cls=GreedyCommand)(generate)


@user_errors
def generate(
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Model name (see `lowbit-video models`; default: tiny-shapes, or with --model-path the folder's pipeline class). With --model-path, the folder must be a checkpoint of this model."),
    recipe: Optional[list[str]] = typer.Option(None, "--recipe", "-r", help="Recipe name or TOML path; several: --recipe fp16 mxattention (default: fp16)."),
    prompts: Optional[Path] = typer.Option(None, "--prompts", help="Prompt file, one per line, '#' comments (default: prompts/smoke.txt); a shipped prompt set by name: smoke, shapes; or VBench's standard prompt suite: `vbench` (all dimensions) or `vbench:<dimension>`, e.g. vbench:color (needs the vbench package; each run records its prompt's VBench dimensions, so `evaluate` can score object_class, color, scene, ... in VBench's standard mode)."),
    prompt: Optional[list[str]] = typer.Option(None, "--prompt", help="Prompt text instead of --prompts; several allowed."),
    prompt_limit: Optional[int] = typer.Option(None, "--prompt-limit", help="At most N prompts: the first N (with --prompts vbench, dimensions take turns, so a small N reaches every dimension)."),
    seeds: Optional[list[int]] = typer.Option(None, "--seeds", help="Seeds, e.g. --seeds 0 1 2 (default: 0). A seed gives the same initial noise under every recipe."),
    steps: Optional[int] = typer.Option(None, "--steps", help="Denoising steps (default: the model's)."),
    out_dir: Path = typer.Option(Path("runs"), "--out", help="Output root: <out>/<model>/<recipe>/<prompt-slug>/seed-<s>/."),
    model_path: Optional[str] = typer.Option(None, "--model-path", help="Diffusers-format checkpoint folder (offline): of the --model named, or without --model any diffusers text-to-video pipeline folder (WanPipeline, CogVideoXPipeline, LTXPipeline, HunyuanVideoPipeline, ...; an image-to-video one with --image, a video-to-video one with --video), run with its pipeline's default settings."),
    video: Optional[Path] = typer.Option(None, "--video", help="Conditioning video (an mp4 or any file ffmpeg decodes, or a run's frames.npz) of a video-to-video pipeline folder (--model-path without --model: CogVideoXVideoToVideoPipeline, WanVideoToVideoPipeline, WanVACEPipeline, LTXConditionPipeline, ...), as --image is for image-to-video ones; where the pipeline takes no frame count, the clip has the video's."),
    image: Optional[Path] = typer.Option(None, "--image", help="Conditioning image (PNG, JPEG, ...) of an image-to-video pipeline folder (--model-path without --model: WanImageToVideoPipeline, LTXImageToVideoPipeline, CogVideoXImageToVideoPipeline, ...), the same for every prompt, seed and recipe; its content digest joins the run folders' model name, so runs of another image never pair with these."),
    height: Optional[int] = typer.Option(None, "--height", help="Frame height in pixels (default: the model's)."),
    width: Optional[int] = typer.Option(None, "--width", help="Frame width in pixels (default: the model's)."),
    frames: Optional[int] = typer.Option(None, "--frames", help="Frames per clip (default: the model's)."),
    device: str = typer.Option("auto", "--device", help=DEVICE_HELP),
    guidance: Optional[float] = typer.Option(None, "--guidance", help="Classifier-free guidance scale (default: the model's)."),
    batch: Optional[int] = typer.Option(None, "--batch", help="Seeds of a prompt per model call (default 1: a run's frames then never depend on what else is in the grid; larger batches are faster on a GPU, not on a CPU)."),
    capture_qkv: Optional[str] = typer.Option(None, "--capture-qkv", help="Save post-RoPE Q, K, V (safetensors + index) under this folder."),
    capture_blocks: Optional[list[int]] = typer.Option(None, "--capture-blocks", help="Blocks to capture (default: all)."),
    capture_steps: Optional[list[int]] = typer.Option(None, "--capture-steps", help="Denoising steps to capture (default: all)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Regenerate runs that are already complete."),
    shard: Optional[str] = typer.Option(None, "--shard", help="Run only shard i of n of the grid (i counts from 0), e.g. --shard $SLURM_ARRAY_TASK_ID/8 in a cluster array job. Under torchrun the rank picks the shard by itself."),
    context_parallel: Optional[str] = typer.Option(None, "--context-parallel", help="ulysses or ring: split each video's tokens over the torchrun processes (diffusers context parallelism; Wan models)."),
    cp_degree: Optional[int] = typer.Option(None, "--cp-degree", help="Processes per video with --context-parallel (default and currently required: WORLD_SIZE)."),
    compile_: bool = typer.Option(False, "--compile", help="Regional torch.compile of the transformer's repeated blocks (fullgraph, Inductor), the same for every recipe, so fp16 is compiled too; each recipe is compiled afresh, so its first steps include the compilation. Recorded in each run's meta.json (compile)."),
    as_json: bool = JsonOpt,
) -> None:
    """Generate videos for prompts x seeds x recipes: video.mp4, frames.png, frames.npz and meta.json per run.

    Resumable: complete runs (meta.json present; it is written last, atomically) are skipped, so the same command again does nothing; an interrupted run is cleaned and generated again. <out>/manifest.json lists every run and whether it is complete.

    Many processes: `torchrun --nproc-per-node N -m lowbit_video generate ...` splits the grid over the N ranks (each run on exactly one; rank 0 writes the manifest when all are done); `--shard i/n` does the same for array jobs.
    """
    from ..distributed import ShardSpec
    from ..generate import GenerateConfig, Reporter, generate as run_grid

    if prompts is not None and prompt:
        raise UserError("pass --prompts FILE or --prompt TEXT, not both")
    from ..devices import resolve_device

    device = resolve_device(device)
    cfg = GenerateConfig(
        model=model, recipes=recipe or ["fp16"], prompts=prompt or None,
        prompts_file=str(prompts) if prompts is not None else None, prompt_limit=prompt_limit, seeds=seeds or [0],
        steps=steps,
        guidance=guidance, height=height, width=width, frames=frames, out=out_dir, model_path=model_path,
        image=str(image) if image is not None else None,
        video=str(video) if video is not None else None,
        device=device, batch=batch, capture_dir=capture_qkv, capture_blocks=capture_blocks,
        capture_steps=capture_steps, overwrite=overwrite, context_parallel=context_parallel, cp_degree=cp_degree,
        compile=compile_,
    )
    spec = ShardSpec.from_cli_or_env(shard)
    cfg.shard = spec
    prefix = f"[rank {spec}] " if spec.launched else (f"[shard {spec}] " if not spec.single else "")
    # Under torchrun only rank 0 draws progress and prints the result; the others print one line.
    reporter = RichReporter(quiet=as_json, prefix=prefix, device=device) if spec.is_main or not spec.launched else None
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
                     f"({short_path(result['manifest'])})")
        out.print(line, highlight=False, markup=False)
        return
    if done == 0:
        out.print(f"{skipped} runs already complete; nothing to do ({short_path(str(out_dir))})", highlight=False)
        _claimed_note(result)
        return
    if n <= 24:
        table = Table(title=f"generate · {result['runs'][0]['model']} · {short_path(str(out_dir))}")
        for col in ("recipe", "prompt", "seed", "status", "dir (under --out)"):
            table.add_column(col, overflow="fold")
        for r in result["runs"]:
            table.add_row(r["recipe"], r["prompt"], str(r["seed"]), r["status"], relative(r["dir"], out_dir))
        out.print(table)
    out.print(f"generated {done} run{'s' * (done != 1)}, {skipped} already complete → {short_path(str(out_dir))}",
              highlight=False)
    _claimed_note(result)


def _claimed_note(result: dict) -> None:
    """Runs another process was generating are left to it: say how many, and who."""
    claimed = [r for r in result["runs"] if r["status"] == "claimed"]
    if claimed:
        print(f"warning: {len(claimed)} run{'s' * (len(claimed) != 1)} left to another process generating "
              f"{'them' if len(claimed) > 1 else 'it'}, e.g. {claimed[0]['dir']}: {claimed[0].get('note', '')}; "
              "run the same command again once it is done", file=sys.stderr)

