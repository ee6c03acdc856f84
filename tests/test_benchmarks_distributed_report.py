"""benchmarks/distributed_report.py: the comparisons and tables on run folders made here (no torchrun), the
report's layout, and one-line errors for bad input. The torchrun measurement itself is run by hand
(docs/distributed.md)."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmark_scripts import load

from lowbit_video import video_io

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "benchmarks" / "distributed_report.py"


def _load():
    return load("distributed_report")


def _run(root: Path, recipe: str, seed: int, frames: np.ndarray, steps=(1.0,), mode=None) -> Path:
    d = root / "tiny-shapes" / recipe / "a-prompt-0123456789" / f"seed-{seed}"
    d.mkdir(parents=True)
    video_io.write_frames_npz(frames, d / "frames.npz")
    meta = {"model": {"name": "tiny-shapes"}, "recipe": {"name": recipe}, "seed": seed,
            "frames_sha256": video_io.frames_sha256(frames), "files": {"frames": "frames.npz"},
            "timings": {"sample_s": sum(steps), "transformer_s_per_step": list(steps)},
            "attention_calls": {"by_step": {str(i): {"quantized": recipe != "fp16"} for i in range(len(steps))}},
            "distributed": {"context_parallel": {"mode": mode, "degree": 2} if mode else None}}
    (d / "meta.json").write_text(json.dumps(meta))
    return d


def _clip(value: int = 100) -> np.ndarray:
    return np.full((2, 8, 8, 3), value, dtype=np.uint8)


def test_sharded_comparison_counts_equal_differing_and_missing_runs(tmp_path):
    m = _load()
    one, many = tmp_path / "one", tmp_path / "many"
    for seed in (0, 1, 2):
        _run(one, "fp16", seed, _clip())
    _run(many, "fp16", 0, _clip())          # the same frames
    _run(many, "fp16", 1, _clip(101))       # one level brighter: a different sha256
    _run(many, "fp16", 3, _clip())          # a run one process never made
    cmp = m.compare_sharded(one, many)
    assert (cmp["runs_one"], cmp["runs_many"], cmp["equal"]) == (3, 3, 1)
    assert [Path(k).name for k in cmp["differing"]] == ["seed-1"]
    assert [Path(k).name for k in cmp["only_one"]] == ["seed-2"]
    assert [Path(k).name for k in cmp["only_many"]] == ["seed-3"]
    table = m.sharded_table(2, cmp, wall_one=30.0, wall_many=20.0)
    assert "| 1 | 3 | 30.0 | 1.00× |" in table and "| 2 (torchrun) | 3 | 20.0 | 1.50× |" in table
    assert "**1 of 3**" in table and "differing: 1" in table


def test_context_parallel_rows_step_times_difference_and_psnr(tmp_path):
    m = _load()
    single, ring = tmp_path / "cp-1", tmp_path / "cp-ring"
    base = _clip()
    changed = base.copy()
    changed[1, 3, 4, 0] += 3  # one channel of one pixel of the second frame, 3 levels
    # first step left out (one-time costs): one process 2.0 s per step, two ranks 0.8 s
    _run(single, "fp16", 0, base, steps=(9.0, 2.0, 2.0))
    _run(single, "mxattention", 0, base, steps=(9.0, 4.0, 4.0))
    _run(ring, "fp16", 0, base, steps=(5.0, 0.8, 0.8), mode="ring")
    _run(ring, "mxattention", 0, changed, steps=(5.0, 2.0, 2.0), mode="ring")
    rows = {r["recipe"]: r for r in m.compare_context_parallel(single, ring)}
    fp, mx = rows["fp16"], rows["mxattention"]
    assert (fp["mode"], fp["step_s_single"], fp["step_s_parallel"], fp["speedup"]) == ("ring", 2.0, 0.8, 2.5)
    assert fp["bit_equal"] and fp["max_abs"] == 0
    cap = 10 * math.log10(8 * 8 * 3 * 255 ** 2)   # identical frames score the metric's cap
    assert fp["psnr_db"] == pytest.approx(cap, abs=0.01)
    assert not mx["bit_equal"] and mx["max_abs"] == 3 and mx["speedup"] == 2.0
    mse = (3 / 255) ** 2 / (8 * 8 * 3)
    assert mx["psnr_db"] == pytest.approx((cap + 10 * math.log10(1 / mse)) / 2, abs=0.01)
    table = m.cp_table(list(rows.values()), {"1 process": 12.0, "ring": 7.5})
    assert "| ring | mxattention | 4.00 | 2.00 | 2.00× | differ | 3 |" in table
    assert "| ring | fp16 | 2.00 | 0.80 | 2.50× | bit-equal | 0 |" in table
    assert "1 process 12.0, ring 7.5" in table


def test_context_parallel_needs_the_one_process_run(tmp_path):
    m = _load()
    _run(tmp_path / "cp-1", "fp16", 1, _clip())  # another seed: not the run to compare with
    _run(tmp_path / "cp-ring", "fp16", 0, _clip(), mode="ring")
    with pytest.raises(m.UserError, match="no complete one-process run"):
        m.compare_context_parallel(tmp_path / "cp-1", tmp_path / "cp-ring")


def test_report_opens_with_its_command_then_the_hardware():
    m = _load()
    report = {"command": "python benchmarks/distributed_report.py --nproc 2", "nproc": 2, "date": "2026-01-01",
              "hardware": {"backend": "NCCL", "summary": "2 × a GPU"},
              "sharded": {"commands": ["lowbit-video generate --out a", "torchrun ... --out b"], "wall_s_one": 4.0,
                          "wall_s_many": 2.0, "compare": {"runs_one": 2, "runs_many": 2, "equal": 2, "differing": [],
                                                          "only_one": [], "only_many": []}}}
    lines = [ln for ln in m.markdown(report).splitlines() if ln.strip()]
    assert lines[0].startswith("# ") and lines[1] == "Command: `python benchmarks/distributed_report.py --nproc 2`"
    assert lines[2].startswith("Hardware: 2 × a GPU")
    assert "## Sharded sweep" in lines and "## Context parallelism" not in lines


def test_a_failing_command_is_one_error_naming_its_log(tmp_path):
    m = _load()
    log = tmp_path / "x.log"
    cmd = [sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"]
    with pytest.raises(m.UserError, match=r"exited 3 \(see .*x\.log\): boom"):
        m.run_timed(cmd, log, m.child_env("cpu"))


def test_child_environment_turns_nvlink_multicast_off_on_cuda_only():
    m = _load()
    assert m.child_env("cuda")["NCCL_NVLS_ENABLE"] == "0"
    assert m.child_env("cpu").get("NCCL_NVLS_ENABLE") == os.environ.get("NCCL_NVLS_ENABLE")


@pytest.mark.parametrize("args, says", [
    (["--nproc", "1"], "--nproc 1: need at least 2"),
    (["--steps", "0"], "--steps 0: must be at least 1"),
    (["--model-path", "/no/such/folder"], "--model-path /no/such/folder: no such folder"),
    (["--cp-mode", "sideways"], "invalid choice: 'sideways'"),
    (["--work", "README.md"], "--work README.md: exists and is not an empty folder"),
])
def test_bad_input_is_one_error_line(args, says):
    p = subprocess.run([sys.executable, str(SCRIPT), *args], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.startswith("error: ") and says in p.stderr and p.stderr.count("\n") == 1, p.stderr


def test_cuda_with_fewer_gpus_than_processes_is_refused(tmp_path):
    import torch

    if torch.cuda.device_count() >= 64:
        pytest.skip("64 or more GPUs visible: nothing to refuse")
    p = subprocess.run([sys.executable, str(SCRIPT), "--device", "cuda", "--nproc", "64", "--work", str(tmp_path / "w")],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "GPU(s) visible, need one per process" in p.stderr
