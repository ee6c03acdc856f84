"""The model registry and checkpoint-folder checks: names, infos, and one-line errors."""

import json
import shutil
import warnings

import pytest

pytest.importorskip("diffusers")

from lowbit_video.errors import UserError  # noqa: E402
from lowbit_video.models.base import ModelInfo  # noqa: E402
from lowbit_video.models.registry import get_model_info, list_models, load_model  # noqa: E402

NAMES = ["tiny-shapes", "wan2.1-t2v-1.3b", "wan2.1-t2v-14b", "wan2.2-t2v-a14b", "wan2.2-ti2v-5b", "hunyuanvideo"]


def _one_line(exc) -> str:
    msg = str(exc.value)
    assert "\n" not in msg and msg
    return msg


def test_list_models_names_families_and_weights():
    infos = list_models()
    assert [i.name for i in infos] == NAMES
    assert all(isinstance(i, ModelInfo) for i in infos)
    fam = {i.name: i.family for i in infos}
    assert fam["tiny-shapes"] == "tiny-shapes" and fam["hunyuanvideo"] == "hunyuanvideo"
    assert {fam[n] for n in NAMES[1:5]} == {"wan"}
    tiny = get_model_info("tiny-shapes")
    assert not tiny.needs_path and tiny.weights.startswith("shipped with the package")
    for i in infos[1:]:
        assert i.needs_path and "--model-path" in i.weights
        assert (i.default_frames - 1) % 4 == 0 and i.default_height % 16 == 0 and i.default_width % 16 == 0
    json.dumps([i.to_dict() for i in infos])


def test_unknown_model_is_one_line():
    with pytest.raises(UserError) as e:
        get_model_info("wan3")
    assert "unknown model 'wan3'" in _one_line(e) and "tiny-shapes" in str(e.value)


def test_real_model_without_path_is_one_line():
    with pytest.raises(UserError) as e:
        load_model("wan2.1-t2v-14b")
    assert "--model-path" in _one_line(e)


def test_nonexistent_path_is_one_line():
    with pytest.raises(UserError) as e:
        load_model("wan2.1-t2v-14b", path="/nonexistent")
    assert _one_line(e) == "/nonexistent: no such directory"


def test_folder_problems_name_what_is_missing(tmp_path):
    from lowbit_video.models.tiny_checkpoints import save_tiny_wan

    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(UserError, match="not a directory"):
        load_model("wan2.1-t2v-1.3b", path=str(f))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UserError) as e:
        load_model("wan2.1-t2v-1.3b", path=str(empty))
    assert _one_line(e) == f"{empty}: not a diffusers model folder (no model_index.json)"

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        good = save_tiny_wan(tmp_path / "good")

    def broken(name, change):
        d = tmp_path / name
        shutil.copytree(good, d)
        change(d)
        with pytest.raises(UserError) as e:
            load_model("wan2.1-t2v-1.3b", path=str(d))
        return _one_line(e)

    msg = broken("no_transformer", lambda d: shutil.rmtree(d / "transformer"))
    assert msg == f"{tmp_path / 'no_transformer' / 'transformer'}: missing folder (component 'transformer' named in model_index.json)"
    msg = broken("no_weights", lambda d: [p.unlink() for p in (d / "transformer").glob("*.safetensors")])
    assert msg.endswith("transformer: no weights (*.safetensors or *.bin) (component 'transformer' named in model_index.json)")
    msg = broken("no_config", lambda d: (d / "vae" / "config.json").unlink())
    assert "vae: no config.json" in msg
    msg = broken("no_sched", lambda d: (d / "scheduler" / "scheduler_config.json").unlink())
    assert "scheduler: no scheduler_config.json" in msg
    msg = broken("no_tok", lambda d: [p.unlink() for p in (d / "tokenizer").iterdir()])
    assert "tokenizer: no tokenizer files" in msg
    msg = broken("bad_json", lambda d: (d / "model_index.json").write_text("{"))
    assert "model_index.json: not valid JSON" in msg

    def other_pipeline(d):
        idx = json.loads((d / "model_index.json").read_text())
        idx["_class_name"] = "WanImageToVideoPipeline"
        (d / "model_index.json").write_text(json.dumps(idx))

    msg = broken("i2v", other_pipeline)
    assert "describes a WanImageToVideoPipeline, expected WanPipeline for wan2.1-t2v-1.3b" in msg
    # a Wan folder passed as HunyuanVideo
    with pytest.raises(UserError, match="expected HunyuanVideoPipeline"):
        load_model("hunyuanvideo", path=str(good))


def test_cuda_device_without_cuda_is_a_user_error():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(UserError, match="no CUDA device"):
        load_model("tiny-shapes", device="cuda")
