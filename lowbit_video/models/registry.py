"""The models `lowbit-video generate` can run: their ModelInfo rows, and load_model.

    info = get_model_info("wan2.1-t2v-1.3b")
    model = load_model("wan2.1-t2v-1.3b", path="/ckpt/Wan2.1-T2V-1.3B-Diffusers", device="cuda")
    model = load_model(None, path="/ckpt/CogVideoX-2b")      # any diffusers text-to-video pipeline folder
    video = model.generate(["a cat"], [0], recipe=load_recipe("mxattention"))   # (1, T, H, W, 3) in [0, 1]

* `tiny-shapes` is shipped with the package; the real models load a diffusers-format folder the
  user keeps on disk (`path`), offline. Nothing is ever downloaded.
* Named models have a row (documented default settings) and a `FolderSpec` (what their checkpoint holds,
  checked before loading). A folder without a name runs as its pipeline class (`folder_info`), with the
  pipeline's own defaults. Every real model loads through the one adapter, pipeline.py.
* The interface the models share (VideoModel) is in base.py. This module imports the adapters
  (pipeline.py, tiny_shapes_adapter.py); they import base.py and never this module.
"""

from __future__ import annotations

import torch

from ..errors import UserError
from .base import ModelInfo, VideoModel
from .conditioning import Conditioning, folder_only
from .pipeline import FolderSpec, check_folder, folder_mismatch
from .tiny_shapes_adapter import tiny_shapes_info

_FOLDER = "a diffusers-format folder you pass with --model-path"

# Defaults follow each model's documented inference settings (the authors' READMEs / diffusers docs).
_REAL_MODELS = (
    ModelInfo("wan2.1-t2v-1.3b", "wan", "Wan2.1 text-to-video 1.3B (WanPipeline; 30 blocks, 12 heads x 128)",
              _FOLDER, True, 50, 5.0, 480, 832, 81),
    ModelInfo("wan2.1-t2v-14b", "wan", "Wan2.1 text-to-video 14B (WanPipeline; 40 blocks, 40 heads x 128)",
              _FOLDER, True, 50, 5.0, 720, 1280, 81),
    ModelInfo("wan2.2-t2v-a14b", "wan",
              "Wan2.2 text-to-video A14B, two experts (WanPipeline with transformer_2; 40 blocks each)",
              _FOLDER, True, 40, 4.0, 720, 1280, 81),
    ModelInfo("wan2.2-ti2v-5b", "wan", "Wan2.2 text/image-to-video 5B, text-to-video mode (WanPipeline; 30 blocks, "
              "24 heads x 128)", _FOLDER, True, 50, 5.0, 704, 1280, 121),
    ModelInfo("hunyuanvideo", "hunyuanvideo", "HunyuanVideo 13B text-to-video (HunyuanVideoPipeline; 20 dual- + 40 "
              "single-stream blocks, 24 heads x 128)", _FOLDER, True, 50, 6.0, 720, 1280, 129),
)

_WAN_PARTS = ("transformer", "vae", "scheduler", "text_encoder", "tokenizer")
_WAN = FolderSpec(("WanPipeline",), _WAN_PARTS, {"_class_name": "WanTransformer3DModel", "in_channels": 16})
# What each named model's checkpoint holds: a folder of another model loads and runs, but would be filed under a
# name it is not.
_SPECS: dict[str, FolderSpec] = {
    "wan2.1-t2v-1.3b": _WAN,
    "wan2.1-t2v-14b": _WAN,
    "wan2.2-t2v-a14b": FolderSpec(_WAN.pipelines, _WAN_PARTS + ("transformer_2",), _WAN.transformer,
                                  ("boundary_ratio",)),
    "wan2.2-ti2v-5b": FolderSpec(_WAN.pipelines, _WAN_PARTS, {**_WAN.transformer, "in_channels": 48}),
    "hunyuanvideo": FolderSpec(("HunyuanVideoPipeline",), ("transformer", "vae", "scheduler", "text_encoder",
                                                           "tokenizer", "text_encoder_2", "tokenizer_2"),
                               {"_class_name": "HunyuanVideoTransformer3DModel"}),
}
FOLDER_NOTE = ("any diffusers text-to-video pipeline folder also runs: --model-path DIR without --model, with its "
               "pipeline's default settings (run folders are named after its pipeline class)")


def folder_spec(name: str) -> FolderSpec:
    """What `name`'s checkpoint folder holds (empty for tiny-shapes)."""
    return _SPECS.get(name, FolderSpec())


def folder_info(path: str, conditioning: Conditioning | None = None) -> ModelInfo:
    """The row of a folder run without a model name (pipeline.folder_info)."""
    from .pipeline import folder_info as info_of

    return info_of(path, conditioning)


def _fits(name: str, path: str) -> bool:
    try:
        check_folder(_SPECS[name], path, name)
    except UserError:
        return False
    return folder_mismatch(_SPECS[name], path, name) is None


def check_model_folder(name: str, path: str) -> None:
    """UserError (one line) unless `path` holds a checkpoint of the named model `name`; names the model it
    holds when exactly one other fits. Models without a FolderSpec (tiny-shapes) are not checked here."""
    spec = _SPECS.get(name)
    if spec is None:
        return
    check_folder(spec, path, name)
    why = folder_mismatch(spec, path, name)
    if why is None:
        return
    others = [n for n in _SPECS if n != name and _fits(n, path)]
    raise UserError(why + (f"; use --model {others[0]}" if len(others) == 1 else
                           "; pass the --model it is a checkpoint of"))


def list_models() -> list[ModelInfo]:
    return [tiny_shapes_info(), *_REAL_MODELS]


def get_model_info(name: str) -> ModelInfo:
    for info in list_models():
        if info.name == name:
            return info
    raise UserError(f"unknown model {name!r}; known models: {', '.join(i.name for i in list_models())}")


def resolve_device(device: str | torch.device) -> torch.device:
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise UserError(f"unknown device {device!r}; use cpu or cuda") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"device {device} requested but torch sees no CUDA device")
    return dev


def load_model(name: str | None, *, path: str | None = None, device: str = "cpu",
               dtype: torch.dtype | None = None, conditioning: Conditioning | None = None) -> "VideoModel":
    """Load `name` (a ModelInfo.name) onto `device`; `path` is the checkpoint folder of real models
    (tiny-shapes: optional, default the shipped weights). `name` None: the pipeline folder `path`, whatever
    its family; `conditioning` its input, for an image- or video-to-video pipeline (conditioning.py). Path
    problems raise a one-line UserError."""
    from .pipeline import DiffusersVideoModel

    info = get_model_info(name) if name is not None else None  # an unknown name first, then the device
    if conditioning is not None and info is not None:
        raise folder_only(conditioning.kind, info.name)
    dev = resolve_device(device)
    if info is None:
        if not path:
            raise UserError("pass a model name or --model-path DIR (a diffusers-format pipeline folder)")
        return DiffusersVideoModel.load(folder_info(path, conditioning), FolderSpec(), path=path, device=dev,
                                        dtype=dtype, conditioning=conditioning)
    if info.needs_path and not path:
        raise UserError(f"{name}: pass --model-path DIR, a diffusers-format folder of {name} (weights are never "
                        "downloaded)")
    if info.family == "tiny-shapes":
        from .tiny_shapes_adapter import TinyShapesVideoModel

        return TinyShapesVideoModel.load(info, path=path, device=dev, dtype=dtype)
    check_model_folder(name, path)
    return DiffusersVideoModel.load(info, folder_spec(name), path=path, device=dev, dtype=dtype)


__all__ = ["FOLDER_NOTE", "check_model_folder", "folder_info", "folder_spec", "get_model_info", "list_models",
           "load_model", "resolve_device"]
