"""`lowbit-video generate`: the grid of prompts x seeds x recipes, as paired, resumable runs.

* **Grid.** Every (recipe, prompt, seed) is one run, stored at
  `<out>/<model>/<recipe>/<prompt-slug>/seed-<s>/` (`runstore.run_dir`) with video.mp4 (H.264),
  frames.png (frame strip), frames.npz (exact uint8 frames: the lossless source for metrics) and
  meta.json (written last).
* **Models.** `model` names a row of `lowbit-video models` (its checkpoint folder, `model_path`, is
  checked to be that model's before anything is written); `model=None` with `model_path` runs any
  diffusers text-to-video pipeline folder, filed under its pipeline class (models/pipeline.py) with the
  pipeline's default settings; with `image` an image-to-video one (`video`: a video-to-video one), filed under
  its class and the file's content digest (models/conditioning.py). A pipeline that computes a size from its
  components is loaded before the grid is planned, since the settings are part of what a complete run is compared on.
* **Prompts.** `--prompt TEXT`, a prompts file, or VBench's standard suite (`--prompts vbench` or
  `vbench:<dimension>`, vbench_suite.py; each run's meta records its suite entry, so `evaluate`
  can score VBench's suite-only dimensions); `--prompt-limit N` keeps the first N.
* **Paired.** The model draws a seed's initial noise from that seed alone, so every recipe starts
  from the same noise for the same seed; runs of one recipe differ from FP16's only by the recipe.
* **Batches.** One `model.generate` call takes up to `batch` seeds of one prompt under one recipe
  (default 1). Each run is written as soon as its call returns. One seed per call is the default
  because a run's frames then depend on nothing but its own (model, recipe, prompt, seed, settings):
  batched matmuls differ from unbatched ones in the last float bits (measured on tiny-shapes: 1.5e-6),
  so with batching a resumed or enlarged grid could differ from a fresh one, and FP16-vs-FP16 pairs
  from different commands could stop being bit-identical. On the 2-core CPU batching is not faster
  (2 seeds in one call took 2.0x one seed); on a GPU, --batch N trades that exactness for speed.
* **Resumable.** A run is complete iff its meta.json exists (`runstore.is_complete`); complete
  runs are skipped (the model is not even loaded when nothing is left to do). A run is written
  into a fresh folder beside its own and swapped in once whole (`runstore.staged_dir`), so an
  interrupted attempt leaves its run as it was: missing, or (--overwrite) the complete old run. A
  complete run made with different settings (steps, guidance, size, recipe contents) is an error
  rather than a silent skip: use another --out, or `overwrite=True` (--overwrite).
* **Stopping.** Ctrl-C raises `errors.Interrupted` saying how many runs are complete (the same
  command resumes); a refused command (a size the model cannot make, a full disk) leaves no folder
  it created behind, and its claims are released.
* **Concurrent commands.** Two `generate`s on one --out never make a run twice: each run is
  claimed (runstore.claim_run, an flock the kernel drops when the process dies, so a killed
  process leaves nothing stuck) from just before its model call until its files are written; a run
  another process holds is left to it (status "claimed"), a run that became complete meanwhile is
  skipped.
* **Many processes.** Under `torchrun --nproc-per-node N -m lowbit_video generate ...` each rank
  takes its shard of the grid (`distributed.shard_runs`: deterministic, every run on exactly one
  rank) and writes its runs itself; rank 0 writes the manifest after a barrier. `--shard i/n`
  (`GenerateConfig.shard`) does the same for cluster array jobs, without a process group. Resume
  works across any number of processes: a complete run is skipped by whichever shard owns it.
* **Manifest.** `<out>/manifest.json` (written atomically at the end, by rank 0 under torchrun,
  by every job under --shard) lists every run asked of this folder (merged with the runs already
  listed there) with its dir (relative to <out>) and status, `complete` or `missing`.
* **Context parallelism.** `context_parallel="ulysses"|"ring"` with `cp_degree=K` under torchrun
  (WORLD_SIZE = K): every rank runs every run, each on 1/K of the video tokens
  (models/context_parallel.py); rank 0 writes the files.
* **Compiled.** `compile=True` (--compile) compiles the transformer's repeated blocks (regional torch.compile,
  fullgraph, Inductor: models/regional_compile.py) once the model is loaded, the same for every recipe, fp16
  included. Dynamo's graphs are dropped before each recipe's first call, so every recipe is traced afresh with its
  own hooks (its first steps include the compilation) and none reuses a graph of another. Compiled frames differ
  from eager ones in the last float bits (fused kernels round differently), so `compiled` is part of a run's
  request: a complete eager run is not taken for a compiled one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import importlib.resources
import json
import os
import platform
import sys
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from . import __version__
from . import data, distributed, runstore, vbench_suite, video_io
from .devices import resolve_device
from .errors import Interrupted, UserError, shorten_quotes
from .recipes import Recipe, load_recipe

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODEL = "tiny-shapes"
DEFAULT_PROMPTS = "prompts/smoke.txt"
DEFAULT_OUT = "runs"
DEFAULT_RECIPES = ("fp16",)
FPS = 8
META_FORMAT = 1
MANIFEST_NAME = "manifest.json"
CONTEXT_PARALLEL = ("ulysses", "ring")
# Settings that must agree between a complete run on disk and the one asked for, for it to be skipped.
REQUEST_KEYS = ("model", "recipe", "prompt", "seed", "steps", "guidance", "height", "width", "frames", "compiled")
# What a request key means in a run stored before the key existed (runs made before --compile ran eagerly).
REQUEST_DEFAULTS = {"compiled": False}


@dataclass
class GenerateConfig:
    """What `lowbit-video generate` was asked for (None: the model's default)."""

    model: str | None = DEFAULT_MODEL            # None: the pipeline folder model_path (its class), else DEFAULT_MODEL
    recipes: Sequence[str] = DEFAULT_RECIPES
    prompts: Sequence[str] | None = None         # --prompt TEXT ...; None: read prompts_file
    prompts_file: str | None = None              # None: DEFAULT_PROMPTS; "vbench[:<dimension>]": VBench's suite
    prompt_limit: int | None = None              # at most this many prompts (the first ones); None: all
    seeds: Sequence[int] = (0,)
    steps: int | None = None
    guidance: float | None = None
    height: int | None = None
    width: int | None = None
    frames: int | None = None
    out: str | os.PathLike = DEFAULT_OUT
    model_path: str | None = None
    image: str | None = None                     # an image-to-video pipeline folder's conditioning image (a file)
    video: str | None = None                     # a video-to-video pipeline folder's conditioning video (a file)
    device: str = "auto"                         # devices.resolve_device: CUDA when torch sees a GPU, else the CPU
    batch: int | None = None                     # seeds per model call (None: 1; see the module doc)
    capture_dir: str | None = None
    capture_blocks: Sequence[int] | None = None
    capture_steps: Sequence[int] | None = None
    overwrite: bool = False
    fps: int = FPS
    shard: "str | distributed.ShardSpec | None" = None  # "i/n" (array jobs); None: torchrun's RANK/WORLD_SIZE
    context_parallel: str | None = None          # "ulysses" | "ring" (under torchrun); None: off
    cp_degree: int | None = None                 # ranks that share one run (None: WORLD_SIZE)
    manifest: bool = True                        # write <out>/manifest.json
    compile: bool = False                        # regional torch.compile of the transformer blocks (module doc)


@dataclass
class Run:
    """One cell of the grid."""

    dir: Path
    model: str
    recipe: Recipe
    prompt: str
    seed: int
    status: str = "pending"   # pending -> done | skipped | claimed (another process generates it); "other-shard"
    note: str = ""

    def row(self) -> dict:
        row = {"dir": str(self.dir), "model": self.model, "recipe": self.recipe.name, "prompt": self.prompt,
               "seed": self.seed, "status": self.status}
        return {**row, "note": self.note} if self.note else row


class Reporter:
    """Progress hooks (no-ops here; the CLI draws rich progress bars on stderr)."""

    def planned(self, runs: list[Run], todo: int) -> None: ...
    def loading(self, model: str) -> None: ...
    def loaded(self, model: str, seconds: float) -> None: ...
    def batch_started(self, recipe: str, prompt: str, seeds: list[int], steps: int) -> None: ...
    def step(self, step: int, total: int) -> None: ...
    def run_done(self, run: Run) -> None: ...


@dataclass
class Resolved:
    """The fully resolved grid and settings."""

    info: Any
    recipes: list[Recipe]
    prompts: list[str]
    seeds: list[int]
    # None only until the model is loaded, for a pipeline folder whose pipeline computes them (settle_from_model)
    steps: int | None
    guidance: float | None
    height: int | None
    width: int | None
    frames: int | None
    compiled: bool = False
    runs: list[Run] = field(default_factory=list)
    suite: dict[str, dict] = field(default_factory=dict)  # prompt -> its VBench suite entry (vbench_suite.py)
    conditioning: Any = None  # models/conditioning.Conditioning of --image / --video, read once here


# ------------------------------------------------------------------------------------ resolving


def _registry():
    from .models import registry

    return registry


def is_tiny_shapes(info: Any) -> bool:
    """Whether a model's info (models.registry) is the tiny-shapes model (runstore decides)."""
    return runstore.is_tiny_shapes(getattr(info, "name", None), getattr(info, "family", None))


def resolve_prompts_file(path: str | os.PathLike | None) -> "Path | Traversable":
    """The prompts file: as given (relative to the working directory), else a prompt set shipped with
    the package, by name (`smoke`) or by its path in the repository (`prompts/smoke.txt`, so the
    default works from any directory and from an installed package)."""
    p = Path(path if path is not None else DEFAULT_PROMPTS)
    if p.is_file():
        return p
    shipped = data.prompt_set(str(path if path is not None else DEFAULT_PROMPTS))
    if shipped is not None:
        return shipped
    raise UserError(f"prompts file {p}: no such file (prompt sets shipped with the package: "
                    f"{', '.join(sorted(data.prompt_sets()))})")


def read_plain_prompts(path: Path) -> list[str]:
    """One prompt per line; blank lines and '#' comments skipped (the format of prompts/*.txt)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise UserError(f"prompts file {path}: not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start})") from None
    except OSError as e:
        raise UserError(f"prompts file {path}: cannot read: {e.strerror or e}") from None
    return [s for s in (line.strip() for line in lines) if s and not s.startswith("#")]


def resolve_prompts(info: Any, prompts: Sequence[str] | None, prompts_file: str | None) -> list[str]:
    """Prompts in order, duplicates dropped. tiny-shapes prompts must parse in its grammar and are
    canonicalised (parse_prompt's one-line message on a bad one)."""
    tiny = is_tiny_shapes(info)
    if prompts:
        if tiny:
            from .models.tiny_shapes.grammar import parse_prompt

            try:
                out = [parse_prompt(p).prompt for p in prompts]
            except ValueError as e:
                raise UserError(shorten_quotes(str(e))) from None
        else:
            out = [p.strip() for p in prompts]
            if any(not p for p in out):
                raise UserError("--prompt: empty prompt")
    else:
        source = resolve_prompts_file(prompts_file)
        with importlib.resources.as_file(source) as path:  # a real file also for a set inside a zip
            if tiny:
                from .models.tiny_shapes.grammar import read_prompts

                try:
                    out = read_prompts(path)
                except ValueError as e:
                    raise UserError(shorten_quotes(str(e))) from None
            else:
                out = read_plain_prompts(path)
        if not out:
            raise UserError(f"prompts file {source}: no prompts (one per line; '#' starts a comment)")
    return list(OrderedDict.fromkeys(out))


def resolve_prompt_source(info: Any, cfg: GenerateConfig) -> tuple[list[str], dict[str, dict]]:
    """(prompts, {prompt: VBench suite entry}) of --prompt / --prompts FILE / --prompts vbench[:<dim>],
    cut to --prompt-limit. The suite entry is recorded in each run's meta (evaluate's VBench mode)."""
    if cfg.prompts or not vbench_suite.is_suite(cfg.prompts_file):
        prompts = resolve_prompts(info, cfg.prompts, cfg.prompts_file)
        return prompts[:cfg.prompt_limit] if cfg.prompt_limit else prompts, {}
    chosen = vbench_suite.suite_prompts(str(cfg.prompts_file), limit=cfg.prompt_limit)
    if is_tiny_shapes(info):
        raise UserError(f"--prompts {cfg.prompts_file}: VBench's prompts are free text, outside tiny-shapes' "
                        f"prompt grammar (e.g. {chosen[0].prompt!r}); use a real model (--model, --model-path)")
    return resolve_prompts(info, [p.prompt for p in chosen], None), {
        p.prompt: vbench_suite.suite_entry(p) for p in chosen}


def resolve_recipes(names: Sequence[str]) -> list[Recipe]:
    if not names:
        names = DEFAULT_RECIPES
    recipes = [load_recipe(n) for n in OrderedDict.fromkeys(names)]
    seen: dict[str, str] = {}
    for r in recipes:
        if r.name in seen:
            raise UserError(f"two recipes are both named {r.name!r} ({seen[r.name]} and {r.source}); "
                            "their runs would share a folder")
        seen[r.name] = r.source
    return recipes


def resolve_seeds(seeds: Sequence[int]) -> list[int]:
    seeds = list(OrderedDict.fromkeys(int(s) for s in (seeds or [0])))
    bad = [s for s in seeds if s < 0 or s >= 2**63]
    if bad:
        raise UserError(f"--seeds: seeds must be integers in [0, 2^63), got {bad[0]}")
    return seeds


def _positive(name: str, value: Any) -> None:
    if value is not None and value <= 0:
        raise UserError(f"--{name} must be positive, got {value}")


def _setting(kind: type, given: Any, default: Any) -> Any:
    """The asked value, else the model's default; None when neither is known before loading (a pipeline
    that computes it from its components)."""
    value = default if given is None else given
    return None if value is None else kind(value)


def unsettled(res: Resolved) -> list[str]:
    """The settings that only the loaded model can give (settle_from_model)."""
    return [k for k in ("steps", "guidance", "height", "width", "frames") if getattr(res, k) is None]


def settle_from_model(res: Resolved, model: Any) -> None:
    """Fill the settings left None by the model's resolved ones (its UserError names what nothing gives)."""
    s = model.resolve_settings(steps=res.steps, guidance=res.guidance, height=res.height, width=res.width,
                               frames=res.frames)
    for key in unsettled(res):
        setattr(res, key, getattr(s, key))


def conditioning_input(cfg: GenerateConfig):
    """cfg.image or cfg.video read and named by its content (models/conditioning.py), None without either."""
    if cfg.image is not None and cfg.video is not None:
        raise UserError("--image and --video: a pipeline is conditioned on one of them")
    from .models.conditioning import read_image, read_video

    if cfg.image is not None:
        return read_image(cfg.image)
    return read_video(cfg.video) if cfg.video is not None else None


def resolve(cfg: GenerateConfig) -> Resolved:
    """Check everything that can be checked without loading the model; plan the grid."""
    reg = _registry()
    for name in ("steps", "height", "width", "frames", "batch"):
        _positive(name, getattr(cfg, name))
    if cfg.guidance is not None and not (np.isfinite(cfg.guidance) and cfg.guidance >= 0):
        raise UserError(f"--guidance must be a finite number >= 0, got {cfg.guidance}")
    resolve_device(cfg.device)  # UserError unless auto, cpu, cuda or cuda:N
    folder = cfg.model is None and cfg.model_path is not None
    # UserError naming the known models (also for an empty --model)
    info = None if folder else reg.get_model_info(DEFAULT_MODEL if cfg.model is None else cfg.model)
    given = "image" if cfg.image is not None else "video" if cfg.video is not None else None
    if given is not None and not folder:
        from .models.conditioning import folder_only

        raise folder_only(given, info.name)
    conditioning = None
    if cfg.model_path is not None:
        if not Path(cfg.model_path).is_dir():
            why = "not a folder" if Path(cfg.model_path).exists() else "no such directory"
            raise UserError(f"--model-path {cfg.model_path}: {why} ("
                            f"{info.name + ' loads' if info else 'pass'} a diffusers-format checkpoint folder from disk)")
        if folder:
            # named after its pipeline class (and its conditioning input), with its __call__ defaults
            conditioning = conditioning_input(cfg)
            info = reg.folder_info(cfg.model_path, conditioning)
        else:
            reg.check_model_folder(info.name, cfg.model_path)  # a folder of another model: before anything is written
    elif getattr(info, "needs_path", False):
        raise UserError(f"model {info.name} has no shipped weights: pass --model-path DIR "
                        "(a diffusers-format checkpoint folder on disk)")
    _positive("prompt-limit", cfg.prompt_limit)
    recipes = resolve_recipes(cfg.recipes)
    prompts, suite = resolve_prompt_source(info, cfg)
    seeds = resolve_seeds(cfg.seeds)
    res = Resolved(
        info=info, recipes=recipes, prompts=prompts, seeds=seeds, suite=suite,
        steps=_setting(int, cfg.steps, info.default_steps),
        guidance=_setting(float, cfg.guidance, info.default_guidance),
        height=_setting(int, cfg.height, info.default_height), width=_setting(int, cfg.width, info.default_width),
        frames=_setting(int, cfg.frames, info.default_frames), compiled=bool(cfg.compile),
        conditioning=conditioning,
    )
    res.runs = [Run(runstore.run_dir(cfg.out, info.name, r.name, p, s), info.name, r, p, s)
                for r in recipes for p in prompts for s in seeds]
    runstore.check_output(cfg.out, "--out")  # before the model is loaded (seconds to minutes)
    if cfg.capture_dir:
        if cfg.compile:  # a capture saves tensors from Python, which a fullgraph block cannot run
            raise UserError("--capture-qkv cannot be combined with --compile (Q/K/V are captured in eager calls)")
        runstore.check_output(cfg.capture_dir, "--capture-qkv")
    return res


# Recipe fields added after runs were first stored, left out of a run's key at their default so the
# runs made before they existed still match the recipes they were made with.
LATER_FIELDS = {"attention": {"rotation_sigma": 1.0}, "policy": {"high_precision_calls": ()}}


def recipe_key(recipe: Recipe) -> dict:
    """The recipe's contents without where it was read from (what makes two runs comparable)."""
    d = recipe.to_dict()
    d.pop("source", None)
    for table, defaults in LATER_FIELDS.items():
        for key, default in defaults.items():
            if d[table].get(key) == default:
                del d[table][key]
    return d


def request_of(res: Resolved, run: Run) -> dict:
    return {"model": run.model, "recipe": recipe_key(run.recipe), "prompt": run.prompt, "seed": run.seed,
            "steps": res.steps, "guidance": res.guidance, "height": res.height, "width": res.width,
            "frames": res.frames, "compiled": res.compiled}


def _mismatch(old: dict, new: dict) -> str | None:
    new = json.loads(json.dumps(_jsonable(new)))  # compare as stored (tuples -> lists)
    for key in REQUEST_KEYS:
        if key not in old and key not in REQUEST_DEFAULTS:
            continue
        was = old.get(key, REQUEST_DEFAULTS.get(key))
        if was != new[key]:
            if key == "recipe":
                return "the recipe's contents differ"
            return f"{key} {was!r} != {new[key]!r}"
    return None


# ------------------------------------------------------------------------------------- provenance


def git_revision(root: Path = PROJECT_ROOT) -> str | None:
    """The checked-out commit, read from .git without running git; None when not a git checkout or
    unreadable (never raises)."""
    try:
        git = root / ".git"
        if git.is_file():  # worktree or submodule: "gitdir: <path>"
            text = git.read_text().strip()
            if not text.startswith("gitdir:"):
                return None
            git = (root / text.split(":", 1)[1].strip()).resolve()
        if not git.is_dir():
            return None
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref:"):
            return head or None
        ref = head.split(":", 1)[1].strip()
        common = git
        if (git / "commondir").is_file():
            common = (git / (git / "commondir").read_text().strip()).resolve()
        for base in (git, common):
            if (base / ref).is_file():
                return (base / ref).read_text().strip() or None
        for base in (git, common):
            packed = base / "packed-refs"
            if packed.is_file():
                for line in packed.read_text().splitlines():
                    parts = line.split()
                    if len(parts) == 2 and parts[1] == ref:
                        return parts[0]
    except (OSError, ValueError, IndexError):
        return None
    return None


def _dist_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def versions() -> dict:
    import torch

    return {"lowbit_video": __version__, "torch": torch.__version__, "diffusers": _dist_version("diffusers"),
            "numpy": np.__version__, "imageio_ffmpeg": _dist_version("imageio-ffmpeg"),
            "python": platform.python_version()}


def _jsonable(obj: Any) -> Any:
    """describe() output and friends as plain JSON (sets -> sorted lists, paths/dtypes -> str, NaN -> None)."""
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (set, frozenset)):
        return [_jsonable(v) for v in sorted(obj, key=repr)]
    if isinstance(obj, (bool, int, str)) or obj is None:
        return obj
    if isinstance(obj, float):
        return obj if np.isfinite(obj) else None
    if isinstance(obj, np.generic):
        return _jsonable(obj.item())
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return _jsonable(dataclasses.asdict(obj))
    return str(obj)


# ---------------------------------------------------------------------------------------- running


def _capture_spec(cfg: GenerateConfig, run: Run):
    """CaptureSpec for one run (captures of a run go to <capture>/<model>/<recipe>/<slug>/seed-<s>)."""
    if not cfg.capture_dir:
        return None
    from .models.capture import CaptureSpec

    d = runstore.run_dir(cfg.capture_dir, run.model, run.recipe.name, run.prompt, run.seed)
    return CaptureSpec(dir=d, blocks=set(cfg.capture_blocks) if cfg.capture_blocks else None,
                       steps=set(cfg.capture_steps) if cfg.capture_steps else None)


def write_run(run: Run, clip: np.ndarray, *, meta: dict) -> dict:
    """Write one run's files (frames.npz, video.mp4, frames.png), then meta.json last, into a folder
    beside run.dir that then replaces it in one step. Returns the meta written."""
    t0 = time.perf_counter()
    u8 = video_io.to_uint8(clip)
    # built beside the run folder and swapped in whole: a complete run being regenerated
    # (--overwrite) stays complete until the new one is
    with runstore.staged_dir(run.dir) as d:
        meta = _write_files(d, u8, meta, t0)
    return meta


def _write_files(d: Path, u8: np.ndarray, meta: dict, t0: float) -> dict:
    video_io.write_frames_npz(u8, d / "frames.npz")
    video = video_io.write_mp4(u8, d / "video.mp4", fps=meta.get("fps", FPS))
    strip = video_io.write_frame_strip(u8, d / "frames.png")
    meta = dict(meta)
    meta["frames_sha256"] = video_io.frames_sha256(u8)
    meta["frames_shape"] = list(u8.shape)
    meta["files"] = {"video": "video.mp4", "strip": "frames.png", "frames": "frames.npz"}
    meta["outputs"] = {
        "frames.npz": "exact uint8 frames (T, H, W, 3), key 'frames', lossless: metrics read this",
        "video.mp4": {**video, "note": f"H.264 is lossy; frames upscaled x{video['scale']} (nearest) for the mp4 only"},
        "frames.png": {**strip, "note": "frames side by side, nearest-upscaled; lossless PNG"},
    }
    meta["timings"] = {**meta.get("timings", {}), "write_s": round(time.perf_counter() - t0, 4)}
    meta["created"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    runstore.atomic_write_json(d / runstore.META_NAME, _jsonable(meta))
    return meta


def _shard_spec(cfg: GenerateConfig) -> "distributed.ShardSpec":
    if isinstance(cfg.shard, distributed.ShardSpec):
        return cfg.shard
    return distributed.ShardSpec.from_cli_or_env(cfg.shard)


def _check_context_parallel(cfg: GenerateConfig, spec: "distributed.ShardSpec") -> int | None:
    """The context-parallel degree (None: off), after checking it against the launch."""
    if cfg.context_parallel is None:
        if cfg.cp_degree not in (None, 1):
            raise UserError("--cp-degree needs --context-parallel ulysses|ring")
        return None
    if cfg.context_parallel not in CONTEXT_PARALLEL:
        raise UserError(f"--context-parallel must be ulysses or ring, got {cfg.context_parallel!r}")
    if cfg.shard is not None and not isinstance(cfg.shard, distributed.ShardSpec):
        raise UserError("--context-parallel cannot be combined with --shard")
    if not spec.launched:
        raise UserError("--context-parallel needs several processes: launch with torchrun --nproc-per-node K "
                        "-m lowbit_video generate ... --context-parallel ulysses --cp-degree K")
    degree = spec.count if cfg.cp_degree is None else int(cfg.cp_degree)
    if degree < 2:
        raise UserError(f"--cp-degree must be at least 2, got {degree}")
    if degree != spec.count:
        raise UserError(f"--cp-degree {degree} must equal the number of processes (WORLD_SIZE={spec.count}); "
                        "running several context-parallel groups at once is not supported yet")
    if cfg.capture_dir:
        raise UserError("--capture-qkv cannot be combined with --context-parallel (each rank sees part of the tokens)")
    if cfg.batch not in (None, 1):
        raise UserError("--batch cannot be combined with --context-parallel")
    return degree


def generate(cfg: GenerateConfig, reporter: Reporter | None = None, *, model: Any = None) -> dict:
    """Run the grid (this process's shard of it). Returns {"runs": [{dir, model, recipe, prompt, seed,
    status}], "generated", "skipped"}; with several shards or context parallelism also "shard",
    "context_parallel", "manifest", "complete", "missing" (counts over the full grid, as rank 0 or
    this array job sees them at the end).

    `model`: an already loaded model (tests); default: `registry.load_model` when there is work."""
    cfg = dataclasses.replace(cfg, device=resolve_device(cfg.device))  # meta.json records the device used
    spec = _shard_spec(cfg)
    cp_degree = _check_context_parallel(cfg, spec)
    with distributed.process_group(spec, device=cfg.device):
        return _generate(cfg, reporter or Reporter(), model, spec, cp_degree)


def _generate(cfg: GenerateConfig, rep: Reporter, model: Any, spec: "distributed.ShardSpec",
              cp_degree: int | None) -> dict:
    res = resolve(cfg)
    out_existed = Path(cfg.out).exists()
    try:
        return _generate_grid(cfg, res, rep, model, spec, cp_degree)
    except KeyboardInterrupt:
        mine = [r for r in res.runs if r.status != "other-shard"]
        done = sum(runstore.is_complete(r.dir) for r in mine)
        _prune_empty(res.runs, cfg.out, out_existed)
        raise Interrupted(f"{done} of {len(mine)} runs complete; run the same command to resume") from None
    except BaseException:
        _prune_empty(res.runs, cfg.out, out_existed)
        raise


def _prune_empty(runs: list[Run], out: str | os.PathLike, out_existed: bool) -> None:
    """Remove the folders on the way to these runs that are empty (made for a run that was then
    refused or failed; its claim is already released), and --out itself when this command made it."""
    top = Path(out)
    for run in runs:
        d = run.dir
        while d != top and top in d.parents:
            try:
                d.rmdir()  # only when empty
            except OSError:
                break
            d = d.parent
    if not out_existed:
        with contextlib.suppress(OSError):
            top.rmdir()


def _generate_grid(cfg: GenerateConfig, res: Resolved, rep: Reporter, model: Any, spec: "distributed.ShardSpec",
                   cp_degree: int | None) -> dict:
    device = distributed.device_for(cfg.device, spec)
    load_s, loaded_early = 0.0, False
    if unsettled(res):  # a pipeline folder whose defaults its components give: load it to plan (and to skip)
        loaded_early = model is None
        model, load_s = _load(model, res, cfg, device, Reporter())  # progress starts once the grid is planned
        settle_from_model(res, model)
    # Context parallel: every rank runs every run (one shard); rank 0 writes.
    work_shard = distributed.ShardSpec() if cp_degree else spec
    writer = spec.is_main if cp_degree else True
    mine = {id(r) for r in distributed.shard_runs(res.runs, work_shard)}
    todo: list[Run] = []
    for run in res.runs:
        if id(run) not in mine:
            run.status = "other-shard"
            continue
        if not cfg.overwrite and runstore.is_complete(run.dir):
            old = (runstore.read_meta(run.dir) or {}).get("request", {})
            why = _mismatch(old, request_of(res, run))
            if why:
                raise UserError(f"{run.dir} already holds a complete run made with other settings ({why}); "
                                "use another --out, or --overwrite to replace it")
            run.status = "skipped"
        else:
            todo.append(run)
    if cp_degree:
        distributed.barrier()  # every rank has planned before rank 0 writes anything
    rep.planned([r for r in res.runs if id(r) in mine], len(todo))

    if todo:
        # every rank, so that none goes on alone: without ffmpeg the first run would fail at its mp4, after sampling
        video_io.ffmpeg_exe()
        if model is None:
            model, load_s = _load(model, res, cfg, device, rep)
        elif loaded_early:
            rep.loading(res.info.name)
            rep.loaded(res.info.name, load_s)
        if hasattr(model, "resolve_settings"):  # the model's own limits (sizes it can make), before any folder
            model.resolve_settings(steps=res.steps, guidance=res.guidance, height=res.height, width=res.width,
                                   frames=res.frames)
        if cp_degree:
            from .models.context_parallel import enable_context_parallel

            enable_context_parallel(model, cfg.context_parallel, cp_degree)
        compiled = _compile(model, res.info.name) if cfg.compile else None
        described = _jsonable(model.describe()) if hasattr(model, "describe") else {}
        base_meta = {
            "format": "lowbit-video run", "format_version": META_FORMAT,
            "model": {"name": res.info.name, "family": getattr(res.info, "family", None),
                      "path": str(Path(cfg.model_path).resolve()) if cfg.model_path else None,
                      "weights": getattr(res.info, "weights", None),
                      "pipeline": described.get("pipeline") if isinstance(described, dict) else None,
                      "describe": described},
            "steps": res.steps, "guidance": res.guidance,
            "size": {"height": res.height, "width": res.width, "frames": res.frames}, "fps": cfg.fps,
            "device": device, "versions": versions(), "git_revision": git_revision(),
            "argv": list(sys.argv), "compile": compiled,
        }
        if not spec.single or cp_degree:
            base_meta["distributed"] = {"shard": spec.to_dict(), "context_parallel": (
                {"mode": cfg.context_parallel, "degree": cp_degree} if cp_degree else None)}
        # batches: todo runs of one (recipe, prompt), at most `batch` seeds each; with captures on,
        # one seed per call so each run's captures have their own folder
        size = 1 if cfg.capture_dir else (cfg.batch or 1)
        groups: "OrderedDict[tuple[str, str], list[Run]]" = OrderedDict()
        for run in todo:
            groups.setdefault((run.recipe.name, run.prompt), []).append(run)
        started = time.time()
        traced_for = None  # the recipe the compiled blocks were last traced under
        for runs in groups.values():
            for i in range(0, len(runs), size):
                chunk = runs[i: i + size]
                if cfg.compile and chunk[0].recipe.name != traced_for:
                    from .models.regional_compile import forget_graphs

                    forget_graphs()
                    traced_for = chunk[0].recipe.name
                if cp_degree:  # every rank runs every run of the grid together: no claims
                    _run_batch(model, res, cfg, chunk, rep, base_meta, load_s, write=writer)
                    continue
                claims = _claim(chunk, cfg, started, rep)
                try:
                    live = [r for r in chunk if r.status == "pending"]
                    if live:
                        _run_batch(model, res, cfg, live, rep, base_meta, load_s, write=writer)
                finally:
                    for c in claims:
                        c.release()

    out = {"runs": [r.row() for r in res.runs], "generated": sum(r.status == "done" for r in res.runs),
           "skipped": sum(r.status == "skipped" for r in res.runs),
           "claimed": sum(r.status == "claimed" for r in res.runs)}
    manifest = None
    if spec.launched:
        distributed.barrier()  # every rank's runs are written
    if cfg.manifest and (spec.is_main or not spec.launched):
        manifest = write_manifest(cfg.out, res, spec)
    if not spec.single or cp_degree:
        runs = manifest["runs"] if manifest else None
        out.update({
            "shard": spec.to_dict(),
            "context_parallel": {"mode": cfg.context_parallel, "degree": cp_degree} if cp_degree else None,
            "manifest": str(Path(cfg.out) / MANIFEST_NAME) if manifest else None,
            "complete": sum(r["status"] == "complete" for r in runs) if runs else None,
            "missing": sum(r["status"] == "missing" for r in runs) if runs else None,
        })
    return out


def _compile(model: Any, name: str) -> dict:
    """Compile the loaded model's transformer blocks (--compile); what the runs' meta records of it."""
    if not hasattr(model, "compile_blocks"):
        raise UserError(f"--compile: model {name} has no transformer blocks to compile")
    return model.compile_blocks()


def _load(model: Any, res: Resolved, cfg: GenerateConfig, device: str, rep: Reporter) -> tuple[Any, float]:
    """(the model, seconds it took to load); an already loaded `model` is returned as it is."""
    if model is not None:
        return model, 0.0
    rep.loading(res.info.name)
    t0 = time.perf_counter()
    # a folder run without --model loads as its pipeline class (registry.load_model(None, ...))
    name = None if cfg.model is None and cfg.model_path is not None else res.info.name
    model = _registry().load_model(name, path=cfg.model_path, device=device, conditioning=res.conditioning)
    load_s = time.perf_counter() - t0
    rep.loaded(res.info.name, load_s)
    return model, load_s


def write_manifest(out_dir: str | os.PathLike, res: Resolved, spec: "distributed.ShardSpec") -> dict:
    """Write <out>/manifest.json: every run of this grid plus those already listed (other grids asked
    of the same folder), each {dir (relative to <out>), model, recipe, prompt, seed, status}, status
    "complete" or "missing" as found on disk now. Atomic. Returns the manifest."""
    root = Path(out_dir)
    path = root / MANIFEST_NAME
    entries: "OrderedDict[str, dict]" = OrderedDict()
    try:
        old = json.loads(path.read_text())
        for e in old.get("runs", []) if isinstance(old, dict) else []:
            if isinstance(e, dict) and isinstance(e.get("dir"), str):
                entries[e["dir"]] = {k: e.get(k) for k in ("dir", "model", "recipe", "prompt", "seed")}
    except (OSError, ValueError):
        pass
    for run in res.runs:
        rel = os.path.relpath(run.dir, root)
        entries[rel] = {"dir": rel, "model": run.model, "recipe": run.recipe.name, "prompt": run.prompt,
                        "seed": run.seed}
    runs = []
    for rel, e in entries.items():
        runs.append({**e, "status": "complete" if runstore.is_complete(root / rel) else "missing"})
    manifest = {
        "format": "lowbit-video manifest", "format_version": 1,
        "written_by": {"shard": spec.to_dict(), "argv": list(sys.argv)},
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "complete": sum(r["status"] == "complete" for r in runs),
        "missing": sum(r["status"] == "missing" for r in runs),
        "runs": runs,
    }
    runstore.atomic_write_json(path, _jsonable(manifest))
    return manifest


def _claim(chunk: list[Run], cfg: GenerateConfig, started: float, rep: Reporter) -> list:
    """Claim each run of `chunk` (runstore.claim_run) before generating it. A run another process holds
    gets status "claimed" and is left to it; a run that became complete meanwhile (another process
    generated it; with --overwrite: after this command started) gets "skipped". Returns the claims held."""
    claims = []
    for run in chunk:
        claim = runstore.claim_run(run.dir, "generate")
        if claim is None:
            run.status = "claimed"
            run.note = f"being generated by another process ({runstore.claim_holder(run.dir, 'generate')})"
            rep.run_done(run)
            continue
        meta = run.dir / runstore.META_NAME
        if runstore.is_complete(run.dir) and (not cfg.overwrite or meta.stat().st_mtime >= started):
            claim.release()
            run.status = "skipped"
            rep.run_done(run)
            continue
        claims.append(claim)
    return claims


def _run_batch(model, res: Resolved, cfg: GenerateConfig, chunk: list[Run], rep: Reporter,
               base_meta: dict, load_s: float, *, write: bool = True) -> None:
    recipe, prompt = chunk[0].recipe, chunk[0].prompt
    seeds = [r.seed for r in chunk]
    # nothing is removed before the model call: write_run builds each run beside its folder and
    # swaps it in, so an interrupted --overwrite keeps the complete run it was replacing
    rep.batch_started(recipe.name, prompt, seeds, res.steps)
    capture = _capture_spec(cfg, chunk[0])
    t0 = time.perf_counter()
    try:
        clips = model.generate([prompt] * len(chunk), seeds, recipe=recipe, steps=res.steps, guidance=res.guidance,
                               height=res.height, width=res.width, frames=res.frames, progress=rep.step,
                               capture=capture)
    except ValueError as e:  # e.g. a prompt or size the model cannot take: one line
        raise UserError(str(e).splitlines()[0] if str(e) else type(e).__name__) from None
    except Exception as e:  # noqa: BLE001 - torch.compile's errors share no base class but Exception
        from .models.regional_compile import is_compile_error

        if not (cfg.compile and is_compile_error(e)):
            raise
        first = next((line for line in str(e).splitlines() if line.strip()), "")
        raise UserError(f"--compile: torch.compile of the transformer blocks failed under recipe {recipe.name} "
                        f"({type(e).__name__}: {first[:200]}); run without --compile") from None
    sample_s = time.perf_counter() - t0
    clips = np.asarray(clips)
    if clips.ndim != 5 or clips.shape[0] != len(chunk) or clips.shape[-1] != 3:
        raise RuntimeError(f"model returned frames of shape {clips.shape}, expected ({len(chunk)}, T, H, W, 3)")
    rd = recipe.to_dict()
    # attention calls of this model call by precision (quantized / high / fallback), when the model says; compiled
    # blocks do not count their calls (attention_hook.py): a compiled run records the steps the policy planned to
    # quantize rather than counts of zero
    calls = getattr(model, "last_run", None)
    if cfg.compile and isinstance(calls, dict):
        calls = {"counted": False, **{k: calls[k] for k in ("num_steps", "planned_quantized_steps") if k in calls}}
    for run, clip in zip(chunk, clips):
        meta = {
            **base_meta,
            "recipe": rd, "policy": rd.get("policy"),
            "prompt": run.prompt, "prompt_slug": run.dir.parent.name, "seed": run.seed,
            "vbench": res.suite.get(run.prompt),  # the prompt's VBench suite entry, if it came from the suite
            "request": request_of(res, run),
            "attention_calls": _jsonable(calls) if isinstance(calls, dict) else None,
            "capture": None if capture is None else {"dir": str(capture.dir), "blocks": capture.blocks,
                                                     "steps": capture.steps},
            "timings": {"load_s": round(load_s, 4), "sample_s": round(sample_s / len(chunk), 4),
                        "sample_batch_s": round(sample_s, 4), "batch_size": len(chunk),
                        **(getattr(model, "last_timing", None) or {})},
        }
        if write:  # context parallel: only rank 0 writes (every rank has the same frames)
            write_run(run, clip, meta=meta)
        run.status = "done"
        rep.run_done(run)


# ------------------------------------------------------------------------------------- adherence


def adherence(paths: Sequence[str | os.PathLike]) -> dict:
    """Prompt adherence of tiny-shapes runs at or under `paths` (run dirs or folders above them).

    Frames come from frames.npz (lossless), else a complete frames.png strip, else video.mp4 (decoded,
    H.264 artefacts included). Returns {"color_accuracy", "motion_accuracy", "shape_accuracy", "n",
    "runs", "skipped": [{"dir", "reason"}]}; accuracies are fractions over the scored runs."""
    from .models.tiny_shapes.adherence import score_clip

    damaged: list = []
    runs = runstore.find_runs(paths, damaged)
    scores, skipped = [], [{"dir": str(d), "reason": f"damaged run: {why}"} for d, why in damaged]
    for run in runs:
        record = runstore.RunRecord.of(run, runstore.read_meta(run) or {})
        if not record.is_tiny_shapes:
            skipped.append({"dir": str(run), "reason": f"model {record.model!r} is not tiny-shapes"})
            continue
        try:
            frames, source = load_run_frames(run)
            s = score_clip(frames, record.meta["prompt"])
        except (KeyError, ValueError, OSError) as e:  # DamagedRunError among them: one run, not the batch
            skipped.append({"dir": str(run), "reason": f"unreadable: {e}"})
            continue
        if s is None:
            skipped.append({"dir": str(run), "reason": "two-object prompt (not scored)"})
            continue
        scores.append((record.recipe, s))
    by_recipe = {name: _accuracies([s for r, s in scores if r == name]) for name in sorted({r for r, _ in scores if r})}
    return {**_accuracies([s for _, s in scores]), "runs": len(runs), "skipped": skipped, "by_recipe": by_recipe}


def _accuracies(scores: list[dict]) -> dict:
    """Fractions of clips whose colour, motion and shape were detected as prompted (None if no clip)."""
    n = len(scores)

    def acc(key: str) -> float | None:
        return sum(bool(s[key]) for s in scores) / n if n else None

    return {"color_accuracy": acc("color_ok"), "motion_accuracy": acc("motion_ok"), "shape_accuracy": acc("shape_ok"), "n": n}


def load_run_frames(run: str | os.PathLike) -> tuple[np.ndarray, str]:
    """(uint8 frames (T, H, W, 3), source file name) of a run, lossless first. A file that is there but
    cannot be decoded (truncated, corrupt) raises DamagedRunError naming it."""
    from .errors import DamagedRunError

    run = Path(run)
    for name in ("frames.npz", "frames.png", "video.mp4"):
        path = run / name
        if not path.is_file():
            continue
        try:
            if name == "frames.npz":
                return video_io.read_frames_npz(path), name
            if name == "frames.png":
                if video_io.strip_is_complete(path):
                    return video_io.read_frame_strip(path), name
                continue
            meta = runstore.read_meta(run) or {}
            scale = ((meta.get("outputs") or {}).get("video.mp4") or {}).get("scale", 1)
            return video_io.read_mp4(path, downscale=int(scale)), name
        except Exception as e:  # noqa: BLE001 - zipfile, zlib, PIL and ffmpeg each fail their own way on a damaged file
            text = str(e).strip().splitlines()
            raise DamagedRunError(f"{path}: damaged ({type(e).__name__}{': ' + text[0] if text else ''})") from None
    raise FileNotFoundError(f"{run}: no frames.npz, no complete frames.png strip, no video.mp4")
