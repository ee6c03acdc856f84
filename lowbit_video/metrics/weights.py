"""The weights manifest: every file a learned metric needs, where it lives, and whether it is usable.

Why a manifest: LPIPS and VBench would otherwise fetch their weights from the network at first use
(torchvision's hub cache, VBench's `wget`), or -- worse -- silently run with random weights. Here
metrics never download anything: the files live under one *weights root*, placed there by
`lowbit-video weights fetch` (metrics.fetch, from each entry's `url`) or by hand, and each metric is
computed only when all of its files are present and, where a hash is known, verified. Anything else
makes the metric unavailable with a reason naming the file and the fetch command that fixes it.

Layout under the root (see ../shared/notes/evaluation-offline.md §6):

* `torch/`  is used as TORCH_HOME: `torch/hub/checkpoints/<name>-<sha256[:8]>.pth` (torchvision's
  own naming; torchvision trusts any file there, so the hash is checked here instead);
* `vbench/` is used as VBENCH_CACHE_DIR: `clip_model/`, `amt_model/`, `raft_model/models/`, ...;
* `huggingface/` is the VBench worker's HF_HOME (the Hugging Face cache layout: `hub/models--<name>`).

The root is `--weights-dir`, else $LOWBIT_VIDEO_WEIGHTS_DIR, else ~/.cache/lowbit-video/weights.

Hashing multi-GB files on every command would be slow, so a file's sha256 is cached in
`<root>/.verified.json` keyed by (path, size, mtime_ns): replacing or touching a file re-hashes it.
Files without a published hash are only checked for existence (and size, where known), unless the
fetcher recorded the sha256 it saw at download time in `<file>.sha256.json` beside the file: then the
file is checked against that record (a later change of the file is caught; the record says what was
downloaded, not what the publisher meant, and `check` says so).
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

ENV_VAR = "LOWBIT_VIDEO_WEIGHTS_DIR"
DEFAULT_ROOT = Path("~/.cache/lowbit-video/weights")
CACHE_NAME = ".verified.json"
RECORD_SUFFIX = ".sha256.json"
# Reasons are stored cut to 400 characters (metrics.vbench.unavailable); missing_for keeps its
# fix command inside that.
REASON_MAX = 400
STATES = ("present", "missing", "bad-hash", "bad-size")


@dataclass(frozen=True)
class WeightFile:
    """One file (or folder, kind "dir") of the manifest. `sha256`: the full hex digest or a prefix of
    at least 8 characters (torchvision names carry one); None when no hash is known. `source` is
    documentation for the user. `url` is where `weights fetch` downloads it from (None: no direct
    download; `source` says how to get it). `member`: for a file, its path inside the zip archive at
    `url`; for a folder, the prefix inside the zip archive at `url` whose contents become the folder
    ("" for the archive's top level)."""

    key: str
    relpath: str
    used_by: tuple[str, ...]
    sha256: str | None
    size: int | None
    source: str
    kind: str = "file"
    url: str | None = None
    member: str | None = None


@dataclass
class FileStatus:
    """What `check` found for one manifest entry. `found_sha256` is the file's digest when it was
    hashed (only files with a known hash are hashed); `found_size` its size when present."""

    entry: WeightFile
    path: Path
    state: str = "missing"
    detail: str = ""
    found_sha256: str | None = None
    found_size: int | None = None
    hash_source: str | None = None  # "published" (the manifest's), "recorded" (at fetch time) or None

    # the entry's own fields, as the status reports them
    key = property(lambda self: self.entry.key)
    relpath = property(lambda self: self.entry.relpath)
    used_by = property(lambda self: self.entry.used_by)
    expected_sha256 = property(lambda self: self.entry.sha256)
    expected_size = property(lambda self: self.entry.size)
    source = property(lambda self: self.entry.source)

    def to_json(self) -> dict:
        return {"key": self.key, "path": str(self.path), "relpath": self.relpath, "state": self.state,
                "detail": self.detail, "used_by": list(self.used_by), "sha256": self.expected_sha256,
                "size": self.expected_size, "source": self.source, "hash": self.hash_source,
                "found": None if self.state == "missing" else {"size": self.found_size, "sha256": self.found_sha256}}


_HF_USED = "HF OpenGVLab/VBench_Used_Models"
_HF_USED_URL = "https://huggingface.co/OpenGVLab/VBench_Used_Models/resolve/main/"
_CLIP_URL = "https://openaipublic.azureedge.net/clip/models/"
# The download URLs are those VBench itself (init_submodules, its aesthetic and ViCLIP modules) and
# torchvision fetch from; the DINO code is GitHub's archive of the repository VBench clones.
MANIFEST: tuple[WeightFile, ...] = (
    WeightFile("lpips-alexnet", "torch/hub/checkpoints/alexnet-owt-7be5be79.pth", ("lpips",), "7be5be79", None,
               "torchvision AlexNet IMAGENET1K_V1 (download.pytorch.org/models/alexnet-owt-7be5be79.pth); "
               "LPIPS's linear heads ship inside the lpips wheel",
               url="https://download.pytorch.org/models/alexnet-owt-7be5be79.pth"),
    WeightFile("dino-vitb16", "torch/hub/checkpoints/dino_vitbase16_pretrain.pth", ("subject_consistency",), None, None,
               "facebookresearch/dino: dino_vitbase16_pretrain.pth (DINO ViT-B/16)",
               url="https://dl.fbaipublicfiles.com/dino/dino_vitbase16_pretrain/dino_vitbase16_pretrain.pth"),
    WeightFile("dino-hub-code", "vbench/dino_model/facebookresearch_dino_main", ("subject_consistency",), None, None,
               "a checkout of github.com/facebookresearch/dino (main), for torch.hub's local load", kind="dir",
               url="https://github.com/facebookresearch/dino/archive/refs/heads/main.zip", member="dino-main/"),
    WeightFile("clip-vit-b-32", "vbench/clip_model/ViT-B-32.pt", ("background_consistency", "appearance_style"),
               "40d365715913c9da98579312b702a82c18be219cc2a73407c4526f58eba950af", None, "OpenAI CLIP ViT-B/32 (TorchScript .pt)",
               url=_CLIP_URL + "40d365715913c9da98579312b702a82c18be219cc2a73407c4526f58eba950af/ViT-B-32.pt"),
    WeightFile("clip-vit-l-14", "vbench/clip_model/ViT-L-14.pt", ("aesthetic_quality",),
               "b8cca3fd41ae0c99ba7e8951adf17d267cdb84cd88be6f7c2e0eca1737a03836", None, "OpenAI CLIP ViT-L/14 (TorchScript .pt)",
               url=_CLIP_URL + "b8cca3fd41ae0c99ba7e8951adf17d267cdb84cd88be6f7c2e0eca1737a03836/ViT-L-14.pt"),
    WeightFile("aesthetic-head", "vbench/aesthetic_model/emb_reader/sa_0_4_vit_l_14_linear.pth", ("aesthetic_quality",),
               None, None, "LAION-AI/aesthetic-predictor sa_0_4_vit_l_14_linear.pth",
               url="https://github.com/LAION-AI/aesthetic-predictor/raw/main/sa_0_4_vit_l_14_linear.pth"),
    WeightFile("amt-s", "vbench/amt_model/amt-s.pth", ("motion_smoothness",), None, None, "HF lalala125/AMT amt-s.pth",
               url="https://huggingface.co/lalala125/AMT/resolve/main/amt-s.pth"),
    WeightFile("raft-things", "vbench/raft_model/models/raft-things.pth", ("dynamic_degree",), None, None,
               "RAFT release models.zip: raft-things.pth",
               url="https://dl.dropboxusercontent.com/s/4j4z58wuv8o0mfz/models.zip", member="models/raft-things.pth"),
    WeightFile("musiq-spaq", "vbench/pyiqa_model/musiq_spaq_ckpt-358bb6af.pth", ("imaging_quality",), "358bb6af", None,
               "chaofengc/IQA-PyTorch release v0.1-weights: musiq_spaq_ckpt-358bb6af.pth (prefix from the file name)",
               url="https://github.com/chaofengc/IQA-PyTorch/releases/download/v0.1-weights/musiq_spaq_ckpt-358bb6af.pth"),
    WeightFile("umt-l16-k400", "vbench/umt_model/l16_ptk710_ftk710_ftk400_f16_res224.pth", ("human_action",), None, None,
               _HF_USED, url=_HF_USED_URL + "l16_ptk710_ftk710_ftk400_f16_res224.pth"),
    WeightFile("viclip", "vbench/ViCLIP/ViClip-InternVid-10M-FLT.pth", ("temporal_style", "overall_consistency"), None,
               None, _HF_USED, url=_HF_USED_URL + "ViClip-InternVid-10M-FLT.pth"),
    # Optional (used_by empty): when the root lacks it, the VBench worker links the identical file that
    # ships in the openai-clip package (its size and sha256 are that copy's); listed so that a
    # user-supplied copy is visible in `weights check`.
    WeightFile("viclip-bpe", "vbench/ViCLIP/bpe_simple_vocab_16e6.txt.gz", (),
               "924691ac288e54409236115652ad4aa250f48203de50a9e4722a6ecd48d6804a", 1356917,
               "optional: openai/CLIP clip/bpe_simple_vocab_16e6.txt.gz; when absent the copy inside the "
               "openai-clip package is used",
               url="https://raw.githubusercontent.com/openai/CLIP/main/clip/bpe_simple_vocab_16e6.txt.gz"),
    WeightFile("grit-b", "vbench/grit_model/grit_b_densecap_objectdet.pth",
               ("object_class", "multiple_objects", "color", "spatial_relationship"), None, None,
               "GRiT release grit_b_densecap_objectdet.pth (" + _HF_USED + "); needs detectron2",
               url=_HF_USED_URL + "grit_b_densecap_objectdet.pth"),
    WeightFile("tag2text", "vbench/caption_model/tag2text_swin_14m.pth", ("scene",), None, None,
               "HF xinyu1205/recognize-anything tag2text_swin_14m.pth",
               url="https://huggingface.co/spaces/xinyu1205/recognize-anything/resolve/main/tag2text_swin_14m.pth"),
    # No url: the Hugging Face cache layout (refs/, snapshots/<commit>/, blobs/) is written by the
    # Hugging Face client itself; `source` gives the command.
    WeightFile("bert-base-uncased", "huggingface/hub/models--bert-base-uncased", ("scene",), None, None,
               "HF google-bert/bert-base-uncased in the Hugging Face cache layout (Tag2Text builds its text "
               "branch and tokenizer from it; the VBench worker's HF_HOME is <root>/huggingface): "
               "HF_HOME=<root>/huggingface huggingface-cli download bert-base-uncased config.json "
               "tokenizer_config.json vocab.txt tokenizer.json", kind="dir"),
)


# ------------------------------------------------------------------------------------ the root


def weights_root(cli_value: str | os.PathLike | None = None) -> Path:
    """--weights-dir > $LOWBIT_VIDEO_WEIGHTS_DIR > ~/.cache/lowbit-video/weights (never created here)."""
    value = cli_value if cli_value not in (None, "") else os.environ.get(ENV_VAR) or None
    return Path(value).expanduser() if value is not None else DEFAULT_ROOT.expanduser()


def _manifest(manifest: Sequence[WeightFile] | None) -> Sequence[WeightFile]:
    """`manifest`, or the module's MANIFEST looked up at call time (tests may replace it)."""
    return MANIFEST if manifest is None else manifest


def entries_for(metric: str, manifest: Sequence[WeightFile] | None = None) -> list[WeightFile]:
    """The manifest entries a metric uses."""
    return [w for w in _manifest(manifest) if metric in w.used_by]


# ------------------------------------------------------------------------------------- hashing


def file_sha256(path: Path) -> str:
    """The full sha256 hex digest of a file, read in 1 MiB pieces."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


_file_sha256 = file_sha256  # what the hash cache calls (looked up at call time: tests count the calls)


class _HashCache:
    """sha256 by (resolved path, size, mtime_ns), persisted in <root>/.verified.json. A root that is
    not writable simply means re-hashing in the next process (within one, `_memory` remembers)."""

    _memory: dict = {}

    def __init__(self, root: Path) -> None:
        self.file = root / CACHE_NAME
        try:
            data = json.loads(self.file.read_text())
            self.entries: dict = data.get("files", {}) if isinstance(data, dict) else {}
        except (OSError, ValueError):
            self.entries = {}
        self.dirty = False

    def sha256(self, path: Path) -> str:
        st = path.stat()
        key = str(path.resolve())
        for hit in (self.entries.get(key), self._memory.get(key)):
            if isinstance(hit, dict) and hit.get("size") == st.st_size and hit.get("mtime_ns") == st.st_mtime_ns:
                if hit is not self.entries.get(key):
                    self.entries[key], self.dirty = hit, True
                return str(hit["sha256"])
        digest = _file_sha256(path)
        self.entries[key] = self._memory[key] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest}
        self.dirty = True
        return digest

    def save(self) -> None:
        if not self.dirty or not self.file.parent.is_dir():
            return
        from ..runstore import atomic_write_json

        try:
            atomic_write_json(self.file, {"format": "lowbit-video verified weights", "files": self.entries})
        except OSError:
            pass


# -------------------------------------------------------------------------------------- checks


def record_path(path: Path) -> Path:
    """Where the fetcher records the sha256 of a file the manifest has no hash for."""
    return path.with_name(path.name + RECORD_SUFFIX)


def read_record(path: Path) -> dict | None:
    """The record beside `path` ({"sha256", "size", "url", ...}), or None when absent or unreadable."""
    try:
        data = json.loads(record_path(path).read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(data, dict) and isinstance(data.get("sha256"), str) and len(data["sha256"]) == 64
    return data if ok else None


def remember_hash(root: str | os.PathLike, path: Path, digest: str) -> None:
    """Enter a digest the caller just computed for `path` in the root's hash cache, so that the next
    `check` does not hash the file again."""
    cache = _HashCache(Path(root))
    st = path.stat()
    cache.entries[str(path.resolve())] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest}
    cache.dirty = True
    cache.save()


def _status(w: WeightFile, root: Path, cache: _HashCache) -> FileStatus:
    path = root / w.relpath
    st = FileStatus(w, path)
    if w.kind == "dir":
        if path.is_dir() and any(path.iterdir()):
            st.state, st.detail = "present", "folder present (contents not verified)"
        else:
            st.detail = f"folder not found; source: {w.source}"
        return st
    if not path.is_file():
        st.detail = f"not found; source: {w.source}"
        if path.with_name(path.name + ".part").is_file():
            st.detail += f" (a partial download {path.name}.part is there: `weights fetch` resumes it)"
        return st
    st.found_size = path.stat().st_size
    if w.size is not None and st.found_size != w.size:
        st.state, st.detail = "bad-size", f"{w.relpath}: {st.found_size} bytes, expected {w.size}"
        return st
    expected, st.hash_source = w.sha256, "published"
    if expected is None:
        record = read_record(path)
        if record is None:
            st.state, st.detail, st.hash_source = "present", "present (no known hash; not verified)", None
            return st
        expected, st.hash_source = record["sha256"], "recorded"
    try:
        st.found_sha256 = cache.sha256(path)
    except OSError as e:
        st.state, st.detail = "bad-hash", f"{w.relpath}: unreadable ({e.strerror or e})"
        return st
    if st.found_sha256.startswith(expected.lower()):
        st.state = "present"
        st.detail = ("sha256 verified" if st.hash_source == "published"
                     else "sha256 verified against the hash recorded locally, not published")
    else:
        st.state = "bad-hash"
        st.detail = f"{w.relpath}: sha256 {st.found_sha256[:16]}... does not match the expected {expected[:16]}"
        if st.hash_source == "recorded":
            st.detail += f" recorded at fetch in {record_path(path).name} (the file changed since)"
    return st


def check(root: str | os.PathLike, manifest: Sequence[WeightFile] | None = None,
          keys: Iterable[str] | None = None) -> list[FileStatus]:
    """Status of every manifest entry (or only `keys`) under `root`, in manifest order."""
    root = Path(root)
    wanted = None if keys is None else set(keys)
    cache = _HashCache(root)
    try:
        return [_status(w, root, cache) for w in _manifest(manifest) if wanted is None or w.key in wanted]
    finally:
        cache.save()


def fetch_command(metric: str, root: str | os.PathLike | None = None) -> str:
    """The command that fetches `metric`'s files into `root` (--weights-dir only when `root` is not
    the root the command finds by itself)."""
    cmd = f"lowbit-video weights fetch {metric}"
    if root is not None and Path(root).expanduser() != weights_root(None):
        cmd += f" --weights-dir {shlex.quote(str(root))}"
    return cmd


def missing_for(metric: str, root: str | os.PathLike, manifest: Sequence[WeightFile] | None = None) -> str | None:
    """None when every file `metric` uses is present and verified; else one line naming the file(s)
    and ending with the fetch command that fixes it."""
    entries = entries_for(metric, manifest)
    if not entries:
        return None
    bad = [s for s in check(root, manifest, keys=[w.key for w in entries]) if s.state != "present"]
    if not bad:
        return None
    fix = f"; fix: {fetch_command(metric, root)}"
    text = f"{'; '.join(s.detail if s.state != 'missing' else f'missing {s.relpath}' for s in bad)} (weights root {Path(root)})"
    room = REASON_MAX - len(fix)
    if len(text) > room:  # the command must survive the cut that stored reasons get
        text = text[: max(room - 3, 0)] + "..."
    return text + fix


__all__ = ["CACHE_NAME", "ENV_VAR", "RECORD_SUFFIX", "FileStatus", "MANIFEST", "WeightFile", "check",
           "entries_for", "fetch_command", "file_sha256", "missing_for", "read_record", "record_path", "remember_hash",
           "weights_root"]
