"""The models `lowbit-video generate` can run: their ModelInfo rows, and load_model.

    info = get_model_info("wan2.1-t2v-1.3b")
    model = load_model("wan2.1-t2v-1.3b", path="/ckpt/Wan2.1-T2V-1.3B-Diffusers", device="cuda")
    video = model.generate(["a cat"], [0], recipe=load_recipe("mxattention"))   # (1, T, H, W, 3) in [0, 1]

* `tiny-shapes` is shipped with the package; the real models load a diffusers-format folder the
  user keeps on disk (`path`), offline. Nothing is ever downloaded.
* The interface the models share (VideoModel) is in base.py. This module imports the families
  (wan.py, hunyuan.py, tiny_shapes_adapter.py); they import base.py and never this module.
"""

from __future__ import annotations

import torch

from ..errors import UserError
from .base import ModelInfo, VideoModel
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


def load_model(name: str, *, path: str | None = None, device: str = "cpu",
               dtype: torch.dtype | None = None) -> "VideoModel":
    """Load `name` (a ModelInfo.name) onto `device`; `path` is the checkpoint folder of real models
    (tiny-shapes: optional, default the shipped weights). Path problems raise a one-line UserError."""
    info = get_model_info(name)
    dev = resolve_device(device)
    if info.needs_path and not path:
        raise UserError(f"{name}: pass --model-path DIR, a diffusers-format folder of {name} (weights are never "
                        "downloaded)")
    if info.family == "tiny-shapes":
        from .tiny_shapes_adapter import TinyShapesVideoModel

        return TinyShapesVideoModel.load(info, path=path, device=dev, dtype=dtype)
    if info.family == "wan":
        from .wan import WanVideoModel

        return WanVideoModel.load(info, path=path, device=dev, dtype=dtype)
    from .hunyuan import HunyuanVideoModel

    return HunyuanVideoModel.load(info, path=path, device=dev, dtype=dtype)


__all__ = ["get_model_info", "list_models", "load_model", "resolve_device"]
