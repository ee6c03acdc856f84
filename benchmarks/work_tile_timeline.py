"""The timeline of one Gluon attention kernel call, work tile by work tile.

Each work tile (a program's 64·consumers query rows against every key tile) writes its SM id and its SM's cycle
counter at four points (kernels/gluon_ws.py `_trace_point`): its start, its first QKᵀ done, its key loop done, its
output stored; the start and the end also as the global timer. From them, per shape and recipe:

- prologue: start to the first QKᵀ (Q's and the first K tile's TMA loads, the first MMA);
- key loop: per key tile, from the first QKᵀ to the loop's end, divided by the key tiles;
- epilogue: the loop's end to the output stored (normalisation and the stores issued);
- gap: on one SM, from a work tile's end to the next one's start (the next program's launch there);
- fixed cost: prologue + epilogue + gap, in key tiles of that shape's key loop;
- tail: the kernel's span (first start to last end, global timer) against its SMs' mean busy time.

The traced call is launched behind a head start of the GPU (no host time in it), after untraced warm-up calls.
Cycles become µs at the clock the SM counter ran at over the call (cycles over global-timer nanoseconds).

    python benchmarks/work_tile_timeline.py --shapes short --shapes wan14b-720p --recipes sage2-int8

Needs a CUDA device of sm_90 with triton (the Gluon kernel).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

SLOTS = ("sm", "global_start_ns", "start", "first_qk", "loop_end", "end", "global_end_ns")


def summarize(records, n_tiles: int) -> dict:
    """records: one dict per work tile and warpgroup with SLOTS' keys (cycles, global-timer ns), n_tiles key tiles
    per work tile -> the timeline's figures (µs, the clock in MHz, per-SM counts). Pure arithmetic (CPU-tested)."""
    span_ns = max(r["global_end_ns"] for r in records) - min(r["global_start_ns"] for r in records)
    cycles = sum(r["end"] - r["start"] for r in records)
    ns = sum(r["global_end_ns"] - r["global_start_ns"] for r in records)
    mhz = cycles / ns * 1e3 if ns > 0 else float("nan")
    us = 1.0 / mhz  # µs per cycle

    def med(values):
        return statistics.median(values) * us

    prologue = med([r["first_qk"] - r["start"] for r in records])
    per_tile = med([(r["loop_end"] - r["first_qk"]) / n_tiles for r in records])
    epilogue = med([r["end"] - r["loop_end"] for r in records])
    # a work tile (one program) runs from its first warpgroup's start to its last one's end, on one SM
    tiles: dict[int, dict] = {}
    for r in records:
        t = tiles.setdefault(r["tile"], dict(sm=r["sm"], start=r["start"], end=r["end"], gend=r["global_end_ns"]))
        t.update(start=min(t["start"], r["start"]), end=max(t["end"], r["end"]),
                 gend=max(t["gend"], r["global_end_ns"]))
    by_sm: dict[int, list] = {}
    for t in tiles.values():
        by_sm.setdefault(t["sm"], []).append(t)
    gaps, busy, last_end = [], [], []
    for seq in by_sm.values():
        seq.sort(key=lambda t: t["start"])
        busy.append(sum(t["end"] - t["start"] for t in seq) * us)
        gaps += [(b["start"] - a["end"]) * us for a, b in zip(seq, seq[1:])]
        last_end.append(max(t["gend"] for t in seq))
    gap = statistics.median(gaps) if gaps else 0.0
    span_us = span_ns / 1e3
    counts = [len(t) for t in by_sm.values()]
    return {
        "clock_mhz": mhz, "span_us": span_us, "sms": len(by_sm), "work_tiles": len(tiles),
        "tiles_per_sm_min": min(counts), "tiles_per_sm_max": max(counts), "key_tiles": n_tiles,
        "prologue_us": prologue, "key_tile_us": per_tile, "epilogue_us": epilogue, "gap_us": gap,
        "fixed_key_tiles": (prologue + epilogue + gap) / per_tile if per_tile > 0 else float("nan"),
        "busy_share": statistics.fmean(busy) / span_us if span_us > 0 else float("nan"),
        "tail_us": (max(last_end) - min(last_end)) / 1e3,
    }


def records_of(trace) -> list[dict]:
    """The traced buffer (work tiles, warpgroups, 8) int64 as one dict per work tile and warpgroup."""
    rows = trace.cpu().tolist()
    return [dict(tile=w, wg=g, **dict(zip(SLOTS, slots))) for w, per_wg in enumerate(rows)
            for g, slots in enumerate(per_wg)]


def trace_call(shape: str, recipe: str, seed: int = 0, warmup: int = 3) -> dict:
    """One traced kernel call of `recipe` at bench shape `shape` (randn bf16 inputs, as `bench kernels`)."""
    import torch
    import triton

    from lowbit_video.bench.common import SHAPES, shape_name
    from lowbit_video.kernels.dispatch import attention_spec, merged_config, variant_of
    from lowbit_video.kernels.gluon_ws import BLOCK_N, TRACE_SLOTS, work_tiles
    from lowbit_video.kernels.launch import split_call

    sh = SHAPES[shape_name(shape)]
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(seed)
    q, k, v = (torch.randn(sh.batch, sh.heads, sh.tokens, sh.head_dim, device=dev, dtype=torch.bfloat16,
                           generator=g) for _ in range(3))
    spec = attention_spec(recipe)
    cfg = merged_config(variant_of(spec).name, sh.head_dim, None, spec.placement)
    if not cfg.get("GLUON"):
        raise SystemExit(f"{recipe} does not run the Gluon kernel at head_dim {sh.head_dim}")
    consumers = cfg.get("CONSUMERS", 2)
    n_work = work_tiles(sh.tokens, sh.batch * sh.heads, consumers)
    _, kernel, _ = split_call(q, k, v, spec)
    trace = torch.zeros(n_work, consumers, TRACE_SLOTS, dtype=torch.int64, device=dev)
    plain = kernel()
    for _ in range(warmup):  # the traced kernel compiled and warm too
        kernel(trace=trace)
        kernel()
    torch.cuda.synchronize()
    torch.cuda._sleep(1_000_000)  # the host queues the call ahead of the GPU: no host time in the timeline
    traced = kernel(trace=trace)
    torch.cuda.synchronize()
    if not torch.equal(plain, traced):
        raise SystemExit(f"{recipe} at {shape}: the traced call's output differs from the plain call's")
    out = summarize(records_of(trace), triton.cdiv(sh.tokens, BLOCK_N))
    out.update(shape=sh.name, recipe=recipe, consumers=consumers)
    return out


COLUMNS = (("shape", "{}"), ("recipe", "{}"), ("clock_mhz", "{:.0f}"), ("work_tiles", "{}"),
           ("tiles_per_sm_max", "{}"), ("key_tiles", "{}"), ("prologue_us", "{:.2f}"), ("key_tile_us", "{:.3f}"),
           ("epilogue_us", "{:.2f}"), ("gap_us", "{:.2f}"), ("fixed_key_tiles", "{:.1f}"), ("busy_share", "{:.3f}"),
           ("tail_us", "{:.1f}"), ("span_us", "{:.0f}"))


def to_markdown(rows) -> str:
    head = "| " + " | ".join(c for c, _ in COLUMNS) + " |"
    lines = [head, "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(f.format(r[c]) for c, f in COLUMNS) + " |" for r in rows]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", action="append", required=True, help="bench shape names (repeat)")
    ap.add_argument("--recipes", action="append", default=None, help="recipe names (repeat; default sage2-int8)")
    ap.add_argument("--repeat", type=int, default=3, help="traced calls per shape and recipe; the figures of each")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("error: needs a CUDA device (sm_90)", file=sys.stderr)
        return 2
    rows = [trace_call(s, r) for s in args.shapes for r in (args.recipes or ["sage2-int8"])
            for _ in range(args.repeat)]
    print(json.dumps(rows, indent=1) if args.json else to_markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
