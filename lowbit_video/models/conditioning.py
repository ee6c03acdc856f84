"""The conditioning input of an image- or video-to-video pipeline (`generate --image FILE` / `--video FILE`): read
once, named by its content.

Every recipe of a grid starts from the same input, as from the same seed's noise, so a recipe's clip is paired with
the fp16 clip of the same prompt, seed and input. The input's content digest enters the run's model name
(`<pipeline slug>-<file slug>-<sha256 prefix>`): runs of another input never share a folder or a baseline, and a
rerun with the same input resumes.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from ..errors import UserError
from ..runstore import HASH_CHARS, safe_name


@dataclass(frozen=True)
class Conditioning:
    kind: str  # "image" or "video": the pipeline __call__ argument it is passed as
    path: str  # absolute
    sha256: str  # of the file's bytes

    @property
    def key(self) -> str:
        """'<file stem slug>-<sha256 prefix>': the input's part of a run's model name."""
        return f"{safe_name(Path(self.path).stem, 24)}-{self.sha256[:HASH_CHARS]}"

    def load(self):
        """What diffusers' pipelines take: an RGB PIL image, or a video as a list of them."""
        from PIL import Image

        if self.kind == "image":
            with Image.open(self.path) as im:
                return im.convert("RGB")
        return [Image.fromarray(frame) for frame in _video_frames(Path(self.path))]

    def to_dict(self) -> dict:
        return {"path": self.path, "sha256": self.sha256}


def pipeline_kind(kind: str) -> str:
    """'an image-to-video' / 'a video-to-video' / 'a text-to-video': the kind of pipeline an input names."""
    return f"{'an' if kind == 'image' else 'a'} {kind}-to-video"


def folder_only(kind: str, model: str | None = None) -> UserError:
    """The one-line error for --image / --video beside a named --model (they condition a pipeline folder)."""
    why = f" ({model} generates from text)" if model else ""
    return UserError(f"--{kind} conditions {pipeline_kind(kind)} pipeline folder: pass --model-path DIR without "
                     f"--model{why}")


def _video_frames(path: Path):
    """uint8 (T, H, W, 3) frames of a video file ffmpeg reads, or of a run's frames.npz."""
    from ..video_io import read_frames_npz, read_mp4

    return read_frames_npz(path) if path.suffix == ".npz" else read_mp4(path)


def _file(option: str, path: str | Path) -> tuple[Path, bytes]:
    p = Path(path).expanduser()
    if not p.is_file():
        raise UserError(f"{option} {path}: {'not a file' if p.exists() else 'no such file'}")
    return p, p.read_bytes()


def read_image(path: str | Path) -> Conditioning:
    """Check that `path` is an image PIL reads; UserError (one line) otherwise."""
    from PIL import Image, UnidentifiedImageError

    p, data = _file("--image", path)
    try:
        with Image.open(p) as im:
            im.verify()
    except (OSError, UnidentifiedImageError, SyntaxError, ValueError) as e:
        raise UserError(f"--image {path}: not an image PIL can read ({str(e).splitlines()[0] if str(e) else e})") \
            from None
    return Conditioning("image", str(p.resolve()), hashlib.sha256(data).hexdigest())


def read_video(path: str | Path) -> Conditioning:
    """Check that `path` is a video ffmpeg decodes (or a run's frames.npz) with at least one frame; UserError (one
    line) otherwise."""
    p, data = _file("--video", path)
    try:
        frames = _video_frames(p)
    except (OSError, RuntimeError, ValueError, KeyError) as e:
        raise UserError(f"--video {path}: not a video ffmpeg can read ({str(e).splitlines()[0] if str(e) else e})") \
            from None
    if getattr(frames, "ndim", 0) != 4 or frames.shape[-1] != 3 or frames.dtype.name != "uint8":
        raise UserError(f"--video {path}: frames must be uint8 (T, H, W, 3) RGB, got {getattr(frames, 'dtype', '?')} "
                        f"{tuple(getattr(frames, 'shape', ()))}")
    if len(frames) == 0:
        raise UserError(f"--video {path}: no frames")
    return Conditioning("video", str(p.resolve()), hashlib.sha256(data).hexdigest())


__all__ = ["Conditioning", "folder_only", "pipeline_kind", "read_image", "read_video"]
