"""Progress as plain lines, for a stderr that is not a terminal.

CI logs and cluster job logs have no terminal, so rich's progress bars draw nothing there and a long
`generate` would say nothing for hours. Commands use this instead when stderr is not a terminal: a
line per event (a run done, a model loaded) and one every `step_every` denoising steps, each
starting with the time elapsed since the command started, e.g.

    [   41.2 s] generate: mxattention · seed 0 · a red circle moving left on a black background: step 5/20
    [  160.9 s] generate: run 3/8 done (mxattention · seed 0)
"""

from __future__ import annotations

import sys
import time
from typing import Callable, TextIO


class LineProgress:
    """Timestamped progress lines on `stream` (default: stderr), flushed at once."""

    def __init__(self, what: str, stream: TextIO | None = None, *, prefix: str = "", steps_per_run: int = 4,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.what, self.prefix = what, prefix
        self.stream = stream if stream is not None else sys.stderr
        self.steps_per_run = steps_per_run  # step lines per run (the last step always has one)
        self.clock = clock
        self.t0 = clock()
        self.total = self.done = 0
        self.current = ""
        self.steps_done = 0

    def line(self, text: str) -> None:
        print(f"{self.prefix}[{self.clock() - self.t0:8.1f} s] {self.what}: {text}", file=self.stream, flush=True)

    def planned(self, todo: int, of: int) -> None:
        self.total = todo
        self.line(f"{todo} of {of} runs to do" if todo != of else f"{todo} runs to do")

    def started(self, label: str) -> None:
        self.current, self.steps_done = label, 0

    def step(self, total: int) -> None:
        """One denoising step of the current run finished."""
        self.steps_done = min(self.steps_done + 1, total)
        every = max(1, -(-total // max(1, self.steps_per_run)))
        if self.steps_done % every == 0 or self.steps_done == total:
            self.line(f"{self.current}: step {self.steps_done}/{total}")

    def run_done(self, label: str | None = None, status: str = "done") -> None:
        self.done += 1
        self.line(f"run {self.done}/{self.total} {status} ({label or self.current})")


__all__ = ["LineProgress"]
