"""A/B of attention-kernel and pre-pass variants in one process, in interleaved rounds.

Separate processes on the H200 machine differ by 2-5 % in kernel time (results/kernels-h200.md), more than most
kernel changes, so a change is judged here: every variant runs on the same tensors, each round times every variant
in turn (each round starting one variant later), and the medians over the rounds are compared with the first
variant's. By default the kernel alone is timed, on the variant's pre-pass operands (calls issued back to back
behind a head start of the GPU, so that no host time counts); with `--call`, the whole call
`kernels.launch.attention` (pre-pass and kernel), from an idle GPU (its host work counts, as at short sequences) and
back to back ("queued"). Each variant's output is also compared with the first's, bit for bit.

A variant is `default` (this checkout's kernels and settings), kernel settings `KEY=VALUE[+KEY=VALUE...]` (as
`lowbit-video bench kernels --config`), or other versions of the kernel and pre-pass modules in front of them:
`file=PATH` another kernels/gluon_ws.py (e.g. `git show REV:kernels/gluon_ws.py > /tmp/gluon_ws_rev.py`), which
the Gluon-kernel recipes (sage2-int8, the MXFP4 family, the INT4 recipes) then launch, and `prepass=PATH` another
kernels/prepass.py, whose functions kernels/operands.py then calls (time those with `--call`); each is imported
beside this checkout's modules.

    python benchmarks/kernel_ab.py --shapes ltx-video --shapes cogvideox-5b --recipes sage2-int8 \\
        --variant default --variant NUM_STAGES=4 --variant file=/tmp/gluon_ws_rev.py
    python benchmarks/kernel_ab.py --call --shapes ltx-video --shapes short --recipes sage2-int8 \\
        --variant prepass=/tmp/prepass_rev.py --variant default

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
    prepass: str | None = None  # another prepass.py, or None: this checkout's


def parse_variant(text: str) -> Variant:
    """`default`, or `[file=PATH+][prepass=PATH+]KEY=VALUE[+KEY=VALUE...]` (the files first, each optional, the
    settings optional after a file) as a Variant (settings typed and checked as `bench kernels --config` does);
    ValueError with a one-line reason."""
    from lowbit_video.bench.kernels import parse_config

    text = text.strip()
    if text == "default":
        return Variant("default", None, {})
    items = [t for t in text.split("+") if t]
    files = {}
    while items and items[0].startswith(("file=", "prepass=")):
        key, _, path = items.pop(0).partition("=")
        if key in files:
            raise ValueError(f"variant {text!r}: {key}= given twice")
        if not path:
            raise ValueError(f"variant {text!r}: {key}= needs a path")
        if not os.path.isfile(path):
            raise ValueError(f"variant {text!r}: no file {path}")
        files[key] = path
    if not items and not files:
        raise ValueError(f"a variant is default, KEY=VALUE[+...] or file=PATH / prepass=PATH[+KEY=VALUE...], "
                         f"got {text!r}")
    return Variant(text, files.get("file"), parse_config(items), files.get("prepass"))


def load_kernel_file(path: str, index: int, kind: str = "variant"):
    """The module at `path` (a version of kernels/gluon_ws.py, or of another module of kernels/ such as
    prepass.py) imported inside lowbit_video.kernels under its own name, so that its relative imports resolve
    to this checkout's sibling modules."""
    import lowbit_video.kernels  # noqa: F401  (the parent package)

    name = f"lowbit_video.kernels._ab_{kind}_{index}"
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


@contextlib.contextmanager
def prepass_module(module):
    """While inside, kernels/operands.py calls `module`'s pre-pass functions; None leaves this checkout's."""
    from lowbit_video.kernels import operands

    if module is None:
        yield
        return
    current = operands.prepass
    operands.prepass = module
    try:
        yield
    finally:
        operands.prepass = current


@contextlib.contextmanager
def variant_modules(kernel, prepass):
    """The variant's modules in place, with no call plan from outside the block: a plan replays the launches (the
    compiled kernels and the pre-pass) of the call that recorded it, so one recorded under another variant's
    modules would run in this variant's place (kernels/plans.py)."""
    from lowbit_video.kernels import plans

    plans.clear()
    try:
        with kernel_module(kernel), prepass_module(prepass):
            yield
    finally:
        plans.clear()


def run(shapes, recipes, variants, rounds: int, reps: int, seed: int = 0, call: bool = False):
    """[(shape, recipe, [(label, {measure: median ms}, {measure: the first variant's median / this one's (above 1:
    faster)}, output bit-equal to the first variant's)])]; the measure is "kernel", or with `call` "idle" and
    "queued" (the whole call from an idle GPU and back to back)."""
    import torch

    from lowbit_video.bench.common import SHAPES, cuda_times, queued_ms, shape_name
    from lowbit_video.kernels.dispatch import attention_spec
    from lowbit_video.kernels.launch import attention, split_call

    modules = {v.path: None for v in variants}
    for i, path in enumerate(p for p in modules if p is not None):
        modules[path] = load_kernel_file(path, i)
    prepasses = {v.prepass: None for v in variants}
    for i, path in enumerate(p for p in prepasses if p is not None):
        prepasses[path] = load_kernel_file(path, i, kind="prepass")
    dev = torch.device("cuda")
    out = []
    for name in map(shape_name, shapes):
        sh = SHAPES[name]
        g = torch.Generator(device=dev).manual_seed(seed)
        q, k, v = (torch.randn(sh.batch, sh.heads, sh.tokens, sh.head_dim, device=dev, dtype=torch.bfloat16,
                               generator=g) for _ in range(3))
        for recipe in recipes:
            spec = attention_spec(recipe)
            fns, outputs = [], []
            for var in variants:
                with variant_modules(modules[var.path], prepasses[var.prepass]):
                    if call:
                        fn = (lambda cfg: lambda: attention(q, k, v, spec, config=cfg))(var.config or None)
                    else:
                        fn = split_call(q, k, v, spec, config=var.config or None)[1]
                    outputs.append(fn().clone())  # compiles the variant
                fns.append(fn)
            times = [{} for _ in variants]
            for r in range(rounds):
                # each round starts one variant later: a variant timed right after a long one runs on a hotter
                # GPU, and a fixed order would charge that to the same variant every round
                for i in [(r + j) % len(variants) for j in range(len(variants))]:
                    var = variants[i]
                    with variant_modules(modules[var.path], prepasses[var.prepass]):
                        if call:
                            times[i].setdefault("idle", []).append(
                                statistics.median(cuda_times(fns[i], warmup=1, reps=reps)))
                            times[i].setdefault("queued", []).append(queued_ms(fns[i], reps=reps))
                        else:
                            times[i].setdefault("kernel", []).append(
                                queued_ms(fns[i], reps=reps, head_start_cycles=1_000_000))
            med = [{m: statistics.median(t) for m, t in ts.items()} for ts in times]
            out.append((name, recipe, [(var.label, md, {m: med[0][m] / md[m] for m in md}, torch.equal(outputs[0], o))
                                      for var, md, o in zip(variants, med, outputs)]))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", action="append", required=True, help="bench shape names (repeat)")
    ap.add_argument("--recipes", action="append", required=True, help="recipe names (repeat)")
    ap.add_argument("--variant", action="append", required=True, dest="variants",
                    help="default | KEY=VALUE[+KEY=VALUE...] | [file=PATH+][prepass=PATH+]KEY=VALUE... (repeat; the "
                         "first is the baseline)")
    ap.add_argument("--call", action="store_true",
                    help="time the whole call (pre-pass and kernel) from an idle GPU and back to back, not the kernel "
                         "alone")
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
    for name, recipe, rows in run(args.shapes, args.recipes, variants, args.rounds, args.reps, call=args.call):
        print(f"{name} {recipe}: " + "; ".join(
            f"{label} " + " ".join(f"{m} {ms[m]:.3f} ms ({ratio[m]:.3f}x)" for m in ms) + ("" if same else ", other bits")
            for label, ms, ratio, same in rows), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
