"""`lowbit-video profile`: one 16-bit generation per prompt x seed with the recipe measured at every attention call.

Writes into `out`: profile.json (the cells, provenance, timings), heatmap.png, and with a budget the policy's recipe
file `<name>.toml` (every file atomically: runstore). The model, prompts, seeds and settings are resolved exactly
as `lowbit-video generate` resolves them (the same one-line errors), and a clip is made one (prompt, seed) per
model call as there, so the PSNR the search measures is the PSNR `generate` + `evaluate` would give.
"""

from __future__ import annotations

import dataclasses
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .. import runstore
from ..errors import UserError
from ..generate import GenerateConfig
from ..recipes import Recipe, load_recipe
from .cells import FORMAT, FORMAT_VERSION, Profile, aggregate
from .policy import (Budget, cells_for_share, cells_over_error, include_target, parse_budget, recipe_toml, share_of,
                     with_cells)
from .probe import CallProbe
from .search import search_kept

PROFILE_NAME = "profile.json"
HEATMAP_NAME = "heatmap.png"


@dataclass
class ProfileConfig:
    """What `lowbit-video profile` was asked for: the recipe, the 16-bit clips to make (model, prompts, seeds and
    settings exactly as `generate` takes them; None: the model's default), and what to do with the profile."""

    recipe: str
    clips: GenerateConfig = field(default_factory=lambda: GenerateConfig(recipes=["fp16"], out="profile"))
    budget: str | None = None
    name: str | None = None  # of the written recipe; default "<recipe>-profiled"
    search_evals: int = 6  # generations the psnr search may make
    time_fp16: bool = False  # also time one plain 16-bit generation (the profile's cost against it)


class Reporter:
    """Progress hooks (no-ops; the CLI draws a bar on stderr)."""

    def phase(self, text: str, total: int) -> None: ...
    def advance(self) -> None: ...
    def step(self, done: int, total: int) -> None: ...


@dataclass
class Session:
    """A loaded model with its resolved grid: what the profile, the search and the study generate with."""

    model: Any
    info: Any
    prompts: list[str]
    seeds: list[int]
    settings: dict[str, Any]  # steps, guidance, height, width, frames
    num_blocks: int
    text_position: str | None
    reporter: Reporter = field(default_factory=Reporter)

    def pairs(self) -> list[tuple[str, int]]:
        return [(p, s) for p in self.prompts for s in self.seeds]

    def clips(self, recipe: Recipe | str, *, capture: Any = None) -> list[np.ndarray]:
        """uint8 clips (T, H, W, 3) of every (prompt, seed), one per model call (as generate makes them)."""
        from ..video_io import to_uint8

        out = []
        for prompt, seed in self.pairs():
            try:
                clip = self.model.generate([prompt], [seed], recipe=recipe, progress=self.reporter.step,
                                           capture=capture, **self.settings)
            except ValueError as e:
                raise UserError(str(e).splitlines()[0] if str(e) else type(e).__name__) from None
            out.append(to_uint8(clip[0]))
            self.reporter.advance()
        return out

    def mean_psnr(self, recipe: Recipe, refs: Sequence[np.ndarray]) -> float:
        from ..metrics.paired import psnr

        self.reporter.phase(f"scoring {recipe.name}", len(refs))
        return float(np.mean([psnr(c, r) for c, r in zip(self.clips(recipe), refs)]))


def open_session(cfg: ProfileConfig, reporter: Reporter | None = None) -> Session:
    """Resolve the model, prompts, seeds and settings as generate does, and load the model."""
    from ..devices import resolve_device
    from ..generate import resolve, settle_from_model, unsettled
    from ..models import families, registry

    if cfg.search_evals < 1:
        raise UserError(f"--search-evals must be at least 1, got {cfg.search_evals}")
    clips = cfg.clips
    device = resolve_device(clips.device)
    res = resolve(dataclasses.replace(clips, recipes=["fp16"], device=device))
    name = None if clips.model is None and clips.model_path is not None else res.info.name
    model = registry.load_model(name, path=clips.model_path, device=device, conditioning=res.conditioning)
    if unsettled(res):
        settle_from_model(res, model)
    settings = dict(steps=res.steps, guidance=res.guidance, height=res.height, width=res.width, frames=res.frames)
    model.resolve_settings(**settings)  # the model's own limits, before the first generation
    transformer = model._transformers()[0][1]
    return Session(model, res.info, res.prompts, res.seeds, settings, families.num_blocks(transformer),
                   families.text_position(transformer), reporter or Reporter())


def check_recipe(recipe: Recipe) -> None:
    """A recipe worth profiling: it changes self-attention."""
    from ..models.injection_context import recipe_changes_attention

    if not recipe_changes_attention(recipe):
        raise UserError(f"recipe {recipe.name!r} is exact attention (the 16-bit baseline itself): nothing to profile")
    if "self" not in recipe.policy.apply_to:
        raise UserError(f"recipe {recipe.name!r} quantizes no self-attention (policy.apply_to = "
                        f"{list(recipe.policy.apply_to)}): the profiled calls are self / joint attention")


def measure(session: Session, recipes: Sequence[Recipe]) -> tuple[dict[str, Profile], list[np.ndarray], dict]:
    """The 16-bit generation of every (prompt, seed) with `recipes` measured at every call: ({recipe name:
    profile}, the 16-bit clips, timings)."""
    probe = CallProbe(recipes, text_position=session.text_position)
    session.reporter.phase("profiling", len(session.pairs()))
    t0 = time.perf_counter()
    refs = session.clips("fp16", capture=probe)
    rows = probe.rows()
    seconds = time.perf_counter() - t0
    if not rows:
        raise UserError(f"{session.info.name}: no self- or joint-attention call reached the recipe hooks")
    steps = int(session.settings["steps"])
    profiles = {r.name: aggregate(rows, r.name, num_blocks=session.num_blocks, num_steps=steps) for r in recipes}
    for r in recipes:
        if not profiles[r.name].cells:
            raise UserError(f"recipe {r.name!r} could take none of the profiled calls "
                            f"({probe.skipped.get(r.name, 0)} calls: head_dim not a multiple of "
                            f"{r.attention.head_dim_multiple})")
    timings = {"profile_s": round(seconds, 3), "generations": len(refs),
               "calls": len(probe.keys), "skipped_calls": dict(probe.skipped)}
    return profiles, refs, timings


def choose_cells(profile: Profile, budget: Budget, *, session: Session | None = None, base: Recipe | None = None,
                 refs: Sequence[np.ndarray] = (), max_evals: int = 6) -> tuple[list[tuple[int, int]], dict]:
    """The 16-bit cells a budget asks for, and what the choice found (the search's trials for psnr)."""
    if budget.kind == "rel-l2":
        return cells_over_error(profile, budget.value), {}
    if budget.kind == "fp16-share":
        return cells_for_share(profile, budget.value), {}
    ranking = profile.ranking()

    def score(k: int) -> float:
        return session.mean_psnr(with_cells(base, ranking[:k], name=f"{base.name}-search-{k}"), refs)

    kept, trials = search_kept(len(ranking), score, budget.value, max_evals=max_evals)
    return ranking[:kept], {"trials": [dataclasses.asdict(t) for t in trials],
                            "psnr": next((t.psnr for t in trials if t.kept == kept), None)}


def generate_command(cfg: ProfileConfig, session: Session, recipe_path: Path) -> str:
    """The `lowbit-video generate` command that runs the written policy next to the 16-bit baseline."""
    clips = cfg.clips
    words = ["lowbit-video", "generate"]
    if clips.model is not None or not clips.model_path:  # a folder without a model name runs as its pipeline class
        words += ["--model", session.info.name]
    if clips.model_path:
        words += ["--model-path", str(clips.model_path)]
    if clips.image:
        words += ["--image", str(clips.image)]
    if clips.video:
        words += ["--video", str(clips.video)]
    words += ["--recipe", "fp16", str(recipe_path)]
    if clips.prompts:
        for p in clips.prompts:
            words += ["--prompt", p]
    else:
        words += ["--prompts", str(clips.prompts_file or "prompts/smoke.txt")]
        if clips.prompt_limit:
            words += ["--prompt-limit", str(clips.prompt_limit)]
    words += ["--seeds", *map(str, session.seeds), "--steps", str(session.settings["steps"])]
    for key in ("guidance", "height", "width", "frames"):
        if getattr(clips, key) is not None:
            words += [f"--{key}", str(getattr(clips, key))]
    if clips.device != "auto":
        words += ["--device", clips.device]
    return shlex.join(words)


def finite(obj: Any) -> Any:
    """`obj` with non-finite floats as None (JSON holds no NaN or infinity)."""
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    if isinstance(obj, float) and not np.isfinite(obj):
        return None
    return obj


def run_profile(cfg: ProfileConfig, reporter: Reporter | None = None) -> dict[str, Any]:
    """Profile, write profile.json and heatmap.png, and with a budget the recipe file; returns profile.json's
    contents plus "files" and (with a budget) "policy"."""
    from .heatmap import write_heatmap

    recipe = load_recipe(cfg.recipe)
    check_recipe(recipe)
    budget = parse_budget(cfg.budget) if cfg.budget else None
    name = cfg.name or f"{recipe.name}-profiled"
    if budget is not None:
        runstore.check_output(Path(cfg.clips.out) / f"{name}.toml", "--out", is_dir=False)
        include = include_target(recipe)  # before the generations: a recipe with no file fails now
    session = open_session(cfg, reporter)
    profiles, refs, timings = measure(session, [recipe])
    profile = profiles[recipe.name]
    if cfg.time_fp16:
        session.reporter.phase("timing one plain 16-bit generation", 1)
        one = dataclasses.replace(session, prompts=session.prompts[:1], seeds=session.seeds[:1])
        t0 = time.perf_counter()
        one.clips("fp16")
        timings["fp16_generation_s"] = round(time.perf_counter() - t0, 3)
    out = Path(cfg.clips.out)
    doc: dict[str, Any] = {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "model": session.info.name, "model_path": cfg.clips.model_path,
        "recipe_source": recipe.source, "prompts": session.prompts, "seeds": session.seeds,
        "settings": session.settings, "device": str(session.model.device), "timings": timings,
        **profile.to_dict(),
    }
    files = {"profile": str(out / PROFILE_NAME), "heatmap": str(out / HEATMAP_NAME)}
    if budget is not None:
        cells, found = choose_cells(profile, budget, session=session, base=recipe, refs=refs,
                                    max_evals=cfg.search_evals)
        path = out / f"{name}.toml"
        text = recipe_toml(recipe, cells, name=name, include=include,
                           note=f"written by lowbit-video profile --budget {budget.label()} ({session.info.name}, "
                                f"{profile.num_blocks} blocks x {profile.num_steps} steps)")
        runstore.atomic_write_bytes(path, text.encode())
        written = load_recipe(path)  # the round trip `recipes validate` makes
        doc["policy"] = {"budget": budget.label(), "recipe": written.name, "file": str(path),
                         "high_precision_calls": [list(c) for c in written.policy.high_precision_calls],
                         "fp16_share": share_of(cells, profile), **found,
                         "generate": generate_command(cfg, session, path)}
        files["recipe"] = str(path)
    doc = finite(doc)
    runstore.atomic_write_json(out / PROFILE_NAME, doc)
    write_heatmap(profile, out / HEATMAP_NAME, title=f"{recipe.name} on {session.info.name}: rel-L2 per call")
    return {**doc, "files": files}


__all__ = ["HEATMAP_NAME", "PROFILE_NAME", "ProfileConfig", "Reporter", "Session", "check_recipe", "choose_cells",
           "generate_command", "measure", "open_session", "run_profile"]
