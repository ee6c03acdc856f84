"""Which denoising step a transformer call belongs to, from the scheduler (not from call counts).

Counting transformer calls breaks under classifier-free guidance (two calls per step in Wan and
HunyuanVideo, one batched call in tiny-shapes) and under Wan2.2's expert switch (two transformers).
Every diffusers sampling loop calls `scheduler.set_timesteps` once and `scheduler.step` once per
denoising step, so `StepTracker.wrap(scheduler)` wraps exactly those two methods on the scheduler
instance (not its class):

* set_timesteps -> step = 0, num_steps = len(scheduler.timesteps) after the call;
* step          -> step += 1 after the call (and the progress callback).

Transformer calls between two `scheduler.step` calls see the same `tracker.step`. The wrappers
keep the original signatures visible (`functools.wraps`), because pipelines inspect
`scheduler.set_timesteps` for `sigmas=` / `timesteps=` support (`retrieve_timesteps`).
"""

from __future__ import annotations

import contextlib
import functools
from typing import Callable, Iterator


class StepTracker:
    """The current denoising step of a sampling loop, shared by every processor of a model."""

    def __init__(self, on_step: Callable[[int, int], None] | None = None) -> None:
        self.step = 0  # index of the step whose transformer calls are running
        self.num_steps = 1  # length of the schedule set by the last set_timesteps
        self.forward_in_step = 0  # transformer forwards started in the current step so far
        self.loops = 0  # set_timesteps calls seen (one per sampling loop)
        self.steps_done = 0  # scheduler.step calls seen, over all loops
        self.on_step = on_step  # called as on_step(steps_done, steps_total) after each scheduler step
        self.steps_total: int | None = None  # for on_step; default: num_steps x loops seen so far

    def reset(self, num_steps: int) -> None:
        self.step = 0
        self.num_steps = max(int(num_steps), 1)
        self.forward_in_step = 0
        self.loops += 1

    def advance(self) -> None:
        self.step += 1
        self.forward_in_step = 0
        self.steps_done += 1
        if self.on_step is not None:
            total = self.steps_total if self.steps_total is not None else self.num_steps * self.loops
            self.on_step(self.steps_done, total)

    def on_forward(self) -> int:
        """Called at the start of every transformer forward; returns its index within the step."""
        i = self.forward_in_step
        self.forward_in_step += 1
        return i

    @contextlib.contextmanager
    def wrap(self, scheduler) -> Iterator["StepTracker"]:
        """Track `scheduler` while the block runs; its own methods are restored afterwards."""
        had = {name: name in vars(scheduler) for name in ("set_timesteps", "step")}
        saved = {name: vars(scheduler).get(name) for name in ("set_timesteps", "step")}
        orig_set, orig_step = scheduler.set_timesteps, scheduler.step

        @functools.wraps(orig_set)
        def set_timesteps(*args, **kwargs):
            out = orig_set(*args, **kwargs)
            self.reset(len(scheduler.timesteps))
            return out

        @functools.wraps(orig_step)
        def step(*args, **kwargs):
            out = orig_step(*args, **kwargs)
            self.advance()
            return out

        scheduler.set_timesteps = set_timesteps
        scheduler.step = step
        try:
            yield self
        finally:
            for name in ("set_timesteps", "step"):
                if had[name]:
                    setattr(scheduler, name, saved[name])
                else:
                    vars(scheduler).pop(name, None)


__all__ = ["StepTracker"]
