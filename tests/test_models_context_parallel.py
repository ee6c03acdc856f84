"""Context parallelism (models/context_parallel.py) with 2 gloo ranks on CPU, tiny random Wan.

Tolerances, and why:
* Ulysses: exactly equal (0.0). Each rank runs the recipe on every token of half of the heads;
  the recipe works per head (Q/K blocks along head_dim, V blocks along tokens of one head), so
  the arithmetic per head is the one-process arithmetic, and diffusers' split/gather of the
  hidden states is exact (measured: 0.0 for fp16 and mxattention).
* Ring, fp16: 1e-5 on frames in [0, 1]. Each rank attends to one key chunk at a time and the
  chunks are merged with their float32 log-sum-exp (diffusers' convert_to_fp32), a float32
  re-association of the same sum (measured: 2.4e-7).
* Ring, mxattention: ring vs one process differs by less than the recipe itself moves the frames
  (one process, mxattention vs fp16): mean below that mean, max below twice that max. Not bit-equal
  by design: a chunk's P̃ tiles are exp(S - m) with the chunk's running max m, not the global one,
  and MXFP4 quantization is only invariant to power-of-two rescaling, so P̂ differs by quantization
  noise (measured: mean 7.5e-4 and max 0.103, against the recipe's own mean 1.9e-3, max 0.104).
"""

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

pytest.importorskip("diffusers")

from lowbit_video.errors import UserError  # noqa: E402

pytestmark = pytest.mark.slow

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    from lowbit_video.models.tiny_checkpoints import save_tiny_wan

    root = tmp_path_factory.mktemp("cp")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        save_tiny_wan(root / "wan")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           str(TESTS / "_distributed_cp_worker.py"), str(root / "wan"), str(root / "result.json")]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    p = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads((root / "result.json").read_text())


@pytest.mark.parametrize("recipe", ["fp16", "mxattention"])
def test_ulysses_equals_one_process(result, recipe):
    r = result["modes"]["ulysses"][recipe]
    assert r["max_abs"] == 0.0
    assert (r["quantized_calls"] > 0) == (recipe == "mxattention")


def test_ring_fp16_equals_one_process_to_float32_rounding(result):
    assert result["modes"]["ring"]["fp16"]["max_abs"] < 1e-5


def test_ring_mxattention_within_quantization_noise(result):
    r = result["modes"]["ring"]["mxattention"]
    assert r["quantized_calls"] > 0
    recipe_effect = result["mx_vs_fp16_single"]  # how far the recipe itself moves the frames
    assert r["mean_abs"] < recipe_effect["mean_abs"] and r["max_abs"] < 2 * recipe_effect["max_abs"]


def test_hunyuanvideo_is_refused_with_one_line(monkeypatch):
    import torch.distributed as dist

    from lowbit_video.models import context_parallel as cpm
    from lowbit_video.models.tiny_checkpoints import tiny_hunyuan_transformer_config

    from diffusers import HunyuanVideoTransformer3DModel

    class M:
        device = __import__("torch").device("cpu")

        def _transformers(self):
            return [("transformer", HunyuanVideoTransformer3DModel(**tiny_hunyuan_transformer_config()))]

    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda: 2)
    with pytest.raises(UserError, match="^context parallel is not supported for HunyuanVideo yet$"):
        cpm.enable_context_parallel(M(), "ulysses", 2)
