"""`lowbit-video weights fetch`: parse, call metrics.fetch, show progress and the outcome.

Progress goes to stderr: a rich bar per file (bytes, rate, time left) on a terminal, timestamped
plain lines (progress_lines) where stderr is not one. A failed file is one `error:` line on stderr
as soon as it is settled; the command goes on with the others and exits 2 at the end. An entry with
no download source is a `warning:` (nothing was tried; its metrics stay unavailable).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

import typer

from .common import JsonOpt, err, line_progress, out, print_json, user_errors

FETCH_HELP = """Download the weight files the named metrics need (or --all) into the weights root, verified.

Only entries that `weights check` does not find present and verified are fetched. Each goes to <file>.part (a .part left by an interrupted or failed fetch is resumed with an HTTP Range request), is checked against the manifest's size and sha256, and only then renamed into place; a file that fails the check is deleted and reported. A file the manifest has no hash for is hashed and the hash recorded beside it (<file>.sha256.json); `weights check` then verifies it against that record and says the hash is local, not published. Every file is tried; exit code 2 when any failed. An entry with no download source (bert-base-uncased: the Hugging Face cache layout is the Hugging Face client's to write) is listed with the command that gets it by hand; it does not fail the command.

Relative path: an entry's path under the weights root, exactly as `weights check` lists it (e.g. vbench/raft_model/models/raft-things.pth). --mirror URL fetches each file from URL/<relative path> (the file itself, even where the original source is an archive) and each folder entry from URL/<relative path>.zip (a zip of the folder's contents at its top level): serving a copy of a complete weights root is a mirror. --from DIR copies from DIR/<relative path>, else DIR/<file name>, else (archive entries) DIR/<the archive's file name as downloaded>; folders likewise, or DIR/<relative path>.zip.
"""


def _mb(n: float | None) -> str:
    if n is None:
        return "size unknown"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


class _FetchProgress:
    """A metrics.fetch.Reporter for the terminal or a log (duck-typed: the base only says nothing)."""

    def __init__(self, quiet: bool, clock: Callable[[], float]) -> None:
        from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                                   TransferSpeedColumn)

        self.quiet, self.clock = quiet, clock
        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                            TimeRemainingColumn(), console=err, disable=quiet or not err.is_terminal)
        self.lines = line_progress("weights fetch", quiet)
        self.tasks: dict[str, int] = {}
        self.started = False
        self.t0: dict[str, tuple[float, int]] = {}  # key -> (start time, bytes at start) of the transfer
        self.next_line: dict[str, tuple[float, float]] = {}  # key -> (next fraction, next time) for a line

    def say(self, text: str) -> None:
        self.bar.console.print(text, highlight=False, markup=False, soft_wrap=True)

    def file_started(self, entry, source: str, total: int | None, done: int) -> None:
        if not self.started:
            self.bar.start()
            self.started = True
        if entry.key in self.tasks:
            self.bar.update(self.tasks[entry.key], total=total, completed=done)
        else:
            self.tasks[entry.key] = self.bar.add_task(entry.key, total=total, completed=done)
        now = self.clock()
        self.t0[entry.key] = (now, done)
        self.next_line[entry.key] = (0.1 * (int(10 * done / total) + 1) if total else 0.0, now + 30.0)
        if self.lines:
            resumed = f", resuming at {_mb(done)}" if done else ""
            self.lines.line(f"{entry.key}: {_mb(total)} from {source}{resumed}")

    def file_progress(self, entry, done: int, total: int | None) -> None:
        self.bar.update(self.tasks[entry.key], completed=done)
        if not self.lines:
            return
        now = self.clock()
        frac, at = self.next_line[entry.key]
        if (total and done / total >= frac and done < total) or now >= at:
            t_start, b_start = self.t0[entry.key]
            rate = (done - b_start) / max(now - t_start, 1e-9)
            left = f", {(total - done) / rate:.0f} s left" if total and rate > 0 else ""
            of = f" of {_mb(total)} ({100 * done / total:.0f}%)" if total else ""
            self.lines.line(f"{entry.key}: {_mb(done)}{of}, {_mb(rate)}/s{left}")
            self.next_line[entry.key] = ((int(10 * done / total) + 1) / 10 if total else 0.0, now + 30.0)

    def retrying(self, entry, attempt: int, attempts: int, why: str, wait: float) -> None:
        self.say(f"warning: {entry.key}: {why}; attempt {attempt + 1} of {attempts} in {wait:.0f} s")

    def file_done(self, outcome) -> None:
        task = self.tasks.get(outcome.key)
        if task is not None:
            self.bar.update(task, visible=outcome.state == "fetched")
        if outcome.state == "failed":
            self.say(f"error: {outcome.key} ({outcome.relpath}): {outcome.detail}")
        elif outcome.state == "manual" and not self.quiet:
            # not a failure of this command (nothing was tried), but its metrics stay n/a until done
            self.say(f"warning: {outcome.key} ({outcome.relpath}): {outcome.detail}")
        elif self.lines and outcome.state == "fetched":
            self.lines.line(f"{outcome.key}: fetched, {outcome.detail}")

    def close(self) -> None:
        if self.started:
            self.bar.stop()


def _render(outcomes, root: Path, dry_run: bool) -> None:
    from rich.table import Table

    from ..metrics.fetch import summary

    doc = summary(outcomes)
    if dry_run:
        table = Table(title=f"weights fetch --dry-run · {root}")
        for col in ("key", "path", "size", "used by", "from"):
            table.add_column(col, overflow="fold")
        for o in outcomes:
            if o.state == "planned":
                table.add_row(o.key, o.relpath + ("/" if o.kind == "dir" else ""),
                              "folder, size unknown" if o.kind == "dir" and o.size is None else _mb(o.size),
                              ", ".join(o.used_by) or "none (optional)", o.source or "")
            elif o.state == "manual":
                table.add_row(o.key, o.relpath + ("/" if o.kind == "dir" else ""), "size unknown",
                              ", ".join(o.used_by) or "none (optional)", "by hand (below)")
        out.print(table)
        unknown = doc["planned_size_unknown"]
        out.print(f"would fetch {len(doc['planned'])} of {len(outcomes)}: {doc['bytes_planned']} bytes"
                  + (f" ({_mb(doc['bytes_planned'])})" if doc["bytes_planned"] >= 1000 else "")
                  + (f" + {unknown} of size unknown" if unknown else ""), highlight=False)
    else:
        for o in outcomes:
            if o.state in ("fetched", "failed"):
                out.print(f"{o.state:8} {o.key}: {o.relpath} · {o.detail}", highlight=False, markup=False)
        out.print(f"fetched {len(doc['fetched'])} ({_mb(doc['bytes_fetched'])}), already present "
                  f"{len(doc['present'])}, failed {len(doc['failed'])}", highlight=False)
    for o in outcomes:
        if o.state == "manual":
            out.print(f"by hand  {o.key}: {o.relpath} · {o.detail}", highlight=False, markup=False)


def register(weights_app: typer.Typer, weights_dir_opt) -> None:
    @weights_app.command("fetch", help=FETCH_HELP)
    @user_errors
    def weights_fetch(
        metrics: Optional[list[str]] = typer.Argument(None, help="Metric names (see `lowbit-video metrics`) or manifest keys."),
        all_entries: bool = typer.Option(False, "--all", help="Every file of the manifest."),
        dry_run: bool = typer.Option(False, "--dry-run", help="List what would be fetched and how many bytes; download nothing."),
        mirror: Optional[str] = typer.Option(None, "--mirror", help="Base URL of a mirror: files from URL/<relative path>, folders from URL/<relative path>.zip."),
        from_dir: Optional[Path] = typer.Option(None, "--from", help="Copy (and verify) files downloaded elsewhere, from this folder."),
        timeout: float = typer.Option(60.0, "--timeout", help="Seconds to wait for a connection or for data."),
        retries: int = typer.Option(3, "--retries", help="Further attempts after a timeout or dropped connection (backoff 2, 4, 8 ... s)."),
        weights_dir: Optional[str] = weights_dir_opt,
        as_json: bool = JsonOpt,
    ) -> None:
        import time

        from ..errors import UserError
        from ..metrics.fetch import Options, fetch, summary
        from ..metrics.weights import weights_root

        if mirror is not None and from_dir is not None:
            raise UserError("--mirror and --from exclude each other")
        if mirror is not None and not mirror.startswith(("http://", "https://")):
            raise UserError(f"--mirror needs an http:// or https:// URL, got {mirror!r}")
        if from_dir is not None and not from_dir.is_dir():
            raise UserError(f"--from {from_dir}: not a folder")
        if timeout <= 0 or retries < 0:
            raise UserError("--timeout must be > 0 and --retries >= 0")
        root = weights_root(weights_dir)
        reporter = _FetchProgress(quiet=as_json or dry_run, clock=time.monotonic)
        try:
            outcomes = fetch(root, metrics or (), all_entries=all_entries, mirror=mirror, from_dir=from_dir,
                             dry_run=dry_run, options=Options(timeout=timeout, retries=retries), reporter=reporter)
        finally:
            reporter.close()
        if as_json:
            print_json({"root": str(root), "dry_run": dry_run, "mirror": mirror,
                        "from": None if from_dir is None else str(from_dir), **summary(outcomes)})
        else:
            _render(outcomes, root, dry_run)
        if any(o.state == "failed" for o in outcomes):
            raise typer.Exit(2)


__all__ = ["register"]
