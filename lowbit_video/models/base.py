"""The interface every model adapter implements (pipeline.py: every diffusers pipeline;
tiny_shapes_adapter.py), and the helpers they share. registry.py lists the models and loads them; it
imports the adapters, which import this module and never the registry, so the imports run one way:
registry -> adapter -> base.

* `VideoModel.generate` installs the recipe's attention hooks for the call through the public
  `use_recipe` (injection.py, attention_hook.py), tracks the denoising step on the scheduler (steps.py), optionally captures Q/K/V
  (capture.py), and takes the hooks out afterwards.
* Paired noise: the initial noise of a seed is drawn on a CPU `torch.Generator` seeded with it,
  so every recipe (and device) starts from the same noise.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

import numpy as np
import torch

from ..errors import UserError
from ..recipes import Recipe, load_recipe
from .capture import CaptureSpec, CaptureWriter
from .steps import StepTracker


@dataclass(frozen=True)
class ModelInfo:
    name: str  # "tiny-shapes", "wan2.1-t2v-1.3b", ...
    family: str  # "tiny-shapes" | "wan" | "hunyuanvideo"; a folder's: its transformer's (families.py)
    description: str
    weights: str  # where the weights come from
    needs_path: bool
    # None (a pipeline folder only): the pipeline computes it from its components; known once loaded
    default_steps: int | None
    default_guidance: float | None
    default_height: int | None
    default_width: int | None
    default_frames: int | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Settings:
    """The resolved sampling settings of one generate call."""

    steps: int
    guidance: float
    height: int
    width: int
    frames: int


class VideoModel(ABC):
    """A loaded model of one family. Subclasses provide `_recipe_target`, `_scheduler`, `_sample`."""

    info: ModelInfo
    device: torch.device
    dtype: torch.dtype

    def __init__(self, info: ModelInfo, *, device: torch.device, dtype: torch.dtype, path: str | None = None):
        self.info = info
        self.device = device
        self.dtype = dtype
        self.path = path
        self.last_run: dict[str, Any] | None = None  # attention-call counts of the last generate
        self.last_timing: dict[str, Any] | None = None  # transformer time per step, peak memory (timing.py)

    # -- public

    def generate(self, prompts: list[str], seeds: list[int], *, recipe: Recipe, steps: int | None = None,
                 guidance: float | None = None, height: int | None = None, width: int | None = None,
                 frames: int | None = None, progress: Callable[[int, int], None] | None = None,
                 capture: Any = None) -> np.ndarray:
        """One clip per (prompt, seed) pair: float32 (n, frames, height, width, 3) in [0, 1].

        `progress(done, total)` is called after every denoising step (total = steps x sampling
        loops of this call). `capture`: a CaptureSpec saves post-RoPE Q/K/V (capture.py); any other
        object with CaptureWriter's `wants` / `save` (and `prompts` / `seeds` attributes) is handed
        the same tensors in memory, on the model's device (lowbit_video.profile)."""
        prompts, seeds = list(prompts), [int(s) for s in seeds]
        if len(prompts) != len(seeds):
            raise UserError(f"{len(prompts)} prompts but {len(seeds)} seeds; pass one seed per prompt")
        recipe = load_recipe(recipe)
        s = self.resolve_settings(steps=steps, guidance=guidance, height=height, width=width, frames=frames)
        if not prompts:
            return np.zeros((0, s.frames, s.height, s.width, 3), np.float32)
        tracker = StepTracker(on_step=progress)
        tracker.steps_total = s.steps * self._loops(len(prompts))
        writer = None
        if isinstance(capture, CaptureSpec):
            writer = CaptureWriter(capture, {"model": self.info.name, "recipe": recipe.name})
        elif capture is not None:  # a sink with CaptureWriter's wants/save that keeps Q/K/V in memory (profile)
            writer = capture
        if writer is not None:
            writer.prompts, writer.seeds = prompts, seeds
        scheduler = self._scheduler()
        from .injection import use_recipe
        from .timing import TransformerTimer

        timer = TransformerTimer([t for _, t in self._transformers()], tracker, self.device)
        # the public one-call API (injection.py): generate runs what a user's own pipeline runs
        with torch.no_grad(), use_recipe(self._recipe_target(), recipe, scheduler=scheduler, tracker=tracker,
                                         capture=writer) as handle, timer:
            video = self._sample(prompts, seeds, s, handle.context, scheduler)
        self.last_run = handle.calls
        self.last_timing = timer.summary()
        video = np.asarray(video, dtype=np.float32)
        return np.clip(video, 0.0, 1.0)

    def compile_blocks(self) -> dict[str, Any]:
        """Regional torch.compile of every transformer's repeated blocks (regional_compile.py), traced at their first
        call under whatever recipe is installed then; returns what a run's meta records of it."""
        from .regional_compile import BACKEND, compile_blocks, describe

        blocks = [b for _, t in self._transformers() if t is not None for b in compile_blocks(t, backend=BACKEND)]
        return describe(blocks, BACKEND)

    def describe(self) -> dict[str, Any]:
        """JSON-ready description: model, classes, config essentials, blocks, device, dtype."""
        from .families import block_lists
        from .injection import num_blocks, rope_segments

        out: dict[str, Any] = {"model": self.info.name, "family": self.info.family, "path": self.path,
                               "device": str(self.device), "dtype": str(self.dtype).replace("torch.", "")}
        experts = {}
        for name, t in self._transformers():
            if t is None:
                continue
            cfg = t.config
            experts[name] = {
                "class": type(t).__name__, "num_blocks": num_blocks(t),
                "blocks": {n: len(getattr(t, n)) for n in block_lists(t)},
                "num_attention_heads": _int(cfg, "num_attention_heads"),
                "attention_head_dim": _int(cfg, "attention_head_dim"),
                "patch_size": _jsonable(getattr(cfg, "patch_size", None)), "in_channels": _int(cfg, "in_channels"),
                "rope_segments": list(rope_segments(t) or ()),
            }
        out["transformers"] = experts
        out["num_blocks"] = next(iter(experts.values()))["num_blocks"] if experts else 0
        out.update(self._describe_extra())
        return out

    def resolve_settings(self, *, steps=None, guidance=None, height=None, width=None, frames=None) -> Settings:
        i = self.info
        s = Settings(int(i.default_steps if steps is None else steps),
                     float(i.default_guidance if guidance is None else guidance),
                     int(i.default_height if height is None else height),
                     int(i.default_width if width is None else width),
                     int(i.default_frames if frames is None else frames))
        if s.steps < 1:
            raise UserError(f"steps must be >= 1, got {s.steps}")
        if not s.guidance >= 0:
            raise UserError(f"guidance must be >= 0, got {s.guidance}")
        for name in ("height", "width", "frames"):
            if getattr(s, name) < 1:
                raise UserError(f"{name} must be >= 1, got {getattr(s, name)}")
        self._check_settings(s)
        return s

    # -- implemented by each adapter (pipeline.py, tiny_shapes_adapter.py)

    @abstractmethod
    def _recipe_target(self) -> Any:
        """What the recipe is installed into (`injection.use_recipe`): the pipeline, or an object
        holding the transformer(s) as `transformer` / `transformer_2`."""

    @abstractmethod
    def _scheduler(self) -> Any:
        """The scheduler whose set_timesteps/step the step tracker wraps (the sampler must use it)."""

    @abstractmethod
    def _sample(self, prompts: list[str], seeds: list[int], s: Settings, ctx, scheduler: Any) -> np.ndarray:
        """Run the family's sampler with the recipe installed; (n, T, H, W, 3) floats in [0, 1]."""

    def _transformers(self) -> list[tuple[str, torch.nn.Module]]:
        """(name, transformer) pairs the recipe is installed into (Wan2.2 A14B has two)."""
        from .injection import pipeline_transformers

        return pipeline_transformers(self._recipe_target())

    def _loops(self, n_prompts: int) -> int:
        """Sampling loops (set_timesteps calls) per generate call of n prompts."""
        return n_prompts

    def _check_settings(self, s: Settings) -> None:
        pass

    def _describe_extra(self) -> dict[str, Any]:
        return {}


def _int(cfg: Any, key: str) -> int | None:
    """An integer of a transformer config, None where the family names it otherwise."""
    v = getattr(cfg, key, None)
    return int(v) if isinstance(v, int) else None


def _jsonable(x: Any) -> Any:
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x


def pipeline_dtype(dtype: torch.dtype | None, device: torch.device) -> torch.dtype:
    """Default compute dtype of the real models: bfloat16 (their training dtype) on every device."""
    return dtype if dtype is not None else torch.bfloat16


def cpu_noise(shape: Sequence[int], seed: int) -> torch.Tensor:
    """float32 standard normal noise of `shape` from a CPU generator seeded with `seed`."""
    g = torch.Generator(device="cpu").manual_seed(int(seed))
    return torch.randn(tuple(shape), generator=g, dtype=torch.float32)


def dtype_kwargs(dtype: torch.dtype) -> dict[str, Any]:
    """diffusers >= 0.36 takes `dtype=` (and deprecates `torch_dtype=`)."""
    try:
        from diffusers.utils import deprecation_utils

        if hasattr(deprecation_utils, "_resolve_dtype"):
            return {"dtype": dtype}
    except ImportError:
        pass
    return {"torch_dtype": dtype}


def quiet_progress(pipe) -> None:
    """No diffusers progress bar of its own: generate draws one over runs and steps."""
    try:
        pipe.set_progress_bar_config(disable=True)
    except Exception:  # pragma: no cover - cosmetic only
        pass


__all__ = ["ModelInfo", "Settings", "VideoModel", "cpu_noise", "dtype_kwargs", "pipeline_dtype", "quiet_progress"]
