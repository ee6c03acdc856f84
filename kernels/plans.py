"""Call plans: the kernel launches of one attention call, recorded once per call signature and replayed by later
calls of the same signature with their own q, k, v and output in place of the recorded ones.

Why: at short sequences a call's kernels wait for the host that issues them (dispatch, settings, nine buffer
allocations, Triton's binding and specialization of each launch, the kernel's TMA descriptors). Without plans,
sage2-int8's GPU waited 0.14–0.26 ms between a call's launches at the short zoo shapes, whose calls take 0.7–1.5 ms,
and 2–3 µs with them (one H100, `python benchmarks/attend_profile.py --shapes short short-d64 ltx-video --recipes
sage2-int8 --without-plans`; results/kernels-h200.md, "Small shapes"). A replayed call allocates its output and
issues the recorded launches through the compiled kernels' own launchers (`_launcher.run_compiled`): nothing else.

What a plan keeps: each launch's compiled kernel, grid, stream and arguments, and so the buffers the pre-pass
wrote them into (its workspace): a replayed call writes the same buffers again. That is safe because the
launches run in stream order (a plan belongs to one stream and one host thread, both in its key) and because the
row's pre-pass rewrites every buffer it reads on each call (`dispatch.Variant.replay`; sage2's statistics counter
is reset by the kernel that counts with it; what no launch writes, the rotation matrices and the zeros standing in
for what a recipe leaves out, never changes). Kept only where that memory is small: a workspace over
`WORKSPACE_BYTES` is not kept, since there the host time is a small share of the call (wan14b-720p: 1.2 GB of
operands, a 140 ms call), and at most `MAX_PLANS` plans, the least recently used dropped first.

A call records a plan only when replaying it cannot differ from running it: on CUDA, outside CUDA-graph capture
(a graph would keep the workspace's addresses beyond the plan's life), with no Triton launch hook set (profilers
that expect Triton's own path), and when every tensor a launch took is either one of the call's own tensors
(q, k, v, the output, the LSE; by identity) or a buffer sharing no memory with them. The key holds everything a
launch's arguments or Triton's specialization depend on: the recipe (its AttentionSpec, by identity), the layout,
shapes, strides, dtypes, devices and 16-byte alignment of q, k and v, which of them are one tensor, the stream
and thread, the softmax scale and the call's options.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import torch

from . import _launcher

# sage2-int8's calls up to wan2.2-5b-720p keep theirs (wan1.3b-480p 149 MiB, an 8 ms call), the MXFP4 family's up
# to cogvideox-5b and wan1.3b-480p (313 / 290 MiB: bf16-sized buffers, for the exact fallback; mxattention's GPU
# waited 0.55 ms for the host in a 10.9 ms call at wan1.3b-480p, results/kernels-h200.md "Small shapes"), the INT4
# recipes' at the short shapes only (Q smoothing keeps K smoothed in fp32 and the ΔS table: at wan1.3b-480p those
# alone are 192 + 384 MiB); the 14B and HunyuanVideo shapes (0.5–1.2 GB) keep none: half a millisecond of host time
# is at most 2 % of their 28–215 ms calls
WORKSPACE_BYTES = 384 << 20
MAX_PLANS = 4  # a model calls attention at one or two shapes (self- and cross-attention)
SLOTS = ("q", "k", "v", "out", "lse")  # the call's own tensors, replaced on replay


def available() -> bool:
    """Whether calls may record and replay plans now (not while a CUDA graph is captured on the current stream,
    not with a Triton launch hook set)."""
    return not _launcher._hooked() and not torch.cuda.is_current_stream_capturing()


def key(spec, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *options) -> tuple:
    """The plan key of a call of BHND or BNHD q, k, v under `spec` with the call's other `options` (layout, scale,
    flags: hashable values); see the module docstring."""
    device = q.get_device()
    return (id(spec), q.shape, q.stride(), k.shape, k.stride(), v.shape, v.stride(), q.dtype, k.dtype, v.dtype,
            q.data_ptr() % 16 == 0, k.data_ptr() % 16 == 0, v.data_ptr() % 16 == 0, q is k, k is v, q is v,
            device, k.get_device(), v.get_device(), _launcher._stream(device), threading.get_ident(), *options)


class Plan:
    """Recorded launches: (compiled kernel, grid, stream, arguments, slots), slots the (argument index, SLOTS
    index) pairs to fill with the call's tensors. `extra`: what the caller keeps beside the launches."""

    __slots__ = ("spec", "steps", "workspace_bytes", "extra")

    def __init__(self, spec, steps, workspace_bytes: int, extra):
        self.spec, self.steps, self.workspace_bytes, self.extra = spec, steps, workspace_bytes, extra

    def replay(self, q, k, v, out, lse=None) -> None:
        tensors = (q, k, v, out, lse)
        for kernel, grid, stream, args, slots in self.steps:
            if slots:
                args = list(args)
                for i, s in slots:
                    args[i] = tensors[s]
            _launcher.run_compiled(kernel, grid, stream, args)


class Recorder:
    """The `launch` argument of a recorded call's pre-pass and kernel: launches as `_launcher.launch` does and keeps
    each launch's compiled kernel, grid, stream and bound arguments."""

    def __init__(self):
        self.launches = []
        self.declined = False

    def decline(self) -> None:
        """Keep no plan of this call: its pre-pass did work outside the launches (a torch cast) that a replay
        would not repeat."""
        self.declined = True

    def __call__(self, fn, grid, *args, **constexprs):
        kernel = _launcher.launch(fn, grid, *args, **constexprs)
        stream = _launcher._stream(_launcher._device())  # the stream the launch took
        self.launches.append((kernel, tuple(grid), stream, _launcher.bound_arguments(fn, args, constexprs)))
        return kernel

    def plan(self, spec, q, k, v, out, lse=None, extra=None) -> Plan | None:
        """The plan of the recorded call whose own tensors were q, k, v, out and lse, or None where replaying could
        differ from running the call (a launch took a tensor sharing memory with them that is not one of them, or
        a TMA descriptor of one of them; the pre-pass declined) or where its workspace is over WORKSPACE_BYTES."""
        if self.declined:
            return None
        own = (q, k, v, out, lse)
        own_storage = {t.untyped_storage().data_ptr() for t in own if t is not None}
        workspace = {}
        steps = []
        for kernel, grid, stream, args in self.launches:
            slots = []
            for i, arg in enumerate(args):
                slot = next((s for s, t in enumerate(own) if t is not None and arg is t), None)
                if slot is not None:
                    slots.append((i, slot))
                    continue
                base = getattr(arg, "base", None) if getattr(arg, "block_shape", None) is not None else arg
                if isinstance(base, torch.Tensor):
                    storage = base.untyped_storage()
                    if storage.data_ptr() in own_storage:
                        return None
                    workspace[storage.data_ptr()] = storage.nbytes()
            steps.append((kernel, grid, stream, args, tuple(slots)))
        size = sum(workspace.values())
        if size > WORKSPACE_BYTES:
            return None
        return Plan(spec, tuple(steps), size, extra)


class Plans:
    """The plans of this process, least recently used first (at most MAX_PLANS)."""

    def __init__(self):
        self._plans = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key, spec) -> Plan | None:
        with self._lock:
            plan = self._plans.get(key)
            if plan is None or plan.spec is not spec:  # (an id reused by another spec: not this plan's)
                return None
            self._plans.move_to_end(key)
            return plan

    def put(self, key, plan: Plan | None) -> None:
        if plan is None:
            return
        with self._lock:
            self._plans[key] = plan
            self._plans.move_to_end(key)
            while len(self._plans) > MAX_PLANS:
                self._plans.popitem(last=False)

    def newest(self) -> Plan | None:
        """The plan used or kept last (None when there is none)."""
        with self._lock:
            return next(reversed(self._plans.values()), None)

    def clear(self) -> None:
        """Drop every plan (and so its workspace)."""
        with self._lock:
            self._plans.clear()

    def __len__(self) -> int:
        return len(self._plans)


PLANS = Plans()


def decline(run) -> None:
    """Keep no plan of the call whose launches `run` issues, where that call is being recorded (a `Recorder`; a
    plain launcher has nothing to keep): for a pre-pass that did work outside its launches, a torch cast, which a
    replay would not repeat."""
    if isinstance(run, Recorder):
        run.decline()


def clear() -> None:
    """Drop every call plan of this process and the buffers they keep (`torch.cuda.empty_cache` can then return
    that memory)."""
    PLANS.clear()


__all__ = ["MAX_PLANS", "PLANS", "Plan", "Plans", "Recorder", "WORKSPACE_BYTES", "available", "clear", "key"]
