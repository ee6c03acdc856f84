"""Run directories: layout, atomic writes, completeness, resume.

Layout (shared/DESIGN.md)::

    <out>/<model>/<recipe>/<prompt-slug>/seed-<s>/{video.mp4, frames.png, frames.npz, meta.json}

* `prompt_slug`: a readable, filesystem-safe slug of the prompt (lower-case ASCII letters, digits
  and '-', at most 48 characters) plus '-' and the first 10 hex digits of the prompt's sha256, so
  distinct prompts never share a folder even when their slugs agree ("A red circle!" vs
  "a red circle?") or are cut at the same length.
* A run is **complete iff its meta.json exists** (and parses, and names files that exist).
  meta.json is written last, and every file is written atomically: to a temporary name in the same
  folder (".<name>.tmp-<pid>-<random><suffix>"), flushed and fsync'd, then `os.replace`d onto its
  final name, and the folder fsync'd. A run killed at any point therefore either has a complete
  meta.json or none; its leftover temporaries and outputs are removed by `reset_run_dir` before
  the run is generated again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import unicodedata
from pathlib import Path
from typing import Any, Iterator

META_NAME = "meta.json"
OUTPUT_NAMES = ("video.mp4", "frames.png", "frames.npz", META_NAME)
# Files a later stage writes into a run directory; stale copies go when the run is regenerated.
DERIVED_NAMES = ("metrics.json",)
SLUG_MAX = 48
HASH_CHARS = 10
_TMP_MARK = ".tmp-"


# --------------------------------------------------------------------------------------- naming


def safe_name(text: str, max_len: int = SLUG_MAX) -> str:
    """A filesystem-safe, readable slug: NFKD-folded to ASCII, lower case, runs of anything but
    [a-z0-9] collapsed to '-', trimmed to `max_len` at a '-' boundary where possible. "" -> "x"."""
    folded = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii").lower()
    slug = re.sub(r"[^a-z0-9]+", "-", folded).strip("-")
    if len(slug) > max_len:
        cut = slug[:max_len]
        slug = cut.rsplit("-", 1)[0] if "-" in cut[max_len // 2:] else cut
        slug = slug.strip("-")
    return slug or "x"


def component(name: str) -> str:
    """A model or recipe name as one path component: kept as is when it is already safe
    (letters, digits, '.', '_', '-'; not starting with '.'), else slugged with a hash."""
    if re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}", name):
        return name
    return f"{safe_name(name, 32)}-{hashlib.sha256(name.encode()).hexdigest()[:HASH_CHARS]}"


def prompt_slug(prompt: str) -> str:
    """'<readable slug>-<sha256 prefix>' of the exact prompt text."""
    digest = hashlib.sha256(prompt.encode("utf-8")).hexdigest()[:HASH_CHARS]
    return f"{safe_name(prompt)}-{digest}"


def run_dir(out: str | os.PathLike, model: str, recipe: str, prompt: str, seed: int) -> Path:
    """<out>/<model>/<recipe>/<prompt-slug>/seed-<s>"""
    return Path(out) / component(model) / component(recipe) / prompt_slug(prompt) / f"seed-{int(seed)}"


# ------------------------------------------------------------------------------- atomic writes


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def temp_name(path: Path) -> Path:
    """A fresh temporary name beside `path`, keeping its suffix (ffmpeg picks formats by suffix)."""
    return path.with_name(f".{path.name}{_TMP_MARK}{os.getpid()}-{secrets.token_hex(4)}{path.suffix}")


def is_temp(path: Path) -> bool:
    return path.name.startswith(".") and _TMP_MARK in path.name


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path` for the caller (or a subprocess) to write; on success the
    file is fsync'd and renamed onto `path` (os.replace) and the folder fsync'd; on any exception,
    including KeyboardInterrupt, the temporary is removed and `path` is untouched."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_name(path)
    try:
        yield tmp
        if not tmp.is_file():
            raise FileNotFoundError(f"{tmp}: nothing was written for {path}")
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=2, allow_nan=False, sort_keys=False) + "\n").encode())


# ---------------------------------------------------------------------------------- run state


def read_meta(run: str | os.PathLike) -> dict | None:
    """The run's meta.json, or None when it is missing or unreadable."""
    p = Path(run) / META_NAME
    try:
        data = json.loads(p.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def is_complete(run: str | os.PathLike) -> bool:
    """True iff meta.json exists, parses, and every file it lists under "files" exists."""
    meta = read_meta(run)
    if meta is None:
        return False
    files = meta.get("files", {})
    names = files.values() if isinstance(files, dict) else files
    return all((Path(run) / str(n)).is_file() for n in names)


def reset_run_dir(run: str | os.PathLike) -> list[str]:
    """Prepare an incomplete run directory for a fresh attempt: remove leftover temporaries, outputs
    of an interrupted attempt and stale derived files. Other files are left alone. Returns the names
    removed. Never call this on a complete run unless it is being regenerated on purpose."""
    run = Path(run)
    removed = []
    if not run.is_dir():
        return removed
    for p in run.iterdir():
        if p.is_file() and (is_temp(p) or p.name in OUTPUT_NAMES or p.name in DERIVED_NAMES):
            p.unlink()
            removed.append(p.name)
    return sorted(removed)


def iter_runs(root: str | os.PathLike) -> Iterator[Path]:
    """Complete run directories at or under `root` (sorted walk; a run's own subfolders are not
    searched)."""
    root = Path(root)
    if is_complete(root):
        yield root
        return
    for dirpath, dirnames, _ in os.walk(root):
        dirnames.sort()
        here = Path(dirpath)
        if here != root and is_complete(here):
            dirnames[:] = []
            yield here


def find_runs(paths) -> list[Path]:
    """Complete runs at or under each of `paths`, in argument order, duplicates removed (resolved
    paths). UserError for an empty list, a missing path, or a path with no complete run."""
    from collections import OrderedDict

    from .errors import UserError

    if not paths:
        raise UserError("give at least one run directory (or a folder above run directories)")
    found: list[Path] = []
    for p in paths:
        p = Path(p)
        if not p.exists():
            raise UserError(f"{p}: no such file or directory")
        runs = list(iter_runs(p))
        if not runs:
            raise UserError(f"{p}: no complete runs (a run directory holds meta.json; make them with `lowbit-video generate`)")
        found.extend(runs)
    return list(OrderedDict.fromkeys(r.resolve() for r in found))


__all__ = [
    "find_runs",
    "META_NAME", "OUTPUT_NAMES", "atomic_path", "atomic_write_bytes", "atomic_write_json", "component",
    "is_complete", "is_temp", "iter_runs", "prompt_slug", "read_meta", "reset_run_dir", "run_dir",
    "safe_name", "temp_name",
]
