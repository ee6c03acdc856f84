"""The conditioning image of an image-to-video pipeline (`generate --image FILE`): read once, named by its content.

Every recipe of a grid starts from the same image, as from the same seed's noise, so a recipe's clip is paired with
the fp16 clip of the same prompt, seed and image. The image's content digest enters the run's model name
(`<pipeline slug>-<image slug>-<sha256 prefix>`): runs of another image never share a folder or a baseline, and a
rerun with the same image resumes.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from ..errors import UserError
from ..runstore import HASH_CHARS, safe_name


@dataclass(frozen=True)
class ConditioningImage:
    path: str  # absolute
    sha256: str  # of the file's bytes

    @property
    def key(self) -> str:
        """'<file stem slug>-<sha256 prefix>': the image's part of a run's model name."""
        return f"{safe_name(Path(self.path).stem, 24)}-{self.sha256[:HASH_CHARS]}"

    def load(self):
        """The image as an RGB PIL image (what diffusers' image-to-video pipelines take)."""
        from PIL import Image

        with Image.open(self.path) as im:
            return im.convert("RGB")

    def to_dict(self) -> dict:
        return {"path": self.path, "sha256": self.sha256}


def read_image(path: str | Path) -> ConditioningImage:
    """Check that `path` is an image PIL reads; UserError (one line) otherwise."""
    from PIL import Image, UnidentifiedImageError

    p = Path(path).expanduser()
    if not p.is_file():
        raise UserError(f"--image {path}: {'not a file' if p.exists() else 'no such file'}")
    try:
        data = p.read_bytes()
        with Image.open(p) as im:
            im.verify()
    except (OSError, UnidentifiedImageError, SyntaxError, ValueError) as e:
        raise UserError(f"--image {path}: not an image PIL can read ({str(e).splitlines()[0] if str(e) else e})") \
            from None
    return ConditioningImage(str(p.resolve()), hashlib.sha256(data).hexdigest())


__all__ = ["ConditioningImage", "read_image"]
