"""`lowbit-video profile`: which attention calls of a model a recipe can quantize, and the policy that follows."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer
from rich.table import Table

from ..errors import UserError
from .common import DEVICE_HELP, GreedyCommand, JsonOpt, err, out, print_json, progress_bar, short_path, user_errors

TOP = 8  # rows of each end of the sensitivity table


def register(app: typer.Typer) -> None:
    app.command("profile", cls=GreedyCommand)(profile)


class BarReporter:
    """The profile's progress on stderr: one bar per phase (profiling, each scored candidate)."""

    def __init__(self, quiet: bool) -> None:
        self.progress = progress_bar(disable=quiet or not err.is_terminal)
        self.task = None
        self.progress.start()

    def phase(self, text: str, total: int) -> None:
        if self.task is not None:
            self.progress.remove_task(self.task)
        self.task = self.progress.add_task(text, total=total)

    def advance(self) -> None:
        if self.task is not None:
            self.progress.advance(self.task)

    def step(self, done: int, total: int) -> None:
        pass

    def close(self) -> None:
        self.progress.stop()


@user_errors
def profile(
    recipe: Optional[str] = typer.Option(None, "--recipe", "-r", help="Recipe to profile: a name or a TOML path."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Model name (see `lowbit-video models`; default: tiny-shapes, or with --model-path the folder's pipeline class), as for generate."),
    model_path: Optional[str] = typer.Option(None, "--model-path", help="Diffusers-format checkpoint folder of --model (as for generate)."),
    image: Optional[Path] = typer.Option(None, "--image", help="Conditioning image of an image-to-video pipeline folder (as for generate)."),
    video: Optional[Path] = typer.Option(None, "--video", help="Conditioning video of a video-to-video pipeline folder (as for generate)."),
    prompts: Optional[Path] = typer.Option(None, "--prompts", help="Prompt file or shipped prompt set (smoke, shapes), as for generate (default: prompts/smoke.txt)."),
    prompt: Optional[list[str]] = typer.Option(None, "--prompt", help="Prompt text instead of --prompts; several allowed."),
    prompt_limit: Optional[int] = typer.Option(None, "--prompt-limit", help="At most N prompts: the first N."),
    seeds: Optional[list[int]] = typer.Option(None, "--seeds", help="Seeds, e.g. --seeds 0 1 (default: 0)."),
    steps: Optional[int] = typer.Option(None, "--steps", help="Denoising steps (default: the model's). The policy written is for this step count."),
    guidance: Optional[float] = typer.Option(None, "--guidance", help="Classifier-free guidance scale (default: the model's)."),
    height: Optional[int] = typer.Option(None, "--height", help="Frame height (default: the model's)."),
    width: Optional[int] = typer.Option(None, "--width", help="Frame width (default: the model's)."),
    frames: Optional[int] = typer.Option(None, "--frames", help="Frames per clip (default: the model's)."),
    out_dir: Path = typer.Option(Path("profile"), "--out", help="Folder for profile.json, heatmap.png and the policy's recipe file."),
    budget: Optional[str] = typer.Option(None, "--budget", help="Write a policy: rel-l2=X (no quantized call above rel-L2 X), fp16-share=S (the most sensitive share S of the calls in 16 bit) or psnr=P (the fewest 16-bit calls whose clips reach P dB against the 16-bit clips; a short search that generates candidates)."),
    name: Optional[str] = typer.Option(None, "--name", help="Name of the written recipe (default: <recipe>-profiled)."),
    search_evals: int = typer.Option(6, "--search-evals", help="With --budget psnr=: at most this many candidate policies generated and scored."),
    time_fp16: bool = typer.Option(False, "--time-fp16", help="Also time one plain 16-bit generation (the first prompt and seed), to compare the profile's cost with."),
    device: str = typer.Option("auto", "--device", help=DEVICE_HELP),
    study: bool = typer.Option(False, "--study", help="Instead: the validation study on tiny-shapes (profiled vs uniform vs the papers' policies, PSNR against 16 bit), written as markdown to --out (a .md file)."),
    study_recipes: Optional[list[str]] = typer.Option(None, "--study-recipe", help="With --study: the recipes (default: rotateattention-half, mxattention, draftattention2)."),
    as_json: bool = JsonOpt,
) -> None:
    """Profile a recipe on a model: one 16-bit generation per prompt x seed, with the recipe's output computed next
    to the 16-bit one at every self-/joint-attention call (rel-L2, cosine), aggregated by block x step x attention
    type. Writes profile.json and heatmap.png; with --budget also a recipe file that keeps the chosen (block, step)
    calls in 16 bit, and prints the generate command that runs it."""
    if prompts is not None and prompt:
        raise UserError("pass --prompts FILE or --prompt TEXT, not both")
    if study:
        return _study(out_dir, prompts, prompt_limit, seeds, steps, device, study_recipes, as_json)
    if recipe is None:
        raise UserError("--recipe is required: the recipe to profile (e.g. --recipe mxattention)")
    from ..generate import GenerateConfig
    from ..profile.run import ProfileConfig, run_profile

    clips = GenerateConfig(model=model, recipes=["fp16"], model_path=model_path,
                           image=str(image) if image is not None else None,
                           video=str(video) if video is not None else None, prompts=prompt or None,
                           prompts_file=str(prompts) if prompts is not None else None, prompt_limit=prompt_limit,
                           seeds=seeds or [0], steps=steps, guidance=guidance, height=height, width=width,
                           frames=frames, out=str(out_dir), device=device)
    cfg = ProfileConfig(recipe=recipe, clips=clips, budget=budget, name=name, search_evals=search_evals,
                        time_fp16=time_fp16)
    reporter = BarReporter(quiet=as_json)
    try:
        result = run_profile(cfg, reporter)
    finally:
        reporter.close()
    if as_json:
        print_json(result)
        return
    _print_table(result)
    files = result["files"]
    out.print(f"profile of {result['recipe']} on {result['model']}: {result['timings']['calls']} calls in "
              f"{result['timings']['profile_s']:.1f} s → {short_path(files['profile'])}, "
              f"{short_path(files['heatmap'])}", highlight=False, markup=False)
    policy = result.get("policy")
    if policy:
        extra = f", mean PSNR {policy['psnr']:.2f} dB" if policy.get("psnr") is not None else ""
        out.print(f"policy for {policy['budget']}: {len(policy['high_precision_calls'])} (block, step) cells in 16 bit "
                  f"(share {policy['fp16_share']:.3f}{extra}) → {short_path(policy['file'])}", highlight=False,
                  markup=False)
        out.print("generate with it:", highlight=False, markup=False)
        out.print(policy["generate"], highlight=False, markup=False, soft_wrap=True)


def _print_table(result: dict[str, Any]) -> None:
    cells = sorted(result["cells"], key=lambda c: -c["rel_l2_mean"])
    if len(cells) <= 2 * TOP:
        shown, gap = cells, False
    else:
        shown, gap = cells[:TOP] + cells[-TOP:], True
    table = Table(title=f"{result['recipe']} on {result['model']}: most sensitive calls first")
    for col in ("attention", "block", "step", "calls", "rel-L2 mean", "rel-L2 max", "cosine mean"):
        table.add_column(col, justify="left" if col == "attention" else "right")
    for i, c in enumerate(shown):
        if gap and i == TOP:
            table.add_row("…", "", "", "", "", "", "")
        table.add_row(c["attention_type"], str(c["block"]), str(c["step"]), str(c["calls"]), f"{c['rel_l2_mean']:.4g}",
                      f"{c['rel_l2_max']:.4g}", f"{c['cosine_mean']:.6f}")
    out.print(table)


def _study(out_path: Path, prompts, prompt_limit, seeds, steps, device, recipes, as_json: bool) -> None:
    from .. import runstore
    from ..profile.study import DEFAULT_RECIPES, StudyConfig, run_study, study_markdown

    if not str(out_path).endswith(".md"):
        raise UserError(f"--study writes a markdown page: --out must name a .md file, got {out_path}")
    runstore.check_output(out_path, "--out", is_dir=False)
    cfg = StudyConfig(recipes=tuple(recipes or DEFAULT_RECIPES), prompts_file=str(prompts or "prompts/shapes.txt"),
                      prompt_limit=prompt_limit, seeds=tuple(seeds or (0, 1)), steps=steps, device=device)
    reporter = BarReporter(quiet=as_json)
    try:
        result = run_study(cfg, reporter)
    finally:
        reporter.close()
    md = study_markdown(result, cfg, str(out_path))
    runstore.atomic_write_bytes(out_path, md.encode())
    if as_json:
        print_json({**result, "out": str(out_path)})
        return
    out.print(md, highlight=False, markup=False)
