"""The DraftAttention2 recipes: frozen validated schema, shipped values, and the CLI report."""

import dataclasses
import json
import subprocess
import sys

import pytest
import torch
from safetensors.torch import save_file
from typer.testing import CliRunner

from lowbit_video.cli import app
from lowbit_video.errors import RecipeError
from lowbit_video.recipes import DraftSpec, DraftSpecError, load_recipe

DRAFTS = ("draftattention2", "draftattention-sparse16")


def cli(*args):
    """The command in this process (tests/test_cli.py covers the real-process plumbing)."""
    return CliRunner().invoke(app, list(args))


def one_line_error(res):
    lines = [l for l in res.stderr.splitlines() if l.strip()]
    clean_exit = res.exception is None or isinstance(res.exception, SystemExit)  # no traceback
    return res.exit_code == 2 and clean_exit and len(lines) == 1 and lines[0].startswith("error: ")


def test_shipped_values_and_their_sources():
    # draftattention2: anemoi defaults/examples (see the recipe's header): Q64, 80% skip, retained
    # 0.15 / 0.25 / 0.60, max-pool weight 0.5; dense first 10 steps and first 2 blocks.
    a = load_recipe("draftattention2")
    assert a.attention.kind == "draft"
    assert a.attention.draft == DraftSpec(block=64, maxpool_weight=0.5, sparsity=0.8, fp16=0.15, int8=0.25, nvfp4=0.6)
    assert a.policy.high_precision_steps == tuple(range(10)) and a.policy.high_precision_blocks == (0, 1)
    # The v1 baseline differs only in keeping every retained pair at 16 bit.
    b = load_recipe("draftattention-sparse16")
    assert b.attention.draft == dataclasses.replace(a.attention.draft, fp16=1.0, int8=0.0, nvfp4=0.0)
    assert b.policy == a.policy


def test_draft_spec_is_frozen_validated_and_dense_by_default():
    spec = DraftSpec()
    assert (spec.sparsity, spec.fp16, spec.int8, spec.nvfp4) == (0.0, 1.0, 0.0, 0.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.sparsity = 0.5  # type: ignore[misc]
    for bad in ({"block": 96}, {"sparsity": 1.0}, {"maxpool_weight": -0.1}, {"fp16": 0.5}, {"nvfp4": float("nan")}):
        with pytest.raises(DraftSpecError):
            DraftSpec(**bad)


@pytest.mark.parametrize("body, key", [
    ('[attention]\nkind = "draft"\n[attention.draft]\nblock = 96\n', "attention.draft.block"),
    ('[attention]\nkind = "draft"\n[attention.draft]\nsparsity = 1.0\n', "attention.draft.sparsity"),
    ('[attention]\nkind = "draft"\n[attention.draft]\nmaxpool_weight = 2\n', "attention.draft.maxpool_weight"),
    ('[attention]\nkind = "draft"\n[attention.draft]\nfp16 = 0.5\nint8 = 0.4\n', "attention.draft.fp16"),
    ('[attention]\nkind = "draft"\n[attention.draft]\nsparsty = 0.5\n', "attention.draft.sparsty"),
    ('[attention]\nkind = "draft"\n[attention.draft]\nblock = "64"\n', "attention.draft.block"),
    ('[attention]\nkind = "draft"\n', "attention.draft"),
    ('[attention]\nkind = "dense"\n[attention.draft]\nsparsity = 0.5\n', "attention.kind"),
    ('[attention]\nkind = "draft"\nplacement = "pnq"\n[attention.draft]\n', "attention.placement"),
])
def test_bad_draft_recipes_name_the_file_and_key(tmp_path, body, key):
    path = tmp_path / "bad.toml"
    path.write_text('name = "bad"\n' + body)
    with pytest.raises(RecipeError) as e:
        load_recipe(path)
    msg = str(e.value)
    assert str(path) in msg and key in msg and "\n" not in msg


def test_partial_shares_default_to_zero(tmp_path):
    path = tmp_path / "int8only.toml"
    path.write_text('name = "int8only"\n[attention]\nkind = "draft"\n[attention.draft]\nint8 = 1.0\n')
    assert load_recipe(path).attention.draft == DraftSpec(fp16=0.0, int8=1.0)


def test_recipes_json_lists_the_draft_recipes():
    res = subprocess.run([sys.executable, "-m", "lowbit_video", "recipes", "--json"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert set(DRAFTS) <= {r["name"] for r in json.loads(res.stdout)["recipes"]}


@pytest.mark.parametrize("name", DRAFTS)
def test_diagnose_attention_reports_the_budget(name):
    res = cli("diagnose", "attention", "--recipe", name, "--json")
    assert res.exit_code == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["recipe"] == name and 0 < data["rel_l2"]
    budget = data["budget"]
    tol = 1 / budget["pairs_per_head"] + 1e-12  # one block per head
    assert abs(data["skip_fraction"] - budget["skip_fraction"]) <= tol
    assert set(data["precision_fractions"]) == {"16", "8", "4"} == set(budget["precision_fractions"])
    for bits, share in data["precision_fractions"].items():
        assert abs(share - budget["precision_fractions"][bits]) <= tol
    spec = load_recipe(name).attention.draft
    assert budget["skip_fraction"] == pytest.approx(spec.sparsity)
    assert budget["precision_fractions"]["4"] == pytest.approx((1 - spec.sparsity) * spec.nvfp4)
    # Synthetic inputs: 1024 tokens = 4 frames of 16 x 16 = 16 regions of 64 tokens.
    assert (budget["block"], budget["regions"]) == (64, 16)


def test_diagnose_attention_layout_errors_are_one_line(tmp_path):
    assert one_line_error(cli("diagnose", "attention", "-r", "draftattention2", "--seq", "500"))
    assert one_line_error(cli("diagnose", "attention", "-r", "draftattention2", "--seq", "512", "--kv-seq", "256"))
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 3 + 2 * 8 * 8, 32, generator=g) for _ in range(3))
    path = tmp_path / "qkv.safetensors"
    save_file({"q": q, "k": k, "v": v}, str(path))
    res = cli("diagnose", "attention", "-r", "draftattention-sparse16", "--tensors", str(path))
    assert one_line_error(res) and "--height" in res.stderr
    res = cli("diagnose", "attention", "-r", "draftattention-sparse16", "--tensors", str(path),
              "--height", "8", "--width", "8", "--prefix", "3", "--json")
    assert res.exit_code == 0, res.stderr
    assert json.loads(res.stdout)["budget"]["regions"] == 2
