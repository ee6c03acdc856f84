"""Where a generate call's time and memory go: transformer time per denoising step, peak GPU memory.

`TransformerTimer` hooks the forward of each transformer a recipe is installed into. On CUDA it
records a pair of CUDA events around every forward (no host synchronisation while sampling: the
events are read once, after the clip), on the CPU wall time. Forwards are binned by the step
tracker's step (classifier-free guidance's two forwards and Wan2.2's two experts land in the step
they belong to), so `summary()["transformer_s_per_step"][i]` is the transformer time of step i,
attention included: the figure recipes are compared by.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from .steps import StepTracker


class TransformerTimer:
    """Context manager timing every forward of `transformers` per denoising step of `tracker`."""

    def __init__(self, transformers: list[torch.nn.Module], tracker: StepTracker, device: torch.device | str):
        self.transformers = transformers
        self.tracker = tracker
        self.cuda = torch.device(device).type == "cuda"
        self._marks: list[tuple[tuple[int, int], Any, Any]] = []  # ((loop, step), start, end)
        self._open: list[tuple[tuple[int, int], Any]] = []
        self._handles: list[Any] = []

    def _now(self):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def _pre(self, module, args) -> None:
        self._open.append(((self.tracker.loops, self.tracker.step), self._now()))

    def _post(self, module, args, output) -> None:
        if self._open:
            key, start = self._open.pop()
            self._marks.append((key, start, self._now()))

    def __enter__(self) -> "TransformerTimer":
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()
        for t in self.transformers:
            self._handles.append(t.register_forward_pre_hook(self._pre))
            self._handles.append(t.register_forward_hook(self._post))
        return self

    def __exit__(self, *exc) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def summary(self) -> dict[str, Any]:
        """{"transformer_s_per_step": [...] (in step order, every sampling loop), "transformer_s",
        "transformer_forwards", and on CUDA "peak_memory_gib" (torch's allocator peak)}."""
        if self.cuda:
            torch.cuda.synchronize()
        per: dict[tuple[int, int], float] = {}
        for key, start, end in self._marks:
            dt = start.elapsed_time(end) / 1000.0 if self.cuda else end - start
            per[key] = per.get(key, 0.0) + dt
        steps = [round(per[k], 4) for k in sorted(per)]
        out: dict[str, Any] = {"transformer_s_per_step": steps, "transformer_s": round(sum(per.values()), 4),
                               "transformer_forwards": len(self._marks)}
        if self.cuda:
            out["peak_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 3)
        return out


__all__ = ["TransformerTimer"]
