"""Any diffusers text-to-video pipeline from a diffusers-format folder, offline: one adapter for every family.

    spec = folder_spec(path)                      # what model_index.json and the pipeline class say
    model = DiffusersVideoModel.load(info, spec, path=path, device=dev)

* **Loading.** The class model_index.json names (`_class_name`, e.g. WanPipeline, CogVideoXPipeline,
  LTXPipeline) is loaded with its `from_pretrained(..., local_files_only=True)`; nothing is downloaded.
  What differs between pipelines at load time is data (`PIPELINE_FACTS`, keyed by pipeline class): Wan
  keeps its VAE in float32 (as Wan's own examples do), HunyuanVideo decodes tiled.
* **Checks.** A named model (registry.py) brings a `FolderSpec`: the pipeline classes, components, transformer
  config values and model_index.json keys its checkpoint has. A folder that differs is a one-line error
  before any weight is read, so a run is never filed under a model it is not.
* **Settings.** Unset settings come from the named model's row, else from the pipeline's `__call__`
  defaults (height, width, num_frames, num_inference_steps, guidance_scale). Where a pipeline leaves a size
  at None it computes it from its components; `PIPELINE_FACTS.derived` says how (read from the pipeline's
  source), and a size nothing gives is a one-line error asking for --height / --width.
* **Sampling.** One pipeline call per prompt (batch 1), its initial noise drawn by the pipeline from a CPU
  `torch.Generator` seeded with the seed: the same noise under every recipe (paired), on every device.
  Keyword arguments go in only when the pipeline's `__call__` takes them (`max_sequence_length`,
  `negative_prompt`, `prompt_template`, `guidance_scale_2` of Wan2.2's second expert).
"""

from __future__ import annotations

import inspect
import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch

from ..errors import UserError
from .base import ModelInfo, Settings, VideoModel, dtype_kwargs, pipeline_dtype, quiet_progress
from .checkpoint import check_pipeline_folder, components, read_model_index
from .conditioning import Conditioning, pipeline_kind

# Settings -> the pipeline __call__ argument that holds its default.
CALL_ARGUMENTS = {"steps": "num_inference_steps", "guidance": "guidance_scale", "height": "height", "width": "width",
                  "frames": "num_frames"}
# The pipeline attributes holding the VAE's compression (CogVideoX/Wan/HunyuanVideo name them one way, LTX and
# Mochi two others).
SPATIAL = ("vae_scale_factor_spatial", "vae_spatial_compression_ratio", "vae_spatial_scale_factor")
TEMPORAL = ("vae_scale_factor_temporal", "vae_temporal_compression_ratio", "vae_temporal_scale_factor")


@dataclass(frozen=True)
class PipelineFacts:
    """What a pipeline class needs that its objects do not say (read from diffusers 0.42.1's sources)."""

    vae_float32: bool = False  # load the VAE in float32 when the rest runs in half precision
    vae_tiling: bool = False  # decode tiled (HunyuanVideo's VAE at 720p needs it)
    frames_form: bool = False  # frames must be (VAE temporal factor) * k + 1: the pipeline decodes no other count
    # setting -> attribute paths on the pipeline whose product is the value __call__ uses when the argument is None
    derived: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # or (method, argument paths): the pipeline's own method returning (height, width) when both are None; a path
    # `image.…` reads the conditioning image (HunyuanVideo-1.5's image-to-video pipeline sizes the clip from it
    # and takes no height or width)
    size_call: tuple[str, tuple[str, ...]] | None = None
    frames_argument: str = "num_frames"  # the __call__ argument that takes the frame count (Latte: video_length)
    # the attribute path of the only frame count the model takes (Latte: its temporal position embedding's length)
    frames_fixed: str | None = None
    # __call__ arguments the pipeline needs beyond its defaults (a caller's negative prompt still wins):
    # EasyAnimate's encode_prompt iterates over the negative prompt under guidance, so None fails there; Sana-Video's
    # resolution binning (render at the nearest trained size, then resize) off, so that a run renders the size it
    # records (its 480p bin for a square video, 624 x 624, fails the pipeline's own multiple-of-32 check)
    call_extra: Mapping[str, Any] = field(default_factory=dict)
    # an image-to-video pipeline whose __call__ gives `image` a default it cannot run with (LTX-Video's)
    image_required: bool = False


_COG_SIZE = {"height": ("transformer.config.sample_height", "vae_scale_factor_spatial"),
             "width": ("transformer.config.sample_width", "vae_scale_factor_spatial")}
PIPELINE_FACTS: dict[str, PipelineFacts] = {
    "WanPipeline": PipelineFacts(vae_float32=True, frames_form=True),
    "WanImageToVideoPipeline": PipelineFacts(vae_float32=True, frames_form=True),
    "HunyuanVideoPipeline": PipelineFacts(vae_tiling=True, frames_form=True),
    "CogVideoXPipeline": PipelineFacts(frames_form=True,
                                       derived={**_COG_SIZE, "frames": ("transformer.config.sample_frames",)}),
    "CogVideoXImageToVideoPipeline": PipelineFacts(frames_form=True, derived=_COG_SIZE),
    "CogVideoXVideoToVideoPipeline": PipelineFacts(frames_form=True, derived=_COG_SIZE),
    "WanVideoToVideoPipeline": PipelineFacts(vae_float32=True, frames_form=True),
    "WanVACEPipeline": PipelineFacts(vae_float32=True, frames_form=True),
    "LTXPipeline": PipelineFacts(frames_form=True),
    "LTXImageToVideoPipeline": PipelineFacts(frames_form=True, image_required=True),
    "LTXConditionPipeline": PipelineFacts(frames_form=True),
    "LTX2ImageToVideoPipeline": PipelineFacts(frames_form=True, image_required=True),
    "AllegroPipeline": PipelineFacts(vae_tiling=True, derived={
        "height": ("transformer.config.sample_height", "vae_scale_factor_spatial"),
        "width": ("transformer.config.sample_width", "vae_scale_factor_spatial"),
        "frames": ("transformer.config.sample_frames", "vae_scale_factor_temporal")}),
    "MochiPipeline": PipelineFacts(frames_form=True,
                                   derived={"height": ("default_height",), "width": ("default_width",)}),
    # the Wan VAE's 4k + 1 frames
    "SkyReelsV2Pipeline": PipelineFacts(frames_form=True),
    "SkyReelsV2DiffusionForcingPipeline": PipelineFacts(frames_form=True),
    "SkyReelsV2ImageToVideoPipeline": PipelineFacts(frames_form=True),
    "MotifVideoPipeline": PipelineFacts(frames_form=True),
    "EasyAnimatePipeline": PipelineFacts(frames_form=True, call_extra={"negative_prompt": ""}),
    "Kandinsky5T2VPipeline": PipelineFacts(frames_form=True),
    "LTX2Pipeline": PipelineFacts(frames_form=True),
    "SanaVideoPipeline": PipelineFacts(frames_form=True, frames_argument="frames",
                                       call_extra={"use_resolution_binning": False}),
    "LattePipeline": PipelineFacts(frames_argument="video_length", frames_fixed="transformer.config.video_length"),
    "HunyuanVideo15Pipeline": PipelineFacts(frames_form=True, size_call=(
        "video_processor.calculate_default_height_width",
        ("default_aspect_ratio[1]", "default_aspect_ratio[0]", "target_size"))),
    "HunyuanVideo15ImageToVideoPipeline": PipelineFacts(frames_form=True, size_call=(
        "video_processor.calculate_default_height_width", ("image.height", "image.width", "target_size"))),
}


@dataclass(frozen=True)
class FolderSpec:
    """What a checkpoint folder must hold to be loaded as one model (empty: any text-to-video pipeline)."""

    pipelines: tuple[str, ...] = ()  # accepted model_index.json _class_name values
    required: tuple[str, ...] = ()  # components model_index.json must name
    transformer: Mapping[str, Any] = field(default_factory=dict)  # transformer/config.json key -> value
    index_keys: tuple[str, ...] = ()  # model_index.json keys that must be set (Wan2.2 A14B: boundary_ratio)


def pipeline_class(name: str, where: str) -> type:
    """The diffusers pipeline class `name` (model_index.json's _class_name); UserError if diffusers has none."""
    import diffusers

    try:
        cls = getattr(diffusers, name)
    except (AttributeError, ImportError, RuntimeError):
        cls = None
    if not (isinstance(cls, type) and hasattr(cls, "from_pretrained")):
        raise UserError(f"{where}: model_index.json names {name}, which the installed diffusers "
                        f"{diffusers.__version__} does not have")
    return cls


def call_arguments(cls: type) -> dict[str, str]:
    """setting -> the `cls.__call__` argument that takes it (CALL_ARGUMENTS, with the class's frames argument)."""
    frames = PIPELINE_FACTS.get(cls.__name__, PipelineFacts()).frames_argument
    return {**CALL_ARGUMENTS, "frames": frames}


def call_defaults(cls: type) -> dict[str, Any]:
    """setting -> the default of its argument in `cls.__call__` (None where it has none, or defaults to None)."""
    params = inspect.signature(cls.__call__).parameters
    out = {}
    for setting, arg in call_arguments(cls).items():
        p = params.get(arg)
        out[setting] = None if p is None or p.default is inspect.Parameter.empty else p.default
    return out


def check_text_to_video(cls: type, where: str, given: str | None = None) -> None:
    """UserError unless `cls.__call__` takes a frame count (num_frames, or the class's `frames_argument`) and a
    prompt and needs no other input; with `given` "image" (generate --image), an image-to-video pipeline: one that
    takes an `image` and needs nothing else; "video" (generate --video), a video-to-video one, which may take its
    frame count from the video instead."""
    params = inspect.signature(cls.__call__).parameters
    frames = call_arguments(cls)["frames"]
    video_to_video = frames not in params and "video" in params  # its frames are the video's
    if given is not None and given not in params:
        kind = pipeline_kind("image" if "image" in params else "video" if video_to_video else "text")
        raise UserError(f"{where}: {cls.__name__} takes no {given} ({kind} pipeline); leave --{given} out")
    if video_to_video and given is None and "prompt" in params:
        raise UserError(f"{where}: {cls.__name__} needs video besides the prompt ({pipeline_kind('video')} "
                        "pipeline: generate --video FILE)")
    if (frames not in params and given != "video") or "prompt" not in params:
        raise UserError(f"{where}: {cls.__name__} is not a text-to-video pipeline (its __call__ takes no "
                        f"{frames if frames not in params else 'prompt'})")
    needed = [n for n, p in params.items() if n not in ("self", "prompt", given)
              and p.default is inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if given != "image" and PIPELINE_FACTS.get(cls.__name__, PipelineFacts()).image_required:
        needed = ["image", *needed]
    if needed in (["image"], ["video"]):
        raise UserError(f"{where}: {cls.__name__} needs {needed[0]} besides the prompt ({pipeline_kind(needed[0])} "
                        f"pipeline: generate --{needed[0]} FILE)")
    if needed:
        raise UserError(f"{where}: {cls.__name__} needs {', '.join(needed)} besides the prompt; generate runs "
                        "text-, image- and video-to-video pipelines")


def slug(pipeline: str) -> str:
    """The short name of a pipeline class for run folders: CogVideoXPipeline -> cogvideox, LTXPipeline -> ltx."""
    base = pipeline[: -len("Pipeline")] if pipeline.endswith("Pipeline") and pipeline != "Pipeline" else pipeline
    return re.sub(r"[^a-z0-9]+", "-", base.lower()).strip("-") or "pipeline"


def transformer_config(path: str | Path) -> dict[str, Any] | None:
    try:
        cfg = json.loads((Path(path) / "transformer" / "config.json").read_text())
    except (OSError, ValueError):
        return None  # check_pipeline_folder / from_pretrained report a missing or unreadable config
    return cfg if isinstance(cfg, dict) else None


def folder_mismatch(spec: FolderSpec, path: str | Path, name: str) -> str | None:
    """Why the folder (already checked by check_pipeline_folder) is not a checkpoint of `name`, None if it is."""
    index = read_model_index(path)
    extra = sorted(c for c in components(index) if c.startswith("transformer") and c not in spec.required)
    if extra:
        return f"{path}: has a {', '.join(extra)} component that {name} does not have"
    cfg = transformer_config(path)
    if cfg is not None:
        for key, want in spec.transformer.items():
            if cfg.get(key) != want:
                return (f"{path}: the checkpoint's transformer config is not {name}'s ({key} {cfg.get(key)}, "
                        f"{name} has {want})")
    for key in spec.index_keys:
        if index.get(key) is None:
            return f"{path}: model_index.json has no {key} (which {name} has)"
    return None


def check_folder(spec: FolderSpec, path: str | Path, name: str) -> dict[str, Any]:
    """check_pipeline_folder with `spec`'s classes and components; returns model_index.json. Mismatches of
    transformer components, config and keys are left to `folder_mismatch`."""
    return check_pipeline_folder(path, expected_pipelines=spec.pipelines, required=spec.required, model_name=name)


def _attr(obj: Any, path: str) -> Any:
    """`a.b.c` or `a.b[i]` read from `obj` (configs are mappings); None where anything on the way is missing."""
    m = re.fullmatch(r"([\w.]+?)(?:\[(\d+)\])?", path)
    if m is None:
        raise ValueError(f"bad attribute path {path!r}")
    for part in m.group(1).split("."):
        obj = obj.get(part) if isinstance(obj, Mapping) else getattr(obj, part, None)
        if obj is None:
            return None
    if m.group(2) is not None:
        try:
            obj = obj[int(m.group(2))]
        except (IndexError, KeyError, TypeError):
            return None
    return obj


def _first_attr(obj: Any, names: tuple[str, ...]) -> int | None:
    for n in names:
        v = getattr(obj, n, None)
        if isinstance(v, int) and v > 0:
            return v
    return None


def _frames_array(frames: Any) -> np.ndarray:
    """A pipeline's `.frames` (output_type="np") as float32 (1, T, H, W, 3) in [0, 1]."""
    if isinstance(frames, torch.Tensor):
        frames = frames.float().cpu().numpy()
    if isinstance(frames, (list, tuple)) and frames and isinstance(frames[0], (list, tuple)):
        frames = [np.stack([np.asarray(f) for f in clip]) for clip in frames]  # lists of frames per video
    arr = np.asarray(frames)
    if arr.ndim == 4:  # one video without its batch axis
        arr = arr[None]
    if arr.ndim == 5 and arr.shape[-1] != 3 and arr.shape[2] == 3:  # (B, T, C, H, W)
        arr = np.moveaxis(arr, 2, -1)
    if arr.dtype == np.uint8:
        return arr.astype(np.float32) / 255.0
    return arr.astype(np.float32)


class DiffusersVideoModel(VideoModel):
    """A diffusers text-to-video pipeline behind the VideoModel interface.

    Attributes a caller may set: `max_sequence_length`, `negative_prompt`, `prompt_template` (None: the
    pipeline's default), `guidance_2` (Wan2.2 A14B's low-noise expert; None: same as guidance)."""

    def __init__(self, pipe, info: ModelInfo, *, device: torch.device, dtype: torch.dtype, path: str | None = None,
                 conditioning: Conditioning | None = None):
        super().__init__(info, device=device, dtype=dtype, path=path)
        self.pipe = pipe
        # an image- or video-to-video pipeline's conditioning input, the same for every call
        self.conditioning = conditioning
        self._input = conditioning.load() if conditioning is not None else None
        self.facts = PIPELINE_FACTS.get(type(pipe).__name__, PipelineFacts())
        self._params = inspect.signature(type(pipe).__call__).parameters
        self.max_sequence_length: int | None = None
        self.negative_prompt: str | None = None
        self.prompt_template: dict[str, Any] | None = None
        self.guidance_2: float | None = None

    @classmethod
    def load(cls, info: ModelInfo, spec: FolderSpec, *, path: str, device: torch.device,
             dtype: torch.dtype | None = None, conditioning: Conditioning | None = None) -> "DiffusersVideoModel":
        index = check_folder(spec, path, info.name)
        klass = pipeline_class(str(index.get("_class_name")), str(path))
        check_text_to_video(klass, str(path), conditioning.kind if conditioning is not None else None)
        facts = PIPELINE_FACTS.get(klass.__name__, PipelineFacts())
        dtype = pipeline_dtype(dtype, device)
        try:
            extra = {}
            vae = components(index).get("vae")
            if facts.vae_float32 and dtype != torch.float32 and vae is not None:
                import diffusers

                extra["vae"] = getattr(diffusers, vae[1]).from_pretrained(path, subfolder="vae", local_files_only=True,
                                                                          **dtype_kwargs(torch.float32))
            pipe = klass.from_pretrained(path, local_files_only=True, **dtype_kwargs(dtype), **extra)
        except (OSError, ValueError, EnvironmentError, AttributeError, ImportError) as e:
            # ImportError: a package the pipeline needs to load (Cosmos's cosmos_guardrail safety checker)
            raise UserError(f"{path}: cannot load {info.name} ({str(e).splitlines()[0]})") from None
        pipe.to(device)
        if facts.vae_tiling:
            pipe.vae.enable_tiling()
        quiet_progress(pipe)
        return cls(pipe, info, device=device, dtype=dtype, path=str(path), conditioning=conditioning)

    # -- VideoModel

    def _recipe_target(self):
        return self.pipe

    def _scheduler(self) -> Any:
        return self.pipe.scheduler

    def resolve_settings(self, **given) -> Settings:
        """The row's defaults (a named model) or the pipeline's (its __call__, then `PIPELINE_FACTS.derived`)."""
        missing = [s for s in CALL_ARGUMENTS if given.get(s) is None and getattr(self.info, f"default_{s}") is None]
        if missing:
            derived = {s: self._derived(s) for s in missing}
            unknown = [s for s, v in derived.items() if v is None]
            if unknown:
                opts = " ".join(f"--{s}" for s in unknown)
                raise UserError(f"{self.info.name}: {type(self.pipe).__name__} has no default {', '.join(unknown)}; "
                                f"pass {opts}")
            self.info = replace(self.info, **{f"default_{s}": v for s, v in derived.items()})
        return super().resolve_settings(**given)

    def _video_frames(self) -> int | None:
        """The conditioning video's frame count where the pipeline takes its frames from it (no frame argument)."""
        if self.facts.frames_argument in self._params or self.conditioning is None:
            return None
        return len(self._input) if self.conditioning.kind == "video" else None

    def _derived(self, setting: str) -> int | float | None:
        if setting == "frames" and self._video_frames() is not None:
            return self._video_frames()
        if setting == "guidance" and "guidance_scale" not in self._params:
            g = _attr(self.pipe, "guider.guidance_scale")  # pipelines guided by a guider object (HunyuanVideo-1.5)
            return float(g) if isinstance(g, (int, float)) else None
        if setting in ("height", "width") and self.facts.size_call is not None:
            method, args = self.facts.size_call
            fn, values = _attr(self.pipe, method), [self._value(a) for a in args]
            if not callable(fn) or any(v is None for v in values):
                return None
            return int(fn(*values)[0 if setting == "height" else 1])
        paths = self.facts.derived.get(setting)
        if not paths:
            return None
        values = [_attr(self.pipe, p) for p in paths]
        if not all(isinstance(v, (int, float)) for v in values):
            return None
        return int(np.prod(values))

    def _value(self, path: str) -> Any:
        """An attribute path of the pipeline, or with `image.` of the conditioning image."""
        if path.startswith("image."):
            image = self._input if self.conditioning is not None and self.conditioning.kind == "image" else None
            return _attr(image, path.removeprefix("image.")) if image is not None else None
        return _attr(self.pipe, path)

    def _check_settings(self, s: Settings) -> None:
        if self._video_frames() is not None and s.frames != self._video_frames():
            raise UserError(f"{self.info.name}: {type(self.pipe).__name__} takes its frames from the video "
                            f"({self._video_frames()}); leave --frames out")
        if "height" not in self._params:
            size = (self._derived("height"), self._derived("width"))
            if (s.height, s.width) != size:
                raise UserError(f"{self.info.name}: {type(self.pipe).__name__} takes its size from the image "
                                f"({size[0]}x{size[1]}); leave --height and --width out")
        if "guidance_scale" not in self._params and s.guidance != self.info.default_guidance:
            raise UserError(f"{self.info.name}: {type(self.pipe).__name__} takes its guidance from its guider "
                            f"({self.info.default_guidance}); leave --guidance out")
        fixed = _attr(self.pipe, self.facts.frames_fixed) if self.facts.frames_fixed else None
        if isinstance(fixed, int) and s.frames != fixed:
            raise UserError(f"{self.info.name}: {type(self.pipe).__name__} generates {fixed} frames "
                            f"({self.facts.frames_fixed}), got {s.frames}")
        vt, vs = _first_attr(self.pipe, TEMPORAL), _first_attr(self.pipe, SPATIAL)
        if self.facts.frames_form and vt and (s.frames - 1) % vt:
            if self._video_frames() is not None:
                raise UserError(f"{self.info.name}: {type(self.pipe).__name__} takes the video's frames, which must "
                                f"be {vt}k + 1; the video has {s.frames}")
            default = self.info.default_frames  # None where the pipeline computes it (LTX-2's duration head)
            example = default if default is not None and (default - 1) % vt == 0 else vt * 20 + 1
            raise UserError(f"{self.info.name}: frames must be {vt}k + 1 (e.g. {example}), got {s.frames}")
        if vs:
            from .families import patch_sizes

            t = next((t for _, t in self._transformers()), None)
            patch = (patch_sizes(t) if t is not None else None) or (1, 1, 1)
            mh, mw = vs * patch[1], vs * patch[2]
            if s.height % mh or s.width % mw:
                raise UserError(f"{self.info.name}: height and width must be multiples of {max(mh, mw)}, "
                                f"got {s.height}x{s.width}")

    def call_kwargs(self, prompt: str, seed: int, s: Settings) -> dict[str, Any]:
        """The pipeline call of one prompt: the settings, the seed's CPU generator, and the optional
        arguments this pipeline takes."""
        kwargs: dict[str, Any] = dict(prompt=prompt, height=s.height, width=s.width,
                                      **{self.facts.frames_argument: s.frames},
                                      num_inference_steps=s.steps, output_type="np",
                                      generator=torch.Generator(device="cpu").manual_seed(int(seed)))
        if "guidance_scale" in self._params:
            kwargs["guidance_scale"] = s.guidance
        optional = {"negative_prompt": self.negative_prompt, "max_sequence_length": self.max_sequence_length,
                    "prompt_template": self.prompt_template}
        if getattr(self.pipe, "transformer_2", None) is not None:
            optional["guidance_scale_2"] = self.guidance_2 if self.guidance_2 is not None else s.guidance
        for arg in ("height", "width", self.facts.frames_argument):
            if arg not in self._params:  # given by the input itself (its image's size, its video's frames)
                del kwargs[arg]
        kwargs.update(self.facts.call_extra)
        kwargs.update({k: v for k, v in optional.items() if v is not None and k in self._params})
        if self.conditioning is not None:
            kwargs[self.conditioning.kind] = self._input
        return kwargs

    def _sample(self, prompts, seeds, s: Settings, ctx, scheduler) -> np.ndarray:
        outs = []
        for i, (prompt, seed) in enumerate(zip(prompts, seeds)):
            ctx.batch_prompts = [i]
            result = self.pipe(**self.call_kwargs(prompt, seed, s))
            frames = getattr(result, "frames", None)
            clip = _frames_array(frames if frames is not None else result[0])
            if clip.shape[1:4] != (s.frames, s.height, s.width):
                # a pipeline constraint no fact above says (Helios renders whole chunks of frames): nothing is
                # filed under a size the clip does not have
                got = dict(zip(("frames", "height", "width"), clip.shape[1:4]))
                fix = " ".join(f"--{k} {v}" for k, v in got.items() if v != getattr(s, k))
                raise UserError(f"{self.info.name}: {type(self.pipe).__name__} returned {got['frames']} frames of "
                                f"{got['height']}x{got['width']} for {s.frames} of {s.height}x{s.width}; pass {fix}")
            outs.append(clip)
        return np.concatenate(outs)

    def _describe_extra(self) -> dict[str, Any]:
        p = self.pipe
        comps = {name: type(c).__name__ for name, c in p.components.items() if c is not None}
        sched = p.scheduler.config
        config = {k: p.config.get(k) for k in ("boundary_ratio", "expand_timesteps") if k in p.config}
        vt, vs = _first_attr(p, TEMPORAL), _first_attr(p, SPATIAL)
        seq = self.max_sequence_length
        if seq is None and "max_sequence_length" in self._params:
            seq = self._params["max_sequence_length"].default
        vae = getattr(p, "vae", None)
        return {
            "pipeline": type(p).__name__, "components": comps,
            "scheduler": {"class": type(p.scheduler).__name__,
                          **{k: sched.get(k) for k in ("flow_shift", "shift", "use_flow_sigmas", "prediction_type")
                             if k in sched}},
            **config,
            "vae_scale_factor": [vt, vs, vs] if vt and vs else None,
            "vae_dtype": str(vae.dtype).replace("torch.", "") if vae is not None else None,
            "max_sequence_length": seq if isinstance(seq, int) else None,
            **({self.conditioning.kind: self.conditioning.to_dict()} if self.conditioning is not None else {}),
        }


def folder_info(path: str | Path, conditioning: Conditioning | None = None) -> ModelInfo:
    """The ModelInfo of a pipeline folder run without --model: named after its pipeline class (slug), and with
    `conditioning` (an image- or video-to-video pipeline's input) after that file too; its defaults the pipeline
    __call__'s (None where the pipeline computes them at call time; a video-to-video pipeline's frames: the
    video's)."""
    p = Path(path).expanduser()
    index = read_model_index(p)
    name = str(index.get("_class_name"))
    klass = pipeline_class(name, str(p))
    check_text_to_video(klass, str(p), conditioning.kind if conditioning is not None else None)
    d = call_defaults(klass)
    transformer = components(index).get("transformer", (None, None))[1]
    from .families import FACTS

    family = FACTS[transformer].name if transformer in FACTS else (transformer or name)
    run_name = slug(name) if conditioning is None else f"{slug(name)}-{conditioning.key}"
    return ModelInfo(run_name, family, f"{name} from a diffusers-format folder", str(p), True,
                     d["steps"], None if d["guidance"] is None else float(d["guidance"]), d["height"], d["width"],
                     d["frames"])


__all__ = ["CALL_ARGUMENTS", "DiffusersVideoModel", "FolderSpec", "PIPELINE_FACTS", "PipelineFacts", "call_arguments",
           "call_defaults", "check_folder", "check_text_to_video", "folder_info", "folder_mismatch", "pipeline_class",
           "slug"]
