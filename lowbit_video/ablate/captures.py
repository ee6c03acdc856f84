"""Captured Q/K/V for the mechanism studies: made once, reused.

For each (prompt, seed) the model samples with the capture recipe (FP16) and saves the attention
inputs of the chosen blocks at the chosen denoising step (`lowbit_video.models.capture`: post-RoPE,
pre-rotation, pre-quantization, BNHD). The clip is not kept and no run directory is written, so
`evaluate`/`compare` over the same --out never see these samples. Folder per sample:

    <out>/captures/<model>/<recipe>/<prompt-slug>/seed-<s>/{block..._step..._prompt000.safetensors, index.json, capture.json}

capture.json (written last, atomically) records the settings; a folder whose capture.json matches
the settings asked for is reused as is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from .. import runstore
from ..errors import UserError
from .common import Reporter, Resolved
from .study import CaptureParams

MARKER = "capture.json"


@dataclass(frozen=True)
class Capture:
    block: int
    prompt: str
    seed: int
    path: Path
    grid: tuple[int, ...] | None = None  # (frames, height, width) of the video tokens, from the index
    rope_segments: tuple[int, ...] | None = None  # the model's t/h/w RoPE split
    text_tokens: int = 0  # prompt tokens after the video tokens (HunyuanVideo's joint attention)

    def load(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v as float64 BHND."""
        from ..models.capture import load_capture

        t = load_capture(self.path)
        return tuple(t[n].transpose(1, 2).to(torch.float64) for n in ("q", "k", "v"))  # type: ignore[return-value]


def capture_root(out: Path) -> Path:
    return Path(out) / "captures"


def _settings(res, cap: CaptureParams, prompt: str, seed: int) -> dict:
    return {"model": res.info.name, "recipe": cap.recipe, "prompt": prompt, "seed": seed, "steps": res.steps,
            "guidance": res.guidance, "height": res.height, "width": res.width, "frames": res.frames,
            "capture_step": cap.step, "capture_blocks": list(cap.blocks)}


def ensure_captures(r: Resolved, cap: CaptureParams, reporter: Reporter | None = None) -> list[Capture]:
    """Captures of every prompt x seed (made where missing), sorted by (prompt, seed, block).

    Several processes (r.shard): each makes the missing captures of its share of the prompt x seed
    grid (distributed.shard_runs over the whole grid, so processes started at different times agree),
    then waits for the other ranks (torchrun). A process that only does its share (Resolved.share_only)
    returns [] without reading any capture."""
    from .. import distributed
    from ..generate import resolve
    from ..models.capture import CaptureSpec
    from ..recipes import load_recipe

    rep = reporter or Reporter()
    cfg = r.generate_config(recipes=[cap.recipe], out=capture_root(r.out))
    res = resolve(cfg)
    if cap.step >= res.steps:
        raise UserError(f"capture step {cap.step} is past the last denoising step ({res.steps} steps)")
    recipe = load_recipe(cap.recipe)
    spec = r.spec
    todo = []
    for run in distributed.shard_runs(res.runs, spec):
        want = _settings(res, cap, run.prompt, run.seed)
        marker = run.dir / MARKER
        try:
            have = json.loads(marker.read_text())
        except (OSError, ValueError):
            have = None
        if have is None or have.get("settings") != want:
            todo.append((run, want))
    if todo:
        rep.stage(f"capturing Q/K/V ({cap.recipe}, step {cap.step})", len(todo))
        model = None
        for run, want in todo:
            if model is None:
                from ..models.registry import load_model

                model = load_model(None if r.folder else res.info.name, path=r.model_path,
                                   device=distributed.device_for(r.device, spec),
                                   conditioning=res.conditioning)
            if run.dir.is_dir():
                for p in run.dir.iterdir():  # stale files of other settings
                    if p.is_file():
                        p.unlink()
            spec = CaptureSpec(dir=run.dir, blocks=set(cap.blocks) or None, steps={cap.step})
            model.generate([run.prompt], [run.seed], recipe=recipe, steps=res.steps, guidance=res.guidance,
                           height=res.height, width=res.width, frames=res.frames, capture=spec)
            runstore.atomic_write_json(run.dir / MARKER, {"settings": want, "note": "captured by lowbit-video ablate"})
            rep.advance()
        rep.done()
    distributed.barrier()  # every rank's captures are written
    if r.share_only:
        return []
    captures = []
    for run in res.runs:
        index = json.loads((run.dir / "index.json").read_text())
        for e in index.get("entries", []):
            if e.get("step") == cap.step and e.get("branch", "cond") == "cond":
                captures.append(Capture(int(e["block"]), run.prompt, run.seed, run.dir / e["file"],
                                        grid=tuple(e["grid"]) if e.get("grid") else None,
                                        rope_segments=tuple(e["rope_segments"]) if e.get("rope_segments") else None,
                                        text_tokens=int(e.get("text_tokens") or 0)))
    if not captures:
        raise UserError(f"no Q/K/V were captured at step {cap.step} (blocks {list(cap.blocks) or 'all'})")
    order = {(run.prompt, run.seed): i for i, run in enumerate(res.runs)}
    return sorted(captures, key=lambda c: (order[(c.prompt, c.seed)], c.block))
