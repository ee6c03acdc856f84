"""Where the time of one `attend(q, k, v, recipe)` call goes, at the model zoo's shapes (bench/common.py SHAPES).

For each shape and recipe (random bf16 BHND inputs at the shape's head_dim, as `lowbit-video bench kernels`) it
prints, beside SDPA cuDNN in the same process:
- total: one call timed by CUDA events from an idle GPU (median of 15, 7 at the long shapes, after 2 warm-ups): the
  figure `bench kernels` reports, host work included;
- queued: calls issued back to back (`bench.common.queued_ms`: events around the whole run, divided by the
  count): the GPU-bound rate, the host time hidden when the host runs ahead (`bench kernels`' queued figure);
- host: wall time of issuing one call without waiting (the Python and launch work);
- first: µs from entering `attend` to its first launch leaving the host, for calls that replay a call plan (median
  of 40 calls, each after the GPU finished the last, as a call from an idle GPU starts: the GPU waits that long);
- pre / kern: the pre-pass and the kernel timed on their own (`kernels.launch.split_call`, each from an idle GPU);
- gpu / span: one call from an idle GPU under torch.profiler: the GPU time of its kernels and the span from the
  first kernel's start to the last one's end (span − gpu: the time the GPU waited for the host between launches;
  the profiler adds host time of its own, so this is an upper bound), and the number of kernels;
- plan: the workspace of the call plan the timed calls kept (kernels/plans.py), or none.
`--tune 'RECIPE:{"KEY": VALUE}'` (repeatable) also times the kernel with those settings at the three smallest shapes.
`--prepass` also lists the pre-pass's GPU kernels (µs per call, torch.profiler over 10 pre-passes) beside a copy of
Q, K and V (`clone`, back to back: reading the inputs and writing as many bytes, a floor for a pass that reads them
all and writes codes of at most the same size).
With `--out DIR`, at the `short` shape it writes a host cProfile and torch.profiler's kernel list of the first two
recipes there, and every figure as profile.json.

`--without-plans` also times each recipe with call plans off (kernels/plans.py), in the same process.
`--launches` also lists each launch of calls issued back to back as a model step issues them (torch.profiler over
12 calls behind a head start of the GPU, the first quarter of the kernels left out): its median GPU time per call
and the median gap before it, beside cuDNN's, so that the pre-pass's share of a queued call and the GPU's idle
time between launches can be read apart.

Examples (the figures of results/kernels-h200.md's "Small shapes" section, then its pre-pass figures, then the call
plans' figures, then the launches of queued calls):
    python benchmarks/attend_profile.py --shapes short wan1.3b-480p \\
        --recipes sage2-int8 mxattention rotateattention-half \\
        --tune 'sage2-int8:{"NUM_STAGES": 2}' --tune 'mxattention:{"NUM_STAGES": 3}'
    python benchmarks/attend_profile.py --shapes ltx-video short-d64 cogvideox-5b wan1.3b-480p \\
        --recipes sage2-int8 mxattention rotateattention-half --prepass
    python benchmarks/attend_profile.py --shapes short short-d64 ltx-video cogvideox-5b wan1.3b-480p \\
        --recipes sage2-int8 --without-plans
    python benchmarks/attend_profile.py --shapes ltx-video short-d64 short wan1.3b-480p --recipes sage2-int8 \\
        --launches
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import cProfile
import io
import json
import os
import pstats
import statistics
import sys
import time

SMALL = ("short", "wan1.3b-480p", "wan2.2-5b-720p")


def _host_ms(fn, n: int = 5) -> float:
    import torch

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    host = (time.perf_counter() - t0) / n * 1e3
    torch.cuda.synchronize()
    return host


def _us(value: float | None) -> str:
    return f"{value:5.1f} µs" if value is not None else "    — µs"


def _first_launch_us(fn, n: int = 40) -> float | None:
    """Median µs from calling `fn` to its first launch through a compiled kernel's own launcher
    (`_launcher.run_compiled`, which every launch of a replayed call plan takes), each call after the GPU finished
    the last; None where no call launched that way (no plan)."""
    import torch

    from lowbit_video.kernels import _launcher

    marks, firsts = [], []
    run = _launcher.run_compiled

    def marked(*args):
        marks.append(time.perf_counter())
        return run(*args)

    _launcher.run_compiled = marked
    try:
        for _ in range(n):
            torch.cuda.synchronize()
            marks.clear()
            t0 = time.perf_counter()
            fn()
            if marks:
                firsts.append((marks[0] - t0) * 1e6)
    finally:
        _launcher.run_compiled = run
        torch.cuda.synchronize()
    return statistics.median(firsts) if firsts else None


def timeline_summary(kernels) -> dict:
    """(start µs, duration µs) of each GPU kernel of one call -> the kernel count, the GPU time (ms, the union of
    the kernels' intervals) and the span from the first start to the last end (ms)."""
    spans = sorted((float(a), float(a) + float(d)) for a, d in kernels)
    if not spans:
        return dict(kernels=0, gpu=0.0, span=0.0)
    busy, (lo, hi) = 0.0, spans[0]
    for a, b in spans[1:]:
        if a > hi:
            busy, lo = busy + hi - lo, a
        hi = max(hi, b)
    busy += hi - lo
    return dict(kernels=len(spans), gpu=busy / 1e3, span=(max(b for _, b in spans) - spans[0][0]) / 1e3)


def per_kernel(events, calls: int) -> list[tuple[str, float, float]]:
    """(name, launches per call, µs per call) of GPU kernels from (name, duration µs) events over `calls` calls,
    the longest first."""
    total = collections.defaultdict(lambda: [0.0, 0])
    for name, us in events:
        total[name][0] += float(us)
        total[name][1] += 1
    return sorted(((n, c / calls, t / calls) for n, (t, c) in total.items()), key=lambda row: -row[2])


def launch_rows(kernels) -> list[tuple[str, int, float, float]]:
    """(name, count, median µs, median gap µs before it) per kernel name, in the order of first appearance, from
    (name, start µs, duration µs) kernel events of calls issued back to back; the gap is from the end of the
    kernel before (the first event has none)."""
    spans = sorted((float(a), float(a) + float(d), name) for name, a, d in kernels)
    durs, gaps = {}, collections.defaultdict(list)
    for i, (a, b, name) in enumerate(spans):
        durs.setdefault(name, []).append(b - a)
        if i:
            gaps[name].append(a - spans[i - 1][1])
    return [(n, len(d), statistics.median(d), statistics.median(gaps[n]) if gaps[n] else 0.0)
            for n, d in durs.items()]


def _queued_launches(fn, calls: int = 12) -> list[tuple[str, int, float, float]]:
    """`launch_rows` of `calls` runs of `fn()` issued back to back behind a head start of the GPU (no host gap
    counts), the first quarter of the kernels left out (the queue filling)."""
    kernels = _cuda_kernels(fn, calls, head_start_cycles=3_000_000)
    events = sorted((e for e in kernels if e[2] > 0 and "sleep" not in e[0]), key=lambda e: e[1])
    return launch_rows(events[len(events) // 4:])


def _print_launches(label: str, rows) -> None:
    parts = (f"{name[:40]} {us:.1f} µs (x{n}, gap before {gap:.1f})" for name, n, us, gap in rows)
    print(f"{label}: " + "; ".join(parts), flush=True)


def _cuda_kernels(fn, calls: int = 1, head_start_cycles: int = 0) -> list[tuple[str, float, float]]:
    """(name, start µs, duration µs) of the GPU kernels of `calls` runs of `fn()` after one warm-up run, from
    torch.profiler's CUDA kernel events; head_start_cycles: the GPU spins that long first, so that the runs are
    queued ahead of it."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        if head_start_cycles:
            torch.cuda._sleep(head_start_cycles)
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    return [(e.name, e.time_range.start, e.time_range.elapsed_us()) for e in prof.events()
            if e.device_type.name == "CUDA"]


def _prepass_kernels(pre, calls: int = 10) -> list[tuple[str, float, float]]:
    """`per_kernel` of `calls` runs of the pre-pass `pre`."""
    return per_kernel(((name, us) for name, _, us in _cuda_kernels(pre, calls)), calls)


def _timeline(call) -> dict:
    """`timeline_summary` of one `call()` issued on an idle GPU."""
    return timeline_summary((start, us) for _, start, us in _cuda_kernels(call))


@contextlib.contextmanager
def _plans(on: bool):
    """Call plans as they are (on), or off for the block: no call records or replays one (kernels/plans.py)."""
    from lowbit_video.kernels import plans

    if on:
        yield
        return
    available = plans.available
    plans.available = lambda: False
    try:
        yield
    finally:
        plans.available = available


def _write_profiles(q, k, v, recipes, out: str) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from lowbit_video.attention import attend

    for r in recipes[:2]:
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(50):
            attend(q, k, v, r)
        pr.disable()
        torch.cuda.synchronize()
        s = io.StringIO()
        pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(25)
        with open(os.path.join(out, f"cprofile-{r}.txt"), "w") as fh:
            fh.write(s.getvalue())
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                attend(q, k, v, r)
            torch.cuda.synchronize()
        with open(os.path.join(out, f"kernels-{r}.txt"), "w") as fh:
            fh.write(prof.key_averages().table(sort_by="cuda_time_total", row_limit=30))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", nargs="+", default=list(SMALL), help="zoo shape names (default: the three smallest)")
    ap.add_argument("--recipes", nargs="+", default=["sage2-int8", "mxattention"], help="recipes to time")
    ap.add_argument("--tune", action="append", default=[], help='RECIPE:{"KEY": VALUE} kernel settings to time too')
    ap.add_argument("--prepass", action="store_true", help="also list each pre-pass's GPU kernels beside a copy of "
                    "Q, K and V")
    ap.add_argument("--without-plans", action="store_true", help="also time each recipe with call plans off "
                    "(every call through dispatch, pre-pass allocation and launch: kernels/plans.py)")
    ap.add_argument("--launches", action="store_true", help="also list each launch of calls issued back to back: "
                    "its GPU time per call and the gap before it, beside cuDNN's")
    ap.add_argument("--out", help="folder for profile.json and the profiles of the short shape")
    args = ap.parse_args(argv)

    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from lowbit_video.attention import attend
    from lowbit_video.bench.common import SHAPES, median_ms, queued_ms, shape_name
    from lowbit_video.kernels import plans
    from lowbit_video.kernels.launch import attention, split_call

    if not torch.cuda.is_available():
        print("error: attend_profile.py needs a CUDA GPU (none is visible)", file=sys.stderr)
        return 2
    try:
        shapes = [SHAPES[shape_name(s)] for s in args.shapes]
        tune = [(r, json.loads(cfg)) for r, _, cfg in (t.partition(":") for t in args.tune)]
    except (KeyError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.out:
        os.makedirs(args.out, exist_ok=True)
    rows = []
    for sh in shapes:
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (torch.randn(sh.batch, sh.heads, sh.tokens, sh.head_dim, device="cuda", dtype=torch.bfloat16,
                               generator=g) for _ in range(3))
        reps = 7 if sh.heads * sh.tokens ** 2 > 6e10 else 15

        def cudnn():
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v)

        c, cb = median_ms(cudnn, warmup=2, reps=reps), queued_ms(cudnn, reps=reps)
        print(f"{sh.name:15s} cudnn {c:8.3f} ms  queued {cb:8.3f}", flush=True)
        if args.launches:
            _print_launches(f"{sh.name:15s} cudnn launches, queued", _queued_launches(cudnn))
        if args.prepass:
            copy = lambda: (q.clone(), k.clone(), v.clone())  # noqa: E731
            copy()
            copy_us = queued_ms(copy, reps=20, head_start_cycles=2_000_000) * 1e3
            print(f"{sh.name:15s} copy of Q, K, V {copy_us:8.1f} µs ({2 * 3 * q.numel() * 2 / copy_us / 1e6:.2f} TB/s)",
                  flush=True)
        for r, planned in [(r, p) for r in args.recipes for p in ((True, False) if args.without_plans else (True,))]:
            label = r if planned else f"{r} (no plans)"
            call = lambda: attend(q, k, v, r)  # noqa: E731
            plans.clear()
            with _plans(planned):
                tot = median_ms(call, warmup=2, reps=reps)
                queued, host = queued_ms(call, reps=reps), _host_ms(call)
                # (without plans the pre-pass launches through Triton's own path, which the mark does not see)
                first = _first_launch_us(call) if planned else None
                tl = _timeline(call)
            kept = plans.PLANS.newest()
            plan = f"{kept.workspace_bytes / 2 ** 20:.0f} MiB" if kept is not None else "none"
            pre, kern, st = split_call(q, k, v, r)
            pm, km = median_ms(pre, warmup=1, reps=reps), median_ms(kern, warmup=1, reps=reps)
            rows.append(dict(shape=sh.name, recipe=r, plans=planned, plan=plan, cudnn=c, total=tot, queued=queued,
                             host=host, first_launch_us=first, pre=pm, kern=km, x=c / tot, x_queued=cb / queued,
                             kernel=st.kernel, **tl))
            if args.launches:
                with _plans(planned):
                    rows[-1]["launches"] = launches = _queued_launches(call)
                _print_launches(f"{sh.name:15s} {label} launches, queued", launches)
            print(f"{sh.name:15s} {label:22s} total {tot:8.3f} x{c / tot:5.2f} | queued {queued:8.3f} "
                  f"x{cb / queued:5.2f} | host {host:6.3f} first {_us(first)} | pre {pm:7.3f} kern {km:8.3f} "
                  f"({st.kernel}) | gpu {tl['gpu']:8.3f} span {tl['span']:8.3f} ({tl['kernels']} kernels) "
                  f"| plan {plan}", flush=True)
            if args.prepass:
                kernels = _prepass_kernels(pre)
                rows[-1].update(prepass_kernels=kernels, copy_us=copy_us)
                print(f"{sh.name:15s} {r:22s} pre-pass kernels {sum(us for _, _, us in kernels):7.1f} µs: " +
                      "; ".join(f"{n} {us:.1f}" + (f" (x{c:g})" if c != 1 else "") for n, c, us in kernels),
                      flush=True)
        for r, cfg in tune:
            if sh.name not in SMALL:
                continue
            pre, kern, st = split_call(q, k, v, r, config=cfg)
            km = median_ms(kern, warmup=1, reps=reps)
            tot = median_ms(lambda: attention(q, k, v, r, config=cfg), warmup=1, reps=reps)
            rows.append(dict(shape=sh.name, recipe=r, config=cfg, kern=km, total=tot, cudnn=c))
            print(f"{sh.name:15s} TUNE {r} {json.dumps(cfg)}: kern {km:8.3f} total {tot:8.3f} x{c / tot:5.2f}",
                  flush=True)
        if sh.name == "short" and args.out:
            _write_profiles(q, k, v, args.recipes, args.out)
        del q, k, v
        torch.cuda.empty_cache()
    if args.out:
        with open(os.path.join(args.out, "profile.json"), "w") as fh:
            json.dump(rows, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
