"""Which denoising step a transformer call belongs to, from the scheduler (not from call counts).

Counting transformer calls breaks under classifier-free guidance (two calls per step in Wan and
HunyuanVideo, one batched call in tiny-shapes) and under Wan2.2's expert switch (two transformers).
Every diffusers sampling loop calls `scheduler.set_timesteps` before it and `scheduler.step` after
each denoising step's transformer calls, so `StepTracker.wrap(scheduler)` wraps exactly those two
methods of the scheduler:

* set_timesteps -> step = 0, num_steps = len(scheduler.timesteps) after the call;
* step          -> step += 1 after the call (and the progress callback).

Diffusion-forcing pipelines (SkyReels-V2's) denoise each latent frame on its own deep copy of the
scheduler: every copy is set, then each stepped once per transformer call. So the scheduler steps
between two transformer forwards count as one denoising step, and the schedulers set before the
first forward as one sampling loop. The wrappers live on a subclass the scheduler instance is
switched to (and back from on exit), not on the instance: a copy the pipeline makes keeps its
class, so it steps itself, where instance attributes would have been copied as functions bound to
the original. They keep the original signatures visible (`functools.wraps`), because pipelines
inspect `scheduler.set_timesteps` for `sigmas=` / `timesteps=` support (`retrieve_timesteps`).
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
        self._forward_seen = False  # a transformer forward ran since the last set_timesteps

    def reset(self, num_steps: int) -> None:
        """A scheduler was set: step 0 of a new sampling loop, unless no transformer forward ran since the last
        one was set (a diffusion-forcing pipeline sets one scheduler per latent frame for one loop)."""
        if self.loops == 0 or self._forward_seen:
            self.loops += 1
        self._forward_seen = False
        self.step = 0
        self.num_steps = max(int(num_steps), 1)
        self.forward_in_step = 0

    def advance(self) -> None:
        """A scheduler stepped: the next denoising step, once per group of steps between transformer forwards."""
        if self.forward_in_step == 0:
            return  # another latent frame's scheduler stepping after the same transformer call
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
        self._forward_seen = True
        return i

    @contextlib.contextmanager
    def wrap(self, scheduler) -> Iterator["StepTracker"]:
        """Track `scheduler` (and the copies made of it) while the block runs; its class is restored afterwards."""
        base = type(scheduler)
        tracker = self

        @functools.wraps(base.set_timesteps)
        def set_timesteps(sched, *args, **kwargs):
            out = base.set_timesteps(sched, *args, **kwargs)
            tracker.reset(len(sched.timesteps))
            return out

        @functools.wraps(base.step)
        def step(sched, *args, **kwargs):
            out = base.step(sched, *args, **kwargs)
            tracker.advance()
            return out

        # named as the scheduler's class: pipelines and run records read type(scheduler).__name__
        tracked = type(base.__name__, (base,), {"set_timesteps": set_timesteps, "step": step,
                                                "__qualname__": base.__qualname__, "__module__": base.__module__})
        scheduler.__class__ = tracked
        try:
            yield self
        finally:
            scheduler.__class__ = base


__all__ = ["StepTracker"]
