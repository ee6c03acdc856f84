"""HunyuanVideo text-to-video from a diffusers-format folder (`HunyuanVideoPipeline`), offline.

The recipe's hooks take over the joint (video + text) attention of the 20 dual-stream and 40
single-stream blocks (block indices 0-19 and 20-59); the token refiner (text only) is left alone.
The prompt is padded to `max_sequence_length` text tokens and the padding masked; the hooks
handle that mask exactly (attention_hook.py). `guidance` is HunyuanVideo's embedded guidance scale
(no classifier-free guidance pass: one transformer forward per step). The VAE decodes tiled.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..errors import UserError
from .checkpoint import check_pipeline_folder
from .base import ModelInfo, Settings, VideoModel, cpu_noise, dtype_kwargs, pipeline_dtype, quiet_progress


class HunyuanVideoModel(VideoModel):
    def __init__(self, pipe, info: ModelInfo, *, device: torch.device, dtype: torch.dtype, path: str | None = None):
        super().__init__(info, device=device, dtype=dtype, path=path)
        self.pipe = pipe
        self.max_sequence_length = 256  # text tokens after the template crop (diffusers' default)
        self.prompt_template: dict[str, Any] | None = None  # None: diffusers' default Llama template

    @classmethod
    def load(cls, info: ModelInfo, *, path: str, device: torch.device, dtype: torch.dtype | None = None
             ) -> "HunyuanVideoModel":
        check_pipeline_folder(path, expected_pipelines=("HunyuanVideoPipeline",),
                              required=("transformer", "vae", "scheduler", "text_encoder", "tokenizer",
                                        "text_encoder_2", "tokenizer_2"), model_name=info.name)
        dtype = pipeline_dtype(dtype, device)
        from diffusers import HunyuanVideoPipeline

        try:
            pipe = HunyuanVideoPipeline.from_pretrained(path, local_files_only=True, **dtype_kwargs(dtype))
        except (OSError, ValueError, EnvironmentError) as e:
            raise UserError(f"{path}: cannot load {info.name} ({str(e).splitlines()[0]})") from None
        pipe.to(device)
        pipe.vae.enable_tiling()
        quiet_progress(pipe)
        return cls(pipe, info, device=device, dtype=dtype, path=str(path))

    def _recipe_target(self):
        return self.pipe

    def _scheduler(self) -> Any:
        return self.pipe.scheduler

    def _check_settings(self, s: Settings) -> None:
        vt, vs = self.pipe.vae_scale_factor_temporal, self.pipe.vae_scale_factor_spatial
        p = int(self.pipe.transformer.config.patch_size)
        if (s.frames - 1) % vt:
            raise UserError(f"{self.info.name}: frames must be {vt}k + 1 (e.g. 129), got {s.frames}")
        if s.height % (vs * p) or s.width % (vs * p):
            raise UserError(f"{self.info.name}: height and width must be multiples of {vs * p}, "
                            f"got {s.height}x{s.width}")

    def latent_shape(self, s: Settings) -> tuple[int, int, int, int, int]:
        vt, vs = self.pipe.vae_scale_factor_temporal, self.pipe.vae_scale_factor_spatial
        c = int(self.pipe.transformer.config.in_channels)
        return (1, c, (s.frames - 1) // vt + 1, s.height // vs, s.width // vs)

    def initial_latents(self, seed: int, s: Settings) -> torch.Tensor:
        return cpu_noise(self.latent_shape(s), seed).to(self.device)

    def _sample(self, prompts, seeds, s: Settings, ctx, scheduler) -> np.ndarray:
        outs = []
        for i, (prompt, seed) in enumerate(zip(prompts, seeds)):
            ctx.batch_prompts = [i]
            kwargs: dict[str, Any] = dict(
                prompt=prompt, height=s.height, width=s.width, num_frames=s.frames, num_inference_steps=s.steps,
                guidance_scale=s.guidance, latents=self.initial_latents(seed, s), output_type="np",
                max_sequence_length=self.max_sequence_length,
            )
            if self.prompt_template is not None:
                kwargs["prompt_template"] = self.prompt_template
            frames = self.pipe(**kwargs).frames
            outs.append(np.asarray(frames, dtype=np.float32))
        return np.concatenate(outs)

    def _describe_extra(self) -> dict[str, Any]:
        p = self.pipe
        comps = {name: type(c).__name__ for name, c in p.components.items() if c is not None}
        cfg = p.transformer.config
        return {
            "pipeline": type(p).__name__, "components": comps,
            "scheduler": {"class": type(p.scheduler).__name__, "shift": p.scheduler.config.get("shift")},
            "dual_stream_blocks": int(cfg.num_layers), "single_stream_blocks": int(cfg.num_single_layers),
            "guidance_embeds": bool(cfg.guidance_embeds), "max_sequence_length": self.max_sequence_length,
        }


__all__ = ["HunyuanVideoModel"]
