"""Shared by the image- and video-to-video tests (tests/test_models_image_to_video.py,
tests/test_models_video_to_video.py): the generate call on a tiny pipeline folder, its one-line errors, and the
checks that a conditioned run is filed under its input and that its fp16 clip is diffusers' own call."""

import hashlib
import json
import warnings
from pathlib import Path

import numpy as np
import torch
from typer.testing import CliRunner

from lowbit_video.cli import app

PROMPT = "a red circle moving right"
runner = CliRunner()


def save_folders(root: Path, names) -> dict[str, Path]:
    """The tiny pipeline folders `names` (models/tiny_pipelines.py) under root, by name."""
    from lowbit_video.models.tiny_pipelines import save_tiny_pipeline

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {name: save_tiny_pipeline(name, root / name) for name in names}


def generate(folder, out, *extra, recipes=("fp16", "sage2-int8")):
    args = ["generate", "--model-path", str(folder), *[a for r in recipes for a in ("--recipe", r)], "--steps", "2",
            "--prompt", PROMPT, "--seeds", "1", "--out", str(out), *extra, "--json"]
    return runner.invoke(app, args)


def one_error_line(res) -> str:
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    assert res.exit_code == 2 and errors == lines[-1:] and "Traceback" not in res.stderr, res.stderr
    return errors[0]


def conditioned_runs(res, out: Path, pipeline: str, kind: str, file: Path) -> tuple[dict, dict]:
    """({recipe: run dir}, {recipe: meta}) of a generate result, after checking that its runs are filed under the
    pipeline and the input file's stem and digest and that each meta records the input."""
    assert res.exit_code == 0, res.stderr
    runs = {r["recipe"]: Path(r["dir"]) for r in json.loads(res.stdout)["runs"]}
    digest = hashlib.sha256(file.read_bytes()).hexdigest()
    model = f"{pipeline.removesuffix('Pipeline').lower()}-{file.stem}-{digest[:10]}"
    assert {d.relative_to(out).parts[0] for d in runs.values()} == {model}
    metas = {r: json.loads((d / "meta.json").read_text()) for r, d in runs.items()}
    assert all(m["model"]["describe"][kind] == {"path": str(file.resolve()), "sha256": digest} for m in metas.values())
    return runs, metas


def diffusers_clip(pipeline: str, folder: Path, **call) -> np.ndarray:
    """diffusers' own call of the folder's pipeline (bfloat16, Wan's VAE in float32 as its examples load it, two
    steps, seed 1's CPU generator): float frames (T, H, W, 3) in [0, 1]."""
    import diffusers

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        extra = {}
        if pipeline.startswith("Wan"):
            extra["vae"] = diffusers.AutoencoderKLWan.from_pretrained(str(folder), subfolder="vae",
                                                                      torch_dtype=torch.float32)
        pipe = getattr(diffusers, pipeline).from_pretrained(str(folder), torch_dtype=torch.bfloat16, **extra)
        pipe.set_progress_bar_config(disable=True)
        with torch.no_grad():
            frames = pipe(prompt=PROMPT, num_inference_steps=2, generator=torch.Generator("cpu").manual_seed(1),
                          output_type="np", **call).frames
    return np.clip(np.asarray(frames, np.float32)[0], 0, 1)


def check_fp16_is_diffusers_and_quantized_differs(runs: dict, metas: dict, plain: np.ndarray, shape: tuple) -> None:
    """The fp16 clip equals diffusers' clip up to the 8-bit rounding of the stored frames; sage2-int8 quantized
    attention calls (no fallback) and changed the clip."""
    ours = np.load(runs["fp16"] / "frames.npz")["frames"]
    assert ours.shape == plain.shape == shape
    assert np.abs(ours.astype(np.int16) - np.round(plain * 255).astype(np.int16)).max() <= 1
    calls = metas["sage2-int8"]["attention_calls"]
    assert calls["quantized"] > 0 and calls["fallback"] == 0 and calls["engine"] == 0
    assert not np.array_equal(np.load(runs["sage2-int8"] / "frames.npz")["frames"], ours)
