"""Summarise Nsight Compute raw CSVs (results/scripts/s7_ncu.sh) into one table: duration, SM clock, issue-slot
use, pipe utilisation (% of peak while the SM is active) and the leading warp-stall reasons (cycles per issued
instruction).

    python3 results/scripts/ncu_summary.py results/ncu/ncu_*.csv
"""
import csv
import re
import sys

PIPES = {"issue": "sm__issue_active.avg.pct_of_peak_sustained_active",
         "tensor": "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
         "fma": "sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active",
         "alu": "sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active",
         "xu": "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active",
         "fmaheavy": "sm__inst_executed_pipe_fmaheavy.avg.pct_of_peak_sustained_active"}


def load(path):
    rows = list(csv.reader(open(path)))
    hi = next(i for i, r in enumerate(rows) if r and r[0] == "ID")
    return dict(zip(rows[hi], rows[hi + 2])), dict(zip(rows[hi], rows[hi + 1]))


def num(s):
    try:
        return float(s.replace(",", ""))
    except (ValueError, AttributeError):
        return float("nan")


def summary(path):
    d, units = load(path)
    out = {"kernel": d.get("Kernel Name", "")[:32], "ms": num(d["gpu__time_duration.sum"]) / 1e6,
           "sm_mhz": num(d.get("sm__cycles_elapsed.avg.per_second", "nan")) * (1e3 if units.get(
               "sm__cycles_elapsed.avg.per_second") == "Ghz" else 1),
           "regs": d.get("launch__registers_per_thread"), "warps_active": num(d.get(
               "sm__warps_active.avg.per_cycle_active", "nan"))}
    for k, m in PIPES.items():
        if m not in d:  # tensor pipe names vary: take what the profile has
            alt = [c for c in d if k == "tensor" and re.match(r"sm__pipe_tensor_op_gmma.*cycles_active\.avg\.pct_of_peak_sustained_active", c)]
            m = alt[0] if alt else m
        out[k] = num(d.get(m, "nan"))
    stalls = {c.split("issue_stalled_")[1].split(".")[0]: num(v) for c, v in d.items()
              if c.startswith("smsp__average_warp_latency_issue_stalled_") and c.endswith(".ratio")}
    if not stalls:
        stalls = {c.split("issue_stalled_")[1].split("_per_warp")[0]: num(v) for c, v in d.items()
                  if c.startswith("smsp__average_warps_issue_stalled_") and c.endswith("_per_issue_active.ratio")}
    out["stalls"] = sorted(((v, k) for k, v in stalls.items() if v == v), reverse=True)[:6]
    return out


if __name__ == "__main__":
    print("| kernel | ms | SM MHz | regs | issue % | tensor % | FMA % | ALU % | XU % | top stalls (cycles per issue) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for p in sys.argv[1:]:
        s = summary(p)
        lab = re.sub(r"^ncu_|\.csv$", "", p.split("/")[-1])
        st = ", ".join(f"{k} {v:.2f}" for v, k in s["stalls"])
        print(f"| {lab} ({s['kernel']}) | {s['ms']:.3f} | {s['sm_mhz']:.0f} | {s['regs']} | {s['issue']:.1f} | "
              f"{s['tensor']:.1f} | {s['fma']:.1f} | {s['alu']:.1f} | {s['xu']:.1f} | {st} |")
