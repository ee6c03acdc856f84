"""`evaluate` and `ablate` over several processes: `--shard i/n` (array jobs) and torchrun with 2 gloo
ranks on CPU. Sharded evaluation writes exactly the metrics.json files one process writes, each run
scored by exactly one process (every metric computation is logged with the process that did it);
ablate's captures are split the same way, and only one process writes a study's outputs.

Runs are written the way generate writes them (test_evaluate.make_run); ablate's capture model is a
cheap stand-in (tests/_distributed_eval_entry.py) and table3's quantized attention the stand-in of
test_ablate_table3."""

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

import _distributed_eval_entry as entry
from lowbit_video import distributed as D
from lowbit_video import runstore
from lowbit_video.ablate import AblateOptions, run_study
from lowbit_video.evaluate import METRICS_NAME, evaluate_runs
from test_evaluate import PROMPT, base_clip, make_run, shifted

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
RECIPES = {"fp16": 0, "mxattention": 12, "nvfp4": -20}  # recipe -> brightness shift of the fp16 clip
SEEDS = (0, 1, 2)
METRICS = "psnr,ssim,cosine,adherence"
TIMESTAMPS = ("created", "updated")


def build(out: Path) -> Path:
    """9 runs: 3 recipes x 3 seeds of one prompt (identical content in every folder built)."""
    for seed in SEEDS:
        clip = base_clip(seed)
        for recipe, delta in RECIPES.items():
            make_run(out, recipe, shifted(clip, delta) if delta else clip, seed=seed)
    return out


def files(out: Path) -> dict:
    """metrics.json of every run (relative folder -> document without its timestamps)."""
    docs = {}
    for run in runstore.iter_runs(out):
        p = run / METRICS_NAME
        if p.is_file():
            doc = json.loads(p.read_text())
            docs[str(run.relative_to(out))] = {k: v for k, v in doc.items() if k not in TIMESTAMPS}
    return docs


def key_of(run: Path) -> tuple:
    return D.run_key(runstore.read_meta(run))


def computed(log: Path, out: Path) -> Counter:
    """(relative run folder, metric) -> how many times it was computed (any process)."""
    return Counter((str(Path(w[0]).relative_to(out.resolve())), w[1]) for _, kind, w in entry.read_log(log)
                   if kind == "metric" and Path(w[0]).is_relative_to(out.resolve()))


@pytest.fixture
def logged(tmp_path, monkeypatch):
    log = tmp_path / "log.jsonl"
    monkeypatch.setenv("LOWBIT_TEST_LOG", str(log))
    entry.install(monkeypatch.setattr)
    return log


# ------------------------------------------------------------------------------ evaluate --shard


def test_two_shards_write_exactly_the_single_process_files(tmp_path, logged):
    one, two, w = build(tmp_path / "one"), build(tmp_path / "two"), str(tmp_path / "no-weights")
    single = evaluate_runs([one], metrics=[METRICS], weights_dir=w)
    assert {r["status"] for r in single} == {"scored"} and len(single) == 9
    once = computed(logged, one)
    # 6 quantized runs x (psnr, ssim, cosine) + 9 runs x adherence; fp16 runs: paired = "baseline run"
    assert sum(once.values()) == 6 * 3 + 9 and set(once.values()) == {1}

    r0 = evaluate_runs([two], metrics=[METRICS], weights_dir=w, shard="0/2")
    r1 = evaluate_runs([two], metrics=[METRICS], weights_dir=w, shard=D.ShardSpec(1, 2))
    assert computed(logged, two) == once  # every (run, metric) computed once, by one of the two shards
    assert files(two) == files(one)  # the same files, the same values

    runs = list(runstore.iter_runs(two))
    owner = dict(zip(runs, D.shard_of([key_of(r) for r in runs], D.ShardSpec(0, 2))))
    for i, res in enumerate((r0, r1)):
        status = {Path(r["dir"]): r["status"] for r in res}
        assert set(status) == {r.resolve() for r in runs}  # every run is returned
        assert {r for r in runs if status[r.resolve()] == "scored"} == {r for r in runs if owner[r] == i}
        assert {r for r in runs if status[r.resolve()] == "other-shard"} == {r for r in runs if owner[r] != i}
    assert {len([r for r in res if r["status"] == "scored"]) for res in (r0, r1)} == {4, 5}  # balanced
    # shard 1 returns shard 0's runs as shard 0 wrote them
    by_dir = {r["dir"]: r for r in r1}
    for r in r0:
        if r["status"] == "scored":
            assert by_dir[r["dir"]]["metrics"] == r["metrics"] and by_dir[r["dir"]]["status"] == "other-shard"

    # resume with another shard count (and with one process): nothing is computed again
    before = sum(computed(logged, two).values())
    for i in range(3):
        res = evaluate_runs([two], metrics=[METRICS], weights_dir=w, shard=f"{i}/3")
        assert {r["status"] for r in res} <= {"skipped", "other-shard"}
    assert {r["status"] for r in evaluate_runs([two], metrics=[METRICS], weights_dir=w)} == {"skipped"}
    assert sum(computed(logged, two).values()) == before


def test_the_split_does_not_depend_on_what_is_already_scored(tmp_path, logged):
    """Shards started at different times must agree: a run scored in between moves to no other shard."""
    out, w = build(tmp_path / "runs"), str(tmp_path / "w")
    runs = list(runstore.iter_runs(out))
    evaluate_runs([out], metrics=["psnr"], weights_dir=w, shard="0/2")
    evaluate_runs(runs[:4], metrics=["psnr"], weights_dir=w)  # someone scores a few runs meanwhile (1 process)
    evaluate_runs([out], metrics=["psnr"], weights_dir=w, shard="1/2")
    got = computed(logged, out)
    assert set(got.values()) == {1} and len(got) == 6  # the 6 quantized runs' psnr, each computed once


def test_cli_shard(tmp_path, logged):
    from lowbit_video.cli import app

    out, w = build(tmp_path / "runs"), str(tmp_path / "w")
    runner = CliRunner()
    res = runner.invoke(app, ["evaluate", str(out), "--metrics", "psnr", "--weights-dir", w, "--shard", "1/2", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["shard"] == {"index": 1, "count": 2, "torchrun": False}
    assert doc["scored"] + doc["skipped"] + doc["other_shard"] == 9 and doc["other_shard"] in (4, 5)
    res = runner.invoke(app, ["evaluate", str(out), "--metrics", "psnr", "--weights-dir", w, "--shard", "0/2"])
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith("[shard 0/2] scored ") and "belong to other shards" in res.stdout
    assert sum(computed(logged, out).values()) == 6
    res = runner.invoke(app, ["evaluate", str(out), "--shard", "2/2"])
    assert res.exit_code == 2 and "need 0 <= i < n" in res.stderr


# --------------------------------------------------------------------------- evaluate, torchrun


def _torchrun(args: list[str], log: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           str(TESTS / "_distributed_eval_entry.py"), *args]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "LOWBIT_TEST_LOG": str(log)}
    p = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr[-3000:]
    return p


@pytest.mark.slow
def test_torchrun_two_ranks_equal_one_process(tmp_path):
    one, two, w = build(tmp_path / "one"), build(tmp_path / "two"), str(tmp_path / "w")
    evaluate_runs([one], metrics=["psnr,ssim,cosine"], weights_dir=w)
    log = tmp_path / "log.jsonl"
    p = _torchrun(["evaluate", str(two), "--metrics", "psnr,ssim,cosine", "--weights-dir", w, "--json"], log)
    assert files(two) == files(one)
    doc = json.loads(p.stdout)  # rank 0 prints the result of every run; rank 1 one line on stderr
    assert doc["scored"] == 9 and doc["skipped"] == 0 and doc["other_shard"] == 0
    assert {r["status"] for r in doc["runs"]} == {"scored"} and doc["shard"]["torchrun"]
    assert "[rank 1/2] scored " in p.stderr
    # each (run, metric) computed once, by the rank that owns the run
    runs = {str(r.resolve()): r for r in runstore.iter_runs(two)}
    owner = dict(zip(runs, D.shard_of([key_of(r) for r in runs.values()], D.ShardSpec(0, 2))))
    got = Counter((w_[0], w_[1]) for _, kind, w_ in entry.read_log(log) if kind == "metric")
    assert set(got.values()) == {1} and len(got) == 6 * 3
    for rank, kind, (run, _) in (x for x in entry.read_log(log) if x[1] == "metric"):
        assert int(rank) == owner[run]


# ------------------------------------------------------------------------------------- ablate


def _prompts(tmp_path) -> str:
    p = tmp_path / "p.txt"
    p.write_text(PROMPT + "\n")
    return str(p)


def _outputs(out: Path, study: str) -> list[str]:
    return sorted(p.name for p in out.glob(f"{study}*") if p.is_file()) if out.is_dir() else []


def test_ablate_captures_are_sharded_and_shards_write_no_study_outputs(tmp_path, logged):
    out = tmp_path / "out"
    opts = dict(prompts=_prompts(tmp_path), seeds=[0, 1, 2], steps=2, out=str(out))
    shares = [run_study("rowsum", AblateOptions(**opts, shard=f"{i}/2")) for i in range(2)]
    for i, res in enumerate(shares):
        assert res["files"] == [] and res["shard"] == {"index": i, "count": 2, "torchrun": False}
    assert _outputs(out, "rowsum") == []
    caps = Counter(tuple(w) for _, kind, w in entry.read_log(logged) if kind == "capture")
    assert caps == Counter({(PROMPT, s): 1 for s in (0, 1, 2)})  # each prompt x seed captured once
    # which shard captured what: generate's split of the capture grid
    order = [tuple(w) for _, kind, w in entry.read_log(logged) if kind == "capture"]
    keys = [("tiny-shapes", "fp16", PROMPT, s) for s in (0, 1, 2)]
    first = {(k[2], k[3]) for k, o in zip(keys, D.shard_of(keys, D.ShardSpec(0, 2))) if o == 0}
    assert set(order[:len(first)]) == first

    res = run_study("rowsum", AblateOptions(**opts))  # one process: reuses every capture, writes the outputs
    assert len([x for x in entry.read_log(logged) if x[1] == "capture"]) == 3
    assert res["n_tensors"] == 9 and len(res["files"]) == 4
    assert _outputs(out, "rowsum") == ["rowsum-entropy.png", "rowsum.json", "rowsum.md", "rowsum.png"]


@pytest.mark.slow
def test_ablate_under_torchrun_rank0_writes_the_study_once(tmp_path):
    out, log = tmp_path / "out", tmp_path / "log.jsonl"
    p = _torchrun(["ablate", "rowsum", "--prompts", _prompts(tmp_path), "--seeds", "0", "1", "2", "--steps", "2",
                   "--out", str(out), "--json"], log)
    doc = json.loads(p.stdout)
    assert doc["n_tensors"] == 9 and len(doc["files"]) == 4 and "[rank 1/2] rowsum: captures made" in p.stderr
    records = entry.read_log(log)
    caps = [(int(rank), tuple(w)) for rank, kind, w in records if kind == "capture"]
    keys = [("tiny-shapes", "fp16", PROMPT, s) for s in (0, 1, 2)]
    owner = {(k[2], k[3]): o for k, o in zip(keys, D.shard_of(keys, D.ShardSpec(0, 2)))}
    assert sorted(c for _, c in caps) == sorted(owner) and all(owner[c] == r for r, c in caps)
    study_writes = [(rank, Path(w).name) for rank, kind, w in records if kind == "write" and Path(w).parent == out]
    assert sorted(study_writes) == [("0", n) for n in ("rowsum-entropy.png", "rowsum.json", "rowsum.md", "rowsum.png")]


@pytest.mark.slow
def test_table3_shards_then_one_process_writes_the_table(tmp_path, monkeypatch):
    import lowbit_video.models.attention_hook as attention_hook
    from test_ablate_table3 import CONFIGS, _cheap_attend

    monkeypatch.setattr(attention_hook, "attend", _cheap_attend(attention_hook.attend))
    out = tmp_path / "out"
    opts = dict(prompts=_prompts(tmp_path), seeds=[0], steps=2, out=str(out), weights_dir=str(tmp_path / "w"))
    shares = [run_study("table3", AblateOptions(**opts, shard=f"{i}/2")) for i in range(2)]
    assert [s["files"] for s in shares] == [[], []] and _outputs(out, "table3") == []
    assert sum(s["generated"] for s in shares) == 5 and sum(s["evaluated"] for s in shares) == 5
    assert {s["generated"] for s in shares} == {2, 3}
    res = run_study("table3", AblateOptions(**opts))
    assert res["generated"] == 0 and res["reused"] == 5 and _outputs(out, "table3") == ["table3.json", "table3.md"]
    assert [r["config"] for r in res["rows"]] == CONFIGS
    for row in res["rows"]:  # paired metrics whose baseline the other shard had not made yet: scored now
        assert row["n"] == 1 and all(isinstance(row[m], float) for m in ("cosine", "ssim", "psnr"))
