"""Captures of post-RoPE Q, K, V for the mechanism studies (`--capture-qkv DIR`).

`CaptureSpec(dir, blocks, steps)` names the folder and which transformer blocks and denoising
steps to save (None = all). During `VideoModel.generate`, each self-attention call (joint
video+text attention in HunyuanVideo) of a chosen block and step saves, per prompt:

    DIR/block{b:03d}_step{s:03d}_prompt{p:03d}.safetensors        tensors "q", "k", "v"
    DIR/index.json                                                what each file holds

* Q, K, V are the exact attention inputs (after projections, QK-norm and RoPE, before any
  quantization), in BNHD layout (1, tokens, heads, head_dim) and the model's dtype.
* `prompt` is the index of the prompt in the `generate` call; `index.json` also records its text
  and seed. By default only the conditional branch of classifier-free guidance is saved; with
  `branches=("cond", "uncond")` the unconditional one goes to `..._uncond.safetensors`.
* HunyuanVideo: the tokens are the video tokens followed by the prompt's valid (unpadded) text
  tokens; `video_tokens` / `text_tokens` in the index say where the split is.

Files are written atomically (runstore.atomic_write_bytes: temporary file, fsync, rename; a full
disk is a one-line error naming the file) and index.json is rewritten atomically after every
file, so an interrupted run leaves an index that lists only complete files. An existing
index.json in the folder is extended (entries with the same file name are replaced).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..runstore import atomic_write_bytes

INDEX_NAME = "index.json"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class CaptureSpec:
    """What to capture: folder, blocks (None = all), denoising steps (None = all), CFG branches."""

    dir: str | os.PathLike
    blocks: set[int] | frozenset[int] | None = None
    steps: set[int] | frozenset[int] | None = None
    branches: tuple[str, ...] = ("cond",)
    prompts: set[int] | frozenset[int] | None = None  # prompt indices (None = all)

    def wants(self, *, block: int, step: int, num_steps: int, num_blocks: int) -> bool:
        """True if (block, step) is chosen; negative entries count from the end, as in recipes."""
        if self.blocks is not None and block not in {b if b >= 0 else num_blocks + b for b in self.blocks}:
            return False
        if self.steps is not None and step not in {s if s >= 0 else num_steps + s for s in self.steps}:
            return False
        return True


class CaptureWriter:
    """Writes the files of one `generate` call and keeps index.json up to date."""

    def __init__(self, spec: CaptureSpec, meta: dict[str, Any]) -> None:
        self.spec = spec
        self.dir = Path(spec.dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.meta = dict(meta)
        self.prompts: list[str] = []
        self.seeds: list[int] = []
        index_path = self.dir / INDEX_NAME
        self.entries: dict[str, dict[str, Any]] = {}
        if index_path.is_file():
            try:
                old = json.loads(index_path.read_text())
                self.entries = {e["file"]: e for e in old.get("entries", []) if isinstance(e, dict) and "file" in e}
            except (json.JSONDecodeError, OSError):
                self.entries = {}
        self.written = 0

    def wants(self, *, block: int, step: int, num_steps: int, num_blocks: int, prompt: int, branch: str) -> bool:
        if branch not in self.spec.branches:
            return False
        if self.spec.prompts is not None and prompt not in self.spec.prompts:
            return False
        return self.spec.wants(block=block, step=step, num_steps=num_steps, num_blocks=num_blocks)

    @staticmethod
    def file_name(block: int, step: int, prompt: int, branch: str) -> str:
        suffix = "" if branch == "cond" else f"_{branch}"
        return f"block{block:03d}_step{step:03d}_prompt{prompt:03d}{suffix}.safetensors"

    def save(self, *, block: int, step: int, num_steps: int, prompt: int, branch: str,
             q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, info: dict[str, Any]) -> Path:
        """Save one prompt's (1, N, H, D) q, k, v and add its index entry."""
        from safetensors.torch import save as st_save

        name = self.file_name(block, step, prompt, branch)
        tensors = {n: t.detach().to("cpu").contiguous() for n, t in (("q", q), ("k", k), ("v", v))}
        atomic_write_bytes(self.dir / name, st_save(tensors, metadata={"format": "pt", "layout": "BNHD"}))
        entry = {
            "file": name, "block": block, "step": step, "num_steps": num_steps, "prompt_index": prompt,
            "prompt": self.prompts[prompt] if prompt < len(self.prompts) else None,
            "seed": self.seeds[prompt] if prompt < len(self.seeds) else None,
            "branch": branch, "layout": "BNHD", "dtype": str(tensors["q"].dtype).replace("torch.", ""),
            "shapes": {n: list(t.shape) for n, t in tensors.items()},
            **self.meta, **info,
        }
        self.entries[name] = entry
        self.written += 1
        self.write_index()
        return self.dir / name

    def write_index(self) -> None:
        entries = sorted(self.entries.values(), key=lambda e: (e.get("block", 0), e.get("step", 0),
                                                              e.get("prompt_index", 0), e.get("branch", "")))
        doc = {"format": FORMAT_VERSION, "layout": "BNHD", "tensors": ["q", "k", "v"],
               "note": "post-RoPE attention inputs before quantization; one file per (block, step, prompt)",
               "entries": entries}
        atomic_write_bytes(self.dir / INDEX_NAME, (json.dumps(doc, indent=1) + "\n").encode())


def load_capture(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """The q, k, v tensors of one capture file."""
    from safetensors.torch import load_file

    return load_file(str(path))


__all__ = ["CaptureSpec", "CaptureWriter", "load_capture", "INDEX_NAME"]
