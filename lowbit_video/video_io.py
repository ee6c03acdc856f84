"""Video files of a run: H.264 mp4, a PNG frame strip, and a lossless frames.npz.

Frames are uint8 (T, H, W, 3) RGB everywhere here (`to_uint8` converts a model's float [0, 1]
output, rounding to nearest).

* `write_mp4`: H.264 (libx264), yuv420p, through the ffmpeg binary that the imageio-ffmpeg wheel
  ships (no system ffmpeg, no network). yuv420p needs even sizes and most players want at least
  a couple of hundred pixels, so small frames are upscaled by an integer factor with
  nearest-neighbour (32x32 -> x8 = 256x256) **for the mp4 only**; `mp4_scale` says which factor.
  H.264 is lossy: metrics never read the mp4 when frames.npz exists.
* `write_frame_strip`: the frames side by side in one PNG, upscaled x4 (nearest) when they are
  small (<= 64 px), at most `max_frames` frames (evenly spaced) so a long, large video still gives a
  viewable strip, separated by a black-and-white line (visible on any background). The PNG carries
  its layout (scale, frame indices, separator width) in text chunks, so `read_frame_strip` recovers
  the exact uint8 frames of a full strip.
* `write_frames_npz` / `read_frames_npz`: the exact uint8 frames, compressed (np.savez_compressed,
  key "frames"). The lossless source for metrics.

Every writer writes atomically: to a temporary name in the target's folder, fsync, os.replace
(`runstore.atomic_path`), so an interrupted write never leaves a file under the final name.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import math
import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Sequence

import numpy as np

from .errors import UserError
from .runstore import atomic_path, atomic_write_bytes

MP4_MIN_SIDE = 256          # small frames are upscaled (integer factor) until the short side reaches this
STRIP_SMALL_SIDE = 64       # frames with both sides <= this get the x4 strip upscale
STRIP_SCALE_SMALL = 4
STRIP_MAX_FRAMES = 16
STRIP_GAP = 2               # separator between strip frames: one black, one white pixel column
_PNG_KEY = "lowbit_video.strip"


def to_uint8(frames: np.ndarray) -> np.ndarray:
    """float [0, 1] (NaN -> 0, clipped) or uint8 -> uint8, C-contiguous, rounding to nearest."""
    arr = np.asarray(frames)
    if arr.dtype == np.uint8:
        return np.ascontiguousarray(arr)
    f = np.nan_to_num(arr.astype(np.float32), nan=0.0, posinf=1.0, neginf=0.0)
    return np.ascontiguousarray(np.floor(np.clip(f, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8))


def frames_sha256(frames: np.ndarray) -> str:
    """sha256 of the uint8 frames' bytes (C order), shape folded in so (2, 4) != (4, 2)."""
    u8 = to_uint8(frames)
    h = hashlib.sha256(json.dumps(list(u8.shape)).encode())
    h.update(u8.tobytes())
    return h.hexdigest()


def _check(frames: np.ndarray) -> np.ndarray:
    u8 = to_uint8(frames)
    if u8.ndim != 4 or u8.shape[-1] != 3 or 0 in u8.shape:
        raise ValueError(f"frames must be (T, H, W, 3) with T, H, W > 0, got shape {u8.shape}")
    return u8


def upscale(frames: np.ndarray, factor: int) -> np.ndarray:
    """Nearest-neighbour integer upscale of (T, H, W, C)."""
    if factor == 1:
        return frames
    return np.repeat(np.repeat(frames, factor, axis=1), factor, axis=2)


def mp4_scale(height: int, width: int, min_side: int = MP4_MIN_SIDE) -> int:
    """The integer upscale factor `write_mp4` uses: the smallest k >= 1 with k * min(H, W) >= min_side,
    doubled when k * H or k * W would be odd (yuv420p needs even sizes)."""
    k = max(1, math.ceil(min_side / max(1, min(height, width))))
    if (k * height) % 2 or (k * width) % 2:
        k *= 2
    return k


# ------------------------------------------------------------------------------------------ mp4


def ffmpeg_exe() -> str:
    """The ffmpeg binary `write_mp4` and `read_mp4` run: IMAGEIO_FFMPEG_EXE, else the one inside the imageio-ffmpeg
    wheel, else a system one. A one-line UserError when there is none, so that a command that will write mp4s can
    ask before it starts work rather than fail at its first video."""
    try:
        import imageio_ffmpeg
    except ImportError:
        raise UserError("mp4 files need the imageio-ffmpeg package: pip install imageio-ffmpeg") from None
    try:
        exe = imageio_ffmpeg.get_ffmpeg_exe()
    except RuntimeError:
        raise UserError("no ffmpeg binary for mp4 files: imageio-ffmpeg's own is missing or not executable and "
                        "none is installed (reinstall imageio-ffmpeg, or set IMAGEIO_FFMPEG_EXE)") from None
    found = shutil.which(exe)  # IMAGEIO_FFMPEG_EXE is taken as given by imageio-ffmpeg: a name on PATH or a path
    if found is None:
        raise UserError(f"IMAGEIO_FFMPEG_EXE names {exe!r}, which is not an executable file")
    return found


def write_mp4(frames: np.ndarray, path: str | Path, fps: int = 8, *, crf: int = 16,
              min_side: int = MP4_MIN_SIDE) -> dict:
    """Write uint8/float frames (T, H, W, 3) as H.264 yuv420p mp4 at `fps`, upscaled by
    `mp4_scale(H, W)` (nearest). Atomic. Returns {"fps", "scale", "width", "height", "frames", "codec"}."""
    exe = ffmpeg_exe()
    u8 = _check(frames)
    T, H, W, _ = u8.shape
    k = mp4_scale(H, W, min_side)
    big = np.ascontiguousarray(upscale(u8, k))
    path = Path(path)
    # ffmpeg run here rather than through imageio_ffmpeg.write_frames, which never looks at ffmpeg's
    # exit status: a full disk would leave a truncated mp4 under the final name, silently
    cmd = [exe, "-y", "-f", "rawvideo", "-vcodec", "rawvideo", "-s", f"{W * k}x{H * k}",
           "-pix_fmt", "rgb24", "-r", str(fps), "-i", "-", "-an", "-vcodec", "libx264", "-pix_fmt", "yuv420p",
           "-v", "error", "-crf", str(crf), "-preset", "medium", "-f", "mp4"]
    with atomic_path(path) as tmp:
        # its own session: a Ctrl-C at the terminal reaches this process only, which stops ffmpeg
        # (subprocess.run kills it) and removes the temporary, rather than ffmpeg failing first
        done = subprocess.run([*cmd, str(tmp)], input=big.tobytes(), capture_output=True, start_new_session=True)
        if done.returncode != 0:
            raise _ffmpeg_error(done, tmp)
    return {"fps": fps, "scale": k, "width": W * k, "height": H * k, "frames": T, "codec": "h264 (libx264, yuv420p)"}


def _ffmpeg_error(done: subprocess.CompletedProcess, path: Path) -> OSError:
    """The OSError of a failed ffmpeg: a lack of room keeps its errno (runstore.atomic_path makes it a
    one-line error naming the file); anything else says ffmpeg's last line."""
    text = done.stderr.decode("utf-8", "replace")
    if done.returncode == -signal.SIGXFSZ:  # killed at the file-size limit (ulimit -f)
        return OSError(errno.EFBIG, os.strerror(errno.EFBIG), str(path))
    for code in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        if os.strerror(code) in text:
            return OSError(code, os.strerror(code), str(path))
    last = next((line for line in reversed(text.splitlines()) if line.strip()), "no message")
    return OSError(f"ffmpeg failed writing {path} (exit status {done.returncode}): {last.strip()}")


def read_mp4(path: str | Path, *, downscale: int = 1) -> np.ndarray:
    """Decode an mp4 to uint8 (T, H, W, 3); `downscale` k > 1 undoes `write_mp4`'s nearest upscale by
    taking the centre pixel of each k x k cell (the values are H.264-decoded, not the originals)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    ffmpeg_exe()  # first: a missing package or binary is a one-line error, not an ImportError
    import imageio_ffmpeg

    gen = imageio_ffmpeg.read_frames(str(path), pix_fmt="rgb24")
    meta = next(gen)
    w, h = meta["size"]
    frames = [np.frombuffer(buf, dtype=np.uint8).reshape(h, w, 3) for buf in gen]
    arr = np.stack(frames) if frames else np.zeros((0, h, w, 3), np.uint8)
    if downscale > 1:
        c = downscale // 2
        arr = arr[:, c::downscale, c::downscale]
    return np.ascontiguousarray(arr)


# ---------------------------------------------------------------------------------- frame strip


def strip_layout(frames_shape: Sequence[int], *, scale: int | None = None,
                 max_frames: int = STRIP_MAX_FRAMES) -> dict:
    """{"scale", "indices"} that `write_frame_strip` uses for frames of shape (T, H, W, 3)."""
    T, H, W = int(frames_shape[0]), int(frames_shape[1]), int(frames_shape[2])
    if scale is None:
        scale = STRIP_SCALE_SMALL if max(H, W) <= STRIP_SMALL_SIDE else 1
    if T <= max_frames:
        indices = list(range(T))
    else:
        indices = sorted({int(round(i)) for i in np.linspace(0, T - 1, max_frames)})
    return {"scale": int(scale), "indices": indices}


def write_frame_strip(frames: np.ndarray, path: str | Path, *, scale: int | None = None,
                      max_frames: int = STRIP_MAX_FRAMES) -> dict:
    """PNG of the frames side by side (left to right in time), nearest-upscaled by `scale` (default x4
    for frames <= 64 px, else x1), at most `max_frames` evenly spaced frames. Atomic. Returns the
    layout {"scale", "indices", "frames", "height", "width"} (also stored in the PNG)."""
    from PIL import Image, PngImagePlugin

    u8 = _check(frames)
    T, H, W, _ = u8.shape
    layout = strip_layout(u8.shape, scale=scale, max_frames=max_frames)
    sel = upscale(u8[layout["indices"]], layout["scale"])
    sep = np.zeros((sel.shape[1], STRIP_GAP, 3), np.uint8)
    sep[:, 1:] = 255
    parts = [part for frame in sel for part in (frame, sep)][:-1]
    strip = np.concatenate(parts, axis=1)  # (H*s, n*W*s + (n-1)*gap, 3)
    layout.update({"frames": T, "height": H, "width": W, "gap": STRIP_GAP})
    info = PngImagePlugin.PngInfo()
    info.add_text(_PNG_KEY, json.dumps(layout))
    buf = io.BytesIO()
    Image.fromarray(strip, mode="RGB").save(buf, format="PNG", pnginfo=info, optimize=False)
    atomic_write_bytes(Path(path), buf.getvalue())
    return layout


def read_frame_strip(path: str | Path) -> np.ndarray:
    """uint8 frames (n, H, W, 3) from a strip written by `write_frame_strip` (the frames it shows:
    all of them unless the clip had more than `max_frames`). Exact: PNG is lossless and the upscale
    is undone by taking each scale x scale cell's top-left pixel."""
    from PIL import Image

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    with Image.open(path) as im:
        text = im.text.get(_PNG_KEY) if hasattr(im, "text") else None
        arr = np.asarray(im.convert("RGB"))
    if text is None:
        raise ValueError(f"{path}: not a lowbit-video frame strip (no {_PNG_KEY} text chunk)")
    layout = json.loads(text)
    s, H, W, n = layout["scale"], layout["height"], layout["width"], len(layout["indices"])
    gap = int(layout.get("gap", 0))  # strips written before separators have none
    if arr.shape != (H * s, n * W * s + (n - 1) * gap, 3):
        raise ValueError(f"{path}: strip is {arr.shape[1]}x{arr.shape[0]}, layout says "
                         f"{n * W * s + (n - 1) * gap}x{H * s}")
    frames = [arr[::s, i * (W * s + gap): i * (W * s + gap) + W * s: s] for i in range(n)]
    return np.ascontiguousarray(np.stack(frames))


def strip_is_complete(path: str | Path) -> bool:
    """Whether a strip shows every frame of its clip (so `read_frame_strip` is the whole clip)."""
    from PIL import Image

    with Image.open(path) as im:
        text = getattr(im, "text", {}).get(_PNG_KEY)
    if text is None:
        return False
    layout = json.loads(text)
    return len(layout["indices"]) == layout["frames"]


# ------------------------------------------------------------------------------------ lossless


def write_frames_npz(frames: np.ndarray, path: str | Path) -> None:
    """The exact uint8 frames, compressed (key "frames"). Atomic."""
    u8 = _check(frames)
    buf = io.BytesIO()
    np.savez_compressed(buf, frames=u8)
    atomic_write_bytes(Path(path), buf.getvalue())


def read_frames_npz(path: str | Path) -> np.ndarray:
    with np.load(Path(path), allow_pickle=False) as data:
        return np.ascontiguousarray(data["frames"])


__all__ = [
    "ffmpeg_exe", "frames_sha256", "mp4_scale", "read_frame_strip", "read_frames_npz", "read_mp4",
    "strip_is_complete", "strip_layout", "to_uint8", "upscale", "write_frame_strip", "write_frames_npz", "write_mp4",
]
