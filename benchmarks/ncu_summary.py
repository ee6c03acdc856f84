"""Summarise Nsight Compute raw-page CSVs (`ncu --set full --page raw --csv`, e.g. of benchmarks/ncu_target.py;
plain or gzipped) into one markdown table: duration, warp instructions, issue-slot use, tensor-pipe and XU use,
warps per scheduler, registers, the leading warp-stall reasons (cycles per issued instruction, per warp), and the
time the kernel would take at 100 % issue (same instructions, every scheduler issuing one per cycle). A kernel
whose time at 100 % issue is close to its time while the tensor pipe is far from busy is issue-bound.

Example:
    python benchmarks/ncu_summary.py ncu_sdpa-cudnn.csv ncu_mx-gluon.csv ncu_sage-gluon.csv
"""

from __future__ import annotations

import argparse
import csv
import gzip
import re
import sys

ISSUE = "smsp__issue_active.avg.pct_of_peak_sustained_active"
TENSOR = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"
XU = "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active"
INST = "smsp__inst_executed.sum"
WARPS = "smsp__warps_active.avg.per_cycle_active"
STALL = re.compile(r"smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio")


def load(path: str) -> dict:
    """The first profiled kernel's metrics {column: value} of an ncu raw-page CSV."""
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        rows = list(csv.reader(f))
    try:
        hi = next(i for i, r in enumerate(rows) if r and r[0] == "ID")
    except StopIteration:
        raise ValueError(f"{path}: no ncu raw-page header (a row starting with ID)") from None
    if len(rows) < hi + 3:
        raise ValueError(f"{path}: no profiled kernel in the file")
    return dict(zip(rows[hi], rows[hi + 2]))  # row hi + 1 holds the units


def num(s) -> float:
    return float(str(s).replace(",", ""))


def summary(path: str) -> dict:
    d = load(path)
    s = {"label": re.sub(r"^ncu_|\.csv(\.gz)?$", "", path.split("/")[-1]), "kernel": d["Kernel Name"][:30],
         "ms": num(d["gpu__time_duration.sum"]) / 1e6, "mhz": num(d["sm__cycles_elapsed.avg.per_second"]) / 1e6,
         "inst": num(d[INST]), "issue": num(d[ISSUE]), "tensor": num(d[TENSOR]), "xu": num(d[XU]),
         "warps": num(d[WARPS]), "regs": d["launch__registers_per_thread"]}
    s["ms_full_issue"] = s["ms"] * s["issue"] / 100
    stalls = {m.group(1): num(v) for c, v in d.items() if (m := STALL.fullmatch(c)) and v not in ("", "n/a")}
    s["stalls"] = sorted(((v, k) for k, v in stalls.items() if k != "selected"), reverse=True)[:4]
    return s


def to_markdown(summaries: list[dict]) -> str:
    lines = ["| kernel | ms | warp instr. (1e9) | issue % | ms at 100 % issue | tensor pipe % | XU % | warps/scheduler "
             "| regs | top stalls (cycles per issue) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for s in summaries:
        st = ", ".join(f"{k} {v:.2f}" for v, k in s["stalls"])
        lines.append(f"| {s['label']} (`{s['kernel']}`) | {s['ms']:.2f} | {s['inst'] / 1e9:.2f} | {s['issue']:.0f} | "
                     f"{s['ms_full_issue']:.2f} | {s['tensor']:.0f} | {s['xu']:.0f} | {s['warps']:.1f} | {s['regs']} | {st} |")
    clocks = [round(s["mhz"]) for s in summaries]
    lines += ["", f"SM clock under ncu (its default clock control): {min(clocks)}–{max(clocks)} MHz"]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", nargs="+", help="ncu raw-page CSV files (.csv or .csv.gz); the label is the file name")
    args = ap.parse_args(argv)
    try:
        print(to_markdown([summary(p) for p in args.csv]))
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
