"""The commands when the world goes wrong: a full disk or a file-size limit, Ctrl-C (also in the middle
of `generate --overwrite`), a 20 KB prompt, and values refused only after the model is loaded. Each
ends in one line on stderr and a known exit status, with nothing half-written left behind.

A full disk is simulated two ways: in a real process under a small RLIMIT_FSIZE (SIGXFSZ ignored, as
Python does, so writes fail with EFBIG; ffmpeg, a child, is killed by the signal instead), and in
process by a file object that writes part of its data and then raises ENOSPC, for the file named.
Most calls run the Typer app in process with test_generate.py's fake model (fast); two run the
shipped model in a real process."""

import builtins
import errno
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from lowbit_video import generate as gen
from lowbit_video import runstore, video_io
from lowbit_video.cli import app
from lowbit_video.errors import DiskFullError

from test_generate import PROMPTS, FakeRegistry

runner = CliRunner()
P = PROMPTS[0]


@pytest.fixture
def fake(monkeypatch):
    reg = FakeRegistry()
    monkeypatch.setattr(gen, "_registry", lambda: reg)
    return reg


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def error_lines(stderr: str) -> list[str]:
    """stderr's lines without progress ("loaded tiny-shapes in 1.2 s", timestamped run lines, "1 of 2
    runs already complete")."""
    return [l for l in stderr.splitlines()
            if l.strip() and not l.startswith(("loaded ", "[")) and not l.endswith(" runs already complete")]


def one_line(res, code: int, starts: str = "error: ") -> str:
    stderr = res.stderr if hasattr(res, "stderr") else ""
    lines = error_lines(stderr)
    assert getattr(res, "exit_code", getattr(res, "returncode", None)) == code, stderr
    assert "Traceback" not in stderr and len(lines) == 1 and lines[0].startswith(starts), stderr
    return lines[0]


def leftovers(root: Path) -> list[str]:
    """Temporaries, claim files, and run folders holding files but no meta.json (half-written runs)."""
    bad = [str(p) for p in root.rglob("*") if runstore.is_temp(p) or p.name.startswith(".claim-")]
    bad += [str(d) for d in root.rglob("seed-*") if d.is_dir() and any(d.iterdir()) and not runstore.is_complete(d)]
    return bad


def fill_disk(monkeypatch, name: str, module=runstore, ctrl_c: bool = False):
    """Writes through `module`'s open() of a file whose name contains `name` write half their data
    and then fail as on a full disk (ENOSPC), or as if Ctrl-C came then. Returns the list of failed paths."""
    real, failed = builtins.open, []

    class Filling:
        def __init__(self, f, path):
            self.f, self.path = f, path

        def write(self, data):
            self.f.write(data[: len(data) // 2])
            failed.append(self.path)
            if ctrl_c:
                raise KeyboardInterrupt
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.path))

        def __getattr__(self, a):
            return getattr(self.f, a)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    def fake_open(file, mode="r", *a, **k):
        f = real(file, mode, *a, **k)
        return Filling(f, file) if "w" in mode and name in Path(file).name else f

    monkeypatch.setattr(module, "open", fake_open, raising=False)
    return failed


def limited(limit: int):
    """preexec_fn: a file-size limit of `limit` bytes; SIGXFSZ ignored, so writes past it fail with EFBIG."""
    def set_limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return set_limit


# ------------------------------------------------------------------------------ full disk


def test_an_mp4_past_the_file_size_limit_is_refused_not_truncated(tmp_path):
    # ffmpeg (a child process) is killed by SIGXFSZ; its exit status is what says the mp4 is incomplete
    code = ("import numpy as np, sys; from lowbit_video import video_io; from lowbit_video.errors import DiskFullError\n"
            "f = (np.random.default_rng(0).random((8, 32, 32, 3)) * 255).astype(np.uint8)\n"
            "try:\n    video_io.write_mp4(f, sys.argv[1])\nexcept DiskFullError as e:\n    print(e)\n")
    res = subprocess.run([sys.executable, "-c", code, str(tmp_path / "video.mp4")], capture_output=True, text=True,
                         preexec_fn=limited(6000))
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == f"cannot write {tmp_path / 'video.mp4'}: file too large (over the file-size limit, see `ulimit -f`)"
    assert list(tmp_path.iterdir()) == []  # no truncated mp4, no temporary


@pytest.mark.slow
def test_generate_past_the_file_size_limit_in_a_real_process(tmp_path):
    out = tmp_path / "o"
    res = subprocess.run([sys.executable, "-m", "lowbit_video", "generate", "--prompt", P, "--steps", "1", "--out", str(out),
                          "--json"], capture_output=True, text=True, preexec_fn=limited(7000), cwd=tmp_path)
    line = one_line(res, 2)
    assert "file too large" in line and str(out) in line and ".tmp-" not in line, line
    assert not out.exists()  # the refused command leaves no folder it made


@pytest.mark.parametrize("name", ["frames.npz", "frames.png", "meta.json", "manifest.json"])
def test_generate_on_a_full_disk_names_the_file_and_leaves_complete_runs_only(fake, tmp_path, monkeypatch, name):
    out = tmp_path / "o"
    assert invoke("generate", "--prompt", P, "--seeds", "0", "--out", out).exit_code == 0
    fill_disk(monkeypatch, name)
    res = invoke("generate", "--prompt", P, "--seeds", "0", "1", "--out", out)
    line = one_line(res, 2)
    where = out / "manifest.json" if name == "manifest.json" else runstore.run_dir(out, "tiny-shapes", "fp16", P, 1) / name
    assert line == f"error: cannot write {where}: no space left on the disk"
    assert leftovers(out) == []
    assert runstore.is_complete(runstore.run_dir(out, "tiny-shapes", "fp16", P, 0))


def test_a_claim_on_a_full_disk_is_one_line_and_leaves_no_empty_claim_file(fake, tmp_path, monkeypatch):
    real = os.write

    def write(fd, data):
        if os.readlink(f"/proc/self/fd/{fd}").endswith(".claim-generate"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data)

    monkeypatch.setattr(os, "write", write)
    res = invoke("generate", "--prompt", P, "--out", tmp_path / "o")
    claim = runstore.claim_path(runstore.run_dir(tmp_path / "o", "tiny-shapes", "fp16", P, 0), "generate")
    assert one_line(res, 2) == f"error: cannot write {claim}: no space left on the disk"
    assert not (tmp_path / "o").exists()


@pytest.fixture
def scored(fake, tmp_path):
    out = tmp_path / "o"
    assert invoke("generate", "--recipe", "fp16", "mxattention", "--prompt", P, "--out", out).exit_code == 0
    return out


def test_evaluate_on_a_full_disk(scored, monkeypatch):
    fill_disk(monkeypatch, "metrics.json")
    res = invoke("evaluate", scored, "--metrics", "psnr")
    line = one_line(res, 2)
    assert line.startswith("error: cannot write ") and line.endswith("metrics.json: no space left on the disk")
    assert leftovers(scored) == [] and not list(scored.rglob("metrics.json"))


def test_ctrl_c_in_evaluate_is_one_line_and_leaves_no_half_written_scores(scored, monkeypatch):
    fill_disk(monkeypatch, "metrics.json", ctrl_c=True)
    res = invoke("evaluate", scored, "--metrics", "psnr")
    assert one_line(res, 130, "interrupted: ").startswith("interrupted: stopped by Ctrl-C before the end;")
    assert leftovers(scored) == [] and not list(scored.rglob("metrics.json"))


def test_ctrl_c_in_ablate_is_one_line_and_leaves_no_half_written_table(tmp_path, monkeypatch):
    import lowbit_video.ablate.rowsum as rowsum
    from test_ablate_rowsum import _captures

    caps = _captures(tmp_path)
    monkeypatch.setattr(rowsum, "ensure_captures", lambda r, cap, rep=None: caps)
    fill_disk(monkeypatch, "rowsum.json", ctrl_c=True)
    res = invoke("ablate", "rowsum", "--steps", "2", "--out", tmp_path / "out", "--quiet")
    assert one_line(res, 130, "interrupted: ").startswith("interrupted: stopped by Ctrl-C before the end;")
    assert not (tmp_path / "out" / "rowsum.json").exists()
    assert [p for p in (tmp_path / "out").iterdir() if runstore.is_temp(p)] == []


@pytest.mark.parametrize("what", ["--out", "--plots"])
def test_compare_on_a_full_disk(scored, tmp_path, monkeypatch, what):
    assert invoke("evaluate", scored, "--metrics", "psnr").exit_code == 0
    target = tmp_path / ("table.md" if what == "--out" else "plots")
    fill_disk(monkeypatch, ".md" if what == "--out" else ".png")
    res = invoke("compare", scored, what, target)
    line = one_line(res, 2)
    assert line.startswith(f"error: cannot write {target}") and line.endswith("no space left on the disk"), line
    assert not target.exists() or not [p for p in target.iterdir()]


def test_ablate_outputs_on_a_full_disk(tmp_path, monkeypatch):
    import lowbit_video.ablate.rowsum as rowsum
    from test_ablate_rowsum import _captures

    caps = _captures(tmp_path)
    monkeypatch.setattr(rowsum, "ensure_captures", lambda r, cap, rep=None: caps)
    fill_disk(monkeypatch, "rowsum.json")
    res = invoke("ablate", "rowsum", "--steps", "2", "--out", tmp_path / "out", "--quiet")
    assert one_line(res, 2) == f"error: cannot write {tmp_path / 'out' / 'rowsum.json'}: no space left on the disk"
    assert [p for p in (tmp_path / "out").iterdir() if runstore.is_temp(p)] == []


def test_a_capture_on_a_full_disk_names_its_file_and_keeps_the_index_true(tmp_path, monkeypatch):
    from lowbit_video.models.capture import CaptureSpec, CaptureWriter

    writer = CaptureWriter(CaptureSpec(dir=tmp_path), {"model": "m", "recipe": "fp16"})
    writer.prompts, writer.seeds = [P], [0]
    q, k, v = (torch.full((1, 4, 2, 8), float(i)) for i in range(3))
    writer.save(block=0, step=0, num_steps=1, prompt=0, branch="cond", q=q, k=k, v=v, info={})
    fill_disk(monkeypatch, "block001")
    with pytest.raises(DiskFullError, match=f"^cannot write {tmp_path / 'block001_step000_prompt000.safetensors'}: no space"):
        writer.save(block=1, step=0, num_steps=1, prompt=0, branch="cond", q=q, k=k, v=v, info={})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["block000_step000_prompt000.safetensors", "index.json"]
    assert [e["file"] for e in json.loads((tmp_path / "index.json").read_text())["entries"]] == [
        "block000_step000_prompt000.safetensors"]


def test_generate_capture_qkv_on_a_full_disk(tmp_path, monkeypatch):
    # the shipped model (captures are made inside its attention calls), one step, block 0 only
    fill_disk(monkeypatch, "block000")
    res = invoke("generate", "--prompt", P, "--steps", "1", "--out", tmp_path / "o", "--capture-qkv", tmp_path / "cap",
                 "--capture-blocks", "0")
    line = one_line(res, 2)
    cap = runstore.run_dir(tmp_path / "cap", "tiny-shapes", "fp16", P, 0)
    assert line == f"error: cannot write {cap / 'block000_step000_prompt000.safetensors'}: no space left on the disk"
    assert leftovers(tmp_path) == [] and not (tmp_path / "o").exists()
    assert not [p for p in (tmp_path / "cap").rglob("*") if p.is_file()]


# ------------------------------------------------------------------------------ Ctrl-C


def sha(run_dir: Path) -> str:
    return runstore.read_meta(run_dir)["frames_sha256"]


def _interrupt_at(monkeypatch, fake, where: str):
    """Ctrl-C at one point of a run's generation (the model call, each file written, the swap)."""
    def stop(*a, **k):
        raise KeyboardInterrupt

    if where == "model":
        monkeypatch.setattr(fake.model, "generate", stop)
    elif where == "meta.json":
        real = runstore.atomic_write_json
        monkeypatch.setattr(runstore, "atomic_write_json",
                            lambda p, o: stop() if Path(p).name == "meta.json" else real(p, o))
    elif where == "swap":
        monkeypatch.setattr(runstore, "_exchange", stop)
    else:
        monkeypatch.setattr(video_io, where, stop)


@pytest.mark.parametrize("where", ["model", "write_frames_npz", "write_mp4", "write_frame_strip", "meta.json", "swap"])
def test_ctrl_c_during_overwrite_keeps_the_complete_old_run(fake, tmp_path, monkeypatch, where):
    out = tmp_path / "o"
    assert invoke("generate", "--prompt", P, "--out", out).exit_code == 0
    d = runstore.run_dir(out, "tiny-shapes", "fp16", P, 0)
    old = sha(d)
    real = fake.model.generate
    fake.model.generate = lambda *a, **k: 1.0 - real(*a, **k)  # the new run differs from the old
    with monkeypatch.context() as m:
        _interrupt_at(m, fake, where)
        res = invoke("generate", "--prompt", P, "--out", out, "--overwrite")
        assert one_line(res, 130, "interrupted: ") == "interrupted: 1 of 1 runs complete; run the same command to resume"
    assert runstore.is_complete(d) and sha(d) == old and leftovers(out) == []
    assert invoke("generate", "--prompt", P, "--out", out, "--overwrite").exit_code == 0
    assert runstore.is_complete(d) and sha(d) != old and leftovers(out) == []
    assert sorted(p.name for p in d.iterdir()) == ["frames.npz", "frames.png", "meta.json", "video.mp4"]


def test_overwrite_keeps_other_files_and_a_claim_another_process_holds(fake, tmp_path):
    out = tmp_path / "o"
    assert invoke("generate", "--prompt", P, "--out", out).exit_code == 0
    d = runstore.run_dir(out, "tiny-shapes", "fp16", P, 0)
    (d / "notes.txt").write_text("mine")
    (d / "metrics.json").write_text("{}")  # scores of the old frames: stale once they are replaced
    with runstore.claim_run(d, "evaluate") as held:
        assert invoke("generate", "--prompt", P, "--out", out, "--overwrite").exit_code == 0
        assert (d / "notes.txt").read_text() == "mine" and not (d / "metrics.json").exists()
        assert runstore.claim_run(d, "evaluate") is None  # the claim file came along: still held
        assert os.stat(held.path).st_ino == os.fstat(held._fd).st_ino
    assert not (d / ".claim-evaluate").exists() and not (d / ".claim-generate").exists()


def test_ctrl_c_in_generate_says_how_many_runs_are_complete(fake, tmp_path):
    real = fake.model.generate

    def second_call_interrupted(prompts, seeds, **kw):
        if seeds == [1]:
            raise KeyboardInterrupt
        return real(prompts, seeds, **kw)

    fake.model.generate = second_call_interrupted
    out = tmp_path / "o"
    res = invoke("generate", "--prompt", P, "--seeds", "0", "1", "2", "--out", out)
    assert one_line(res, 130, "interrupted: ") == "interrupted: 1 of 3 runs complete; run the same command to resume"
    assert leftovers(out) == []
    fake.model.generate = real
    res = invoke("generate", "--prompt", P, "--seeds", "0", "1", "2", "--out", out, "--json")
    assert json.loads(res.stdout)["generated"] == 2


@pytest.mark.slow
def test_sigint_in_a_real_process(tmp_path):
    out = tmp_path / "o"
    # twelve runs of one step: the signal goes out once the first is complete, with the rest still to do.
    # The command's SIGINT is the default one, as in a terminal: a shell starts background jobs with SIGINT ignored,
    # children inherit that, and Python then never installs its handler (a suite run from such a job saw the
    # command ignore the signal, finish every run and exit 0)
    seeds = [str(i) for i in range(12)]
    proc = subprocess.Popen([sys.executable, "-m", "lowbit_video", "generate", "--prompt", P, "--seeds", *seeds,
                             "--steps", "1", "--out", str(out), "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    first = runstore.run_dir(out, "tiny-shapes", "fp16", P, 0) / "meta.json"
    started = time.time()
    deadline = started + 300
    while not first.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    # what the loop saw, for the message should the command not be running any more when the signal goes out
    seen = (f"first run complete: {first.exists()}, command ended: {proc.poll() is not None}, "
            f"after {time.time() - started:.1f} s")
    os.killpg(proc.pid, signal.SIGINT)  # as Ctrl-C at a terminal: to the whole process group (ffmpeg too)
    stdout, stderr = proc.communicate(timeout=120)
    lines = error_lines(stderr)
    assert proc.returncode == 130 and "Traceback" not in stderr, (seen, stderr, stdout[-500:])
    assert len(lines) == 1 and lines[0].startswith("interrupted: ") and lines[0].endswith(
        "runs complete; run the same command to resume"), stderr
    done = int(lines[0].split()[1])
    assert 1 <= done < len(seeds) and lines[0].startswith(f"interrupted: {done} of {len(seeds)} ")
    assert sum(runstore.is_complete(d) for d in runstore.iter_runs(out)) == done and leftovers(out) == []


# ------------------------------------------------------------------------------ refused inputs


def test_generate_without_ffmpeg_stops_before_loading_the_model(fake, tmp_path, monkeypatch):
    # imageio-ffmpeg takes IMAGEIO_FFMPEG_EXE as given; a name that is no executable must not cost a whole run
    monkeypatch.setenv("IMAGEIO_FFMPEG_EXE", str(tmp_path / "no-ffmpeg"))
    res = invoke("generate", "--prompt", P, "--out", tmp_path / "o")
    assert "IMAGEIO_FFMPEG_EXE" in one_line(res, 2) and "no-ffmpeg" in res.stderr
    assert fake.loads == 0 and not (tmp_path / "o").exists()


def test_generate_without_imageio_ffmpeg_stops_before_loading_the_model(fake, tmp_path, monkeypatch):
    real_import = builtins.__import__

    def no_imageio_ffmpeg(name, *args, **kwargs):
        if name == "imageio_ffmpeg":
            raise ImportError("No module named 'imageio_ffmpeg'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_imageio_ffmpeg)
    res = invoke("generate", "--prompt", P, "--out", tmp_path / "o")
    assert "pip install imageio-ffmpeg" in one_line(res, 2)
    assert fake.loads == 0 and not (tmp_path / "o").exists()


def test_a_complete_grid_needs_no_ffmpeg(fake, tmp_path, monkeypatch):
    out = tmp_path / "o"
    assert invoke("generate", "--prompt", P, "--out", out).exit_code == 0
    monkeypatch.setenv("IMAGEIO_FFMPEG_EXE", str(tmp_path / "no-ffmpeg"))
    res = invoke("generate", "--prompt", P, "--out", out)
    assert res.exit_code == 0, res.stderr


def test_a_huge_prompt_with_an_unknown_word_is_named_in_a_short_line(tmp_path):
    prompt = "a red circle moving left on a black background " * 200 + "a zorbly square static on a gray background"
    prompt += " " + "x" * (20_000 - len(prompt) - 1)
    assert len(prompt) == 20_000
    res = invoke("generate", "--prompt", prompt, "--out", tmp_path / "o")
    line = one_line(res, 2)
    assert "unknown word 'zorbly'" in line and "a zorbly square" in line and "20000 characters" in line
    assert len(line) < 600, len(line)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("args, needle", [(["--height", "33"], "32x32 only"), (["--guidance", "-1"], "--guidance"),
                                          (["--guidance", "nan"], "--guidance"), (["--width", "0"], "--width")])
def test_values_the_model_refuses_create_nothing(tmp_path, args, needle):
    res = invoke("generate", "--prompt", P, "--steps", "1", "--out", tmp_path / "o", *args)
    assert needle in one_line(res, 2)
    assert not (tmp_path / "o").exists()


def test_an_existing_empty_out_stays_after_a_refusal(tmp_path):
    (tmp_path / "o").mkdir()
    res = invoke("generate", "--prompt", P, "--steps", "1", "--out", tmp_path / "o", "--frames", "3")
    assert "8 frames" in one_line(res, 2)
    assert (tmp_path / "o").is_dir() and not any((tmp_path / "o").iterdir())
