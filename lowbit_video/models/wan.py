"""Wan2.1 / Wan2.2 text-to-video from a diffusers-format folder (`WanPipeline`), offline.

* wan2.1-t2v-1.3b, wan2.1-t2v-14b: one transformer.
* wan2.2-t2v-a14b: two experts (`transformer` for high noise, `transformer_2` below the boundary
  timestep); the recipe's hooks go into both, and the step tracker (on the one scheduler) gives both
  the same step numbering.
* wan2.2-ti2v-5b: one transformer, `expand_timesteps`, VAE 4x16x16; text-to-video mode.

The folder is checked first (model_index.json and the component folders it names). The VAE is
loaded in float32 (as Wan's own examples do) when the rest runs in half precision. Each prompt is
one pipeline call (batch 1; CFG runs the conditional and unconditional passes as two forwards),
starting from latents drawn on a CPU generator seeded with its seed (paired noise).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..errors import UserError
from .checkpoint import check_pipeline_folder
from .base import ModelInfo, Settings, VideoModel, cpu_noise, dtype_kwargs, pipeline_dtype, quiet_progress


# What each model's transformer config must say (diffusers config.json keys): a folder of another Wan model loads
# and runs, but would be filed under a name it is not.
EXPECTED_TRANSFORMER = {
    "wan2.1-t2v-1.3b": {"in_channels": 16},
    "wan2.1-t2v-14b": {"in_channels": 16},
    "wan2.2-t2v-a14b": {"in_channels": 16},
    "wan2.2-ti2v-5b": {"in_channels": 48},
}


def check_transformer_config(path, name: str) -> None:
    """UserError when the folder's transformer/config.json is not `name`'s (EXPECTED_TRANSFORMER)."""
    import json
    from pathlib import Path

    cfg_path = Path(path) / "transformer" / "config.json"
    try:
        cfg = json.loads(cfg_path.read_text())
    except (OSError, ValueError):
        return  # check_pipeline_folder / from_pretrained report a missing or unreadable config
    for key, want in EXPECTED_TRANSFORMER.get(name, {}).items():
        if cfg.get(key) != want:
            raise UserError(f"{path}: the checkpoint's transformer config is not {name}'s ({key} {cfg.get(key)}, "
                            f"{name} has {want}); pass the --model it is a checkpoint of")


class WanVideoModel(VideoModel):
    def __init__(self, pipe, info: ModelInfo, *, device: torch.device, dtype: torch.dtype, path: str | None = None):
        super().__init__(info, device=device, dtype=dtype, path=path)
        self.pipe = pipe
        self.negative_prompt: str | None = None  # None: the pipeline's default (empty prompt)
        self.guidance_2: float | None = None  # Wan2.2 A14B low-noise expert; None: same as guidance
        self.max_sequence_length = 512  # umT5 context length Wan was trained with

    @classmethod
    def load(cls, info: ModelInfo, *, path: str, device: torch.device, dtype: torch.dtype | None = None
             ) -> "WanVideoModel":
        two = info.name == "wan2.2-t2v-a14b"
        index = check_pipeline_folder(path, expected_pipelines=("WanPipeline",),
                                      required=("transformer", "vae", "scheduler", "text_encoder", "tokenizer")
                                      + (("transformer_2",) if two else ()), model_name=info.name)
        has_two = isinstance(index.get("transformer_2"), list) and index["transformer_2"][0] is not None
        if has_two and not two:
            raise UserError(f"{path}: has two transformers (a Wan2.2 A14B checkpoint); use --model wan2.2-t2v-a14b")
        check_transformer_config(path, info.name)
        if two and index.get("boundary_ratio") is None:
            raise UserError(f"{path}: model_index.json has no boundary_ratio (needed to switch Wan2.2 A14B experts)")
        dtype = pipeline_dtype(dtype, device)
        from diffusers import AutoencoderKLWan, WanPipeline

        try:
            extra = {}
            if dtype != torch.float32:
                extra["vae"] = AutoencoderKLWan.from_pretrained(path, subfolder="vae", local_files_only=True,
                                                                **dtype_kwargs(torch.float32))
            pipe = WanPipeline.from_pretrained(path, local_files_only=True, **dtype_kwargs(dtype), **extra)
        except (OSError, ValueError, EnvironmentError) as e:
            raise UserError(f"{path}: cannot load {info.name} ({str(e).splitlines()[0]})") from None
        pipe.to(device)
        quiet_progress(pipe)
        return cls(pipe, info, device=device, dtype=dtype, path=str(path))

    # -- VideoModel

    def _recipe_target(self):
        return self.pipe

    def _scheduler(self) -> Any:
        return self.pipe.scheduler

    def _patch(self) -> tuple[int, int, int]:
        t = self.pipe.transformer if self.pipe.transformer is not None else self.pipe.transformer_2
        return tuple(t.config.patch_size)

    def _check_settings(self, s: Settings) -> None:
        vt, vs = self.pipe.vae_scale_factor_temporal, self.pipe.vae_scale_factor_spatial
        _, ph, pw = self._patch()
        if (s.frames - 1) % vt:
            raise UserError(f"{self.info.name}: frames must be {vt}k + 1 (e.g. 81), got {s.frames}")
        if s.height % (vs * ph) or s.width % (vs * pw):
            raise UserError(f"{self.info.name}: height and width must be multiples of {vs * ph}, "
                            f"got {s.height}x{s.width}")

    def latent_shape(self, s: Settings) -> tuple[int, int, int, int, int]:
        t = self.pipe.transformer if self.pipe.transformer is not None else self.pipe.transformer_2
        vt, vs = self.pipe.vae_scale_factor_temporal, self.pipe.vae_scale_factor_spatial
        return (1, int(t.config.in_channels), (s.frames - 1) // vt + 1, s.height // vs, s.width // vs)

    def initial_latents(self, seed: int, s: Settings) -> torch.Tensor:
        """The paired initial noise of `seed` (float32, CPU generator), on the model's device."""
        return cpu_noise(self.latent_shape(s), seed).to(self.device)

    def _sample(self, prompts, seeds, s: Settings, ctx, scheduler) -> np.ndarray:
        outs = []
        two = getattr(self.pipe, "transformer_2", None) is not None and self.pipe.config.boundary_ratio is not None
        for i, (prompt, seed) in enumerate(zip(prompts, seeds)):
            ctx.batch_prompts = [i]
            kwargs: dict[str, Any] = dict(
                prompt=prompt, negative_prompt=self.negative_prompt, height=s.height, width=s.width,
                num_frames=s.frames, num_inference_steps=s.steps, guidance_scale=s.guidance,
                latents=self.initial_latents(seed, s), output_type="np", max_sequence_length=self.max_sequence_length,
            )
            if two:
                kwargs["guidance_scale_2"] = self.guidance_2 if self.guidance_2 is not None else s.guidance
            frames = self.pipe(**kwargs).frames
            outs.append(np.asarray(frames, dtype=np.float32))
        return np.concatenate(outs)

    def _describe_extra(self) -> dict[str, Any]:
        p = self.pipe
        comps = {name: type(c).__name__ for name, c in p.components.items() if c is not None}
        sched = p.scheduler.config
        return {
            "pipeline": type(p).__name__, "components": comps,
            "scheduler": {"class": type(p.scheduler).__name__,
                          **{k: sched.get(k) for k in ("flow_shift", "shift", "use_flow_sigmas", "prediction_type")
                             if k in sched}},
            "boundary_ratio": p.config.get("boundary_ratio"), "expand_timesteps": p.config.get("expand_timesteps"),
            "vae_scale_factor": [p.vae_scale_factor_temporal, p.vae_scale_factor_spatial, p.vae_scale_factor_spatial],
            "vae_dtype": str(p.vae.dtype).replace("torch.", ""),
        }


__all__ = ["WanVideoModel"]
