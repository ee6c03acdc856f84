"""Sampling tiny-shapes: Euler on the rectified-flow ODE with diffusers' FlowMatchEulerDiscreteScheduler.

* Schedule: sigmas = linspace(1, 1/1000, N) under the time shift `shift` (config["sample_shift"]),
  then 0; timestep = 1000 * sigma (diffusers' FlowMatchEulerDiscreteScheduler, N model calls).
* Euler step: x <- x + (sigma_next - sigma) * v, v the predicted eps - x0.
* Classifier-free guidance (guidance > 1): v = v_uncond + g (v_cond - v_uncond), the unconditional
  input being the empty (all-padding) prompt; cond and uncond run as one batch.
* Initial noise: for each seed, `torch.randn` of one clip from a CPU `torch.Generator` seeded with
  it, then moved to the device: the same seed gives the same noise on every device and recipe.

`python -m lowbit_video.models.tiny_shapes.sample --eval` samples prompts/shapes.txt x seeds and
prints the adherence figures (`adherence.score_many`); `--time` measures one clip on the CPU.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from .model import TinyShapesModel, model_to_clips


def make_scheduler(model: TinyShapesModel, shift: float | None = None):
    """A FlowMatchEulerDiscreteScheduler with the model's sampling shift (or `shift`)."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    s = float(model.config.get("sample_shift", 1.0) if shift is None else shift)
    return FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=s)


def initial_noise(model: TinyShapesModel, seeds: Sequence[int]) -> torch.Tensor:
    """(n, 3, F, H, W) float32 noise on the CPU, clip i from torch.Generator('cpu').manual_seed(seeds[i])."""
    shape = model.video_shape
    out = torch.empty((len(seeds), *shape), dtype=torch.float32)
    for i, seed in enumerate(seeds):
        g = torch.Generator(device="cpu").manual_seed(int(seed))
        out[i] = torch.randn(shape, generator=g, dtype=torch.float32)
    return out


@torch.no_grad()
def sample(model: TinyShapesModel, prompts: Sequence[str], seeds: Sequence[int], *, steps: int | None = None,
           guidance: float | None = None, shift: float | None = None, scheduler=None,
           batch_size: int | None = None, autocast_dtype: torch.dtype | None = None,
           callback: Callable[[int, int], None] | None = None) -> np.ndarray:
    """Generate one clip per (prompt, seed) pair: numpy float32 (n, frames, H, W, 3) in [0, 1].

    `prompts` and `seeds` have equal length (pair them up yourself for a grid). Runs on the model's
    device and dtype; `autocast_dtype` (e.g. torch.bfloat16 on CUDA) wraps the transformer calls.
    A scheduler passed in is used as is (its set_timesteps/step are called once per batch/step).
    """
    if len(prompts) != len(seeds):
        raise ValueError(f"{len(prompts)} prompts but {len(seeds)} seeds")
    cfg = model.config
    steps = int(cfg.get("default_steps", 20) if steps is None else steps)
    guidance = float(cfg.get("default_guidance", 1.0) if guidance is None else guidance)
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    device = model.device
    dtype = model.transformer.patch_embedding.weight.dtype
    batch_size = batch_size or len(prompts) or 1
    outs = []
    for start in range(0, len(prompts), batch_size):
        p = list(prompts[start: start + batch_size])
        s = list(seeds[start: start + batch_size])
        sched = scheduler if scheduler is not None else make_scheduler(model, shift)
        sched.set_timesteps(steps, device=device)
        x = initial_noise(model, s).to(device)
        ids = model.tokenize(p).to(device)
        cfg_on = guidance != 1.0
        if cfg_on:
            ids = torch.cat([ids, model.null_ids(len(p)).to(device)])
        with torch.autocast(device.type, dtype=autocast_dtype or torch.float32, enabled=autocast_dtype is not None):
            ehs = model.encode_text(ids).to(dtype)
        for i, t in enumerate(sched.timesteps):
            xin = torch.cat([x, x]) if cfg_on else x
            tt = t.to(device).reshape(1).expand(xin.shape[0]).to(torch.float32)
            with torch.autocast(device.type, dtype=autocast_dtype or torch.float32,
                                enabled=autocast_dtype is not None):
                v = model.transformer(xin.to(dtype), timestep=tt, encoder_hidden_states=ehs, return_dict=False)[0]
            v = v.float()
            if cfg_on:
                vc, vu = v.chunk(2)
                v = vu + guidance * (vc - vu)
            x = sched.step(v, t, x, return_dict=False)[0].float()
            if callback is not None:
                callback(i, steps)
        outs.append(model_to_clips(x))
    return np.concatenate(outs) if outs else np.zeros((0, cfg["frames"], cfg["size"], cfg["size"], 3), np.float32)


def evaluate(model: TinyShapesModel, prompts: Sequence[str], seeds: Sequence[int], **kwargs) -> dict:
    """Sample prompts x seeds and score them: adherence.score_many plus the settings used."""
    from .adherence import score_many

    pairs = [(p, s) for p in prompts for s in seeds]
    clips = sample(model, [p for p, _ in pairs], [s for _, s in pairs], **kwargs)
    res = score_many(list(clips), [p for p, _ in pairs])
    res.update({k: kwargs.get(k) for k in ("steps", "guidance", "shift") if k in kwargs})
    return res


def time_one_clip(model: TinyShapesModel, *, steps: int | None = None, guidance: float | None = None,
                  repeats: int = 2, prompt: str = "a red circle moving left on a black background") -> float:
    """Median wall seconds to sample one clip (after one warm-up call)."""
    sample(model, [prompt], [0], steps=1, guidance=guidance)
    times = []
    for r in range(repeats):
        t0 = time.perf_counter()
        sample(model, [prompt], [r], steps=steps, guidance=guidance)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="model folder (default: the shipped weights)")
    ap.add_argument("--prompts", default="prompts/shapes.txt")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    ap.add_argument("--steps", type=int, nargs="+", default=[None])
    ap.add_argument("--guidance", type=float, nargs="+", default=[None])
    ap.add_argument("--shift", type=float, nargs="+", default=[None])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float16", help="weights dtype for --eval (float16/bfloat16/float32)")
    ap.add_argument("--eval", action="store_true")
    ap.add_argument("--time", action="store_true", help="time one clip (CPU: fp32 compute of the fp16 weights)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json-out", default=None)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from .grammar import read_prompts

    results = []
    if args.eval:
        model = TinyShapesModel.from_folder(args.model, device=args.device, dtype=args.dtype)
        prompts = read_prompts(args.prompts)
        for st in args.steps:
            for g in args.guidance:
                for sh in args.shift:
                    t0 = time.perf_counter()
                    r = evaluate(model, prompts, args.seeds, steps=st, guidance=g, shift=sh)
                    r.update({"steps": st or model.config["default_steps"],
                              "guidance": g if g is not None else model.config["default_guidance"],
                              "shift": sh if sh is not None else model.config["sample_shift"],
                              "dtype": args.dtype, "device": args.device, "seeds": args.seeds,
                              "prompts": args.prompts, "seconds": round(time.perf_counter() - t0, 2)})
                    results.append(r)
                    print(json.dumps(r), flush=True)
    if args.time:
        model = TinyShapesModel.from_folder(args.model, device="cpu", dtype="float32")
        for st in args.steps:
            for g in args.guidance:
                sec = time_one_clip(model, steps=st, guidance=g)
                r = {"cpu_seconds_per_clip": round(sec, 2), "steps": st or model.config["default_steps"],
                     "guidance": g if g is not None else model.config["default_guidance"],
                     "threads": torch.get_num_threads()}
                results.append(r)
                print(json.dumps(r), flush=True)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
