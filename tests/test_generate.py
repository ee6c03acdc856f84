"""generate: the grid, paired runs, resume and atomicity, adherence; with a small fake VideoModel
(deterministic renders of the tiny-shapes generator) so these tests need no weights and run fast.
The real shipped model is exercised end to end in test_cli_generate.py."""

import dataclasses
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from lowbit_video import generate as gen
from lowbit_video import runstore, video_io
from lowbit_video.cli import app
from lowbit_video.errors import UserError
from lowbit_video.models.tiny_shapes.clips import render_clip
from lowbit_video.recipes import load_recipe

PROMPTS = ["a red circle moving right on a black background", "an orange square growing on a gray background"]


@dataclasses.dataclass
class Info:
    name: str
    family: str
    description: str = "fake"
    weights: str = "none"
    needs_path: bool = False
    default_steps: int = 3
    default_guidance: float = 1.0
    default_height: int = 32
    default_width: int = 32
    default_frames: int = 8


class FakeModel:
    """Renders the prompt's clip with seed-dependent placement; non-fp16 recipes add a small
    seed-determined perturbation (so recipes differ, and a seed pairs runs across recipes)."""

    def __init__(self):
        self.calls = []

    def generate(self, prompts, seeds, *, recipe, steps, guidance, height, width, frames, progress=None, capture=None):
        self.calls.append((recipe.name, list(prompts), list(seeds)))
        out = []
        for p, s in zip(prompts, seeds):
            clip = render_clip(p, seed=s, frames=frames, size=height)
            if recipe.name != "fp16":
                clip = np.clip(clip + 0.01 * np.random.default_rng(s).standard_normal(clip.shape), 0, 1)
            out.append(clip)
        for i in range(steps):
            if progress:
                progress(i, steps)
        return np.stack(out).astype(np.float32)

    def describe(self):
        return {"kind": "fake", "blocks": {1, 2}}


class FakeRegistry:
    def __init__(self):
        self.infos = {"tiny-shapes": Info("tiny-shapes", "tiny-shapes"),
                      "wan-fake": Info("wan-fake", "wan", needs_path=True)}
        self.loads = 0
        self.devices = []
        self.model = FakeModel()

    def list_models(self):
        return list(self.infos.values())

    def get_model_info(self, name):
        if name not in self.infos:
            raise UserError(f"unknown model {name!r}; known models: {', '.join(self.infos)}")
        return self.infos[name]

    def check_model_folder(self, name, path):
        pass  # the real registry's checks of a folder are tested in test_models_registry.py

    def folder_info(self, path, conditioning=None):
        from lowbit_video.models.registry import folder_info

        return folder_info(path, conditioning)  # the real reading of a folder (its errors are the CLI's to show)

    def load_model(self, name, path=None, device="cpu", dtype=None, conditioning=None):
        self.loads += 1
        self.devices.append(device)
        return self.model


@pytest.fixture
def fake(monkeypatch):
    reg = FakeRegistry()
    monkeypatch.setattr(gen, "_registry", lambda: reg)
    return reg


def cfg(out, **kw):
    kw.setdefault("prompts", PROMPTS)
    kw.setdefault("recipes", ["fp16", "mxattention"])
    kw.setdefault("seeds", [0, 1])
    return gen.GenerateConfig(out=out, **kw)


def shas(result):
    return {(r["recipe"], r["prompt"], r["seed"]): runstore.read_meta(r["dir"])["frames_sha256"] for r in result["runs"]}


def test_grid_writes_every_run_with_full_meta(fake, tmp_path):
    res = gen.generate(cfg(tmp_path))
    assert (res["generated"], res["skipped"]) == (8, 0) and len(res["runs"]) == 8
    assert {r["status"] for r in res["runs"]} == {"done"}
    assert fake.loads == 1
    # one seed per call by default, recipe by recipe
    assert [(c[0], c[2]) for c in fake.model.calls] == [("fp16", [0]), ("fp16", [1])] * 2 + [("mxattention", [0]), ("mxattention", [1])] * 2
    r = res["runs"][0]
    d = tmp_path / "tiny-shapes" / "fp16" / runstore.prompt_slug(PROMPTS[0]) / "seed-0"
    assert r["dir"] == str(d)
    assert sorted(p.name for p in d.iterdir()) == ["frames.npz", "frames.png", "meta.json", "video.mp4"]
    meta = runstore.read_meta(d)
    assert meta["prompt"] == PROMPTS[0] and meta["seed"] == 0 and meta["steps"] == 3 and meta["device"] == "cpu"
    assert meta["recipe"]["name"] == "fp16" and meta["policy"] == meta["recipe"]["policy"]
    assert meta["model"]["name"] == "tiny-shapes" and meta["model"]["describe"] == {"kind": "fake", "blocks": [1, 2]}
    assert meta["size"] == {"height": 32, "width": 32, "frames": 8}
    assert set(meta["timings"]) >= {"load_s", "sample_s", "write_s"}
    assert {"lowbit_video", "torch", "diffusers"} <= set(meta["versions"])
    assert "git_revision" in meta and meta["created"]
    assert "lossless" in meta["outputs"]["frames.npz"]
    frames = video_io.read_frames_npz(d / "frames.npz")
    assert meta["frames_sha256"] == video_io.frames_sha256(frames) and meta["frames_shape"] == [8, 32, 32, 3]


def test_batches_hold_seeds_of_one_prompt_and_recipe(fake, tmp_path):
    res = gen.generate(cfg(tmp_path, seeds=[0, 1, 2], batch=2))
    assert [(c[0], c[2]) for c in fake.model.calls] == [("fp16", [0, 1]), ("fp16", [2])] * 2 + [("mxattention", [0, 1]), ("mxattention", [2])] * 2
    meta = runstore.read_meta(res["runs"][0]["dir"])
    assert meta["timings"]["batch_size"] == 2
    assert shas(res) == shas(gen.generate(cfg(tmp_path / "b1", seeds=[0, 1, 2])))  # the fake is batch-invariant


def test_rerun_skips_everything_without_loading(fake, tmp_path):
    gen.generate(cfg(tmp_path))
    fake.loads = 0
    res = gen.generate(cfg(tmp_path))
    assert (res["generated"], res["skipped"]) == (0, 8) and fake.loads == 0
    # a larger grid only generates what is new
    res = gen.generate(cfg(tmp_path, seeds=[0, 1, 2]))
    assert (res["generated"], res["skipped"]) == (4, 8)


def test_paired_and_deterministic(fake, tmp_path):
    a = shas(gen.generate(cfg(tmp_path / "a")))
    b = shas(gen.generate(cfg(tmp_path / "b")))
    assert a == b
    for p in PROMPTS:
        assert a[("fp16", p, 0)] != a[("mxattention", p, 0)]
        assert a[("fp16", p, 0)] != a[("fp16", p, 1)]


def test_interrupted_write_is_not_complete_and_is_redone(fake, tmp_path, monkeypatch):
    real = video_io.write_frame_strip
    calls = {"n": 0}

    def dying(frames, path, **kw):
        calls["n"] += 1
        if calls["n"] == 2:  # Ctrl-C while the second run writes its strip
            open(runstore.temp_name(path), "wb").close()  # as if killed mid-write
            raise KeyboardInterrupt
        return real(frames, path, **kw)

    monkeypatch.setattr(video_io, "write_frame_strip", dying)
    with pytest.raises(KeyboardInterrupt):
        gen.generate(cfg(tmp_path, recipes=["fp16"], prompts=PROMPTS[:1]))
    d0, d1 = (runstore.run_dir(tmp_path, "tiny-shapes", "fp16", PROMPTS[0], s) for s in (0, 1))
    assert runstore.is_complete(d0) and not runstore.is_complete(d1)
    # the attempt was built beside the run folder and removed on Ctrl-C: nothing of it is left
    assert not (d1.exists() and any(d1.iterdir())) and not [p for p in d1.parent.iterdir() if runstore.is_temp(p)]
    # what a SIGKILL leaves instead: the half-built folder beside it, outputs of an older attempt in it
    stale = runstore.temp_name(d1)
    stale.mkdir(parents=True)
    (stale / "video.mp4").write_bytes(b"partial")
    d1.mkdir(exist_ok=True)
    (d1 / "frames.npz").write_bytes(b"partial")
    assert [p.name for p in runstore.iter_runs(tmp_path)] == ["seed-0"]
    monkeypatch.setattr(video_io, "write_frame_strip", real)
    res = gen.generate(cfg(tmp_path, recipes=["fp16"], prompts=PROMPTS[:1]))
    assert [r["status"] for r in res["runs"]] == ["skipped", "done"]
    assert runstore.is_complete(d1) and not [p for p in d1.iterdir() if runstore.is_temp(p)]
    assert not [p for p in d1.parent.iterdir() if runstore.is_temp(p)]
    fresh = gen.generate(cfg(tmp_path / "fresh", recipes=["fp16"], prompts=PROMPTS[:1]))
    assert shas(fresh) == shas(res)  # the resumed run is the run a fresh command makes


def test_other_settings_are_an_error_not_a_skip(fake, tmp_path):
    gen.generate(cfg(tmp_path, seeds=[0], recipes=["fp16"]))
    with pytest.raises(UserError, match="other settings.*steps 3 != 5"):
        gen.generate(cfg(tmp_path, seeds=[0], recipes=["fp16"], steps=5))
    res = gen.generate(cfg(tmp_path, seeds=[0], recipes=["fp16"], steps=5, overwrite=True))
    assert res["generated"] == 2 and runstore.read_meta(res["runs"][0]["dir"])["steps"] == 5


def test_an_eager_run_is_not_taken_for_a_compiled_one(fake, tmp_path):
    gen.generate(cfg(tmp_path, seeds=[0], recipes=["fp16"]))
    with pytest.raises(UserError, match="other settings.*compiled False != True"):
        gen.generate(cfg(tmp_path, seeds=[0], recipes=["fp16"], compile=True))
    # a run stored before runs recorded `compiled` ran eagerly: still skipped by an eager request
    run = runstore.find_runs([tmp_path])[0]
    meta = runstore.read_meta(run)
    del meta["request"]["compiled"]
    (run / runstore.META_NAME).write_text(json.dumps(meta))
    assert gen.generate(cfg(tmp_path, seeds=[0], recipes=["fp16"]))["skipped"] == 2


def test_compile_needs_a_model_with_blocks_and_no_captures(fake, tmp_path):
    with pytest.raises(UserError, match="^--compile: model tiny-shapes has no transformer blocks to compile$"):
        gen.generate(cfg(tmp_path / "a", seeds=[0], recipes=["fp16"], compile=True))
    with pytest.raises(UserError, match="--capture-qkv cannot be combined with --compile"):
        gen.generate(cfg(tmp_path / "b", seeds=[0], recipes=["fp16"], compile=True, capture_dir=str(tmp_path / "q")))
    assert fake.model.calls == [] and not (tmp_path / "a").exists()


def test_bad_inputs_are_user_errors(fake, tmp_path):
    bad = [
        (dict(recipes=["no-such-recipe"]), "unknown recipe"),
        (dict(prompts=["a purple circle moving left on a black background"]), "unknown word 'purple'"),
        (dict(prompts=None, prompts_file=str(tmp_path / "nope.txt")), "no such file"),
        (dict(model="no-such-model"), "unknown model"),
        (dict(model="wan-fake"), "--model-path"),
        (dict(model="wan-fake", model_path="/nonexistent"), "/nonexistent"),
        (dict(seeds=[-1]), "--seeds"),
        (dict(steps=0), "--steps"),
    ]
    for kw, msg in bad:
        with pytest.raises(UserError, match=msg):
            gen.generate(cfg(tmp_path, **kw))
    assert fake.loads == 0 and not any(tmp_path.iterdir())


def test_prompt_file_errors_name_the_line(fake, tmp_path):
    f = tmp_path / "p.txt"
    f.write_text("# header\na red circle moving left on a black background\na red blob\n")
    with pytest.raises(UserError, match=r"p.txt:3: .*'blob'"):
        gen.generate(cfg(tmp_path, prompts=None, prompts_file=str(f)))


def test_a_prompts_file_that_is_not_utf8_is_named(fake, tmp_path):
    f = tmp_path / "p.txt"
    f.write_bytes(b"a red circle moving left on a black background\n\xff\xfe\n")
    with pytest.raises(UserError, match=r"p.txt:2: not UTF-8 text \(byte 0xff"):
        gen.generate(cfg(tmp_path / "out", prompts=None, prompts_file=str(f)))
    with pytest.raises(UserError, match=r"prompts file .*p.txt: not UTF-8 text \(byte 0xff"):
        gen.generate(cfg(tmp_path / "out", model="wan-fake", model_path=str(tmp_path), prompts=None, prompts_file=str(f)))


@pytest.mark.parametrize("out, why", [("a-file", "exists and is not a folder"), ("a-file/runs", "is a file, not a folder"),
                                      ("/proc/lowbit-video-runs", "cannot write there")])
def test_an_unwritable_out_is_refused_before_the_model_loads(fake, tmp_path, out, why):
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(UserError, match=f"^--out .*{why}"):
        gen.generate(cfg(tmp_path / out if not out.startswith("/") else out))
    assert fake.loads == 0
    res = invoke("generate", "--prompt", PROMPTS[0], "--out", str(tmp_path / out if not out.startswith("/") else out))
    assert res.exit_code == 2 and res.stderr.startswith("error: --out") and "Traceback" not in res.output


def test_concurrent_generates_never_make_a_run_twice(fake, tmp_path):
    c = cfg(tmp_path, recipes=["fp16"], seeds=[0, 1, 2])
    held = runstore.run_dir(tmp_path, "tiny-shapes", "fp16", PROMPTS[0], 1)
    other = runstore.run_dir(tmp_path, "tiny-shapes", "fp16", PROMPTS[0], 2)
    real = fake.model.generate

    def generate_and_meanwhile_finish_another(prompts, seeds, **kw):
        clips = real(prompts, seeds, **kw)
        if seeds == [0] and not runstore.is_complete(other):  # "another process" completes seed 2 meanwhile
            gen.write_run(gen.Run(other, "tiny-shapes", load_recipe("fp16"), PROMPTS[0], 2), real([PROMPTS[0]], [2], **kw)[0],
                          meta={"request": {}})
        return clips

    fake.model.generate = generate_and_meanwhile_finish_another
    with runstore.claim_run(held, "generate"):  # "another process" is generating seed 1
        res = gen.generate(c)
    status = {(r["prompt"], r["seed"]): r["status"] for r in res["runs"]}
    assert status[(PROMPTS[0], 1)] == "claimed" and status[(PROMPTS[0], 2)] == "skipped"
    assert status[(PROMPTS[0], 0)] == "done" and res["claimed"] == 1
    assert "being generated by another process (pid" in next(r["note"] for r in res["runs"] if r["status"] == "claimed")
    assert [seeds for _, p, seeds in fake.model.calls if p == [PROMPTS[0]]] == [[0], [2]]  # 2 only by "the other"
    assert not runstore.is_complete(held)
    fake.model.calls.clear()
    res = gen.generate(c)  # the claim is gone: the run left to the other process is made now
    assert [seeds for _, p, seeds in fake.model.calls] == [[1]] and runstore.is_complete(held)
    assert not list(tmp_path.rglob(".claim-*"))  # released claims leave no file


# ------------------------------------------------------------------------------ CLI (in-process)

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, list(args))


def test_cli_json_shape_and_greedy_lists(fake, tmp_path):
    out = str(tmp_path / "D")
    res = invoke("generate", "--recipe", "fp16", "mxattention", "--prompt", PROMPTS[0], "--seeds", "0", "1",
                 "--out", out, "--json")
    assert res.exit_code == 0, res.stderr
    data = json.loads(res.stdout)
    assert set(data) == {"runs", "generated", "skipped", "claimed"} and data["generated"] == 4
    assert set(data["runs"][0]) == {"dir", "model", "recipe", "prompt", "seed", "status"}
    assert [(r["recipe"], r["seed"]) for r in data["runs"]] == [("fp16", 0), ("fp16", 1), ("mxattention", 0), ("mxattention", 1)]
    again = invoke("generate", "-r", "fp16", "-r", "mxattention", "--prompt", PROMPTS[0], "--seeds", "0", "--seeds", "1",
                   "--out", out)
    assert again.exit_code == 0 and "4 runs already complete" in again.stdout


@pytest.mark.parametrize("args,msg", [
    (["--recipe", "nope"], "unknown recipe"),
    (["--prompts", "/nonexistent/p.txt"], "no such file"),
    (["--prompt", "a red blob"], "unknown word 'blob'"),
    (["--prompts", "prompts/smoke.txt", "--prompt", PROMPTS[0]], "not both"),
    (["--model", "wan-fake", "--model-path", "/nonexistent"], "/nonexistent"),
])
def test_cli_errors_are_one_line(fake, tmp_path, args, msg):
    res = invoke("generate", *args, "--out", str(tmp_path))
    assert res.exit_code == 2
    lines = [l for l in res.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and msg in lines[0], res.stderr


def test_adherence_reads_lossless_frames_and_walks_folders(fake, tmp_path):
    gen.generate(cfg(tmp_path, recipes=["fp16"], seeds=[0, 1]))
    res = gen.adherence([tmp_path])
    assert res["n"] == 4 and res["color_accuracy"] == res["motion_accuracy"] == res["shape_accuracy"] == 1.0
    assert list(res["by_recipe"]) == ["fp16"] and res["by_recipe"]["fp16"]["n"] == 4
    # falls back to the PNG strip (exact) and to the mp4 (decoded) when frames.npz is missing
    run = runstore.run_dir(tmp_path, "tiny-shapes", "fp16", PROMPTS[0], 0)
    (run / "frames.npz").unlink()
    frames, source = gen.load_run_frames(run)
    assert source == "frames.png" and runstore.read_meta(run)["frames_sha256"] == video_io.frames_sha256(frames)
    (run / "frames.png").unlink()
    frames, source = gen.load_run_frames(run)
    assert source == "video.mp4" and frames.shape == (8, 32, 32, 3)
    # other models' runs are skipped with a note; JSON shape
    other = tmp_path / "wan" / "r" / "p" / "seed-0"
    other.mkdir(parents=True)
    runstore.atomic_write_json(other / "meta.json", {"model": {"name": "wan2.1-t2v-1.3b", "family": "wan"}, "prompt": "x"})
    cli = invoke("adherence", str(tmp_path / "tiny-shapes"), str(other), "--json")
    assert cli.exit_code == 0, cli.stderr
    data = json.loads(cli.stdout)
    # skipped: the wan run, and the run whose listed files were deleted above (damaged, reported)
    assert {"color_accuracy", "motion_accuracy", "shape_accuracy", "n"} <= set(data) and data["skipped"] == 2
    assert "not tiny-shapes" in cli.stderr
    none = invoke("adherence", str(other))
    assert none.exit_code == 2 and none.stderr.count("error:") == 1


def test_adherence_isolates_damaged_runs(fake, tmp_path):
    gen.generate(cfg(tmp_path, recipes=["fp16"], seeds=[0, 1]))
    truncated = runstore.run_dir(tmp_path, "tiny-shapes", "fp16", PROMPTS[0], 0)
    (truncated / "frames.npz").write_bytes((truncated / "frames.npz").read_bytes()[:100])
    empty = runstore.run_dir(tmp_path, "tiny-shapes", "fp16", PROMPTS[0], 1)
    (empty / "frames.npz").write_bytes(b"")
    bad_meta = runstore.run_dir(tmp_path, "tiny-shapes", "fp16", PROMPTS[1], 0)
    (bad_meta / "meta.json").write_text("{")
    res = gen.adherence([tmp_path])
    assert res["n"] == 1 and res["runs"] == 3
    reasons = {s["dir"]: s["reason"] for s in res["skipped"]}
    assert "frames.npz: damaged (BadZipFile" in reasons[str(truncated.resolve())]
    assert "frames.npz: damaged (EOFError" in reasons[str(empty.resolve())]
    assert reasons[str(bad_meta.resolve())].startswith("damaged run: unreadable meta.json")
    cli = invoke("adherence", str(tmp_path))
    assert cli.exit_code == 0 and cli.stderr.count("note: skipped") == 3 and "Traceback" not in cli.output


def test_without_a_terminal_progress_is_a_line_per_run_and_steps(fake, tmp_path):
    res = invoke("generate", "--recipe", "fp16", "--prompt", PROMPTS[0], "--seeds", "0", "1", "--steps", "8",
                 "--out", str(tmp_path))
    assert res.exit_code == 0, res.stderr
    lines = res.stderr.splitlines()
    assert any(l.endswith("generate: 2 runs to do") for l in lines), lines
    assert sum(" generate: run " in l and " done (fp16 · seed " in l for l in lines) == 2
    assert sum(": step " in l for l in lines) == 2 * 4  # steps 2, 4, 6, 8 of each run
    assert all(l.startswith("[") and " s] " in l for l in lines if "generate:" in l)
    quiet = invoke("generate", "--recipe", "fp16", "--prompt", PROMPTS[1], "--out", str(tmp_path), "--json")
    assert "generate:" not in quiet.stderr


# ----------------------------------------------------------------------------------------- --device


@pytest.mark.parametrize("cuda,asked,used", [(False, "auto", "cpu"), (True, "auto", "cuda"), (True, "cpu", "cpu")])
def test_meta_records_the_resolved_device(fake, tmp_path, monkeypatch, cuda, asked, used):
    # the fake model runs nowhere, so the CUDA branch is checked without a GPU
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    res = gen.generate(cfg(tmp_path, recipes=["fp16"], seeds=[0], prompts=PROMPTS[:1], device=asked))
    assert fake.devices == [used] and runstore.read_meta(res["runs"][0]["dir"])["device"] == used


def test_the_default_device_is_auto(fake, tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    res = invoke("generate", "--prompt", PROMPTS[0], "--out", str(tmp_path))
    assert res.exit_code == 0 and fake.devices == ["cpu"]
    assert "loaded tiny-shapes on cpu" in res.stderr  # the run header names the device
    assert gen.GenerateConfig().device == "auto"


def test_an_unknown_device_is_one_line(fake, tmp_path):
    res = invoke("generate", "--prompt", PROMPTS[0], "--device", "gpu", "--out", str(tmp_path))
    lines = [l for l in res.stderr.splitlines() if l.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and "--device must be auto, cpu, cuda or cuda:N" in lines[0]
    assert fake.loads == 0


# ------------------------------------------------------------------------------ shipped prompt sets


@pytest.mark.parametrize("name", ["smoke", "prompts/smoke.txt", None])
def test_a_shipped_prompt_set_by_name_from_any_directory(fake, tmp_path, monkeypatch, repo, name):
    monkeypatch.chdir(tmp_path)  # no prompts/ folder here
    res = gen.generate(cfg(tmp_path / "o", recipes=["fp16"], seeds=[0], prompts=None, prompts_file=name))
    lines = [l.strip() for l in (repo / "prompts" / "smoke.txt").read_text().splitlines()]
    assert [r["prompt"] for r in res["runs"]] == [l for l in lines if l and not l.startswith("#")]


def test_a_file_in_the_working_directory_wins_over_a_shipped_set(fake, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "smoke.txt").write_text(PROMPTS[1] + "\n")
    res = gen.generate(cfg(tmp_path / "o", recipes=["fp16"], seeds=[0], prompts=None, prompts_file="prompts/smoke.txt"))
    assert [r["prompt"] for r in res["runs"]] == [PROMPTS[1]]


def test_an_unknown_prompt_set_names_the_shipped_ones(fake, tmp_path, monkeypatch, repo):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError) as e:
        gen.generate(cfg(tmp_path / "o", prompts=None, prompts_file="nope"))
    assert str(e.value).startswith("prompts file nope: no such file")
    assert all(p.stem in str(e.value) for p in (repo / "prompts").glob("*.txt"))
