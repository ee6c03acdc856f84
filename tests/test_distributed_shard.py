"""Sharding a run grid (distributed.py), generate's --shard / manifest, and the log-sum-exp that
ring attention needs (attention.attend(return_lse=True), reference engine). Fast: no processes."""

import json
import math

import pytest
import torch

from lowbit_video import distributed as D
from lowbit_video import generate as gen
from lowbit_video import runstore
from lowbit_video.attention import attend
from lowbit_video.attention.reference import reference_attention
from lowbit_video.errors import UserError
from lowbit_video.recipes import load_recipe

from kernel_helpers import ring_merge
from test_generate import PROMPTS, FakeRegistry  # noqa: F401  (the fake model of the generate tests)

PINNED = [1, 0, 1, 0, 1, 0]
GRID = [("tiny-shapes", r, p, s) for r in ("fp16", "mxattention", "nvfp4") for p in ("a", "b", "c d") for s in range(4)]


# ------------------------------------------------------------------------------------- ShardSpec


def test_parse_env_and_cli():
    assert D.ShardSpec.parse("3/8") == D.ShardSpec(3, 8)
    for bad in ("8/8", "1/0", "x", "-1/2", "1"):
        with pytest.raises(UserError):
            D.ShardSpec.parse(bad)
    assert D.ShardSpec.from_env({}) == D.ShardSpec()
    s = D.ShardSpec.from_env({"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1"})
    assert (s.index, s.count, s.launched, s.local_rank) == (1, 4, True, 1)
    assert not D.ShardSpec.from_env({"RANK": "0", "WORLD_SIZE": "1"}).launched  # torchrun with one process
    assert D.ShardSpec.from_cli_or_env("1/2", {}) == D.ShardSpec(1, 2)
    with pytest.raises(UserError, match="torchrun"):
        D.ShardSpec.from_cli_or_env("1/2", {"RANK": "0", "WORLD_SIZE": "2"})
    assert D.device_for("cuda", s) == "cuda:1" and D.device_for("cpu", s) == "cpu"


# ---------------------------------------------------------------------------------- shard_runs


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_every_run_in_exactly_one_shard(n):
    shards = [D.shard_runs(GRID, D.ShardSpec(i, n)) for i in range(n)]
    flat = [r for sh in shards for r in sh]
    assert sorted(flat) == sorted(GRID) and len(flat) == len(set(flat))  # union = grid, no duplicates
    sizes = [len(sh) for sh in shards]
    assert max(sizes) - min(sizes) <= 1  # balanced
    for i, sh in enumerate(shards):  # each shard keeps the grid's order
        assert sh == [r for r in GRID if r in set(sh)]


def test_deterministic_and_independent_of_order():
    a = D.shard_of(GRID, D.ShardSpec(0, 3))
    assert a == D.shard_of(list(GRID), D.ShardSpec(0, 3))
    rev = list(reversed(GRID))
    owner = dict(zip(GRID, a))
    assert dict(zip(rev, D.shard_of(rev, D.ShardSpec(0, 3)))) == owner
    # pinned, so a change of the hash or the dealing (runs moving shards between versions) is noticed
    assert D.shard_of([("m", "fp16", "p", s) for s in range(6)], D.ShardSpec(0, 2)) == PINNED


def test_run_key_accepts_runs_rows_and_tuples():
    row = {"model": "m", "recipe": "fp16", "prompt": "p", "seed": 3, "dir": "x"}
    run = gen.Run(dir=None, model="m", recipe=load_recipe("fp16"), prompt="p", seed=3)
    meta = {"model": {"name": "m", "family": "wan"}, "recipe": {"name": "fp16"}, "prompt": "p", "seed": 3}
    assert D.run_key(row) == D.run_key(run) == D.run_key(meta) == ("m", "fp16", "p", 3)


# ----------------------------------------------------------------------------- generate --shard


@pytest.fixture
def fake(monkeypatch):
    reg = FakeRegistry()
    monkeypatch.setattr(gen, "_registry", lambda: reg)
    return reg


def _cfg(out, **kw):
    return gen.GenerateConfig(out=out, prompts=PROMPTS, recipes=["fp16", "mxattention"], seeds=[0, 1, 2], **kw)


def _shas(out):
    return {str(p.relative_to(out)): runstore.read_meta(p)["frames_sha256"] for p in runstore.iter_runs(out)}


def test_shards_make_the_single_process_grid_and_resume_across_counts(fake, tmp_path):
    single = gen.generate(_cfg(tmp_path / "one"))
    assert set(single) == {"runs", "generated", "skipped", "claimed"}  # single process: result unchanged
    man = json.loads((tmp_path / "one" / gen.MANIFEST_NAME).read_text())
    assert man["complete"] == 12 and man["missing"] == 0 and len(man["runs"]) == 12

    out = tmp_path / "sharded"
    res = gen.generate(_cfg(out, shard="0/3"))
    assert res["generated"] == 4 and res["complete"] == 4 and res["missing"] == 8
    assert sum(r["status"] == "other-shard" for r in res["runs"]) == 8
    man = json.loads((out / gen.MANIFEST_NAME).read_text())
    assert (man["complete"], man["missing"]) == (4, 8)
    # a different shard count resumes: 2 shards finish the rest, nothing is generated twice
    done = [gen.generate(_cfg(out, shard=f"{i}/2")) for i in range(2)]
    assert sum(d["generated"] for d in done) == 8 and sum(d["skipped"] for d in done) == 4
    assert _shas(out) == _shas(tmp_path / "one")
    man = json.loads((out / gen.MANIFEST_NAME).read_text())
    assert (man["complete"], man["missing"]) == (12, 0)
    assert {r["dir"] for r in man["runs"]} == set(_shas(out))


def test_manifest_keeps_runs_of_earlier_grids(fake, tmp_path):
    gen.generate(gen.GenerateConfig(out=tmp_path, prompts=PROMPTS[:1], recipes=["fp16"], seeds=[0]))
    gen.generate(gen.GenerateConfig(out=tmp_path, prompts=PROMPTS[:1], recipes=["mxattention"], seeds=[0]))
    man = json.loads((tmp_path / gen.MANIFEST_NAME).read_text())
    assert sorted(r["recipe"] for r in man["runs"]) == ["fp16", "mxattention"] and man["complete"] == 2


def test_context_parallel_needs_torchrun(fake, tmp_path):
    with pytest.raises(UserError, match="torchrun"):
        gen.generate(_cfg(tmp_path, context_parallel="ulysses"))
    with pytest.raises(UserError, match="ulysses or ring"):
        gen.generate(_cfg(tmp_path, context_parallel="tree"))
    with pytest.raises(UserError, match="--context-parallel"):
        gen.generate(_cfg(tmp_path, cp_degree=2))


# --------------------------------------------------------------------------------------- LSE


def _qkv(n=70, d=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(1, 2, n, d, generator=g, dtype=torch.float64) for _ in range(3)]


def test_reference_lse_is_logsumexp_of_the_scores():
    q, k, v = _qkv()
    exact = torch.logsumexp((q @ k.transpose(-1, -2)) / math.sqrt(32), dim=-1)
    for name in ("fp16", "sage2-int8"):  # dense; smooth_k (the LSE adds the shift back)
        _, diag = reference_attention(q, k, v, load_recipe(name).attention)
        tol = 1e-12 if name == "fp16" else 0.05  # INT8 Q/K: the scores themselves are quantized
        assert diag.lse.dtype == torch.float64 and float((diag.lse - exact).abs().max()) < tol
    # SDPA path: float32, both layouts
    out, lse = attend(q.float(), k.float(), v.float(), "fp16", return_lse=True)
    assert lse.dtype == torch.float32 and lse.shape == (1, 2, 70)
    assert float((lse.double() - exact).abs().max()) < 1e-5
    t = lambda x: x.float().transpose(1, 2)  # noqa: E731
    out2, lse2 = attend(t(q), t(k), t(v), "fp16", layout="BNHD", return_lse=True)
    assert torch.equal(lse2, lse.transpose(1, 2)) and torch.allclose(out2, out.transpose(1, 2))
    # return_diagnostics keeps its place: (out, diag, lse)
    o3, diag, lse3 = attend(q, k, v, "mxattention", return_diagnostics=True, return_lse=True)
    assert lse3.shape == (1, 2, 70) and diag.row_sums.shape == (1, 2, 70)


@pytest.mark.parametrize("recipe", ["fp16", "mxattention", "sage2-int8"])
def test_ring_merge_of_key_chunks_matches_one_pass(recipe):
    """Attention over two key chunks, merged by their LSE as ring attention does, against one pass.
    Dense: equal to rounding. Quantized: a chunk's P̃ is scaled by its own running max, so the merge
    (and, with smoothed K, by its own mean) so the merge differs from one pass by quantization noise:
    the merged output is as far from exact attention as the one-pass output is."""
    q, k, v = _qkv(n=64)
    full, _ = reference_attention(q, k, v, load_recipe(recipe).attention)
    parts = []
    for c in (slice(0, 32), slice(32, 64)):
        o, diag = reference_attention(q, k[..., c, :], v[..., c, :], load_recipe(recipe).attention)
        parts.append((o, diag.lse))
    merged, _ = ring_merge(parts)
    exact = torch.softmax((q @ k.transpose(-1, -2)) / math.sqrt(32), -1) @ v
    err_merge = float((merged - full).abs().max())
    err_recipe = float((full - exact).abs().max())
    if recipe == "fp16":
        assert err_merge < 1e-12
    else:  # the merged result is as close to exact attention as one pass is (within 2x)
        assert float((merged - exact).abs().max()) < 2 * err_recipe, (err_merge, err_recipe)
