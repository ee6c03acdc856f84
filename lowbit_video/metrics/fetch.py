"""Downloading the weights manifest's files into the weights root (`lowbit-video weights fetch`).

Metrics never download (metrics.weights); this module is the one explicit step that does. Each
entry that `weights.check` does not find present and verified is fetched into `<dest>.part`
(resumed with an HTTP Range request when a `.part` is already there), verified -- size and sha256
where the manifest has them -- and only then renamed onto its place, so an interrupted or bad
download is never where a metric would load it. A file that fails verification is deleted. Entries
without a published hash are hashed after the download and the digest is recorded beside the file
(`weights.record_path`), so that `weights check` catches a later change and says the hash is local.

Where an entry comes from. Its *relative path* R is its `relpath`: the path under the weights root,
exactly as `weights check` lists it (e.g. `vbench/raft_model/models/raft-things.pth`).

* default: the entry's `url`. A file with a `member` is that member of the zip archive at `url`
  (RAFT ships in models.zip); a folder is the contents of the archive's `member` prefix.
* mirror M (`--mirror`): `M/R` for a file -- the file itself, never an archive -- and `M/R.zip` for a
  folder, a zip holding the folder's contents at its top level. A mirror is therefore any HTTP
  server serving a copy of a complete weights root (plus one zip per folder entry).
* local folder D (`--from`): for a file the first of D/R, D/<file name of R>, and, for an archive
  entry, D/<file name of the url> (the archive as downloaded); for a folder the first of the folder
  D/R, D/<name of R>, the zips D/R.zip, D/<name of R>.zip (mirror form), D/<file name of the url>.

HTTP is the standard library's urllib: one download loop does not justify a dependency. Transient
failures (timeouts, dropped connections, HTTP 5xx/429) are retried with exponential backoff, keeping
what was received; other HTTP errors (404, 403) fail at once.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import re
import shutil
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Callable, Iterable, Sequence

from ..errors import UserError
from . import weights
from .weights import WeightFile

PART_SUFFIX = ".part"
DOWNLOADS = ".downloads"  # archives being fetched, under the root; removed once installed
STATES = ("fetched", "present", "failed", "manual", "planned")
_RETRY_STATUS = (408, 429, 500, 502, 503, 504)


class FetchError(Exception):
    """One entry could not be fetched; the message is one line."""


class _Transient(Exception):
    """A failure worth retrying (the connection, not the request, went wrong)."""


@dataclass(frozen=True)
class Options:
    """`timeout`: seconds per connect and per read; `retries`: further attempts after the first;
    `backoff`: seconds before the first retry, doubled before each next one."""

    timeout: float = 60.0
    retries: int = 3
    backoff: float = 2.0
    chunk: int = 1 << 20


@dataclass
class Outcome:
    """What happened to one entry. `size`: bytes placed (planned: expected; None when unknown);
    `hash`: "published" or "recorded" for a verified or recorded file, None otherwise."""

    key: str
    relpath: str
    kind: str
    state: str
    detail: str
    source: str | None = None
    size: int | None = None
    sha256: str | None = None
    hash: str | None = None
    used_by: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {"key": self.key, "relpath": self.relpath, "kind": self.kind, "state": self.state,
                "detail": self.detail, "source": self.source, "size": self.size, "sha256": self.sha256,
                "hash": self.hash, "used_by": list(self.used_by)}


class Reporter:
    """What the fetcher tells its caller while it works; this base says nothing."""

    def file_started(self, entry: WeightFile, source: str, total: int | None, done: int) -> None:
        """A transfer began; `done` bytes were already there (a resumed `.part`)."""

    def file_progress(self, entry: WeightFile, done: int, total: int | None) -> None:
        """`done` bytes of the current transfer are on disk."""

    def retrying(self, entry: WeightFile, attempt: int, attempts: int, why: str, wait: float) -> None:
        """Attempt `attempt` of `attempts` failed with `why`; the next starts after `wait` seconds."""

    def file_done(self, outcome: Outcome) -> None:
        """The entry is settled (any state)."""


@dataclass(frozen=True)
class _Source:
    where: str  # a URL, or a local path
    local: bool
    archive: bool  # `where` is a zip archive; `member` says what of it
    member: str | None = None


# ----------------------------------------------------------------------------------- selection


def select(names: Iterable[str], all_entries: bool = False,
           manifest: Sequence[WeightFile] | None = None) -> list[WeightFile]:
    """The entries the named metrics use (a manifest key is accepted too), in manifest order; every
    entry with `all_entries`. Names may be comma-separated. Unknown names are a UserError."""
    man = list(weights.MANIFEST if manifest is None else manifest)
    wanted = [n.strip() for name in names for n in str(name).split(",") if n.strip()]
    if all_entries:
        if wanted:
            raise UserError("give metric names or --all, not both")
        return man
    if not wanted:
        raise UserError("name the metrics to fetch (e.g. lpips; see `lowbit-video metrics`) or pass --all")
    keys: set[str] = set()
    with_weights = sorted({m for w in man for m in w.used_by})
    for name in wanted:
        hits = {w.key for w in man if name in w.used_by or w.key == name}
        if not hits:
            from .registry import list_metrics

            if name in {m.name for m in list_metrics()}:
                raise UserError(f"metric {name} needs no weight files; metrics with weights: {', '.join(with_weights)}")
            raise UserError(f"unknown metric {name!r}; metrics with weights: {', '.join(with_weights)}")
        keys |= hits
    return [w for w in man if w.key in keys]


# ------------------------------------------------------------------------------------- sources


def _url_name(url: str) -> str:
    return PurePosixPath(urllib.parse.urlparse(url).path).name or "download"


def _mirror_source(w: WeightFile, mirror: str) -> _Source:
    rel = urllib.parse.quote(w.relpath + (".zip" if w.kind == "dir" else ""))
    return _Source(mirror.rstrip("/") + "/" + rel, local=False, archive=w.kind == "dir",
                   member="" if w.kind == "dir" else None)


def _local_source(w: WeightFile, folder: Path) -> _Source:
    rel = Path(w.relpath)
    tried: list[Path] = []

    def found(p: Path, is_dir: bool) -> bool:
        tried.append(p)
        return p.is_dir() if is_dir else p.is_file()

    if w.kind == "dir":
        for p in (folder / rel, folder / rel.name):
            if found(p, True):
                return _Source(str(p), local=True, archive=False)
        for p in (folder / f"{rel}.zip", folder / f"{rel.name}.zip"):
            if found(p, False):
                return _Source(str(p), local=True, archive=True, member="")
    else:
        for p in (folder / rel, folder / rel.name):
            if found(p, False):
                return _Source(str(p), local=True, archive=False)
    if w.url and w.member is not None:
        p = folder / _url_name(w.url)
        if found(p, False):
            return _Source(str(p), local=True, archive=True, member=w.member)
    names = ", ".join(str(p.relative_to(folder)) for p in dict.fromkeys(tried))
    raise FetchError(f"not found in {folder} (looked for {names})")


def source_for(w: WeightFile, mirror: str | None = None, from_dir: str | os.PathLike | None = None) -> _Source | None:
    """Where `w` is fetched from (see the module docstring); None when it has no download source."""
    if from_dir is not None:
        return _local_source(w, Path(from_dir))
    if mirror is not None:
        return _mirror_source(w, mirror)
    if w.url is None:
        return None
    if w.kind == "dir":
        return _Source(w.url, local=False, archive=True, member=w.member or "")
    return _Source(w.url, local=False, archive=w.member is not None, member=w.member)


# ------------------------------------------------------------------------------------ download


def _why(e: BaseException) -> str:
    if isinstance(e, urllib.error.HTTPError):
        return f"HTTP {e.code} {e.reason}"
    if isinstance(e, urllib.error.URLError):
        return f"cannot connect: {e.reason}"
    if isinstance(e, TimeoutError):
        return "timed out"
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def _resumed_at(content_range: str | None) -> int | None:
    m = re.match(r"\s*bytes\s+(\d+)-", content_range or "")
    return int(m.group(1)) if m else None


def _download_once(url: str, part: Path, w: WeightFile, opts: Options, reporter: Reporter) -> None:
    have = part.stat().st_size if part.is_file() else 0
    headers = {"User-Agent": "lowbit-video weights fetch"}
    if have:
        headers["Range"] = f"bytes={have}-"
    try:
        resp = urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=opts.timeout)
    except urllib.error.HTTPError as e:
        e.close()
        if e.code == 416 and have:
            return  # nothing after `have`: the .part is the whole file (verification decides)
        if e.code in _RETRY_STATUS:
            raise _Transient(_why(e)) from None
        raise FetchError(f"{_why(e)} from {url}") from None
    with resp:
        if resp.status == 206:
            if not have or _resumed_at(resp.headers.get("Content-Range")) != have:
                part.unlink(missing_ok=True)  # a piece we did not ask for: start again without a Range
                raise _Transient(f"the server answered with another range ({resp.headers.get('Content-Range')})")
            mode = "ab"
        else:  # the whole file (the server ignored or could not honour the Range)
            have, mode = 0, "wb"
        length = resp.headers.get("Content-Length")
        total = have + int(length) if length and length.isdigit() else None
        reporter.file_started(w, url, total, have)
        done = have
        part.parent.mkdir(parents=True, exist_ok=True)
        with open(part, mode) as f:
            while chunk := resp.read(opts.chunk):
                f.write(chunk)
                done += len(chunk)
                reporter.file_progress(w, done, total)
            f.flush()
            os.fsync(f.fileno())
    if total is not None and done < total:
        raise _Transient(f"connection closed after {done} of {total} bytes")


def _download(url: str, part: Path, w: WeightFile, opts: Options, reporter: Reporter,
              sleep: Callable[[float], None]) -> None:
    """`url` into `part`, resuming what is there; retried with backoff on transient failures."""
    attempts = max(1, opts.retries + 1)
    for attempt in range(1, attempts + 1):
        try:
            _download_once(url, part, w, opts, reporter)
            return
        except (_Transient, OSError, http.client.HTTPException) as e:
            why = _why(e)
            if attempt == attempts:
                kept = part.is_file() and part.stat().st_size > 0
                raise FetchError(f"{why} from {url} (after {attempts} attempt{'s' * (attempts != 1)}"
                                 + (f"; {part.name} kept: the next fetch resumes it)" if kept else ")")) from None
            wait = opts.backoff * 2 ** (attempt - 1)
            reporter.retrying(w, attempt, attempts, why, wait)
            sleep(wait)


# ------------------------------------------------------------------------------- verify, place


def _verify(w: WeightFile, cand: Path) -> str:
    """The sha256 of `cand` when its size and hash match the manifest; else delete it and raise."""
    size = cand.stat().st_size
    if w.size is not None and size != w.size:
        cand.unlink()
        raise FetchError(f"{size} bytes, expected {w.size}; the download was deleted")
    digest = weights.file_sha256(cand)
    if w.sha256 is not None and not digest.startswith(w.sha256.lower()):
        cand.unlink()
        raise FetchError(f"sha256 {digest[:16]}... does not match the published {w.sha256[:16]}; "
                         "the download was deleted")
    return digest


def _place_file(w: WeightFile, root: Path, cand: Path, source: str) -> Outcome:
    """Verify `cand` (beside its destination) and rename it onto the destination."""
    from ..runstore import _fsync_dir, atomic_write_json

    dest = root / w.relpath
    digest = _verify(w, cand)
    size = cand.stat().st_size
    if w.sha256 is None:
        atomic_write_json(weights.record_path(dest), {
            "format": "lowbit-video recorded weight hash", "key": w.key, "relpath": w.relpath,
            "sha256": digest, "size": size, "source": source, "published": False,
            "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    os.replace(cand, dest)
    _fsync_dir(dest.parent)
    weights.remember_hash(root, dest, digest)
    verified = ("sha256 verified" if w.sha256 is not None
                else "no published hash: sha256 recorded locally in " + weights.record_path(dest).name)
    return Outcome(w.key, w.relpath, w.kind, "fetched", f"{size} bytes, {verified}", source, size, digest,
                   "published" if w.sha256 is not None else "recorded", w.used_by)


def _extract_member(archive: Path, member: str, out: Path) -> None:
    try:
        with zipfile.ZipFile(archive) as z:
            try:
                info = z.getinfo(member)
            except KeyError:
                raise FetchError(f"{member} is not in the archive {archive.name}") from None
            with z.open(info) as src, open(out, "wb") as f:
                shutil.copyfileobj(src, f, 1 << 20)
                f.flush()
                os.fsync(f.fileno())
    except zipfile.BadZipFile:
        raise FetchError(f"{archive.name} is not a zip archive") from None


def _extract_folder(archive: Path, prefix: str, out: Path) -> int:
    """The files under `prefix` of the zip into folder `out`; refuses paths leaving `out`."""
    n = 0
    try:
        with zipfile.ZipFile(archive) as z:
            for info in z.infolist():
                if info.is_dir() or not info.filename.startswith(prefix):
                    continue
                rel = PurePosixPath(info.filename[len(prefix):])
                if not rel.parts or rel.is_absolute() or ".." in rel.parts:
                    raise FetchError(f"unsafe path {info.filename!r} in {archive.name}")
                target = out.joinpath(*rel.parts)
                target.parent.mkdir(parents=True, exist_ok=True)
                with z.open(info) as src, open(target, "wb") as f:
                    shutil.copyfileobj(src, f, 1 << 20)
                n += 1
    except zipfile.BadZipFile:
        raise FetchError(f"{archive.name} is not a zip archive") from None
    if not n:
        raise FetchError(f"{archive.name} has no files under {prefix or 'its top level'}")
    return n


def _place_folder(w: WeightFile, root: Path, fill: Callable[[Path], None], source: str) -> Outcome:
    """Build the folder in `<dest>.part/` with `fill`, then rename it into place (an empty folder
    standing there is replaced; it counts as missing)."""
    dest = root / w.relpath
    tmp = dest.with_name(dest.name + PART_SUFFIX)
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        fill(tmp)
        if dest.is_dir() and not any(dest.iterdir()):
            dest.rmdir()
        elif dest.exists():
            raise FetchError(f"{dest} exists and is not an empty folder")
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    from ..runstore import _fsync_dir

    _fsync_dir(dest.parent)
    files = sum(1 for p in dest.rglob("*") if p.is_file())
    return Outcome(w.key, w.relpath, w.kind, "fetched", f"folder of {files} files (contents not verified)",
                   source, None, None, None, w.used_by)


def _archive_part(root: Path, url: str) -> Path:
    tag = hashlib.sha256(url.encode()).hexdigest()[:12]
    return root / DOWNLOADS / f"{tag}-{_url_name(url)}{PART_SUFFIX}"


def _fetch_one(w: WeightFile, root: Path, src: _Source, opts: Options, reporter: Reporter,
               sleep: Callable[[float], None]) -> Outcome:
    dest = root / w.relpath
    dest.parent.mkdir(parents=True, exist_ok=True)
    if src.local and not src.archive:
        if w.kind == "dir":
            return _place_folder(w, root, lambda tmp: shutil.copytree(src.where, tmp, dirs_exist_ok=True), src.where)
        cand = dest.with_name(dest.name + PART_SUFFIX)
        shutil.copyfile(src.where, cand)
        return _place_file(w, root, cand, src.where)
    if src.archive:
        archive = Path(src.where) if src.local else _archive_part(root, src.where)
        if not src.local:
            _download(src.where, archive, w, opts, reporter, sleep)
        try:
            if w.kind == "dir":
                return _place_folder(w, root, lambda tmp: _extract_folder(archive, src.member or "", tmp), src.where)
            cand = dest.with_name(dest.name + PART_SUFFIX)
            _extract_member(archive, src.member or "", cand)
            return _place_file(w, root, cand, src.where)
        finally:
            if not src.local:  # a bad archive is not kept for a resume either: it is complete
                archive.unlink(missing_ok=True)
                with contextlib.suppress(OSError):
                    archive.parent.rmdir()  # only when empty
    part = dest.with_name(dest.name + PART_SUFFIX)
    resumed = part.is_file() and part.stat().st_size > 0
    _download(src.where, part, w, opts, reporter, sleep)
    try:
        return _place_file(w, root, part, src.where)
    except FetchError:
        if not resumed:
            raise
    # the bytes kept from an earlier attempt may belong to another version of the file: once more, whole
    _download(src.where, part, w, opts, reporter, sleep)
    return _place_file(w, root, part, src.where)


# ------------------------------------------------------------------------------------------ API


def fetch_entries(entries: Sequence[WeightFile], root: str | os.PathLike, *, mirror: str | None = None,
                  from_dir: str | os.PathLike | None = None, dry_run: bool = False,
                  options: Options = Options(), reporter: Reporter | None = None,
                  sleep: Callable[[float], None] = time.sleep) -> list[Outcome]:
    """Fetch every entry of `entries` that is not present and verified under `root`; one Outcome per
    entry, in order. Every entry is tried; failures are Outcomes, not exceptions."""
    root = Path(root).expanduser()
    reporter = reporter or Reporter()
    statuses = {s.key: s for s in weights.check(root, entries)}
    results = []
    for w in entries:
        st = statuses.get(w.key)
        base = dict(key=w.key, relpath=w.relpath, kind=w.kind, used_by=w.used_by)
        try:
            if st is not None and st.state == "present":
                out = Outcome(**base, state="present", detail=st.detail, size=st.found_size,
                              sha256=st.found_sha256, hash=st.hash_source)
            elif (src := source_for(w, mirror, from_dir)) is None:
                out = Outcome(**base, state="manual", detail="no download source; get it by hand: " + w.source.replace("<root>", str(root)))
            elif dry_run:
                size = w.size
                if size is None and src.local and not src.archive and w.kind == "file":
                    size = Path(src.where).stat().st_size
                out = Outcome(**base, state="planned", detail="would fetch", source=src.where, size=size)
            else:
                out = _fetch_one(w, root, src, options, reporter, sleep)
        except (FetchError, OSError) as e:
            out = Outcome(**base, state="failed", detail=str(e) if isinstance(e, FetchError) else _why(e))
        reporter.file_done(out)
        results.append(out)
    return results


def fetch(root: str | os.PathLike, names: Iterable[str] = (), *, all_entries: bool = False,
          manifest: Sequence[WeightFile] | None = None, **kwargs) -> list[Outcome]:
    """`select` the entries of `manifest` (default: the real one) and `fetch_entries` them."""
    return fetch_entries(select(names, all_entries, manifest), root, **kwargs)


def summary(outcomes: Sequence[Outcome]) -> dict:
    """{state: [outcome json]} for every state, plus byte counts."""
    doc: dict = {s: [o.to_json() for o in outcomes if o.state == s] for s in STATES}
    doc["bytes_fetched"] = sum(o.size or 0 for o in outcomes if o.state == "fetched")
    planned = [o for o in outcomes if o.state == "planned"]
    doc["bytes_planned"] = sum(o.size for o in planned if o.size is not None)
    doc["planned_size_unknown"] = sum(o.size is None for o in planned)
    return doc


__all__ = ["FetchError", "Options", "Outcome", "Reporter", "STATES", "fetch", "fetch_entries", "select",
           "source_for", "summary"]
