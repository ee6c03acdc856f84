"""`torchrun -m lowbit_video generate` with 2 gloo ranks on CPU (the shipped tiny-shapes model):
the same runs as one process, no duplicates, and a crash of one rank resumed by one process.

Kept small for the 2-core CPU (mxattention's reference engine costs ~15 s per denoising step of
tiny-shapes there): one prompt of prompts/smoke.txt, 1 step. The issue's full command (smoke.txt,
seeds 0 1, fp16 + mxattention, 2 steps) was checked the same way by hand (see the report)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lowbit_video import distributed as D
from lowbit_video import generate as gen
from lowbit_video import runstore

pytestmark = pytest.mark.slow

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
PROMPT = "a red circle moving right on a black background"  # the first line of prompts/smoke.txt
STEPS = 1
ARGS = ["generate", "--recipe", "fp16", "--recipe", "mxattention", "--prompt", PROMPT, "--seeds", "0", "1",
        "--steps", str(STEPS)]
# the crash test: 4 cheap fp16 runs, 2 per rank
KILL_ARGS = ["generate", "--recipe", "fp16", "--prompt", PROMPT, "--seeds", "0", "1", "2", "3", "--steps", str(STEPS)]


def _torchrun(entry: list[str], out: Path, args: list[str] = ARGS, check: bool = True) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           *entry, *args, "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    p = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    if check:
        assert p.returncode == 0, p.stderr[-3000:]
    return p


def _shas(out: Path) -> dict:
    return {str(p.relative_to(out)): runstore.read_meta(p)["frames_sha256"] for p in runstore.iter_runs(out)}


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    """The runs of both grids made by one process (this one)."""
    out = tmp_path_factory.mktemp("single")
    gen.generate(gen.GenerateConfig(out=out, prompts=[PROMPT], recipes=["fp16"], seeds=[0, 1, 2, 3], steps=STEPS))
    gen.generate(gen.GenerateConfig(out=out, prompts=[PROMPT], recipes=["mxattention"], seeds=[0, 1], steps=STEPS))
    return out


def _subset(shas: dict, keys) -> dict:
    return {k: shas[k] for k in keys}


def test_two_ranks_make_exactly_the_single_process_runs(single, tmp_path):
    out = tmp_path / "d"
    _torchrun(["-m", "lowbit_video"], out)
    got = _shas(out)
    assert len(got) == 4 and got == _subset(_shas(single), got)  # same set, same frames
    owners = {}
    for run in runstore.iter_runs(out):
        meta = runstore.read_meta(run)
        shard = meta["distributed"]["shard"]
        assert shard["count"] == 2 and shard["torchrun"]
        owners[(meta["recipe"]["name"], meta["prompt"], meta["seed"])] = shard["index"]
    # each run was made by the rank that owns it, and by no other (one meta per run dir)
    keys = sorted(owners)
    expect = D.shard_of([("tiny-shapes", *k) for k in keys], D.ShardSpec(0, 2))
    assert [owners[k] for k in keys] == expect
    man = json.loads((out / gen.MANIFEST_NAME).read_text())
    assert (man["complete"], man["missing"], len(man["runs"])) == (4, 0, 4)


def test_killed_rank_then_one_process_completes_without_corrupt_runs(single, tmp_path):
    out = tmp_path / "d"
    p = _torchrun([str(TESTS / "_distributed_kill_entry.py")], out, KILL_ARGS, check=False)
    assert p.returncode != 0  # rank 1 was killed; torchrun stopped rank 0
    partial = _shas(out)
    assert 1 <= len(partial) < 4 and all(partial[k] == v for k, v in _shas(single).items() if k in partial)
    assert not (out / gen.MANIFEST_NAME).exists()  # rank 0 never got past the barrier
    res = gen.generate(gen.GenerateConfig(out=out, prompts=[PROMPT], recipes=["fp16"], seeds=[0, 1, 2, 3],
                                          steps=STEPS))
    assert res["generated"] == 4 - len(partial) and res["skipped"] == len(partial)
    got = _shas(out)
    assert len(got) == 4 and got == _subset(_shas(single), got)
    leftovers = [f for f in out.rglob("*") if f.is_file() and runstore.is_temp(f)]
    assert leftovers == []
    man = json.loads((out / gen.MANIFEST_NAME).read_text())
    assert (man["complete"], man["missing"]) == (4, 0)


def test_context_parallel_ulysses_cli_equals_one_process(single, tmp_path):
    """`--context-parallel ulysses` on tiny-shapes (a Wan transformer, 4 heads): every rank runs every
    run on half of the heads, rank 0 writes; frames bit-equal to one process (see test_models_context_parallel)."""
    out = tmp_path / "d"
    args = ["generate", "--recipe", "fp16", "--recipe", "mxattention", "--prompt", PROMPT, "--seeds", "0",
            "--steps", str(STEPS), "--context-parallel", "ulysses", "--cp-degree", "2"]
    _torchrun(["-m", "lowbit_video"], out, args)
    got = _shas(out)
    assert len(got) == 2 and got == _subset(_shas(single), got)
    for run in runstore.iter_runs(out):
        assert runstore.read_meta(run)["distributed"]["context_parallel"] == {"mode": "ulysses", "degree": 2}
