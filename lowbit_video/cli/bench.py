"""`lowbit-video bench ...`: benchmarks on the GPU (not timed tests); registered by the CLI package."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from ..errors import UserError
from ..kernels.dispatch import settings_help  # the kernel dispatch table (pure Python: no triton at CLI start)
from .common import user_errors


def _check_known(asked: list[str], known, what: str) -> None:
    """One line naming the unknown values and the known ones."""
    bad = [a for a in asked if a not in known]
    if bad:
        raise UserError(f"unknown {what}(s) {bad}; known: {', '.join(known)}")


def _check_recipes(names: list[str]) -> None:
    """Each name resolves to a recipe (RecipeError's one line names the known ones), before any GPU work or check;
    read through the per-process cache the benchmarks' own look-ups then hit."""
    from ..kernels.dispatch import load_cached

    for name in names:
        load_cached(name)


def _shape_names(known) -> list[str]:
    """The shape names a --shapes option takes: `known` and the aliases of those (bench/common.py)."""
    from ..bench.common import ALIASES

    return list(known) + [a for a, name in ALIASES.items() if name in known]


def _shape_help() -> str:
    from ..bench.common import SHAPES

    return ", ".join(f"{n} (H={s.heads} N={s.tokens}" + (f" D={s.head_dim})" if s.head_dim != 128 else ")")
                     for n, s in SHAPES.items())


def register(app: typer.Typer) -> None:
    bench_app = typer.Typer(help="Benchmarks on a CUDA GPU: attention kernels, DraftAttention2's error–latency trade-off and one end-to-end DiT forward.",
                            no_args_is_help=True)
    app.add_typer(bench_app, name="bench")

    @bench_app.command("kernels")
    @user_errors
    def bench_kernels_cmd(
        shapes: Optional[list[str]] = typer.Option(None, "--shapes", help=f"{_shape_help()} (repeat; default short + wan1.3b-480p)."),
        recipes: Optional[list[str]] = typer.Option(None, "--recipes", help="Recipes to time (repeat; default: every recipe a kernel runs)."),
        reps: Optional[int] = typer.Option(None, "--reps", min=1, help="Timed calls per measurement (median); default by shape size."),
        config: Optional[list[str]] = typer.Option(
            None, "--config", help="Also time each recipe with this kernel setting, KEY=VALUE (repeat to combine), as an "
            "extra row 'recipe[KEY=VALUE,...]'. sage2-int8, the MXFP4 and the INT4 recipes run the Gluon kernel by "
            "default; GLUON=false (or any Triton-only key) times the Triton kernel. Settings: "
            f"{settings_help()}."),
        sustain: float = typer.Option(
            2.0, "--sustain", min=0.0, help="Seconds of back-to-back calls per recipe and shape (and for cuDNN), the "
            "second half timed: the speed once the GPU runs at the clock its power limit holds, as through a "
            "denoising loop (0: skip)."),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object on stdout."),
        markdown: bool = typer.Option(False, "--markdown", help="Print a markdown table."),
    ) -> None:
        """Time of the public call attend(q, k, v, recipe) at the model zoo's shapes vs torch SDPA cuDNN/flash and
        sageattention 1.0.6, same tensors, same process: each call from an idle GPU (median; host work counts), calls
        issued back to back as a model step issues them ("queued"), the same under sustained load ("sustained":
        power-limited clocks), and the pre-pass and kernel on their own."""
        import sys

        import torch

        from ..bench.common import default_recipes
        from ..bench.kernels import SHAPES, bench_kernels, config_variants, to_markdown
        from ..errors import UserError

        recipes = recipes or default_recipes()
        shapes = shapes or ["short", "wan1.3b-480p"]
        _check_known(shapes, _shape_names(SHAPES), "shape")
        _check_recipes(recipes)
        try:
            variants = config_variants(recipes, config or [])
        except ValueError as exc:
            raise UserError(str(exc)) from None
        if not torch.cuda.is_available():
            raise UserError("bench kernels needs a CUDA GPU (none is visible)")
        log = (lambda msg: print(msg, file=sys.stderr)) if as_json else print
        info = bench_kernels(shapes, recipes, reps=reps, variants=variants, sustain_s=sustain, log=log)
        if as_json:
            print(json.dumps(info))
        elif markdown:
            print(to_markdown(info))

    @bench_app.command("draft")
    @user_errors
    def bench_draft_cmd(
        shapes: Optional[list[str]] = typer.Option(None, "--shapes", help="short, wan1.3b-480p, wan2.2-5b-720p, wan14b-480p, wan14b-720p (repeat; default wan14b-720p)."),
        recipes: Optional[list[str]] = typer.Option(None, "--recipes", help="Draft recipes to time (repeat; default every draft recipe a kernel runs)."),
        sweep: bool = typer.Option(True, "--sweep/--no-sweep", help="Also run the error–latency sweep (sparse-16, INT8/FP8 and mixed at several sparsities)."),
        plot: Optional[str] = typer.Option(None, "--plot", help="Write the error-vs-time plot of the first shape to this PNG."),
        reps: int = typer.Option(3, "--reps", min=1, help="Timed calls per measurement (median)."),
        config: Optional[list[str]] = typer.Option(
            None, "--config", help="Draft kernel setting for every point, KEY=VALUE (repeat to combine). Settings: "
            f"{settings_help(draft=True)}."),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object on stdout."),
    ) -> None:
        """DraftAttention2 on the GPU: time (pre-pass, route, kernel), realised density and attention error
        on video-like inputs, against SDPA cuDNN bf16 in the same run; with the error–latency sweep."""
        import sys

        import torch

        from ..bench.common import draft_recipes, shape_name
        from ..bench.draft import GEOMETRIES, bench_draft, equal_time_comparison, plot_sweep
        from ..bench.kernels import _is_draft, parse_config
        from ..errors import UserError
        from ..kernels.dispatch import DRAFT_KEYS

        try:
            cfg = parse_config(config or [], DRAFT_KEYS) or None
        except ValueError as exc:
            raise UserError(str(exc)) from None
        shapes = shapes or ["wan14b-720p"]
        _check_known(shapes, _shape_names(GEOMETRIES), "shape")
        shapes = [shape_name(s) for s in shapes]  # the rows carry the canonical names
        recipes = recipes or draft_recipes()
        _check_recipes(recipes)
        not_draft = [r for r in recipes if not _is_draft(r)]
        if not_draft:
            raise UserError(f"not draft recipes: {not_draft} (use bench kernels)")
        if not torch.cuda.is_available():
            raise UserError("bench draft needs a CUDA GPU (none is visible)")
        log = (lambda msg: print(msg, file=sys.stderr)) if as_json else print
        info = bench_draft(shapes, recipes=recipes, sweep=sweep, reps=reps, config=cfg, log=log)
        if sweep:
            info["equal_time"] = {s: equal_time_comparison(info["sweep"], s) for s in shapes}
        if plot and sweep:
            plot_sweep(info, shapes[0], plot)
            log(f"plot: {plot}")
        if as_json:
            print(json.dumps(info))

    @bench_app.command("models")
    @user_errors
    def bench_models_cmd(
        model: Optional[list[str]] = typer.Option(None, "--model", help="cogvideox-5b, ltx-video, hunyuanvideo-1.5 (repeat; default all)."),
        random_weights: bool = typer.Option(False, "--random-weights", help="Random initialization (required unless --tiny: no checkpoint is read)."),
        recipe: Optional[list[str]] = typer.Option(None, "--recipe", help="Recipes (repeat; default sage2-int8, mxattention); fp16 always runs first as the baseline."),
        blocks: Optional[int] = typer.Option(None, "--blocks", min=1, help="Transformer blocks to build and time (default all of each model's)."),
        reps: int = typer.Option(3, "--reps", min=1, help="Timed forwards per recipe (median)."),
        tiny: bool = typer.Option(False, "--tiny", help="The tiny random-weight instances on the CPU (a smoke run; times mean nothing)."),
        out_path: Optional[Path] = typer.Option(None, "--out", help="Also write the table as markdown (e.g. results/models-h200.md)."),
        as_json: bool = typer.Option(False, "--json", help="Print the rows as JSON on stdout."),
    ) -> None:
        """One forward of CogVideoX-5B-, LTX-Video- and HunyuanVideo-1.5-shaped transformers (random weights, bf16) per
        recipe through use_recipe, against the fp16 recipe: ms, ratio, attention calls."""
        import shlex
        import sys

        import torch

        from .. import runstore
        from ..bench.models import DEFAULT_RECIPES, MODELS, bench_models, models_markdown

        names = model or list(MODELS)
        _check_known(names, MODELS, "model")
        if not tiny and not random_weights:
            raise UserError("bench models needs --random-weights (it reads no checkpoint), or --tiny")
        _check_recipes(recipe or [])
        if not tiny and not torch.cuda.is_available():
            raise UserError("bench models needs a CUDA GPU (none is visible); --tiny runs the tiny instances on the CPU")
        log = (lambda msg: print(msg, file=sys.stderr)) if as_json else print
        rows = bench_models(names, recipe or list(DEFAULT_RECIPES), blocks=blocks, reps=reps, tiny=tiny, log=log)
        if out_path is not None:
            command = "lowbit-video bench models " + " ".join(shlex.quote(a) for a in sys.argv[3:]) \
                if sys.argv[1:3] == ["bench", "models"] else "lowbit-video bench models"
            runstore.atomic_write_bytes(out_path, models_markdown(rows, command.strip()).encode())
        if as_json:
            print(json.dumps(rows))

    @bench_app.command("e2e")
    @user_errors
    def bench_e2e_cmd(
        model: str = typer.Option("wan2.1-t2v-14b", "--model", help="wan2.1-t2v-14b or wan2.1-t2v-1.3b (the transformer's shape)."),
        random_weights: bool = typer.Option(False, "--random-weights", help="Random initialization (required: no checkpoint is read)."),
        resolution: Optional[list[str]] = typer.Option(None, "--resolution", help="480p, 720p (repeat; default 480p)."),
        recipe: Optional[list[str]] = typer.Option(None, "--recipe", help="Recipes (repeat; default sage2-int8, mxattention)."),
        blocks: Optional[int] = typer.Option(None, "--blocks", min=1, max=40, help="Transformer blocks to build and time (default all: 40 for 14B, 30 for 1.3B)."),
        reps: int = typer.Option(3, "--reps", min=1, help="Timed forwards per recipe (median)."),
        compile_: bool = typer.Option(False, "--compile", help="Compile the transformer's blocks as generate --compile "
                                      "does (regional torch.compile; the baseline too)."),
        breakdown: bool = typer.Option(False, "--breakdown", help="Also profile one forward per row and report its "
                                       "GPU time by kind of kernel (quantized attention, pre-pass, SDPA, GEMM, "
                                       "Inductor's fused kernels, other), the span of its GPU work and the time the "
                                       "GPU sat idle in it."),
        as_json: bool = typer.Option(False, "--json", help="Print the rows as JSON on stdout."),
    ) -> None:
        """One Wan2.1-14B- or 1.3B-shaped DiT forward per recipe vs the same forward on SDPA cuDNN (bf16)."""
        import sys

        import torch

        from ..bench.e2e import MODELS, RESOLUTIONS, bench_e2e
        from ..errors import UserError

        _check_known([model], MODELS, "model")
        if not random_weights:
            raise UserError("bench e2e needs --random-weights (it reads no checkpoint)")
        if blocks is not None and blocks > MODELS[model]["num_layers"]:
            raise UserError(f"--blocks {blocks}: {model} has {MODELS[model]['num_layers']} blocks")
        res = resolution or ["480p"]
        _check_known(res, RESOLUTIONS, "resolution")
        _check_recipes(recipe or [])
        if not torch.cuda.is_available():
            raise UserError("bench e2e needs a CUDA GPU (none is visible)")
        log = (lambda msg: print(msg, file=sys.stderr)) if as_json else print
        rows = bench_e2e(res, recipe or ["sage2-int8", "mxattention"], model=model, blocks=blocks, reps=reps,
                         compiled=compile_, breakdown=breakdown, log=log)
        if as_json:
            print(json.dumps(rows))
