"""Writes that fail for want of room, as one line for the user instead of a traceback.

ENOSPC (the disk is full), EDQUOT (the quota is) and EFBIG (the file would pass the process's
file-size limit, `ulimit -f`) are not bugs: the user frees space and runs the command again.
`disk_errors(path)` turns them into `DiskFullError` naming `path`, after removing what the caller
says was half-written; `disk_reason` is the test both it and the CLI's last-resort handler use.
Every atomic write (runstore.atomic_path) and every claim goes through `disk_errors`, so the
commands' own code has no try/except for it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from pathlib import Path
from typing import Iterable, Iterator

from .errors import DiskFullError

REASONS = {
    errno.ENOSPC: "no space left on the disk",
    errno.EDQUOT: "the disk quota is exceeded",
    errno.EFBIG: "file too large (over the file-size limit, see `ulimit -f`)",
}


def disk_reason(exc: BaseException) -> str | None:
    """What `exc` says about room on the disk (a REASONS line), or None when it is another error."""
    if isinstance(exc, DiskFullError):
        return exc.reason
    if isinstance(exc, OSError) and exc.errno in REASONS:
        return REASONS[exc.errno]
    return None


def remove(paths: Iterable[str | os.PathLike]) -> None:
    """Remove files and folders, ignoring those already gone (clean-up after a failed write)."""
    for p in paths:
        p = Path(p)
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                p.unlink()


@contextlib.contextmanager
def disk_errors(path: str | os.PathLike, cleanup: Iterable[str | os.PathLike] = ()) -> Iterator[None]:
    """Inside: an OSError for want of room becomes DiskFullError naming `path` (a DiskFullError raised
    deeper keeps its own path), after `cleanup` is removed. Other errors pass unchanged."""
    try:
        yield
    except (OSError, DiskFullError) as e:
        why = disk_reason(e)
        if why is None:
            raise
        remove(cleanup)
        if isinstance(e, DiskFullError):
            raise
        raise DiskFullError(path, why) from None


__all__ = ["REASONS", "disk_errors", "disk_reason", "remove"]
