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
  final name, and the folder fsync'd.
* A run is generated into a fresh folder beside its own (`staged_dir`, ".seed-<s>.tmp-..."), which
  takes the run folder's place in one step once every file is in it; so regenerating a complete
  run (--overwrite) keeps the old one until the new one is whole, and a run killed at any point is
  either complete or as it was. Folders with temporary names are never runs (`iter_runs` skips
  them); a killed attempt's folder is removed when the run is generated again (`reset_run_dir`
  cleans a run folder written in place, as older versions did).
* A write that fails for want of room (full disk, quota, file-size limit) is a one-line
  `DiskFullError` naming the file, with its temporaries removed (disk_full.py).
* A run is read as a `RunRecord` (`read_run`): its model, family, recipe, prompt, seed, steps and
  whether it is a tiny-shapes run are decided here and nowhere else. Its *baseline* (`find_baseline`)
  is the complete run of the baseline recipe with the same model, prompt, seed, steps, guidance and
  size: the one at `run_dir(out, model, baseline, prompt, seed)` beside it (out: `output_root`),
  else one of the other runs given.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import secrets
import signal
import socket
import sys
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from .disk_full import disk_errors, remove

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
    tmp = temp_name(path)
    try:
        with disk_errors(path):
            path.parent.mkdir(parents=True, exist_ok=True)
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


@contextlib.contextmanager
def staged_dir(final: str | os.PathLike) -> Iterator[Path]:
    """Yield a fresh folder beside `final` to build it in; on success the folder takes `final`'s place
    in one step (`replace_dir`); on any exception, including KeyboardInterrupt, it is removed and
    `final` is untouched. Call it holding the folder's claim: leftovers of earlier attempts (folders
    with `final`'s temporary names) are removed first. A DiskFullError names the file under `final`."""
    from .errors import DiskFullError

    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    remove([p for p in final.parent.iterdir() if is_temp(p) and p.name.startswith(f".{final.name}{_TMP_MARK}")])
    staged = temp_name(final)
    try:
        with disk_errors(final):
            staged.mkdir()
            yield staged
            replace_dir(staged, final)
    except DiskFullError as e:
        remove([staged])
        inside = Path(e.path)
        shown = final / inside.relative_to(staged) if inside.is_relative_to(staged) else inside
        raise DiskFullError(shown, e.reason) from None
    except BaseException:
        remove([staged])
        raise


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step (Linux renameat2 RENAME_EXCHANGE); False where the platform or the
    filesystem cannot (the caller then renames twice)."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # glibc < 2.28, musl
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd, rename_exchange = -100, 2
    if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def replace_dir(staged: str | os.PathLike, final: str | os.PathLike) -> None:
    """Put the folder `staged` at `final` in one step and remove what was there. Files of the old
    `final` that are no run output or temporary (claims another process holds, a user's notes) are
    carried over first, as hard links, so they never leave their path. Where the filesystem cannot
    swap folders in one step, `final` is renamed away and `staged` renamed in with Ctrl-C held off."""
    staged, final = Path(staged), Path(final)
    if not final.exists():
        os.rename(staged, final)
        _fsync_dir(final.parent)
        return
    for p in final.iterdir():
        if p.name in OUTPUT_NAMES or p.name in DERIVED_NAMES or is_temp(p) or (staged / p.name).exists():
            continue
        try:
            os.link(p, staged / p.name, follow_symlinks=False)
        except OSError:  # a folder, or a filesystem without hard links
            os.rename(p, staged / p.name)
    if _exchange(staged, final):
        old = staged
    else:
        old = temp_name(final)
        held = {signal.SIGINT, signal.SIGTERM}
        before = signal.pthread_sigmask(signal.SIG_BLOCK, held)
        try:
            os.rename(final, old)
            os.rename(staged, final)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, before)
    _fsync_dir(final.parent)
    remove([old])


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
    return (Path(run) / META_NAME).is_file() and damage(run) is None


def damage(run: str | os.PathLike) -> str | None:
    """Why a folder holding meta.json is not a complete run (None: it is complete, or has no
    meta.json). meta.json is written last and atomically, so a meta.json that does not parse, or
    that lists files that are gone, is damage, not a run in progress."""
    p = Path(run) / META_NAME
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        return f"unreadable meta.json ({type(e).__name__})"
    if not isinstance(data, dict):
        return "meta.json is not a JSON object"
    files = data.get("files", {})
    names = files.values() if isinstance(files, dict) else files
    gone = [str(n) for n in names if not (Path(run) / str(n)).is_file()]
    return f"files listed in meta.json are missing: {', '.join(gone)}" if gone else None


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


# ------------------------------------------------------------------------------ claims and checks


class Claim:
    """A held claim on a run folder for one stage ("generate", "evaluate"): an exclusive, non-blocking
    flock on `<run>/.claim-<stage>`, the file holding "pid host" of the holder for messages.
    The kernel drops the lock when its process dies (also on SIGKILL), so a killed process never
    leaves a run stuck: the file it leaves behind is simply locked again by the next claimant.
    `release` unlinks the file while still holding the lock; a claimant that locked the unlinked
    file sees that the path no longer names it and tries again (the usual lock-file protocol)."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path, self._fd = path, fd

    def release(self) -> None:
        if self._fd < 0:
            return
        with contextlib.suppress(OSError):
            # only while the path still names our file: a folder swapped in (`replace_dir`) carries
            # the claim over as a link, and a file there that is not ours is another holder's
            if os.stat(self.path).st_ino == os.fstat(self._fd).st_ino:
                self.path.unlink()
        os.close(self._fd)  # closing drops the lock
        self._fd = -1

    def __enter__(self) -> "Claim":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


def claim_path(run: str | os.PathLike, stage: str) -> Path:
    return Path(run) / f".claim-{stage}"


def claim_run(run: str | os.PathLike, stage: str) -> Claim | None:
    """Claim `run` for `stage`; None when another live process holds it (see `claim_holder`)."""
    import fcntl

    path = claim_path(run, stage)
    with disk_errors(path):
        path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        with disk_errors(path):
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if not same:  # released (unlinked) between our open and our lock: try the new file
            os.close(fd)
            continue
        claim = Claim(path, fd)
        try:
            with disk_errors(path):
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()} {socket.gethostname()}\n".encode())
        except BaseException:
            claim.release()  # no empty claim file left behind
            raise
        return claim


def claim_holder(run: str | os.PathLike, stage: str) -> str:
    """'pid P on host H' of the process holding the claim, as it wrote it ("" if unknown)."""
    try:
        pid, host = claim_path(run, stage).read_text().split()[:2]
    except (OSError, ValueError):
        return ""
    return f"pid {pid} on {host}"


def output_problem(path: str | os.PathLike, *, is_dir: bool) -> str | None:
    """Why `path` cannot be written as an output folder (is_dir) or file, else None. Creates nothing:
    writes and removes a probe file in the nearest folder that exists on the way to it, so a path
    through a file, /proc, /sys or a read-only mount is found before any work is done."""
    path = Path(path)
    if is_dir and path.exists() and not path.is_dir():
        return "exists and is not a folder"
    if not is_dir and path.is_dir():
        return "is a folder, not a file"
    folder = (path if is_dir else path.parent).absolute()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        return f"cannot write there ({folder} is a file, not a folder)"
    probe = temp_name(folder / "write-probe")
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        return f"cannot write there ({e.strerror or type(e).__name__})"
    return None


def check_output(path: str | os.PathLike, option: str, *, is_dir: bool = True) -> None:
    """UserError "<option> <path>: <why>" when `output_problem` finds one."""
    from .errors import UserError

    why = output_problem(path, is_dir=is_dir)
    if why:
        raise UserError(f"{option} {path}: {why}")


def iter_runs(root: str | os.PathLike, damaged: list[tuple[Path, str]] | None = None) -> Iterator[Path]:
    """Complete run directories at or under `root` (sorted walk; a run's own subfolders are not
    searched). Folders with a damaged meta.json (see `damage`) are appended to `damaged` as
    (folder, reason) when a list is given."""
    root = Path(root)
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not is_temp(Path(d)))  # runs being built or replaced
        if META_NAME not in filenames:
            continue
        here = Path(dirpath)
        why = damage(here)
        if why is None:
            dirnames[:] = []
            yield here
        elif damaged is not None:
            damaged.append((here, why))


def find_runs(paths, damaged: list[tuple[Path, str]] | None = None) -> list[Path]:
    """Complete runs at or under each of `paths`, in argument order, duplicates removed (resolved
    paths). UserError for an empty list, a missing path, or a path with no complete run. Damaged
    run folders (`damage`) are appended to `damaged` as (resolved folder, reason) when a list is
    given, so the caller can report them."""
    from collections import OrderedDict

    from .errors import UserError

    if not paths:
        raise UserError("give at least one run directory (or a folder above run directories)")
    found: list[Path] = []
    for p in paths:
        p = Path(p)
        if not p.exists():
            raise UserError(f"{p}: no such file or directory")
        bad: list[tuple[Path, str]] = []
        runs = list(iter_runs(p, bad))
        if not runs:
            hint = f"; {len(bad)} damaged, e.g. {bad[0][0]}: {bad[0][1]}" if bad else ""
            raise UserError(f"{p}: no complete runs (a run directory holds meta.json; make them with "
                            f"`lowbit-video generate`){hint}")
        found.extend(runs)
        if damaged is not None:
            damaged.extend((d.resolve(), why) for d, why in bad if (d.resolve(), why) not in damaged)
    return list(OrderedDict.fromkeys(r.resolve() for r in found))


# ------------------------------------------------------------------------------- the run record

TINY_SHAPES = "tiny-shapes"


def is_tiny_shapes(name: str | None, family: str | None) -> bool:
    """Whether a model (by its name or family) is the shipped tiny-shapes model."""
    return TINY_SHAPES in (name, family)


def _name_of(value: Any) -> str | None:
    """meta.json's "model" and "recipe" are {"name": ...} objects (older runs: a plain string)."""
    return value.get("name") if isinstance(value, dict) else value


@dataclass(frozen=True)
class RunRecord:
    """What a run is, read from its meta.json once. Fields are None where meta.json lacks them."""

    dir: Path
    meta: dict
    model: str | None
    family: str | None
    recipe: str | None
    prompt: str | None
    seed: int | None
    steps: Any

    @classmethod
    def of(cls, run: str | os.PathLike, meta: dict) -> "RunRecord":
        model = meta.get("model")
        try:
            seed = int(meta.get("seed"))
        except (TypeError, ValueError):
            seed = None
        prompt = meta.get("prompt")
        return cls(dir=Path(run), meta=meta, model=_name_of(model),
                   family=model.get("family") if isinstance(model, dict) else None,
                   recipe=_name_of(meta.get("recipe")), prompt=prompt if isinstance(prompt, str) else None,
                   seed=seed, steps=meta.get("steps"))

    @property
    def is_tiny_shapes(self) -> bool:
        return is_tiny_shapes(self.model, self.family)

    @property
    def identified(self) -> bool:
        """Whether meta.json names the model, recipe, prompt and seed (a run that can be compared)."""
        return bool(self.model) and bool(self.recipe) and self.prompt is not None and self.seed is not None

    @property
    def setting(self) -> tuple:
        """What a baseline run must share with this one: model, prompt, seed, steps, guidance, size."""
        m = self.meta
        return (self.model, m.get("prompt"), m.get("seed"), m.get("steps"), m.get("guidance"),
                json.dumps(m.get("size"), sort_keys=True))


def read_run(run: str | os.PathLike) -> RunRecord | None:
    """The run's record, or None when its meta.json is missing or unreadable."""
    meta = read_meta(run)
    return None if meta is None else RunRecord.of(run, meta)


def output_root(run: str | os.PathLike) -> Path:
    """The --out folder a run was generated under (<out>/<model>/<recipe>/<slug>/seed-<s>)."""
    run = Path(run)
    return run.parents[3] if len(run.parents) > 3 else run.parent


def find_baseline(run: RunRecord, baseline: str, among: Sequence[RunRecord] = ()) -> RunRecord | None:
    """The baseline run of `run` (the pairing rule of the module doc), or None. `among`: other runs
    to look in when none sits beside it."""
    want = run.setting
    try:
        sibling = run_dir(output_root(run.dir), run.model or "", baseline, run.meta.get("prompt", ""),
                          int(run.meta.get("seed", 0)))
    except (IndexError, TypeError, ValueError):
        sibling = None
    if sibling is not None and sibling.resolve() != run.dir and is_complete(sibling):
        found = read_run(sibling.resolve())
        if found is not None and found.recipe == baseline and found.setting == want:
            return found
    return next((o for o in among if o.dir != run.dir and o.recipe == baseline and o.setting == want), None)


__all__ = [
    "RunRecord", "TINY_SHAPES", "find_baseline", "find_runs", "is_tiny_shapes", "output_root", "read_run",
    "META_NAME", "OUTPUT_NAMES", "atomic_path", "atomic_write_bytes", "atomic_write_json", "component",
    "Claim", "check_output", "claim_holder", "claim_run", "damage", "is_complete", "output_problem", "is_temp", "iter_runs", "prompt_slug", "read_meta", "replace_dir", "reset_run_dir", "run_dir",
    "safe_name", "staged_dir", "temp_name",
]
