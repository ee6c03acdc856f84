"""Hostile values for every option and argument of every command: each ends in exit code 2 and one
`error:` line on stderr (or, where the value is a fine one for that option, exit code 0), never a
traceback, and leaves no file in the working folder.

The options are read from the Typer app's command objects, not listed here, so a new option or
command is fuzzed without editing this file. The values depend on the option's type: paths get an
empty one, non-UTF-8 bytes (as the OS hands them to Python: lone surrogates), a 5000-character name,
a folder where a file is meant and a file where a folder is; integers and floats get negative, NaN,
infinite, empty and too-large values; text gets empty, 20 000 characters and non-UTF-8 bytes.

Commands run in process (CliRunner, as test_generate.py does). What a command would run for long
on an accepted value is cheap here: generate runs test_generate.py's fake model, ablate's rowsum
study reads small synthetic captures (test_ablate_rowsum.py) and draws no PNG, train-tiny's training loop is replaced
by one that records its config (the loop is tested in test_models_tiny_shapes_model.py), and
commands that read runs get a small grid made once."""

import typing
from pathlib import Path

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from lowbit_video import generate as gen
from lowbit_video.cli import app

from test_generate import PROMPTS, FakeRegistry

runner = CliRunner()
P = PROMPTS[0]
HUGE_INT = "9" * 30


def commands(cmd=None, path=()):
    """(command path, click command) of every command of the app that runs (groups' leaves)."""
    cmd = cmd if cmd is not None else get_command(app)
    subs = getattr(cmd, "commands", None)
    if subs:
        for name, sub in subs.items():
            yield from commands(sub, (*path, name))
    else:
        yield path, cmd


def element_type(param):
    ann = param.type_descriptor.annotation
    return typing.get_args(ann)[0] if typing.get_origin(ann) in (list, tuple) else ann


def hostile(param, places) -> dict[str, str]:
    """{kind: value} to try on `param`."""
    t = element_type(param)
    if t is Path or "path" in param.name or param.name.endswith("_dir") or param.name in ("out", "tensors", "prompts"):
        return {"empty": "", "non-utf8": "\udcff\udcfe", "long name": "x" * 5000,
                "a folder": str(places["folder"]), "a file": str(places["file"])}
    if t is int:
        return {"negative": "-1", "nan": "nan", "empty": "", "huge": HUGE_INT}
    if t is float:
        return {"nan": "nan", "-inf": "-inf", "empty": "", "negative": "-1", "huge": "1e999"}
    return {"empty": "", "20 KB": "y" * 20_000, "non-utf8": "\udcff\udcfe", "negative": "-1"}


# (command, option, kind) whose hostile value is a fine value of that option: exit 0 or 2 allowed.
ACCEPTED = {
    # a folder to search for runs, or a folder to write into: a folder is what it takes
    ("adherence", "run_dirs", "a folder"), ("evaluate", "run_dirs", "a folder"), ("compare", "run_dirs", "a folder"),
    ("compare", "--plots", "a folder"), ("generate", "--out", "a folder"), ("ablate", "--out", "a folder"),
    ("train-tiny", "--out", "a folder"), ("generate", "--capture-qkv", "a folder"),
    ("evaluate", "--weights-dir", "a folder"), ("metrics", "--weights-dir", "a folder"),
    ("weights check", "--weights-dir", "a folder"), ("ablate", "--weights-dir", "a folder"),
    ("generate", "--model-path", "a folder"),
    # weights are optional: a folder that does not exist (or a file) makes the learned metrics unavailable
    *((c, "--weights-dir", k) for c in ("evaluate", "metrics", "weights check", "ablate")
      for k in ("empty", "20 KB", "negative", "long name", "a file")),
    # negative blocks and steps count from the end, as in recipes
    ("generate", "--capture-blocks", "negative"), ("generate", "--capture-steps", "negative"),
    ("generate", "--capture-blocks", "huge"), ("generate", "--capture-steps", "huge"),
    # an empty --capture-qkv is no capture; text that names a folder for captures is any folder name
    ("generate", "--capture-qkv", "empty"), ("generate", "--capture-qkv", "negative"),
    # a limit past the number of prompts keeps them all; an empty study option keeps the study's
    ("generate", "--prompt-limit", "huge"), ("ablate", "--prompt-limit", "huge"),
    ("ablate", "--model", "empty"), ("ablate", "--prompts", "empty"), ("ablate", "--model-path", "empty"),
    ("ablate", "--seeds", "empty"), ("ablate", "--shard", "empty"),
    # compare's frame-grid filter picks nothing: the plots are made without grids
    ("compare", "--grid", "empty"), ("compare", "--grid", "20 KB"), ("compare", "--grid", "negative"),
    ("compare", "--grid-count", "huge"), ("compare", "--grid-frames", "huge"),
    # an empty shard or metric list is none given: one process, every metric
    ("generate", "--shard", "empty"), ("evaluate", "--shard", "empty"), ("evaluate", "--metrics", "empty"),
    # a file where a file is written
    ("compare", "--out", "a file"),
    # diagnose: a seed is any integer; --layout is read only with --tensors; no RoPE segments is a setting
    ("diagnose outliers", "--seed", "negative"), ("diagnose attention", "--seed", "negative"),
    *(("diagnose outliers", "--layout", k) for k in ("empty", "20 KB", "negative")),
    ("diagnose outliers", "--rope-segments", "empty"),
    # what only the replaced stages read (see the module doc): train-tiny's training loop judges its
    # own settings, and ablate's model, prompts and device are checked when it generates
    *(("train-tiny", o, "negative") for o in ("--lr", "--minutes", "--workers", "--ckpt-every", "--seed")),
    *(("train-tiny", "--device", k) for k in ("empty", "20 KB", "negative")),
    ("train-tiny", "--out", "long name"), ("train-tiny", "--out", "a file"),
    *(("ablate", "--model", k) for k in ("20 KB", "negative")),
    *(("ablate", o, k) for o in ("--model-path", "--prompts") for k in ("long name", "a folder", "a file")),
    *(("ablate", "--device", k) for k in ("empty", "20 KB", "negative")), ("ablate", "--prompt-limit", "negative"),
}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Runs to read (a small grid, scored), a folder and a file to misuse, synthetic captures."""
    from test_ablate_rowsum import _captures

    mp = pytest.MonkeyPatch()
    reg = FakeRegistry()
    mp.setattr(gen, "_registry", lambda: reg)
    base = tmp_path_factory.mktemp("fuzz")
    runs = base / "runs"
    assert runner.invoke(app, ["generate", "-r", "fp16", "mxattention", "--prompt", P, "--out", str(runs)]).exit_code == 0
    assert runner.invoke(app, ["evaluate", str(runs), "--metrics", "psnr"]).exit_code == 0
    (base / "a-folder").mkdir()
    (base / "a-file.txt").write_text("not what was asked for\n")
    caps = _captures(base, blocks=(0,), n=32, heads=1, d=32)  # small: ablate runs the study per accepted value
    import lowbit_video.ablate.rowsum as rowsum
    import lowbit_video.models.tiny_shapes.train as train

    mp.setattr(rowsum, "ensure_captures", lambda r, cap, rep=None: caps)
    mp.setattr(rowsum, "save_figure", lambda fig, path: (rowsum.pyplot().close(fig), path.write_bytes(b"png")))
    mp.setattr(train, "train", lambda cfg, **kw: {"config": str(cfg)})
    yield {"base": base, "runs": runs, "folder": base / "a-folder", "file": base / "a-file.txt"}
    mp.undo()


def base_args(path: tuple, world, scratch: Path) -> list[str]:
    """Arguments that make `path` a cheap, valid command; the fuzzed option comes after them."""
    runs = str(world["runs"])
    return {
        ("generate",): ["--prompt", P, "--steps", "1", "--out", str(scratch / "g")],
        ("adherence",): [runs], ("evaluate",): [runs, "--metrics", "psnr"], ("compare",): [runs],
        ("ablate",): ["rowsum", "--steps", "1", "--out", str(scratch / "ab"), "--quiet"],
        ("train-tiny",): ["--steps", "1", "--out", str(scratch / "tt")],
        ("diagnose", "attention"): ["--seq", "64", "--heads", "1"], ("diagnose", "outliers"): ["--seq", "64", "--heads", "1"],
        ("recipes", "validate"): [str(Path(__file__).parents[1] / "recipes" / "fp16.toml")],
    }.get(path, [])


def tree(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def error_lines(stderr: str) -> list[str]:
    """stderr without progress and warnings ("loaded ...", timestamped lines, "warning: ...")."""
    return [l for l in stderr.splitlines() if l.strip() and not l.startswith(("loaded ", "[", "warning: "))
            and not l.endswith(("already complete", "already scored")) and not l.startswith("wrote ")]


ALL = [path for path, _ in commands()]


def test_every_command_is_fuzzed():
    # the walk reaches the subcommands of groups, and every accepted exception names an option that exists
    assert {("generate",), ("weights", "check"), ("diagnose", "attention"), ("bench", "e2e")} <= set(ALL)
    cmds = dict(commands())
    for command, option, _ in ACCEPTED:
        names = {o for p in cmds[tuple(command.split())].params for o in (p.opts if p.param_type_name == "option" else [p.name])}
        assert option in names, (command, option)


@pytest.mark.parametrize("path", ALL, ids=[" ".join(p) for p in ALL])
def test_hostile_values(path, world, tmp_path, monkeypatch):
    cmd = dict(commands())[path]
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    places = {"folder": world["folder"], "file": world["file"]}
    bad = []
    for param in cmd.params:
        if getattr(param, "is_flag", False) or param.name == "help":
            continue
        name = param.opts[0] if param.param_type_name == "option" else param.name
        for kind, value in hostile(param, places).items():
            scratch = tmp_path / f"s{len(bad)}-{abs(hash((name, kind))) % 10**8}"
            args = [*path, *base_args(path, world, scratch), *([name, value] if param.param_type_name == "option" else [value])]
            res = runner.invoke(app, args)
            lines = error_lines(res.stderr)
            ok_error = res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: ")
            fine = (path_name := " ".join(path), name, kind) in ACCEPTED and res.exit_code == 0
            clean = "Traceback" not in res.stderr and (res.exception is None or isinstance(res.exception, SystemExit))
            if not ((ok_error or fine) and clean) or tree(work):
                bad.append(f"{path_name} {name} {kind}: exit {res.exit_code}, {len(lines)} lines {lines[:2]!r:.200}, "
                           f"exception {res.exception!r:.120}, new files {sorted(tree(work))[:3]}")
    assert not bad, "\n".join(bad)
