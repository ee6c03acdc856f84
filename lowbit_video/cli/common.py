"""What every command module of the CLI shares: the consoles, the --json option and its printer,
the user-error handler, progress bars and list options that take several values after one flag.

Command modules import this one; it imports none of them.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import math
import os
import shutil
import sys
import typing
from pathlib import Path
from typing import Any, Callable, Iterator

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from typer.core import TyperCommand, TyperGroup, TyperOption

from ..disk_full import disk_reason
from ..errors import Interrupted, UserError, shorten_quotes
from ..progress_lines import LineProgress

# Tables must not be squeezed to 80 columns when stdout is a pipe or a CI log.
_WIDTH = max(shutil.get_terminal_size((160, 24)).columns, 120)
out = Console(soft_wrap=True, width=_WIDTH)
err = Console(stderr=True, soft_wrap=True)

JsonOpt = typer.Option(False, "--json", help="Print exactly one JSON object on stdout instead of a table.")
DEVICE_HELP = "auto (CUDA when torch sees a GPU, else the CPU), cpu, cuda or cuda:N; runs record the device they ran on."

# typer's rich help prints a value type after every option, "<bool>" after flags too (--json, --overwrite,
# --help), which take no value; the help shows none for them. Older typer releases have no such hook
# (and print no type there), so the CLI runs with them unchanged.
_display_type = getattr(TyperOption, "display_type_rich", None)
if _display_type is not None:
    TyperOption.display_type_rich = lambda self, ctx: None if self.is_flag else _display_type(self, ctx)


def line_progress(what: str, quiet: bool, prefix: str = "") -> LineProgress | None:
    """Timestamped progress lines on stderr where it is not a terminal (CI and cluster logs draw no
    progress bars), unless quiet."""
    return None if quiet or err.is_terminal else LineProgress(what, prefix=prefix)


def report_broken(errors: list[str]) -> None:
    """Files a listing could not load: one `error:` line each and exit 2, after the good ones were
    listed (a broken file among good ones hides none of them)."""
    for e in errors:
        print(f"error: {e}", file=sys.stderr)
    if errors:
        raise typer.Exit(2)


# A path the system refuses (too long, not a folder on the way, no permission, gone): the user's to fix.
_PATH_ERRORS = {errno.ENAMETOOLONG, errno.ENOTDIR, errno.EISDIR, errno.ELOOP, errno.EACCES, errno.EPERM, errno.EROFS,
                errno.ENOENT}


def _shown(path: Any, limit: int = 160) -> str:
    text = os.fsdecode(path) if isinstance(path, bytes) else str(path)
    return text if len(text) <= limit else f"{text[:limit // 2]}…{text[-limit // 4:]} ({len(text)} characters)"


def user_errors(fn: Callable) -> Callable:
    """Report UserError as one line on stderr with exit code 2 (no traceback for user mistakes); so
    too a write that failed for want of room anywhere (disk_full.py: the atomic writes already name
    their file and remove their temporaries; this catches the rest) and a path the system refuses.
    Ctrl-C is one line and exit code 130, as for any interrupted command (Interrupted: the command's own line)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except UserError as e:
            print(f"error: {one_line(str(e))}", file=sys.stderr)
            raise typer.Exit(2) from None
        except OSError as e:
            why = disk_reason(e)
            if why is not None:
                print(f"error: cannot write {_shown(e.filename or 'a file')}: {why}", file=sys.stderr)
            elif e.errno in _PATH_ERRORS and e.filename:
                print(f"error: {_shown(e.filename)}: {e.strerror}", file=sys.stderr)
            else:
                raise
            raise typer.Exit(2) from None
        except Interrupted as e:
            print(f"interrupted: {e}", file=sys.stderr)
            raise typer.Exit(130) from None
        except KeyboardInterrupt:  # a command with nothing more precise to say (generate says what is complete)
            print("interrupted: stopped by Ctrl-C before the end; results are written whole or not at all, so "
                  "the same command finishes the work", file=sys.stderr)
            raise typer.Exit(130) from None

    return wrapper


def one_line(message: str) -> str:
    """An error message as one short line: line breaks folded, long quoted values cut to an excerpt."""
    return " ".join(shorten_quotes(message).split())


class OneLineErrors(TyperGroup):
    """The app's group: a command line click cannot parse (an unknown option, a value that is no
    integer, a missing argument) is one `error: ...` line and exit code 2, like every other user
    mistake, instead of typer's usage panel."""

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        with _usage_errors():
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx: Any) -> Any:
        with _usage_errors():
            return super().invoke(ctx)

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        name, cmd, rest = super().resolve_command(ctx, args)
        if cmd is not None:
            guard_inputs(cmd)
        return name, cmd, rest


_TOO_LARGE = 2**63  # no count, size or seed of this CLI is this large; torch and numpy overflow past it


def guard_inputs(cmd: Any) -> None:
    """Refuse, on every option and argument of `cmd` (and of its subcommands), the values no command
    can mean, as a one-line usage error before the command runs: an empty path (it would be the
    working folder), text that is not valid UTF-8 (it cannot be printed or stored in JSON), a number
    that is NaN or infinite, an integer past 2^63. Done here, for whatever options a command has."""
    for sub in (getattr(cmd, "commands", None) or {}).values():
        guard_inputs(sub)
    for param in getattr(cmd, "params", []):
        if getattr(param, "type_descriptor", None) is not None and not getattr(param, "_guarded", False):
            _guard(param)


def _guard(param: Any) -> None:
    annotation = param.type_descriptor.annotation
    kind = (typing.get_args(annotation) or (annotation,))[0] if typing.get_origin(annotation) in (list, tuple) else annotation
    real = param.process_value

    def process_value(ctx: Any, value: Any) -> Any:
        for raw in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(raw, str):
                why = _text_problem(raw, is_path=kind is Path or param.name.endswith(("_path", "_dir")))
                if why:
                    raise typer.BadParameter(why, ctx=ctx, param=param)
        value = real(ctx, value)
        for v in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(v, float) and not math.isfinite(v):
                raise typer.BadParameter(f"{v} is not a finite number", ctx=ctx, param=param)
            if isinstance(v, int) and not isinstance(v, bool) and abs(v) >= _TOO_LARGE:
                raise typer.BadParameter(f"{v} is too large (at most 2^63 - 1)", ctx=ctx, param=param)
        return value

    param.process_value = process_value
    param._guarded = True


def _text_problem(text: str, *, is_path: bool) -> str | None:
    if is_path and not text:
        return "empty path"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:  # bytes the locale could not decode arrive as lone surrogates
        bad = text[e.start]
        byte = f" (byte 0x{ord(bad) - 0xDC00:02x})" if 0xDC80 <= ord(bad) <= 0xDCFF else ""
        return f"not valid UTF-8{byte}"
    return None


@contextlib.contextmanager
def _usage_errors() -> Iterator[None]:
    try:
        yield
    except typer.TyperException as e:  # click's UsageError and friends (typer ships its own click)
        if type(e).__name__ == "NoArgsIsHelpError":  # no arguments: the help was asked for
            raise
        ctx = getattr(e, "ctx", None)
        where = f"; see `{ctx.command_path} --help`" if ctx is not None else ""
        print(f"error: {one_line(e.format_message()).rstrip('.')}{where}", file=sys.stderr)
        raise typer.Exit(e.exit_code) from None


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, allow_nan=False) + "\n")


def progress_bar(disable: bool) -> Progress:
    """A transient rich progress bar on stderr (description, bar, done/total, elapsed time)."""
    return Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                    TimeElapsedColumn(), console=err, transient=True, disable=disable)


def relative(p: str, root: Path) -> str:
    """p relative to root, or p itself when it is not under root."""
    try:
        return str(Path(p).relative_to(root))
    except ValueError:
        return p


def short_path(p: str) -> str:
    """p relative to the working directory when it is under it (shorter table cells), else p."""
    try:
        return str(Path(p).resolve().relative_to(Path.cwd()))
    except ValueError:
        return p


class GreedyCommand(TyperCommand):
    """Lets list options take several values after one flag (`--seeds 0 1 2`, `--recipe fp16
    mxattention`) as well as repeated flags (`--seeds 0 --seeds 1`): each value after a listed option,
    up to the next argument starting with '-', is given to that option."""

    greedy: tuple[str, ...] = ("--seeds", "--recipe", "-r", "--prompt", "--capture-blocks", "--capture-steps")

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        out: list[str] = []
        opt, taken = None, 0
        for i, a in enumerate(args):
            if a == "--":
                out.extend(args[i:])
                break
            if a in self.greedy:
                opt, taken = a, 0
                out.append(a)
            elif a.startswith("-") and len(a) > 1:
                opt = None
                out.append(a)
            elif opt is not None:
                out.extend([a] if taken == 0 else [opt, a])
                taken += 1
            else:
                out.append(a)
        return super().parse_args(ctx, out)


class RichReporter:
    """generate's progress on stderr: one bar over runs, one over the denoising steps of a batch."""

    def __init__(self, quiet: bool, prefix: str = "", device: str = "") -> None:
        self.quiet = quiet
        self.prefix = prefix  # "[rank 0/2] " under torchrun
        self.device = device  # the resolved --device, named when the model is loaded
        self.progress = progress_bar(disable=not err.is_terminal)
        self.lines = line_progress("generate", quiet, prefix)
        self.runs_task = self.steps_task = None
        self.steps_done = 0
        self.started = False

    def planned(self, runs: list, todo: int) -> None:
        done = len(runs) - todo
        if done and not self.quiet:
            err.print(f"{self.prefix}{done} of {len(runs)} runs already complete", highlight=False, markup=False)
        if self.lines and todo:
            self.lines.planned(todo, len(runs))
        if todo:
            self.progress.start()
            self.started = True
            self.runs_task = self.progress.add_task("runs", total=todo)
            self.steps_task = self.progress.add_task("steps", total=1, visible=False)

    def loading(self, model: str) -> None:
        self.progress.update(self.runs_task, description=f"loading {model}")

    def loaded(self, model: str, seconds: float) -> None:
        self.progress.update(self.runs_task, description="runs")
        where = f" on {self.device}" if self.device else ""
        self.progress.console.print(f"{self.prefix}loaded {model}{where} in {seconds:.1f} s", highlight=False, markup=False)

    def batch_started(self, recipe: str, prompt: str, seeds: list, steps: int) -> None:
        short = prompt if len(prompt) <= 32 else prompt[:31] + "…"
        self.progress.update(self.runs_task, description=f"{recipe} · seed {','.join(map(str, seeds))} · {short}")
        if self.lines:
            self.lines.started(f"{recipe} · seed {','.join(map(str, seeds))} · {short}")
        self.steps_done = 0
        self.progress.reset(self.steps_task, total=steps, completed=0, visible=True, description="steps")

    def step(self, step: int, total: int) -> None:
        # one call per finished step (the step index may count from 0 or 1, so it is not used)
        self.steps_done = min(self.steps_done + 1, total)
        self.progress.update(self.steps_task, total=total, completed=self.steps_done)
        if self.lines:
            self.lines.step(total)

    def run_done(self, run: Any) -> None:
        self.progress.advance(self.runs_task)
        if self.lines:
            prompt = run.prompt if len(run.prompt) <= 32 else run.prompt[:31] + "…"
            self.lines.run_done(f"{run.recipe.name} · seed {run.seed} · {prompt}", run.status)

    def close(self) -> None:
        if self.started:
            self.progress.stop()
