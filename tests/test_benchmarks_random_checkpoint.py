"""benchmarks/make_random_checkpoint.py: the full-size Wan architectures it builds (on the meta
device: shapes only, no memory), and its refusal to overwrite a folder."""

import pytest
import torch

from benchmark_scripts import load

pytest.importorskip("diffusers")
pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def script():
    return load("make_random_checkpoint")


def _params(module) -> float:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("model, low, high", [("wan2.1-t2v-1.3b", 1.35e9, 1.5e9), ("wan2.1-t2v-14b", 13.5e9, 15e9)])
def test_published_sizes(script, model, low, high):
    # Published parameter counts: Wan2.1-T2V-1.3B 1.42B, -14B 14.3B; umt5-xxl's encoder 5.7B.
    pipe = script.build_pipeline(model, device="meta", dtype=torch.bfloat16)
    assert low < _params(pipe.transformer) < high
    assert 5.5e9 < _params(pipe.text_encoder) < 5.9e9
    assert pipe.transformer.config.attention_head_dim == 128 and len(pipe.transformer.blocks) in (30, 40)
    assert pipe.vae_scale_factor_spatial == 8 and pipe.vae_scale_factor_temporal == 4
    ids = pipe.tokenizer("a cat on a wave", padding="max_length", max_length=512, return_tensors="pt").input_ids
    assert ids.shape == (1, 512) and int(ids.max()) < pipe.text_encoder.config.vocab_size


def test_refuses_an_existing_folder(script, tmp_path, capsys):
    assert script.main(["--out", str(tmp_path), "--device", "meta"]) == 2
    assert capsys.readouterr().err.startswith("error: ")
