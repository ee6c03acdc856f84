"""tiny-shapes model, training and shipped weights (CPU, small configs; a few seconds in all)."""

import json

import numpy as np
import pytest
import torch

pytest.importorskip("diffusers")

from lowbit_video.models.tiny_shapes.model import (  # noqa: E402
    WEIGHTS_DIR,
    TinyShapesModel,
    clips_to_model,
    default_config,
    model_to_clips,
    tiny_test_config,
)
from lowbit_video.models.tiny_shapes.sample import initial_noise, sample  # noqa: E402
from lowbit_video.models.tiny_shapes.train import (  # noqa: E402
    TrainConfig,
    export_compact,
    export_model,
    import_compact,
    load_checkpoint,
    train,
)

PROMPTS = ["a red circle moving left on a black background", "an orange square growing on a gray background"]


@pytest.fixture(scope="module")
def tiny() -> TinyShapesModel:
    torch.manual_seed(0)
    return TinyShapesModel(tiny_test_config()).eval()


def test_builds_from_config_and_forward_shapes(tiny):
    from diffusers import WanTransformer3DModel

    assert isinstance(tiny.transformer, WanTransformer3DModel)
    c, f, h, w = tiny.video_shape
    assert (c, f, h, w) == (3, 4, 16, 16)
    assert tiny.num_video_tokens == 4 * 8 * 8
    ids = tiny.tokenize(PROMPTS)
    assert ids.shape == (2, tiny.config["text_len"]) and ids.dtype == torch.long
    assert (ids[:, 0] > 0).all() and (tiny.null_ids(2) == 0).all()
    ehs = tiny.encode_text(ids)
    assert ehs.shape == (2, tiny.config["text_len"], tiny.config["transformer"]["text_dim"])
    x = torch.randn(2, c, f, h, w, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        v = tiny(x, torch.tensor([0.3, 0.9]), ids)
    assert v.shape == x.shape and torch.isfinite(v).all()


def test_default_architecture():
    cfg = default_config()
    t = cfg["transformer"]
    assert t["in_channels"] == t["out_channels"] == 3 and tuple(t["patch_size"]) == (1, 2, 2)
    assert t["attention_head_dim"] in (64, 128)
    # 8 frames of 32x32 with patch (1, 2, 2): 2,048 video tokens.
    assert cfg["frames"] * (cfg["size"] // 2) ** 2 == 2048


def test_tokenize_rejects_bad_prompts(tiny):
    with pytest.raises(ValueError):
        tiny.tokenize(["a purple circle moving left on a black background"])


def test_pixel_layout_round_trip():
    clips = np.random.default_rng(0).random((2, 4, 8, 8, 3), dtype=np.float32)
    x = clips_to_model(clips)
    assert x.shape == (2, 3, 4, 8, 8) and float(x.min()) >= -1 and float(x.max()) <= 1
    np.testing.assert_allclose(model_to_clips(x), clips, atol=1e-6)


def test_save_load_round_trip_is_bit_identical(tiny, tmp_path):
    tiny.save(tmp_path / "fp32", dtype="float32")
    back = TinyShapesModel.from_folder(tmp_path / "fp32")
    a, b = tiny.state_dict(), back.state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    # fp16 storage: loading gives the fp16-rounded weights, and saving those again is byte-identical.
    tiny.save(tmp_path / "fp16", dtype="float16")
    half = TinyShapesModel.from_folder(tmp_path / "fp16")
    assert all(torch.equal(half.state_dict()[k], a[k].half().float()) for k in a)
    half.save(tmp_path / "fp16b", dtype="float16")
    from safetensors.torch import load_file

    # (not a byte comparison: safetensors writes its metadata map in no fixed order)
    f1, f2 = (load_file(str(tmp_path / d / "model.safetensors")) for d in ("fp16", "fp16b"))
    assert f1.keys() == f2.keys() and all(torch.equal(f1[k], f2[k]) and f1[k].dtype == torch.float16 for k in f1)
    assert json.loads((tmp_path / "fp16" / "config.json").read_text())["storage_dtype"] == "float16"


def test_missing_folder_is_one_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing config.json, model.safetensors"):
        TinyShapesModel.from_folder(tmp_path)


def test_sampling_is_deterministic_and_batch_independent(tiny):
    n0 = initial_noise(tiny, [7])
    assert torch.equal(n0[0], initial_noise(tiny, [3, 7])[1])
    a = sample(tiny, PROMPTS, [0, 1], steps=2, guidance=2.0)
    b = sample(tiny, PROMPTS[1:], [1], steps=2, guidance=2.0)
    assert a.shape == (2, 4, 16, 16, 3) and a.dtype == np.float32
    assert 0.0 <= a.min() and a.max() <= 1.0
    np.testing.assert_allclose(a[1], b[0], atol=1e-5)


def _tiny_train_config(out, steps):
    return TrainConfig(steps=steps, out=str(out), batch=2, workers=0, chunk_size=4, pool_chunks=2, warmup=2,
                       log_every=1, model_config=tiny_test_config(), device="cpu")


def test_train_two_steps_then_resume(tmp_path):
    out = tmp_path / "run"
    s = train(_tiny_train_config(out, 2), log=lambda m: None)
    assert s["step"] == 2 and np.isfinite(s["final_loss_mean_last_200"])
    ck = load_checkpoint(out / "checkpoint.pt")
    assert ck["step"] == 2 and set(ck) >= {"model", "ema", "optimizer", "rng", "train_config", "history"}
    assert (out / "model" / "model.safetensors").is_file()

    s2 = train(_tiny_train_config(out, 3), resume=True, log=lambda m: None)
    assert s2["step"] == 3 and s2["steps_this_run"] == 1
    steps = [json.loads(line)["step"] for line in (out / "loss.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3]
    assert [h["end_step"] for h in s2["history"]] == [2, 3]

    # Compact transfer format: split parts, reassembled checkpoint resumes at the same step.
    parts = export_compact(out / "checkpoint.pt", tmp_path / "parts", part_bytes=200_000)
    assert len(parts) >= 2 and all(p.stat().st_size <= 200_000 for p in parts)
    assert import_compact(tmp_path / "parts", tmp_path / "run2" / "checkpoint.pt") == 3
    export_model(tmp_path / "run2" / "checkpoint.pt", tmp_path / "exported")
    assert TinyShapesModel.from_folder(tmp_path / "exported").config["frames"] == 4


def test_resume_without_checkpoint_fails(tmp_path):
    with pytest.raises(FileNotFoundError):
        train(_tiny_train_config(tmp_path / "none", 2), resume=True, log=lambda m: None)


def test_shipped_weights_load_and_fit_the_budget():
    files = [WEIGHTS_DIR / "model.safetensors", WEIGHTS_DIR / "config.json"]
    assert all(f.is_file() for f in files)
    assert sum(f.stat().st_size for f in files) <= 25 * 10**6
    from safetensors import safe_open

    with safe_open(str(files[0]), "pt") as f:
        assert {f.get_slice(k).get_dtype() for k in f.keys()} == {"F16"}
    model = TinyShapesModel.from_folder()
    assert model.config["storage_dtype"] == "float16"
    assert model.num_video_tokens == 2048
    assert model.transformer.config.attention_head_dim in (64, 128)
    ids = model.tokenize(PROMPTS[:1])
    with torch.no_grad():
        v = model(initial_noise(model, [0]), torch.tensor([1.0]), ids)
    assert v.shape == (1, 3, 8, 32, 32) and torch.isfinite(v).all()


def test_cli_train_tiny_is_registered():
    from typer.testing import CliRunner

    from lowbit_video.cli import app

    res = CliRunner().invoke(app, ["train-tiny", "--help"])
    assert res.exit_code == 0
    for opt in ("--steps", "--out", "--resume", "--batch", "--lr", "--device", "--minutes"):
        assert opt in res.output
