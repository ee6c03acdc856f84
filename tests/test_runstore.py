"""runstore: run-directory layout, prompt slugs, atomic writes, completeness."""

import json
import re

import pytest

from lowbit_video import runstore as rs


def test_layout_and_readable_slug(tmp_path):
    d = rs.run_dir(tmp_path, "tiny-shapes", "mxattention", "a red circle moving left on a black background", 3)
    rel = d.relative_to(tmp_path).parts
    assert rel[:2] == ("tiny-shapes", "mxattention") and rel[3] == "seed-3"
    assert re.fullmatch(r"a-red-circle-moving-left-on-a-black-background-[0-9a-f]{10}", rel[2])


@pytest.mark.parametrize("a,b", [
    ("A red circle!", "a red circle?"),                       # same readable slug
    ("x" * 60 + " one", "x" * 60 + " two"),                    # differ only after the cut
    ("a red circle", "a red circle "),                         # whitespace
    ("über", "uber"),                                          # unicode folds to the same ASCII
])
def test_distinct_prompts_never_collide(a, b):
    sa, sb = rs.prompt_slug(a), rs.prompt_slug(b)
    assert sa != sb
    for s in (sa, sb):
        assert re.fullmatch(r"[a-z0-9-]+", s) and len(s) <= rs.SLUG_MAX + 1 + rs.HASH_CHARS


def test_odd_names_become_safe_components():
    assert rs.component("wan2.1-t2v-14b") == "wan2.1-t2v-14b"
    for odd in ("../etc", "my recipe/v2", ".hidden", ""):
        c = rs.component(odd)
        assert "/" not in c and not c.startswith(".") and c
    assert rs.prompt_slug("!!!").startswith("x-")


def test_atomic_write_leaves_old_file_or_new_file(tmp_path):
    p = tmp_path / "meta.json"
    rs.atomic_write_json(p, {"v": 1})
    with pytest.raises(KeyboardInterrupt):
        with rs.atomic_path(p) as tmp:
            tmp.write_text('{"v": 2, "trunc')  # half written, then "Ctrl-C"
            raise KeyboardInterrupt
    assert json.loads(p.read_text()) == {"v": 1}
    assert [q.name for q in tmp_path.iterdir()] == ["meta.json"]  # temporary removed
    rs.atomic_write_json(p, {"v": 3})
    assert json.loads(p.read_text()) == {"v": 3}


def test_temp_names_keep_the_suffix_and_are_recognised(tmp_path):
    t = rs.temp_name(tmp_path / "video.mp4")
    assert t.parent == tmp_path and t.suffix == ".mp4" and rs.is_temp(t) and not rs.is_temp(tmp_path / "video.mp4")


def test_complete_iff_meta_and_its_files_exist(tmp_path):
    run = tmp_path / "seed-0"
    run.mkdir()
    (run / "video.mp4").write_bytes(b"x")
    (run / "frames.png").write_bytes(b"x")
    (run / ".meta.json.tmp-1-ab.json").write_text("{")  # interrupted meta write
    assert not rs.is_complete(run)
    (run / "meta.json").write_text("{not json")
    assert not rs.is_complete(run)
    rs.atomic_write_json(run / "meta.json", {"files": {"video": "video.mp4", "frames": "frames.npz"}})
    assert not rs.is_complete(run)  # lists a file that is missing
    (run / "frames.npz").write_bytes(b"x")
    assert rs.is_complete(run)


def test_reset_removes_partial_outputs_only(tmp_path):
    run = tmp_path / "r"
    run.mkdir()
    for name in ("video.mp4", ".frames.png.tmp-9-00.png", "metrics.json", "notes.txt"):
        (run / name).write_text("x")
    assert rs.reset_run_dir(run) == sorted([".frames.png.tmp-9-00.png", "metrics.json", "video.mp4"])
    assert [p.name for p in run.iterdir()] == ["notes.txt"]
    assert rs.reset_run_dir(tmp_path / "missing") == []


def test_iter_runs_walks_and_skips_incomplete(tmp_path):
    done = [rs.run_dir(tmp_path, "m", "r", p, s) for p in ("p1", "p2") for s in (0, 1)]
    for d in done:
        d.mkdir(parents=True)
        rs.atomic_write_json(d / "meta.json", {})
    partial = rs.run_dir(tmp_path, "m", "r", "p3", 0)
    partial.mkdir(parents=True)
    (partial / "video.mp4").write_text("x")
    assert sorted(rs.iter_runs(tmp_path)) == sorted(done)
    assert list(rs.iter_runs(done[0])) == [done[0]]
    assert list(rs.iter_runs(partial)) == []


def test_damaged_meta_is_reported_not_silently_skipped(tmp_path):
    good, bad, gone = tmp_path / "a" / "seed-0", tmp_path / "b" / "seed-0", tmp_path / "c" / "seed-0"
    for d in (good, bad, gone):
        d.mkdir(parents=True)
    rs.atomic_write_json(good / "meta.json", {"files": {}})
    (bad / "meta.json").write_text("{not json")
    rs.atomic_write_json(gone / "meta.json", {"files": {"frames": "frames.npz"}})
    damaged = []
    assert rs.find_runs([tmp_path], damaged) == [good.resolve()]
    assert damaged == [(bad.resolve(), "unreadable meta.json (JSONDecodeError)"),
                       (gone.resolve(), "files listed in meta.json are missing: frames.npz")]
    with pytest.raises(rs_user_error(), match="1 damaged, e.g. .*unreadable meta.json"):
        rs.find_runs([bad.parent])


def rs_user_error():
    from lowbit_video.errors import UserError

    return UserError


@pytest.mark.parametrize("where,is_dir,why", [
    ("a-file/out", True, "is a file, not a folder"),
    ("a-file", True, "exists and is not a folder"),
    ("/proc/lowbit-video-out", True, "cannot write there"),
    ("/sys/lowbit-video-out", True, "cannot write there"),
    ("/proc/table.md", False, "cannot write there"),
    ("folder", False, "is a folder"),
])
def test_unwritable_outputs_are_found_before_any_work(tmp_path, where, is_dir, why):
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "folder").mkdir()
    assert why in rs.output_problem(tmp_path / where, is_dir=is_dir)
    with pytest.raises(rs_user_error(), match=f"^--out .*{why}"):
        rs.check_output(tmp_path / where, "--out", is_dir=is_dir)
    assert rs.output_problem(tmp_path / "new" / "deep", is_dir=True) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "folder"]  # nothing made, the probe gone


def test_a_claim_excludes_others_and_dies_with_its_process(tmp_path):
    import os
    import signal
    import subprocess
    import sys

    run = tmp_path / "seed-0"
    with rs.claim_run(run, "generate") as mine:
        assert mine is not None
        assert rs.claim_run(run, "generate") is None  # a second claimant (another open file) is refused
        assert rs.claim_holder(run, "generate") == f"pid {os.getpid()} on {__import__('socket').gethostname()}"
        other = rs.claim_run(run, "evaluate")  # stages claim independently
        assert other is not None
        other.release()
    assert not rs.claim_path(run, "generate").exists()  # released: no file left behind

    # a process killed while holding the claim leaves its file, but not the lock
    code = ("import sys, time; from lowbit_video import runstore as rs; c = rs.claim_run(sys.argv[1], 'generate'); "
            "print('held', flush=True); time.sleep(60)")
    child = subprocess.Popen([sys.executable, "-c", code, str(run)], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        assert child.stdout.readline().strip() == "held"
        assert rs.claim_run(run, "generate") is None
        assert rs.claim_holder(run, "generate").startswith(f"pid {child.pid} ")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert rs.claim_path(run, "generate").exists()
    again = rs.claim_run(run, "generate")
    assert again is not None
    again.release()


# ------------------------------------------------------------------------------- run records


def test_run_record_reads_model_recipe_prompt_seed_and_tiny_shapes(tmp_path):
    new = rs.RunRecord.of(tmp_path, {"model": {"name": "wan-x", "family": "wan"}, "recipe": {"name": "sage"},
                                     "prompt": "a cat", "seed": "3", "steps": 12})
    assert (new.model, new.family, new.recipe, new.prompt, new.seed, new.steps) == ("wan-x", "wan", "sage", "a cat", 3, 12)
    assert new.identified and not new.is_tiny_shapes
    old = rs.RunRecord.of(tmp_path, {"model": "tiny-shapes", "recipe": "fp16", "prompt": "p", "seed": 0})
    assert (old.model, old.family, old.recipe) == ("tiny-shapes", None, "fp16") and old.is_tiny_shapes
    assert rs.RunRecord.of(tmp_path, {"model": {"name": "mine", "family": "tiny-shapes"}}).is_tiny_shapes
    for meta in ({"model": "m", "recipe": "r", "prompt": "p"}, {"model": "m", "recipe": "r", "prompt": 3, "seed": 0},
                 {"model": "m", "prompt": "p", "seed": 0}, {"model": "m", "recipe": "r", "prompt": "p", "seed": "x"}):
        assert not rs.RunRecord.of(tmp_path, meta).identified, meta
    assert rs.read_run(tmp_path / "nothing-here") is None


def _run(out, recipe, *, prompt="a red circle", seed=0, steps=2, model="tiny-shapes"):
    d = rs.run_dir(out, model, recipe, prompt, seed)
    rs.atomic_write_json(d / "meta.json", {"model": {"name": model, "family": model}, "recipe": {"name": recipe},
                                           "prompt": prompt, "seed": seed, "steps": steps, "guidance": 1.0,
                                           "size": {"height": 8, "width": 8, "frames": 2}})
    return rs.read_run(d.resolve())


def test_baseline_is_the_fp16_run_of_the_same_prompt_seed_and_settings(tmp_path):
    out = tmp_path / "runs"
    base, q = _run(out, "fp16"), _run(out, "sage")
    assert rs.output_root(q.dir) == out.resolve()
    assert rs.find_baseline(q, "fp16").dir == base.dir            # beside it, without being told
    assert rs.find_baseline(base, "fp16") is None                  # a baseline run is not its own baseline
    assert rs.find_baseline(base, "fp16", [base]) is None
    other_seed = _run(out, "sage", seed=1)
    assert rs.find_baseline(other_seed, "fp16") is None
    more_steps = _run(tmp_path / "elsewhere", "sage", steps=4)
    assert rs.find_baseline(more_steps, "fp16", [base]) is None    # same prompt and seed, other steps
    moved = _run(tmp_path / "moved", "sage")                        # no fp16 beside it: found among the runs given
    assert rs.find_baseline(moved, "fp16", [q, base]).dir == base.dir
