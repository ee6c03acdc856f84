"""Summarise the Nsight Compute raw CSVs (results/scripts/s7_ncu.sh; stored gzipped in results/ncu/)
into one table: duration, warp instructions, issue-slot use, tensor-pipe use, warps per scheduler and the leading
warp-stall reasons (cycles per issued instruction, per warp), plus the time the kernel would take at 100 % issue.

    python3 results/scripts/ncu_summary.py results/ncu/ncu_*.csv.gz
"""
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


def load(path):
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        rows = list(csv.reader(f))
    hi = next(i for i, r in enumerate(rows) if r and r[0] == "ID")
    return dict(zip(rows[hi], rows[hi + 2]))


def num(s):
    return float(str(s).replace(",", ""))


def summary(path):
    d = load(path)
    s = {"label": re.sub(r"^ncu_|\.csv(\.gz)?$", "", path.split("/")[-1]), "kernel": d["Kernel Name"][:30],
         "ms": num(d["gpu__time_duration.sum"]) / 1e6, "mhz": num(d["sm__cycles_elapsed.avg.per_second"]) / 1e6,
         "inst": num(d[INST]), "issue": num(d[ISSUE]), "tensor": num(d[TENSOR]), "xu": num(d[XU]),
         "warps": num(d[WARPS]), "regs": d["launch__registers_per_thread"]}
    # at 100 % issue: the same instructions, every scheduler issuing one per cycle
    s["ms_full_issue"] = s["ms"] * s["issue"] / 100
    stalls = {m.group(1): num(v) for c, v in d.items() if (m := STALL.fullmatch(c)) and v not in ("", "n/a")}
    s["stalls"] = sorted(((v, k) for k, v in stalls.items() if k != "selected"), reverse=True)[:4]
    return s


if __name__ == "__main__":
    print("| kernel | ms | warp instr. (1e9) | issue % | ms at 100 % issue | tensor pipe % | XU % | warps/scheduler "
          "| regs | top stalls (cycles per issue) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    clocks = set()
    for p in sys.argv[1:]:
        s = summary(p)
        clocks.add(round(s["mhz"]))
        st = ", ".join(f"{k} {v:.2f}" for v, k in s["stalls"])
        print(f"| {s['label']} (`{s['kernel']}`) | {s['ms']:.2f} | {s['inst'] / 1e9:.2f} | {s['issue']:.0f} | "
              f"{s['ms_full_issue']:.2f} | {s['tensor']:.0f} | {s['xu']:.0f} | {s['warps']:.1f} | {s['regs']} | {st} |")
    print(f"\nSM clock under ncu (its default clock control): {min(clocks)}–{max(clocks)} MHz")
