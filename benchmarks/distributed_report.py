"""Measure `lowbit-video generate` on N processes against one process: a sharded sweep and context parallelism.

    python benchmarks/distributed_report.py --nproc 2 [--device cuda] [--model M --model-path P] [grid options]

Two parts, each run as fresh `generate` commands into folders under --work (which must be new or empty, so
that every run is generated and timed rather than skipped), with the child's output in <work>/<part>.log:

1. sharded sweep: the grid (--recipe x --prompts/--prompt x --seeds, at --steps) once in one process and once
   under `torchrun --standalone --nproc-per-node N -m lowbit_video generate`. Every run's frames_sha256
   (meta.json) is compared between the two folders: runs equal bit for bit, runs missing or differing, the
   wall time of each command (process start, model load and every run) and the speed-up.
2. context parallelism: one prompt and seed (--cp-prompt, default the grid's first prompt and seed) with each
   --cp-recipe, in one process and under torchrun with `--context-parallel MODE --cp-degree N` for each
   --cp-mode. Per recipe: the transformer time per denoising step from meta.json's timings (the mean over
   the steps, leaving out the first step and the first quantized step, which absorb one-time costs, unless no
   other step is left: benchmarks/generate_report.py's "mean step"), the speed-up over one process, and the
   frames against the one-process run (bit-equal or not, the largest absolute difference in uint8 levels, PSNR
   in dB with lowbit_video.metrics.paired.psnr, which scores identical frames at its finite cap). Ulysses should be
   bit-equal; ring differs by float rounding (fp16) or by the recipe's own quantization noise.

Devices: --device cuda runs one GPU per rank with NCCL (the child environment sets NCCL_NVLS_ENABLE=0: NVLink
multicast can take GPUs on shared hosts out of service); --device cpu runs gloo ranks; auto (the default)
takes cuda when at least N GPUs are visible. The markdown report (--out; results/distributed-h200.md by
default on CUDA, <work>/report.md on CPU) opens with the command that made it, then the hardware, the
commands run and the tables; every figure in it is measured by that invocation. --json prints the figures.

Example on a machine with 2 GPUs (a full-size random-weight Wan2.1-1.3B, no download):

    python benchmarks/make_random_checkpoint.py --model wan2.1-t2v-1.3b --out /data/wan13-random
    python benchmarks/distributed_report.py --nproc 2 --device cuda --model wan2.1-t2v-1.3b \\
        --model-path /data/wan13-random --recipe fp16 --recipe mxattention --seeds 0 1 --steps 4 \\
        --work runs/distributed-h200
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
for _p in (str(REPO), str(HERE)):  # the repository's own package and generate_report beside this script
    if _p not in sys.path:
        sys.path.insert(0, _p)

import numpy as np  # noqa: E402

from generate_report import rows as step_rows  # noqa: E402
from lowbit_video import runstore, video_io  # noqa: E402
from lowbit_video.errors import UserError  # noqa: E402

CP_MODES = ("ulysses", "ring")
CP_RECIPES = ("fp16", "sage2-int8", "mxattention")
PARTS = ("sharded", "context-parallel")
CUDA_OUT = "results/distributed-h200.md"


# ------------------------------------------------------------------------------------------- comparing


def _runs(root: Path) -> dict[str, dict]:
    """{run folder relative to root: its meta.json} of every complete run under root."""
    return {str(p.relative_to(root)): runstore.read_meta(p) for p in runstore.iter_runs(root)}


def compare_sharded(one: Path, many: Path) -> dict:
    """Runs of the one-process folder against the torchrun folder, by frames_sha256."""
    a, b = _runs(one), _runs(many)
    both = sorted(set(a) & set(b))
    equal = [k for k in both if a[k].get("frames_sha256") and a[k]["frames_sha256"] == b[k].get("frames_sha256")]
    return {"runs_one": len(a), "runs_many": len(b), "equal": len(equal),
            "differing": sorted(set(both) - set(equal)),
            "only_one": sorted(set(a) - set(b)), "only_many": sorted(set(b) - set(a))}


def _frames(run: Path) -> np.ndarray:
    return video_io.read_frames_npz(run / "frames.npz")


def compare_context_parallel(single: Path, parallel: Path) -> list[dict]:
    """One row per run of the context-parallel folder: step times (one process, parallel), speed-up and
    the frames against the same run made by one process."""
    from lowbit_video.metrics.paired import psnr

    steps_single = {(r["model"], r["recipe"]): r for r in step_rows(single)}
    steps_parallel = {(r["model"], r["recipe"]): r for r in step_rows(parallel)}
    out = []
    for rel, meta in _runs(parallel).items():
        ref = single / rel
        if not runstore.is_complete(ref):
            raise UserError(f"{ref}: no complete one-process run to compare {parallel / rel} with")
        key = (meta["model"]["name"], meta["recipe"]["name"])
        s1 = (steps_single.get(key) or {}).get("mean_step_s")
        sn = (steps_parallel.get(key) or {}).get("mean_step_s")
        a, b = _frames(parallel / rel), _frames(ref)
        same_shape = a.shape == b.shape
        diff = np.abs(a.astype(np.int16) - b.astype(np.int16)) if same_shape else None
        out.append({"model": key[0], "recipe": key[1], "run": rel,
                    "mode": ((meta.get("distributed") or {}).get("context_parallel") or {}).get("mode"),
                    "step_s_single": s1, "step_s_parallel": sn,
                    "speedup": round(s1 / sn, 3) if s1 and sn else None,
                    "bit_equal": bool(same_shape and not diff.any()),
                    "max_abs": int(diff.max()) if same_shape else None,
                    "psnr_db": round(psnr(a, b), 2) if same_shape else None})
    return sorted(out, key=lambda r: (r["recipe"] != "fp16", r["recipe"]))


# ------------------------------------------------------------------------------------------- tables


def _sec(v) -> str:
    return "" if v is None else f"{v:.2f}"


def sharded_table(nproc: int, cmp: dict, wall_one: float, wall_many: float) -> str:
    lines = ["| processes | runs made | wall time (s) | speed-up |", "|---|---|---|---|",
             f"| 1 | {cmp['runs_one']} | {wall_one:.1f} | 1.00× |",
             f"| {nproc} (torchrun) | {cmp['runs_many']} | {wall_many:.1f} | {wall_one / wall_many:.2f}× |"]
    verdict = (f"Runs equal bit for bit (frames_sha256): **{cmp['equal']} of {cmp['runs_one']}**; "
               f"differing: {len(cmp['differing'])}; only in one process: {len(cmp['only_one'])}; "
               f"only under torchrun: {len(cmp['only_many'])}.")
    listed = [f"- differs: `{k}`" for k in cmp["differing"]] + [f"- only in one process: `{k}`" for k in cmp["only_one"]] \
        + [f"- only under torchrun: `{k}`" for k in cmp["only_many"]]
    return "\n".join([*lines, "", verdict, *listed])


def cp_table(rows: list[dict], walls: dict[str, float]) -> str:
    lines = ["| mode | recipe | step, 1 process (s) | step, parallel (s) | speed-up | frames vs 1 process "
             "| max abs diff (uint8 levels) | PSNR (dB) |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        x = "" if r["speedup"] is None else f"{r['speedup']:.2f}×"
        lines.append(f"| {r['mode']} | {r['recipe']} | {_sec(r['step_s_single'])} | {_sec(r['step_s_parallel'])} "
                     f"| {x} | {'bit-equal' if r['bit_equal'] else 'differ'} | {r['max_abs']} | {r['psnr_db']} |")
    walls_line = "Wall time of each command (s): " + ", ".join(f"{k} {v:.1f}" for k, v in walls.items()) + "."
    return "\n".join([*lines, "", walls_line])


def markdown(report: dict) -> str:
    n, hw = report["nproc"], report["hardware"]
    parts = [f"# {n} processes against one: sharded generate and context parallelism ({hw['backend']})", "",
             f"Command: `{report['command']}`", "",
             f"Hardware: {hw['summary']}. Measured {report['date']}.", ""]
    if "sharded" in report:
        s = report["sharded"]
        parts += ["## Sharded sweep", "", "```bash", *s["commands"], "```", "",
                  sharded_table(n, s["compare"], s["wall_s_one"], s["wall_s_many"]), ""]
    if "context_parallel" in report:
        c = report["context_parallel"]
        parts += ["## Context parallelism", "",
                  "Step: transformer seconds per denoising step from meta.json, the mean over the steps after the first "
                  "and the first quantized one (over every step when no other is left). PSNR of identical frames is "
                  "the metric's finite cap.", "",
                  "```bash", *c["commands"], "```", "", cp_table(c["rows"], c["wall_s"]), ""]
    return "\n".join(parts)


# ------------------------------------------------------------------------------------------- running


def hardware(device: str, nproc: int) -> dict:
    import torch

    if device == "cuda":
        names = sorted({torch.cuda.get_device_name(i) for i in range(nproc)})
        nccl = ".".join(map(str, torch.cuda.nccl.version()))
        return {"backend": "NCCL", "summary": f"{nproc} × {', '.join(names)} (NCCL {nccl}, NCCL_NVLS_ENABLE=0), "
                                              f"torch {torch.__version__}, CUDA {torch.version.cuda}"}
    return {"backend": "gloo", "summary": f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} "
                                          f"cores visible), {nproc} gloo ranks, torch {torch.__version__}"}


def resolve_device(requested: str, nproc: int) -> str:
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if requested == "auto":
        return "cuda" if gpus >= nproc else "cpu"
    if requested == "cuda" and gpus < nproc:
        raise UserError(f"--device cuda --nproc {nproc}: {gpus} GPU(s) visible, need one per process")
    return requested


def _shown(cmd: list[str]) -> str:
    """A command as a reader would type it."""
    words = list(cmd)
    if words[:3] == [sys.executable, "-m", "torch.distributed.run"]:
        words = ["torchrun", *words[3:]]
    elif words[:3] == [sys.executable, "-m", "lowbit_video"]:
        words = ["lowbit-video", *words[3:]]
    return shlex.join(words)


def run_timed(cmd: list[str], log: Path, env: dict) -> float:
    """Run `cmd` in the repository with its output appended to `log`; wall seconds. UserError when it fails."""
    print(f"  $ {_shown(cmd)}", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    with open(log, "a", encoding="utf-8") as f:
        f.write(f"$ {_shown(cmd)}\n")
        f.flush()
        rc = subprocess.run(cmd, cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT).returncode
    wall = time.perf_counter() - t0
    if rc != 0:
        tail = [ln for ln in log.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()][-1:]
        raise UserError(f"`{_shown(cmd)}` exited {rc} (see {log}): {tail[0] if tail else ''}")
    print(f"    {wall:.1f} s", file=sys.stderr, flush=True)
    return wall


def child_env(device: str) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
           "PYTHONUNBUFFERED": "1"}
    if device == "cuda":
        env["NCCL_NVLS_ENABLE"] = "0"
    return env


def generate_cmd(nproc: int, args: list[str], out: Path) -> list[str]:
    head = [sys.executable, "-m", "lowbit_video"] if nproc == 1 else \
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc), "-m",
         "lowbit_video"]
    return [*head, "generate", *args, "--out", str(out)]


def common_args(a: argparse.Namespace, device: str) -> list[str]:
    out = ["--model", a.model, "--device", device]
    for flag in ("model_path", "steps", "height", "width", "frames", "guidance"):
        v = getattr(a, flag)
        if v is not None:
            out += [f"--{flag.replace('_', '-')}", str(v)]
    return out


def first_prompt(a: argparse.Namespace) -> str:
    if a.cp_prompt:
        return a.cp_prompt
    if a.prompt:
        return a.prompt[0]
    from lowbit_video.generate import read_plain_prompts, resolve_prompts_file

    prompts = read_plain_prompts(resolve_prompts_file(a.prompts))
    if not prompts:
        raise UserError(f"prompts file {a.prompts}: no prompts")
    return prompts[0]


class _OneLineErrors(argparse.ArgumentParser):
    """argparse, with a bad option reported as one `error: ...` line (exit 2) instead of usage + error."""

    def error(self, message: str):
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)


def parser() -> argparse.ArgumentParser:
    doc = __doc__.split("\n\n")
    ap = _OneLineErrors(prog="python benchmarks/distributed_report.py", description=doc[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog="\n\n".join(doc[1:]))
    ap.add_argument("--nproc", type=int, default=2, help="processes (GPUs on CUDA) under torchrun (default 2)")
    ap.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto",
                    help="cuda: one GPU per rank, NCCL; cpu: gloo; auto: cuda when --nproc GPUs are visible")
    ap.add_argument("--model", default="tiny-shapes", help="model name (default tiny-shapes)")
    ap.add_argument("--model-path", help="diffusers checkpoint folder, e.g. from benchmarks/make_random_checkpoint.py")
    ap.add_argument("--recipe", action="append", help="recipe of the sharded grid; repeat (default fp16 mxattention)")
    ap.add_argument("--prompts", default="prompts/smoke.txt", help="prompt file of the grid (default prompts/smoke.txt)")
    ap.add_argument("--prompt", action="append", help="prompt text instead of --prompts; repeat")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0], help="seeds of the grid (default 0)")
    ap.add_argument("--steps", type=int, help="denoising steps (default: the model's)")
    ap.add_argument("--height", type=int, help="frame height (default: the model's)")
    ap.add_argument("--width", type=int, help="frame width (default: the model's)")
    ap.add_argument("--frames", type=int, help="frames per clip (default: the model's)")
    ap.add_argument("--guidance", type=float, help="classifier-free guidance scale (default: the model's)")
    ap.add_argument("--cp-recipe", action="append",
                    help=f"recipe of the context-parallel part; repeat (default {' '.join(CP_RECIPES)})")
    ap.add_argument("--cp-mode", action="append", choices=CP_MODES, help="context-parallel mode; repeat (default both)")
    ap.add_argument("--cp-prompt", help="the context-parallel prompt (default: the grid's first prompt)")
    ap.add_argument("--only", choices=PARTS, help="run one part only (default both)")
    ap.add_argument("--work", default="runs/distributed-report",
                    help="new or empty folder for the runs and logs (default runs/distributed-report)")
    ap.add_argument("--out", help=f"markdown report (default {CUDA_OUT} on CUDA, <work>/report.md on CPU)")
    ap.add_argument("--json", action="store_true", help="also print the figures as one JSON object on stdout")
    return ap


def check_args(a: argparse.Namespace) -> None:
    if a.nproc < 2:
        raise UserError(f"--nproc {a.nproc}: need at least 2 processes to compare with one")
    for flag in ("steps", "height", "width", "frames"):
        v = getattr(a, flag)
        if v is not None and v < 1:
            raise UserError(f"--{flag} {v}: must be at least 1")
    if a.model_path is not None and not Path(a.model_path).is_dir():
        raise UserError(f"--model-path {a.model_path}: no such folder")
    work = Path(a.work)
    if work.exists() and (not work.is_dir() or any(work.iterdir())):
        raise UserError(f"--work {work}: exists and is not an empty folder (complete runs there would be skipped, "
                        "not timed); give a new folder")


def measure(a: argparse.Namespace, argv: list[str]) -> dict:
    check_args(a)
    device = resolve_device(a.device, a.nproc)
    work, env, base = Path(a.work), child_env(device), common_args(a, device)
    out = Path(a.out or (CUDA_OUT if device == "cuda" else work / "report.md"))
    cp_prompt = first_prompt(a) if a.only != "sharded" else None
    work.mkdir(parents=True, exist_ok=True)
    report = {"command": shlex.join(["python", "benchmarks/distributed_report.py", *argv]), "nproc": a.nproc,
              "device": device, "hardware": hardware(device, a.nproc),
              "date": time.strftime("%Y-%m-%d", time.gmtime())}

    if a.only in (None, "sharded"):
        print("sharded sweep: one process, then torchrun", file=sys.stderr)
        grid = [*base, *[w for r in (a.recipe or ["fp16", "mxattention"]) for w in ("--recipe", r)],
                *([w for p in a.prompt for w in ("--prompt", p)] if a.prompt else ["--prompts", a.prompts]),
                "--seeds", *map(str, a.seeds)]
        one, many = generate_cmd(1, grid, work / "sharded-1"), generate_cmd(a.nproc, grid, work / f"sharded-{a.nproc}")
        log = work / "sharded.log"
        wall_one, wall_many = run_timed(one, log, env), run_timed(many, log, env)
        report["sharded"] = {"commands": [_shown(one), _shown(many)], "wall_s_one": round(wall_one, 2),
                             "wall_s_many": round(wall_many, 2), "speedup": round(wall_one / wall_many, 3),
                             "compare": compare_sharded(work / "sharded-1", work / f"sharded-{a.nproc}")}

    if a.only in (None, "context-parallel"):
        print("context parallelism: one process, then each mode", file=sys.stderr)
        cp = [*base, *[w for r in (a.cp_recipe or CP_RECIPES) for w in ("--recipe", r)],
              "--prompt", cp_prompt, "--seeds", str(a.seeds[0])]
        log, single = work / "context-parallel.log", work / "cp-1"
        cmds = [generate_cmd(1, cp, single)]
        walls = {"1 process": run_timed(cmds[0], log, env)}
        rows = []
        for mode in a.cp_mode or CP_MODES:
            cmds.append(generate_cmd(a.nproc, [*cp, "--context-parallel", mode, "--cp-degree", str(a.nproc)],
                                     work / f"cp-{mode}"))
            walls[mode] = run_timed(cmds[-1], log, env)
            rows += compare_context_parallel(single, work / f"cp-{mode}")
        report["context_parallel"] = {"commands": [_shown(c) for c in cmds],
                                      "wall_s": {k: round(v, 2) for k, v in walls.items()}, "rows": rows}

    out.parent.mkdir(parents=True, exist_ok=True)
    runstore.atomic_write_bytes(out, markdown(report).encode("utf-8"))
    report["out"] = str(out)
    print(f"wrote {out}", file=sys.stderr)
    return report


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    a = parser().parse_args(argv)
    try:
        report = measure(a, argv)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if a.json:
        print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
