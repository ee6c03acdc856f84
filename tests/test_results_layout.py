"""results/ holds what a user reads: a bounded number of tracked files, and every markdown result opens with the
one command that regenerates it, a command that exists (a `lowbit-video` subcommand, a benchmarks/ script with
--help, a Makefile target or a test file)."""

from __future__ import annotations

import importlib
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results"
MAX_TRACKED = 40
COMMAND_LINE = re.compile(r"^Command: `([^`]+)`")


def _result_pages() -> list[Path]:
    return sorted(RESULTS.glob("*.md"))


def _command_of(page: Path) -> str | None:
    """The command of a results page: the first non-empty line after its `# ` title, `Command: `...``."""
    lines = [ln.strip() for ln in page.read_text(encoding="utf-8").splitlines() if ln.strip()]
    if len(lines) < 2 or not lines[0].startswith("# "):
        return None
    m = COMMAND_LINE.match(lines[1])
    return m.group(1) if m else None


def _cli_app():
    """The Typer app behind the `lowbit-video` console script, as pyproject.toml declares it."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module_name = scripts["lowbit-video"].split(":")[0]
    module = importlib.import_module(module_name)
    return module.app


def _cli_path_exists(words: list[str]) -> bool:
    """Whether `lowbit-video WORDS...` names a command (a leaf of the command tree, options and arguments after it)."""
    import typer

    node = typer.main.get_command(_cli_app())
    resolved = 0
    for word in words:  # a group has `commands` (typer may ship its own click, so no isinstance check)
        if word not in getattr(node, "commands", {}):
            break
        node = node.commands[word]
        resolved += 1
    return resolved > 0 and not hasattr(node, "commands")


def _check_command(command: str) -> str | None:
    """None when the command exists here, else the reason it does not."""
    words = shlex.split(command.replace("\\\n", " "))
    if "-m" in words and words[words.index("-m") + 1:words.index("-m") + 2] == ["lowbit_video"]:
        words = ["lowbit-video"] + words[words.index("-m") + 2:]  # python -m / torchrun -m lowbit_video ...
    if words[0] == "lowbit-video":
        return None if _cli_path_exists(words[1:]) else f"no `lowbit-video {' '.join(words[1:3])}` command"
    if words[0].startswith("python") and len(words) > 1 and words[1].startswith("benchmarks/"):
        script = ROOT / words[1]
        if not script.is_file():
            return f"{words[1]} does not exist"
        if "argparse" not in script.read_text(encoding="utf-8"):
            return f"{words[1]} has no argparse --help"
        return None
    if words[0] == "make":
        targets = re.findall(r"^([A-Za-z0-9_.-]+):", (ROOT / "Makefile").read_text(), flags=re.M)
        return None if words[1] in targets else f"no Makefile target {words[1]!r}"
    if "pytest" in words:
        missing = [w.split("::")[0] for w in words if w.startswith("tests/") and not (ROOT / w.split("::")[0]).exists()]
        return f"missing test files {missing}" if missing else None
    return "not a lowbit-video command, a benchmarks/ script, a make target or a pytest run"


def test_results_folder_holds_at_most_40_tracked_files():
    try:
        out = subprocess.run(["git", "ls-files", "results"], cwd=ROOT, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout (or git is missing): the tracked-file count needs `git ls-files`")
    tracked = out.stdout.split()
    assert len(tracked) <= MAX_TRACKED, f"{len(tracked)} tracked files under results/ (at most {MAX_TRACKED}): per-run " \
                                        "logs, per-run JSON and one-off scripts belong out of git"


def test_every_results_page_opens_with_its_command():
    pages = _result_pages()
    assert pages, "results/ has no markdown pages"
    missing = [p.name for p in pages if _command_of(p) is None]
    assert not missing, f"results pages without a `Command: `...`` line right under the title: {missing}"


@pytest.mark.parametrize("page", _result_pages(), ids=lambda p: p.name)
def test_the_command_of_each_results_page_exists(page):
    command = _command_of(page)
    if command is None:
        pytest.fail(f"{page.name} names no command (see test_every_results_page_opens_with_its_command)")
    reason = _check_command(command)
    assert reason is None, f"{page.name}: `{command}`: {reason}"


def test_the_command_check_refuses_what_does_not_exist():
    # the checks above must be able to fail: commands that do not exist are named as such
    assert _check_command("lowbit-video bench no-such-benchmark --json") is not None
    assert _check_command("lowbit-video bench") is not None  # a group, not a command
    assert _check_command("python benchmarks/no_such_script.py --help") is not None
    assert _check_command("make no-such-target") is not None
    assert _check_command("bash results/scripts/run.sh") is not None
    assert _check_command("lowbit-video bench kernels --json") is None


def test_benchmarks_scripts_answer_help_without_a_gpu():
    for script in sorted((ROOT / "benchmarks").glob("*.py")):
        out = subprocess.run([sys.executable, str(script), "--help"], cwd=ROOT, capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, f"{script.name} --help failed: {out.stderr[-500:]}"
        assert "usage:" in out.stdout, script.name


def test_kernels_json_is_what_bench_kernels_prints():
    # the product's own markdown renderer of `bench kernels --json` must read the committed file, every row of it
    import json

    from lowbit_video.bench.kernels import to_markdown

    info = json.loads((RESULTS / "kernels-h200.json").read_text())
    assert isinstance(info, dict) and {"gpu", "torch", "triton", "rows", "baselines"} <= set(info)
    # one measurement, no per-round keys beside the ones lowbit_video/bench/kernels.py writes
    assert set(info) <= {"gpu", "torch", "triton", "cuda", "driver", "rows", "baselines", "e2e", "sageattention"}
    table = to_markdown(info)
    for row in info["rows"]:
        assert f"| {row['shape']} | {row['recipe']} |" in table
    assert {b["backend"] for b in info["baselines"]} >= {"sdpa-cudnn"}


def test_e2e_json_is_what_bench_e2e_prints():
    import json

    rows = json.loads((RESULTS / "e2e-h200.json").read_text())
    keys = {"model", "resolution", "recipe", "tokens", "blocks", "params", "ms", "ms_all", "x_cudnn", "attention_calls"}
    assert isinstance(rows, list) and rows
    assert all(set(r) == keys for r in rows), "rows as lowbit_video/bench/e2e.py writes them"
    runs = lambda rs: {(r["model"], r["resolution"]) for r in rs}  # noqa: E731
    assert runs(r for r in rows if r["recipe"] == "sdpa-cudnn") == runs(rows)


def test_queued_table_ratios_against_cudnn_queued_and_dashes_where_unmeasured():
    from benchmark_scripts import load

    tables = load("results_tables")
    info = {"baselines": [{"shape": "a", "backend": "sdpa-cudnn", "ms": 2.0, "queued_ms": 1.5},
                          {"shape": "b", "backend": "sdpa-cudnn", "ms": 9.0}],
            "rows": [{"shape": "a", "recipe": "r", "total_ms": 2.5, "queued_ms": 1.2, "ratio_cudnn_queued": 1.25},
                     {"shape": "b", "recipe": "r", "total_ms": 8.0}]}
    lines = tables.kernels_table(info, "queued").splitlines()
    assert lines[0] == "| recipe, queued | a ms | × cuDNN |"  # shape b has no queued timing: no column
    assert lines[2] == "| SDPA cuDNN bf16 | 1.50 | 1.00× |" and lines[3] == "| `r` | 1.20 | 1.25× |"
    assert tables.kernels_table({"baselines": [], "rows": [{"shape": "b", "recipe": "r"}]}, "queued") == ""


def test_sustained_table_ratios_against_cudnn_sustained():
    from benchmark_scripts import load

    tables = load("results_tables")
    info = {"baselines": [{"shape": "a", "backend": "sdpa-cudnn", "ms": 1.3, "queued_ms": 1.2, "sustained_ms": 1.36},
                          {"shape": "a", "backend": "sdpa-flash", "ms": 2.4, "queued_ms": 2.3}],
            "rows": [{"shape": "a", "recipe": "r", "total_ms": 1.5, "queued_ms": 1.33, "sustained_ms": 1.31,
                      "ratio_cudnn_sustained": 1.36 / 1.31}]}
    lines = tables.kernels_table(info, "sustained").splitlines()
    assert lines[0] == "| recipe, sustained | a ms | × cuDNN |"
    # flash was not timed under sustained load: no row for it
    assert lines[2:] == ["| SDPA cuDNN bf16 | 1.36 | 1.00× |", "| `r` | 1.31 | 1.04× |"]


def test_clock_table_lists_the_sustained_timings_clocks():
    from benchmark_scripts import load

    tables = load("results_tables")
    info = {"baselines": [{"shape": "a", "backend": "sdpa-cudnn", "sustained_sm_mhz": 1470},
                          {"shape": "a", "backend": "sdpa-flash"}],
            "rows": [{"shape": "a", "recipe": "r", "sustained_sm_mhz": 1965},
                     {"shape": "b", "recipe": "r", "sustained_sm_mhz": 1800}]}
    assert tables.clock_table(info).splitlines() == [
        "| SM clock under sustained load, MHz | a | b |", "|---|---|---|",
        "| SDPA cuDNN bf16 | 1470 | — |", "| `r` | 1965 | 1800 |"]
    assert tables.clock_table({"baselines": [], "rows": [{"shape": "a", "recipe": "r"}]}) == ""


def test_e2e_breakdown_table_sums_each_forwards_kinds():
    from benchmark_scripts import load

    tables = load("results_tables")
    rows = [{"recipe": "sdpa-cudnn", "resolution": "480p", "ms": 10.0,
             "gpu_ms_by_kind": {"SDPA": {"ms": 6.0, "kernels": 2}, "GEMM": {"ms": 3.5, "kernels": 4}}},
            {"recipe": "r", "resolution": "480p", "ms": 8.0,
             "gpu_ms_by_kind": {"quantized attention": {"ms": 4.0, "kernels": 1}, "SDPA": {"ms": 0.25, "kernels": 1},
                                "GEMM": {"ms": 3.25, "kernels": 4}}},
            {"recipe": "s", "resolution": "480p", "ms": 9.0}]  # not profiled: no column
    assert tables.e2e_breakdown_table(rows).splitlines() == [
        "| GPU ms of one forward | SDPA cuDNN bf16 (480p) | `r` (480p) |", "|---|---|---|",
        "| quantized attention | — | 4.00 |", "| SDPA | 6.00 | 0.25 |", "| GEMM | 3.50 | 3.25 |",
        "| total (kernels) | 9.50 | 7.50 |", "| forward, CUDA events (median) | 10.00 | 8.00 |"]
    assert tables.e2e_breakdown_table(rows[2:]) == ""
    rows[1].update(gpu_span_ms=7.75, gpu_idle_ms=0.25)  # the span and idle time, where the row has them
    assert tables.e2e_breakdown_table(rows).splitlines()[-3:] == [
        "| GPU work, first start to last end | — | 7.75 |", "| GPU idle within it | — | 0.25 |",
        "| forward, CUDA events (median) | 10.00 | 8.00 |"]


def test_results_tables_lay_out_the_committed_json():
    out = subprocess.run([sys.executable, "benchmarks/results_tables.py", "kernels", "results/kernels-h200.json"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "| `sage2-int8` |" in out.stdout and "SDPA cuDNN bf16" in out.stdout
    e2e = subprocess.run([sys.executable, "benchmarks/results_tables.py", "e2e", "results/e2e-h200.json"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert e2e.returncode == 0, e2e.stderr
    assert "sage2-int8" in e2e.stdout and "× cuDNN" in e2e.stdout
    bad = subprocess.run([sys.executable, "benchmarks/results_tables.py", "e2e", "results/kernels-h200.json"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.startswith("error: ")
