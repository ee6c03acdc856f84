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
