"""Fixtures for tests/test_metrics_vbench.py: tiny mp4s and random weights of the real architectures.

Videos follow ../shared/notes/evaluation-offline.md §7: cv2 `mp4v`, 8 fps, 64x96 (H x W), 16 frames.
The notes do not spell out the moving square; ours is a 16x16 pure-red square on black moving 4 px to
the right per frame (its uncompressed VBench formula value is 1 - 2*4*16/(64*96*3) = 0.993056; after
mp4v it decodes to 0.99278, the notes' 0.9927). Noise is uniform uint8 per pixel and frame; mp4v
smooths it, so the decoded value (~0.768, seed-dependent within +-1.5e-3 over seeds 0-7) is far above
the 0.6654 of raw uniform noise ((256^2 - 1) / (3 * 256) mean |X - Y|).

Random weights (§7) are written under the real file names of the weights root layout of
lowbit_video.metrics.weights (vbench/... and torch/hub/...). They exercise the real loaders and model
code; their scores mean nothing, so the tests assert structure only. No facebookresearch/dino is
vendored: the hub code dir holds a stub hubconf.py that builds a random 768-d timm ViT and loads the
checkpoint from $TORCH_HOME/hub/checkpoints exactly as DINO's own hubconf does.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

T, H, W, FPS = 16, 64, 96, 8
SQUARE, STEP = 16, 4

# VBench temporal_flickering of the notes' fixtures (evaluation-offline.md §7, measured by its author).
NOTES_GOLDEN = {"static": 1.0, "moving": 0.9927, "noise": 0.7690}


def write_mp4v(path: Path, frames_rgb: np.ndarray, fps: int = FPS) -> Path:
    import cv2

    t, h, w, _ = frames_rgb.shape
    vw = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), fps, (w, h))
    assert vw.isOpened(), "cv2 cannot write mp4v"
    for f in frames_rgb:
        vw.write(np.ascontiguousarray(f[..., ::-1]))   # cv2 wants BGR
    vw.release()
    return path


def static_frames() -> np.ndarray:
    frames = np.zeros((T, H, W, 3), np.uint8)
    frames[:] = (40, 120, 200)
    frames[:, 20:44, 30:60] = (250, 250, 250)
    return frames


def moving_square_frames() -> np.ndarray:
    frames = np.zeros((T, H, W, 3), np.uint8)
    y = (H - SQUARE) // 2
    for t in range(T):
        frames[t, y:y + SQUARE, t * STEP:t * STEP + SQUARE] = (255, 0, 0)
    return frames


def noise_frames(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (T, H, W, 3), dtype=np.uint8)


def moving_square_uncompressed_score() -> float:
    """VBench's formula on the exact frames, by hand: only the square's leading and trailing STEP-wide
    strips change, in one of three channels, by 255."""
    changed = 2 * STEP * SQUARE            # pixels per frame pair
    mean_abs = changed * 255 / (H * W * 3)
    return (255 - mean_abs) / 255


def make_videos(folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    return {
        "static": write_mp4v(folder / "static.mp4", static_frames()),
        "moving": write_mp4v(folder / "moving.mp4", moving_square_frames()),
        "noise": write_mp4v(folder / "noise.mp4", noise_frames()),
    }


# --------------------------------------------------------------------------- random weights (§7)

DINO_URL = "https://dl.fbaipublicfiles.com/dino/dino_vitbase16_pretrain/dino_vitbase16_pretrain.pth"

DINO_STUB_HUBCONF = f'''"""Test stub (not facebookresearch/dino): a random 768-d ViT/16, weights from TORCH_HOME."""
dependencies = ["torch", "timm"]


def _vit():
    from timm.models.vision_transformer import VisionTransformer
    return VisionTransformer(patch_size=16, embed_dim=768, depth=1, num_heads=12, num_classes=0,
                             dynamic_img_size=True)


def dino_vitb16(pretrained=True, **kwargs):
    import torch
    model = _vit()
    if pretrained:
        # like DINO's hubconf: resolves to $TORCH_HOME/hub/checkpoints/dino_vitbase16_pretrain.pth
        sd = torch.hub.load_state_dict_from_url(url="{DINO_URL}", map_location="cpu")
        model.load_state_dict(sd, strict=True)
    return model
'''


def write_random_dino(root: Path) -> None:
    import torch
    from timm.models.vision_transformer import VisionTransformer

    torch.manual_seed(0)
    vit = VisionTransformer(patch_size=16, embed_dim=768, depth=1, num_heads=12, num_classes=0, dynamic_img_size=True)
    ckpt = root / "torch" / "hub" / "checkpoints" / "dino_vitbase16_pretrain.pth"
    ckpt.parent.mkdir(parents=True, exist_ok=True)
    torch.save(vit.state_dict(), ckpt)
    code = root / "vbench" / "dino_model" / "facebookresearch_dino_main"
    code.mkdir(parents=True, exist_ok=True)
    (code / "hubconf.py").write_text(DINO_STUB_HUBCONF)


def write_random_clip(path: Path, embed_dim: int) -> None:
    """A tiny clip.model.CLIP, traced and saved as TorchScript (what clip.load expects at a .pt path)."""
    import torch
    from clip.model import CLIP

    torch.manual_seed(0)
    model = CLIP(embed_dim, 224, 2, 128, 32, 77, 49408, 128, 2, 2).eval()
    image = torch.randn(1, 3, 224, 224)
    text = torch.zeros(1, 77, dtype=torch.long)
    text[0, 0], text[0, 1] = 49406, 49407
    with torch.no_grad():
        traced = torch.jit.trace(model, (image, text), check_trace=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.jit.save(traced, str(path))


def write_random_clip_b32(root: Path) -> None:
    """A tiny TorchScript CLIP at vbench/clip_model/ViT-B-32.pt (background_consistency, appearance_style)."""
    write_random_clip(root / "vbench" / "clip_model" / "ViT-B-32.pt", 512)


def write_random_aesthetic(root: Path) -> None:
    import torch

    write_random_clip(root / "vbench" / "clip_model" / "ViT-L-14.pt", 768)
    torch.manual_seed(0)
    head = root / "vbench" / "aesthetic_model" / "emb_reader" / "sa_0_4_vit_l_14_linear.pth"
    head.parent.mkdir(parents=True, exist_ok=True)
    torch.save(torch.nn.Linear(768, 1).state_dict(), head)


def write_random_musiq(root: Path) -> None:
    import torch
    from pyiqa.archs.musiq_arch import MUSIQ

    torch.manual_seed(0)
    path = root / "vbench" / "pyiqa_model" / "musiq_spaq_ckpt-358bb6af.pth"
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(MUSIQ(pretrained=False).state_dict(), path)


def _in_subprocess(fn_names: list[str], root: Path) -> None:
    """clip/pyiqa imports want the worker's shims; build the files in a fresh interpreter so the test
    process itself never imports them."""
    import subprocess
    import sys

    code = (
        "import sys, types, packaging, packaging.version\n"
        "try:\n    import pkg_resources\nexcept ImportError:\n"
        "    sys.modules['pkg_resources'] = types.SimpleNamespace(packaging=packaging)\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "import vbench_fixtures as f\nfrom pathlib import Path\n"
        + "".join(f"f.{name}(Path({str(root)!r}))\n" for name in fn_names)
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]


def write_random_weights(root: Path, dims: tuple[str, ...] = ("subject_consistency", "aesthetic_quality",
                                                                "imaging_quality")) -> Path:
    writers = {"subject_consistency": "write_random_dino", "aesthetic_quality": "write_random_aesthetic",
               "imaging_quality": "write_random_musiq"}
    _in_subprocess([writers[d] for d in dims], root)
    return root


def make_short_videos(folder: Path, frames: int = 2) -> dict[str, Path]:
    """Short clips for the random-weight runs (MUSIQ on CPU costs seconds per frame)."""
    folder.mkdir(parents=True, exist_ok=True)
    return {
        "moving": write_mp4v(folder / "moving-short.mp4", moving_square_frames()[:frames]),
        "noise": write_mp4v(folder / "noise-short.mp4", noise_frames(1)[:frames]),
    }
