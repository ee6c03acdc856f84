"""`tiny-shapes` behind the VideoModel interface: `tiny_shapes.sample()` with the recipe's hooks
installed on `model.transformer` and the step tracked on the scheduler passed to `sample`.

All prompts of a call are sampled as one batch (classifier-free guidance, when on, batches the
conditional and unconditional rows together), so one call is one sampling loop.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import UserError
from .base import ModelInfo, Settings, VideoModel


def tiny_shapes_info() -> ModelInfo:
    """The tiny-shapes row of the model list: the shipped weights' settings over the defaults."""
    from .tiny_shapes.model import WEIGHTS_DIR, default_config

    cfg = default_config()
    cfg_file = WEIGHTS_DIR / "config.json"
    if cfg_file.is_file():
        try:
            cfg = {**cfg, **json.loads(cfg_file.read_text())}
        except (json.JSONDecodeError, OSError):
            pass
    rel = "lowbit_video/models/tiny_shapes/weights"
    return ModelInfo(
        "tiny-shapes", "tiny-shapes",
        "tiny text-to-video model trained on coloured moving shapes (WanTransformer3DModel in pixel space, "
        "learned text encoder over the prompt grammar)",
        f"shipped with the package ({rel})", False,
        int(cfg.get("default_steps", 20)), float(cfg.get("default_guidance", 1.0)),
        int(cfg["size"]), int(cfg["size"]), int(cfg["frames"]),
    )


class TinyShapesVideoModel(VideoModel):
    def __init__(self, model, info: ModelInfo, *, device: torch.device, dtype: torch.dtype, path: str | None = None):
        super().__init__(info, device=device, dtype=dtype, path=path)
        self.model = model
        cfg = model.config
        # The loaded folder's settings win over the shipped defaults in `info`.
        self.info = ModelInfo(info.name, info.family, info.description, info.weights, info.needs_path,
                              int(cfg.get("default_steps", info.default_steps)),
                              float(cfg.get("default_guidance", info.default_guidance)),
                              int(cfg["size"]), int(cfg["size"]), int(cfg["frames"]))

    @classmethod
    def load(cls, info: ModelInfo, *, path: str | None = None, device: torch.device = torch.device("cpu"),
             dtype: torch.dtype | None = None) -> "TinyShapesVideoModel":
        from .tiny_shapes.model import WEIGHTS_DIR, TinyShapesModel

        folder = Path(path).expanduser() if path else WEIGHTS_DIR
        if not folder.is_dir():
            what = "no such directory" if path else "the shipped weights are not installed (no such directory)"
            raise UserError(f"{folder}: {what}")
        missing = [n for n in ("config.json", "model.safetensors") if not (folder / n).is_file()]
        if missing:
            raise UserError(f"{folder}: not a tiny-shapes model folder (no {' or '.join(missing)})")
        if dtype is None:
            dtype = torch.float16 if device.type == "cuda" else torch.float32
        try:
            model = TinyShapesModel.from_folder(folder, device=device, dtype=dtype)
        except (ValueError, KeyError, RuntimeError) as e:
            raise UserError(f"{folder}: cannot load tiny-shapes model ({str(e).splitlines()[0]})") from None
        return cls(model, info, device=device, dtype=dtype, path=str(folder))

    @classmethod
    def from_model(cls, model, info: ModelInfo | None = None) -> "TinyShapesVideoModel":
        """Wrap an in-memory TinyShapesModel (e.g. a random-init one in tests)."""
        info = info or tiny_shapes_info()
        dtype = model.transformer.patch_embedding.weight.dtype
        return cls(model, info, device=model.device, dtype=dtype)

    def _recipe_target(self):
        return self.model  # a TinyShapesModel holds its WanTransformer3DModel as .transformer

    def _scheduler(self) -> Any:
        from .tiny_shapes.sample import make_scheduler

        return make_scheduler(self.model)

    def _loops(self, n_prompts: int) -> int:
        return 1

    def _check_settings(self, s: Settings) -> None:
        i = self.info
        if (s.height, s.width, s.frames) != (i.default_height, i.default_width, i.default_frames):
            raise UserError(f"tiny-shapes generates {i.default_frames} frames of {i.default_height}x{i.default_width} "
                            f"only; got {s.frames} frames of {s.height}x{s.width}")

    def _sample(self, prompts, seeds, s: Settings, ctx, scheduler) -> np.ndarray:
        from .tiny_shapes.sample import sample

        try:
            self.model.tokenize(prompts)  # the grammar and vocabulary check, as one-line errors
        except ValueError as e:
            raise UserError(f"tiny-shapes: {str(e).splitlines()[0]}") from None
        ctx.batch_prompts = list(range(len(prompts)))
        return sample(self.model, prompts, seeds, steps=s.steps, guidance=s.guidance, scheduler=scheduler,
                      batch_size=len(prompts))

    def _describe_extra(self) -> dict[str, Any]:
        c = self.model.config
        return {"pipeline": "tiny_shapes.sample (FlowMatchEulerDiscreteScheduler)",
                "components": {"transformer": "WanTransformer3DModel", "text_encoder": "TinyTextEncoder"},
                "frames": c["frames"], "size": c["size"], "text_len": c["text_len"],
                "sample_shift": c.get("sample_shift"), "video_tokens": self.model.num_video_tokens}


__all__ = ["TinyShapesVideoModel"]
