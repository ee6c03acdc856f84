"""What every study shares: the resolved options, progress hooks, atomic output writers."""

from __future__ import annotations

import io
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from .. import runstore
from ..errors import UserError
from .study import Study

DEFAULT_OUT = "runs"


@dataclass(frozen=True)
class AblateOptions:
    """CLI overrides (None: the study's [run] defaults). height/width/frames: library-only (tests)."""

    model: str | None = None
    model_path: str | None = None  # checkpoint folder of a real model (as generate --model-path)
    image: str | None = None       # an image-to-video pipeline folder's conditioning image (as generate --image)
    video: str | None = None       # a video-to-video pipeline folder's conditioning video (as generate --video)
    prompts: str | None = None     # a prompts file, or VBench's suite: "vbench" / "vbench:<dimension>"
    prompt_limit: int | None = None
    seeds: Sequence[int] | None = None
    steps: int | None = None
    out: str = DEFAULT_OUT
    device: str = "auto"           # devices.resolve_device: CUDA when torch sees a GPU, else the CPU
    weights_dir: str | None = None
    height: int | None = None
    width: int | None = None
    frames: int | None = None
    shard: Any = None  # "i/n" (array jobs) or a distributed.ShardSpec; None: torchrun's RANK/WORLD_SIZE


@dataclass(frozen=True)
class Resolved:
    """A study's effective settings. With `folder`, model is a pipeline folder's own name (generate --model-path
    without --model: its pipeline class, and its conditioning image's or video's) and `info` its ModelInfo."""

    model: str
    prompts: str
    seeds: tuple[int, ...]
    steps: int | None  # None: the model's default
    out: Path
    device: str
    weights_dir: str | None
    size: dict = field(default_factory=dict)  # height/width/frames overrides (tests)
    shard: Any = None  # distributed.ShardSpec (None: one process)
    model_path: str | None = None
    prompt_limit: int | None = None
    image: str | None = None
    video: str | None = None
    folder: bool = False
    info: Any = None  # the folder's ModelInfo (folder runs)

    def generate_config(self, **kw: Any):
        """The GenerateConfig of the study's runs (`kw`: recipes, out, ...)."""
        from ..generate import GenerateConfig

        return GenerateConfig(model=None if self.folder else self.model, model_path=self.model_path,
                              image=self.image, video=self.video, prompts_file=self.prompts,
                              prompt_limit=self.prompt_limit,
                              seeds=list(self.seeds), steps=self.steps, device=self.device, **self.size, **kw)

    def model_info(self):
        """The ModelInfo of the study's model."""
        if self.info is not None:
            return self.info
        from ..models.registry import get_model_info

        return get_model_info(self.model)

    @property
    def spec(self):
        from ..distributed import ShardSpec

        return self.shard if self.shard is not None else ShardSpec()

    @property
    def share_only(self) -> bool:
        """True where this process does only its share of the runs / captures and writes no study
        outputs: a torchrun rank other than 0, or any `--shard i/n` job (the other jobs may still be
        running; a final run without --shard reuses everything and writes the outputs)."""
        s = self.spec
        return not s.single and not (s.launched and s.is_main)


def resolve(study: Study, opts: AblateOptions) -> Resolved:
    seeds = tuple(opts.seeds) if opts.seeds else study.run.seeds
    bad = [s for s in seeds if not isinstance(s, int) or s < 0]
    if bad:
        raise UserError(f"--seeds: seeds must be non-negative integers, got {bad[0]!r}")
    steps = opts.steps if opts.steps is not None else (study.run.steps or None)
    if steps is not None and steps <= 0:
        raise UserError(f"--steps must be positive, got {steps}")
    size = {k: v for k, v in (("height", opts.height), ("width", opts.width), ("frames", opts.frames)) if v}
    from ..distributed import ShardSpec

    shard = opts.shard if isinstance(opts.shard, ShardSpec) else ShardSpec.from_cli_or_env(opts.shard)
    from ..devices import resolve_device
    from ..runstore import check_output

    check_output(opts.out, "--out")  # before any model is loaded
    # a pipeline folder without --model runs as generate runs it: named after its pipeline class (and input)
    folder = opts.model is None and opts.model_path is not None
    given = "image" if opts.image is not None else "video" if opts.video is not None else None
    if given is not None and not folder:
        from ..models.conditioning import folder_only

        raise folder_only(given)
    info = None
    if folder:
        from ..generate import GenerateConfig
        from ..generate import resolve as plan

        info = plan(GenerateConfig(model=None, model_path=opts.model_path, image=opts.image, video=opts.video,
                                   out=opts.out, device=opts.device)).info
    return Resolved(model=info.name if folder else opts.model or study.run.model,
                    prompts=opts.prompts or study.run.prompts, seeds=tuple(dict.fromkeys(seeds)), steps=steps,
                    out=Path(opts.out), device=resolve_device(opts.device), weights_dir=opts.weights_dir, size=size,
                    shard=shard, model_path=opts.model_path, prompt_limit=opts.prompt_limit, image=opts.image,
                    video=opts.video, folder=folder, info=info)


def effective_steps(r: Resolved) -> int:
    """The denoising steps the study's runs use: --steps / the study's, else the model's default."""
    if r.steps is not None:
        return r.steps
    return r.model_info().default_steps


def share_result(study: Study, r: Resolved, **extra: Any) -> dict:
    """What a process that did only its share returns (it writes no study outputs)."""
    return {"study": study.name, "model": r.model, "shard": r.spec.to_dict(), **extra, "files": []}


def command(study: Study, r: Resolved) -> str:
    """The command line that reproduces this output."""
    from ..recipes import file_key
    from .study_files import available_studies

    known = available_studies().get(study.name)
    # a shipped study may sit in a zip: compare where the files are, not as paths on disk
    name = study.name if known is not None and file_key(known) in (study.file, file_key(Path(study.file))) else study.file
    args = ["lowbit-video", "ablate", name]
    if not r.folder:
        args += ["--model", r.model]
    if r.model_path:
        args += ["--model-path", r.model_path]
    if r.image:
        args += ["--image", r.image]
    if r.video:
        args += ["--video", r.video]
    args += ["--prompts", r.prompts]
    if r.prompt_limit:
        args += ["--prompt-limit", str(r.prompt_limit)]
    args += ["--seeds", *map(str, r.seeds)]
    if r.steps is not None:
        args += ["--steps", str(r.steps)]
    args += ["--out", str(r.out)]
    if r.device != "cpu":
        args += ["--device", r.device]
    if r.weights_dir:
        args += ["--weights-dir", r.weights_dir]
    return shlex.join(args)


class Reporter:
    """Progress hooks (no-ops; the CLI draws rich bars on stderr)."""

    def generate_reporter(self) -> Any:
        from ..generate import Reporter as GenReporter

        return GenReporter()

    def stage(self, description: str, total: int) -> None: ...
    def advance(self, n: int = 1) -> None: ...
    def note(self, message: str) -> None: ...
    def done(self) -> None: ...


# ------------------------------------------------------------------------------------ writing


def written_markdown(result: dict) -> str:
    """A finished study's Markdown output (its first file), as the terminal shows it."""
    return Path(result["files"][0]).read_text()


def write_text(path: Path, text: str) -> None:
    runstore.atomic_write_bytes(path, text.encode("utf-8"))


def write_json(path: Path, obj: Any) -> None:
    runstore.atomic_write_json(path, obj)


def save_figure(fig: Any, path: Path) -> None:
    """A matplotlib figure as PNG, atomically."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120, bbox_inches="tight")
    plt.close(fig)
    runstore.atomic_write_bytes(path, buf.getvalue())


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def md_table(header: Sequence[str], rows: Sequence[Sequence[str]], align: Sequence[str] | None = None) -> str:
    align = align or ["l"] + ["r"] * (len(header) - 1)
    sep = ["---:" if a == "r" else ":---:" if a == "c" else "---" for a in align]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(sep) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def finite(x: float) -> float | dict:
    """x, or {"unavailable": ...} when it is NaN or infinite (JSON never holds NaN)."""
    import math

    x = float(x)
    return x if math.isfinite(x) else {"unavailable": f"non-finite value ({x})"}
