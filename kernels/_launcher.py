"""Launching the warp-specialized Gluon kernels without Triton re-deriving their specialization on every call.

`JITFunction.run` binds and specializes every argument on every launch (alignment and integer-range checks,
hashing the descriptors' layouts, the cache key). For the attention kernel (40 arguments, five TMA descriptors)
that was 104 µs of host time per launch on the H200 machine, against 37 µs for the compiled kernel's own launcher,
and at short sequences the GPU waits for it (results/kernels-h200.md, "Small shapes").

`Launcher` keys compiled kernels by a superset of what Triton specializes on: each tensor's dtype and 16-byte
alignment, each integer's range and whether it is 1 or a multiple of 16, each bool, each descriptor's dtype,
block shape and layout, every constexpr, the device. A key is therefore never coarser than Triton's: the first
call with new argument properties goes through `JITFunction.run` (which compiles or finds the kernel and returns
it), later ones straight to that kernel's launcher with the same arguments. With a Triton launch hook set (a
profiler), every call takes Triton's path.
"""

from __future__ import annotations

import inspect


def _property(arg):
    """What Triton's specialization can depend on, for one argument (see the module docstring)."""
    if isinstance(arg, bool):
        return ("b", arg)
    if isinstance(arg, int):
        return ("i", -(1 << 31) <= arg < (1 << 31), arg < (1 << 63), arg == 1, arg % 16 == 0)
    if isinstance(arg, float):
        return ("f",)
    if arg is None:
        return ("n",)
    block = getattr(arg, "block_shape", None)
    if block is not None:  # a host-side TMA descriptor
        return ("d", arg.base.dtype, tuple(block), arg.layout, arg.padding)
    return ("t", arg.dtype, arg.data_ptr() % 16 == 0)


def _hooked() -> bool:
    """Whether a launch hook is set: Triton 3.6 keeps them in a `HookChain` (set when it has calls); a hook
    assigned directly is any other non-None value."""
    from triton import knobs

    hooks = (knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook)
    return any(h is not None and bool(getattr(h, "calls", True)) for h in hooks)


def _device() -> int:
    import torch

    return torch.cuda.current_device()


def _stream(device: int):
    from triton.runtime import driver

    return driver.active.get_current_stream(device)  # the stream JITFunction.run launches on


class Launcher:
    """`launcher(grid, *args, **constexprs)` runs `fn[grid](*args, **constexprs)` (the arguments as Triton takes
    them: positional runtime arguments, then keyword constexprs)."""

    def __init__(self, fn):
        self.fn = fn
        self.signature = _signature(fn)
        self.compiled = {}

    def __call__(self, grid, *args, **constexprs):
        if _hooked():
            return self.fn[grid](*args, **constexprs)
        device = _device()
        rest = _later_parameters(self.signature, len(args), constexprs)
        key = (device, tuple(map(_property, args)), rest)
        kernel = self.compiled.get(key)
        if kernel is None:
            kernel = self.fn[grid](*args, **constexprs)
            self.compiled[key] = kernel
            return kernel
        run_compiled(kernel, grid, _stream(device), args + rest)
        return kernel


def launch(fn, grid, *args, **constexprs):
    """Launch `fn` on `grid` the way its kind is launched: a `Launcher` by calling it, a Triton JIT function as
    `fn[grid](*args, **constexprs)`. Returns the compiled kernel that ran (the pre-passes and kernels take this
    function as their `launch` argument, so that a caller can record their launches: kernels/plans.py)."""
    if isinstance(fn, Launcher):
        return fn(grid, *args, **constexprs)
    return fn[grid](*args, **constexprs)


def _signature(fn) -> tuple[tuple[str, ...], dict]:
    """(parameter names, defaults) of the Python function behind a Triton JIT function."""
    params = list(inspect.signature(fn.fn).parameters.values())
    return tuple(p.name for p in params), {p.name: p.default for p in params
                                            if p.default is not inspect.Parameter.empty}


def _later_parameters(signature: tuple, n_args: int, constexprs: dict) -> tuple:
    """The values of the parameters after the first `n_args` (`signature` as `_signature` gives it): from
    `constexprs` or their defaults."""
    names, defaults = signature
    return tuple(constexprs[n] if n in constexprs else defaults[n] for n in names[n_args:])


def bound_arguments(fn, args: tuple, constexprs: dict) -> tuple:
    """Every parameter of `fn`'s kernel in order, as its compiled launcher takes them (what `JITFunction.run`
    binds): the positional arguments, then each later parameter from `constexprs` or its default. Launch options
    (num_warps, ...) are no parameters: the compiled kernel holds them."""
    signature = fn.signature if isinstance(fn, Launcher) else _signature(fn)
    return tuple(args) + _later_parameters(signature, len(args), constexprs)


def run_compiled(kernel, grid: tuple, stream, args: tuple) -> None:
    """Launch a compiled kernel directly through its own launcher (no binding, specialization or cache look-up):
    `args` as `bound_arguments` gives them, `stream` the raw CUDA stream (`_stream`)."""
    g = tuple(grid) + (1, 1)
    kernel.run(g[0], g[1], g[2], stream, kernel.function, kernel.packed_metadata, None, None, None, *args)

