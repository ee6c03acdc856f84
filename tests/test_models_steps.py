"""StepTracker: the denoising step comes from the scheduler's set_timesteps / step."""

import copy
import inspect

import pytest
import torch

pytest.importorskip("diffusers")

from diffusers import FlowMatchEulerDiscreteScheduler, UniPCMultistepScheduler  # noqa: E402

from lowbit_video.models.steps import StepTracker  # noqa: E402


def _loop(sched, n, forwards_per_step=2, seen=None, tracker=None):
    sched.set_timesteps(n)
    x = torch.zeros(1, 2)
    for t in sched.timesteps:
        for _ in range(forwards_per_step):  # e.g. cond + uncond transformer calls
            tracker.on_forward()
            seen.append(tracker.step)
        x = sched.step(torch.ones_like(x), t, x, return_dict=False)[0]


@pytest.mark.parametrize("make", [lambda: FlowMatchEulerDiscreteScheduler(shift=3.0),
                                  lambda: UniPCMultistepScheduler(prediction_type="flow_prediction",
                                                                  use_flow_sigmas=True, flow_shift=3.0)])
def test_steps_counted_from_the_scheduler_not_from_calls(make):
    sched = make()
    progress = []
    tracker = StepTracker(on_step=lambda i, n: progress.append((i, n)))
    seen = []
    with tracker.wrap(sched):
        _loop(sched, 4, forwards_per_step=2, seen=seen, tracker=tracker)
        assert tracker.num_steps == 4
        # a second sampling loop restarts at step 0
        _loop(sched, 3, forwards_per_step=1, seen=seen, tracker=tracker)
        assert tracker.num_steps == 3
    assert seen == [0, 0, 1, 1, 2, 2, 3, 3] + [0, 1, 2]
    assert [i for i, _ in progress] == list(range(1, 8))
    # restored: the instance is of its own class again, with no wrappers left
    assert type(sched) is type(make()) and "step" not in vars(sched) and "set_timesteps" not in vars(sched)


def _steps(sched, n, x):
    for t in sched.timesteps[:n]:
        x = sched.step(torch.ones_like(x), t, x, return_dict=False)[0]
    return x


def test_copies_step_themselves_and_the_steps_between_two_forwards_are_one():
    # A diffusion-forcing loop (SkyReels-V2): the scheduler is set, deep-copied once per latent frame and each copy
    # set; per denoising step one transformer forward, then every frame's copy steps its own latents.
    def make():
        return UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=8.0)

    sched, progress, seen = make(), [], []
    tracker = StepTracker(on_step=lambda i, n: progress.append((i, n)))
    with tracker.wrap(sched):
        sched.set_timesteps(3)
        copies = [copy.deepcopy(sched) for _ in range(4)]
        for c in copies:
            c.set_timesteps(3)
        xs = [torch.full((1, 2), float(j)) for j in range(4)]
        for t in copies[0].timesteps:
            tracker.on_forward()
            seen.append(tracker.step)
            xs = [c.step(torch.ones_like(x), t, x, return_dict=False)[0] for c, x in zip(copies, xs)]
    # each copy stepped its own state: what an untracked scheduler gives for the same three steps
    for j, x in enumerate(xs):
        ref = make()
        ref.set_timesteps(3)
        assert torch.equal(x, _steps(ref, 3, torch.full((1, 2), float(j))))
    assert seen == [0, 1, 2] and progress == [(1, 3), (2, 3), (3, 3)] and tracker.loops == 1
    assert type(sched) is UniPCMultistepScheduler


def test_wrapped_set_timesteps_keeps_its_signature():
    # Pipelines call retrieve_timesteps, which inspects set_timesteps for `sigmas` / `timesteps`.
    sched = FlowMatchEulerDiscreteScheduler(shift=7.0)
    with StepTracker().wrap(sched):
        params = set(inspect.signature(sched.set_timesteps).parameters)
        assert {"sigmas", "num_inference_steps", "device"} <= params
        sched.set_timesteps(sigmas=[1.0, 0.75, 0.5, 0.25])
        assert len(sched.timesteps) == 4


def test_tracker_restores_on_exception():
    sched = FlowMatchEulerDiscreteScheduler()
    with pytest.raises(KeyError):
        with StepTracker().wrap(sched):
            raise KeyError("x")
    assert "step" not in vars(sched)
