"""Kernel-alone A/B of attention-kernel variants in one process, in interleaved rounds.

Separate processes on the H200 machine differ by 2-5 % in kernel time (results/kernels-h200.md), more than most
kernel changes, so a change is judged here: every variant runs on the same pre-pass operands of the same tensors,
each round times every variant in turn (calls issued back to back behind a head start of the GPU, so that no
host time counts: the kernels alone), and the medians over the rounds are compared with the first variant's.
Each variant's output is also compared with the first's, bit for bit.

A variant is `default` (this checkout's kernels and settings), kernel settings `KEY=VALUE[+KEY=VALUE...]` (as
`lowbit-video bench kernels --config`), or `file=PATH[+KEY=VALUE...]`: another version of kernels/gluon_ws.py
(e.g. `git show REV:kernels/gluon_ws.py > /tmp/gluon_ws_rev.py`) imported beside this checkout's, which the
Gluon-kernel recipes (sage2-int8, the MXFP4 family, the INT4 recipes) then launch.

    python benchmarks/kernel_ab.py --shapes ltx-video --shapes cogvideox-5b --recipes sage2-int8 \\
        --variant default --variant NUM_STAGES=4 --variant file=/tmp/gluon_ws_rev.py

Needs a CUDA device with triton (sm_90 for the Gluon kernel).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import statistics
import sys
from typing import NamedTuple

KERNEL_MODULE = "lowbit_video.kernels.gluon_ws"


class Variant(NamedTuple):
    label: str
    path: str | None  # another gluon_ws.py, or None: this checkout's
    config: dict  # kernel settings, as `attention(..., config=...)` takes them


def parse_variant(text: str) -> Variant:
    """`default`, `KEY=VALUE[+KEY=VALUE...]` or `file=PATH[+KEY=VALUE...]` as a Variant (settings typed and
    checked as `bench kernels --config` does); ValueError with a one-line reason."""
    from lowbit_video.bench.kernels import parse_config

    text = text.strip()
    if text == "default":
        return Variant("default", None, {})
    items = [t for t in text.split("+") if t]
    path = None
    if items and items[0].startswith("file="):
        path = items.pop(0)[len("file="):]
        if not path:
            raise ValueError(f"variant {text!r}: file= needs a path")
        if not os.path.isfile(path):
            raise ValueError(f"variant {text!r}: no file {path}")
    if not items and path is None:
        raise ValueError(f"a variant is default, KEY=VALUE[+...] or file=PATH[+KEY=VALUE...], got {text!r}")
    return Variant(text, path, parse_config(items))


def load_kernel_file(path: str, index: int):
    """The module at `path` (a version of kernels/gluon_ws.py) imported inside lowbit_video.kernels under its
    own name, so that its relative imports resolve to this checkout's sibling modules."""
    import lowbit_video.kernels  # noqa: F401  (the parent package)

    name = f"lowbit_video.kernels._ab_variant_{index}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def kernel_module(module):
    """While inside, `from . import gluon_ws` in lowbit_video.kernels (kernels/launch.py, at each launch) gives
    `module`; None leaves this checkout's."""
    import lowbit_video.kernels as package

    if module is None:
        yield
        return
    current = sys.modules.get(KERNEL_MODULE)
    sys.modules[KERNEL_MODULE] = module
    package.gluon_ws = module
    try:
        yield
    finally:
        if current is None:  # not imported before: as it was
            del sys.modules[KERNEL_MODULE]
            del package.gluon_ws
        else:
            sys.modules[KERNEL_MODULE] = current
            package.gluon_ws = current


def run(shapes, recipes, variants, rounds: int, reps: int, seed: int = 0):
    """[(shape, recipe, [(label, median ms, the first variant's median / this one's (above 1: faster), output
    bit-equal to the first variant's)])]."""
    import torch

    from lowbit_video.bench.common import SHAPES, queued_ms, shape_name
    from lowbit_video.kernels.dispatch import attention_spec
    from lowbit_video.kernels.launch import split_call

    modules = {v.path: None for v in variants}
    for i, path in enumerate(p for p in modules if p is not None):
        modules[path] = load_kernel_file(path, i)
    dev = torch.device("cuda")
    out = []
    for name in map(shape_name, shapes):
        sh = SHAPES[name]
        g = torch.Generator(device=dev).manual_seed(seed)
        q, k, v = (torch.randn(sh.batch, sh.heads, sh.tokens, sh.head_dim, device=dev, dtype=torch.bfloat16,
                               generator=g) for _ in range(3))
        for recipe in recipes:
            spec = attention_spec(recipe)
            kernels, outputs = [], []
            for var in variants:
                with kernel_module(modules[var.path]):
                    _, kernel, _ = split_call(q, k, v, spec, config=var.config or None)
                    outputs.append(kernel().clone())  # compiles the variant
                kernels.append(kernel)
            times = [[] for _ in variants]
            for _ in range(rounds):
                for i, var in enumerate(variants):
                    with kernel_module(modules[var.path]):
                        times[i].append(queued_ms(kernels[i], reps=reps, head_start_cycles=1_000_000))
            med = [statistics.median(t) for t in times]
            out.append((name, recipe, [(var.label, m, med[0] / m, torch.equal(outputs[0], o))
                                      for var, m, o in zip(variants, med, outputs)]))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", action="append", required=True, help="bench shape names (repeat)")
    ap.add_argument("--recipes", action="append", required=True, help="recipe names (repeat)")
    ap.add_argument("--variant", action="append", required=True, dest="variants",
                    help="default | KEY=VALUE[+KEY=VALUE...] | file=PATH[+KEY=VALUE...] (repeat; the first is the "
                         "baseline)")
    ap.add_argument("--rounds", type=int, default=7, help="interleaved rounds (median over them)")
    ap.add_argument("--reps", type=int, default=10, help="calls per timing")
    args = ap.parse_args(argv)
    try:
        variants = [parse_variant(t) for t in args.variants]
    except ValueError as exc:
        ap.error(str(exc))
    import torch

    if not torch.cuda.is_available():
        print("error: needs a CUDA device", file=sys.stderr)
        return 2
    for name, recipe, rows in run(args.shapes, args.recipes, variants, args.rounds, args.reps):
        print(f"{name} {recipe}: " + "; ".join(
            f"{label} {ms:.3f} ms ({ratio:.3f}x{'' if same else ', other bits'})" for label, ms, ratio, same in rows),
            flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
