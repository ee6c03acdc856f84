import dataclasses
from pathlib import Path

import pytest

from lowbit_video.errors import RecipeError
from lowbit_video.recipes import available_recipes, load_recipe, recipe_from_dict

NINE = {"fp16", "mxfp4-ocp", "mxfp4-tfs", "mxattention", "mxattention-no-uos", "mxattention-no-pnq-uos",
        "nvfp4", "sage-nvfp4", "sage2-int8"}


def test_shipped_recipes_include_the_foundation_nine():
    assert NINE <= set(available_recipes())


@pytest.mark.parametrize("name", sorted(available_recipes()))
def test_every_shipped_recipe_loads_and_names_itself(name):
    recipe = load_recipe(name)
    assert recipe.name == name  # the file stem and the declared name agree
    assert recipe.description and "\n" not in recipe.description


def test_mxattention_resolves_includes_to_paper_algorithm_1():
    a = load_recipe("mxattention").attention
    assert (a.rotation, a.placement) == ("hadamard", "pnq")
    for op in "qkvp":
        o = a.operand(op)
        assert (o.format, o.rule, o.qmax, o.block_size) == ("mxfp4", "uos", 7.25, 32)


@pytest.mark.parametrize(
    "name, rotation, placement, rule",
    [
        ("mxattention-no-uos", "hadamard", "pnq", "ocp"),
        ("mxattention-no-pnq-uos", "hadamard", "direct", "ocp"),
        ("mxfp4-ocp", "none", "direct", "ocp"),
        ("mxfp4-tfs", "none", "direct", "tfs"),
    ],
)
def test_table3_ablation_rows(name, rotation, placement, rule):
    a = load_recipe(name).attention
    assert (a.rotation, a.placement) == (rotation, placement)
    assert {a.operand(o).rule for o in "qkvp"} == {rule}


def test_sage_recipes():
    s = load_recipe("sage-nvfp4").attention
    assert s.smooth_q and s.smooth_k and s.p.outer_scale == "row" and s.p.format == "nvfp4"
    n = load_recipe("nvfp4").attention
    assert not n.smooth_k and n.p.outer_scale == "none"
    i = load_recipe("sage2-int8").attention
    assert (i.q.format, i.v.format, i.p.format) == ("int8", "fp8_e4m3", "fp8_e4m3")
    assert i.p.static_scale == pytest.approx(1 / 448, rel=1e-15)


def test_recipe_is_frozen():
    r = load_recipe("mxattention")
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.attention.placement = "direct"  # type: ignore[misc]


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    "text, key",
    [
        ('name = "x"\n[attention]\nkind = "quantized"\nplacemnt = "pnq"\n[attention.q]\nformat = "mxfp4"\n', "attention.placemnt"),
        ('name = "x"\n[attention]\nkind = "quantized"\n[attention.q]\nformat = "mxfp5"\n', "attention.q.format"),
        ('name = "x"\n[attention]\nkind = "quantized"\n[attention.q]\nformat = "mxfp4"\nrule = "floor"\n', "attention.q.rule"),
        ('name = "x"\n[attention]\nkind = "quantized"\n[attention.p]\nformat = "mxfp4"\nqmax = -1\n', "attention.p.qmax"),
        ('name = "x"\n[attention]\nkind = "quantized"\n[attention.q]\nformat = "int8"\nrule = "ocp"\n', "attention.q.rule"),
        ('name = "x"\n[attention]\nkind = "quantized"\ntile_k = 100\n[attention.p]\nformat = "mxfp4"\n', "attention.tile_k"),
        ('name = "x"\n[attention]\nkind = "dense"\n[attention.q]\nformat = "int8"\n', "attention.kind"),
        ('name = "x"\n[policy]\nhigh_precision_steps = ["last"]\n', "policy.high_precision_steps"),
        ('name = "x"\nbogus = 1\n', "bogus"),
        ('name = "x"\n[attention\n', "not valid TOML"),
    ],
)
def test_bad_recipe_files_name_the_file_and_key(tmp_path, text, key):
    path = _write(tmp_path, "bad.toml", text)
    with pytest.raises(RecipeError) as e:
        load_recipe(path)
    msg = str(e.value)
    assert str(path) in msg and key in msg and "\n" not in msg


def test_include_merges_tables_and_child_wins(tmp_path):
    _write(tmp_path, "base.toml", '[attention]\nkind = "quantized"\nplacement = "direct"\n[attention.q]\nformat = "mxfp4"\nrule = "ocp"\n')
    child = _write(tmp_path, "child.toml", 'include = "base.toml"\nname = "child"\n[attention]\nplacement = "pnq"\n')
    a = load_recipe(child).attention
    assert (a.placement, a.q.format, a.q.rule, a.kind) == ("pnq", "mxfp4", "ocp", "quantized")


def test_include_cycle_is_an_error(tmp_path):
    _write(tmp_path, "a.toml", 'include = "b.toml"\n')
    _write(tmp_path, "b.toml", 'include = "a.toml"\n')
    with pytest.raises(RecipeError, match="include cycle"):
        load_recipe(tmp_path / "a.toml")


def test_unknown_recipe_name_lists_known_ones():
    with pytest.raises(RecipeError, match="unknown recipe 'mxattenion'.*mxattention"):
        load_recipe("mxattenion")


def test_policy_counts_negative_steps_from_the_end():
    r = recipe_from_dict({"name": "x", "policy": {"high_precision_blocks": [0], "high_precision_steps": [-2, -1]}})
    pol = r.policy
    assert not pol.quantizes(block=0, step=5, num_steps=40, num_blocks=30)
    assert not pol.quantizes(block=3, step=38, num_steps=40, num_blocks=30)
    assert not pol.quantizes(block=3, step=39, num_steps=40, num_blocks=30)
    assert pol.quantizes(block=3, step=37, num_steps=40, num_blocks=30)
    assert not pol.quantizes(block=3, step=5, num_steps=40, num_blocks=30, attention_type="cross")


def test_policy_counts_negative_blocks_from_the_end():
    # RotateAttention keeps the first and last 2 DiT blocks at 16 bit: [0, 1, -2, -1] of 40 blocks.
    pol = recipe_from_dict({"name": "x", "policy": {"high_precision_blocks": [0, 1, -2, -1]}}).policy
    kept = [b for b in range(40) if not pol.quantizes(block=b, step=5, num_steps=50, num_blocks=40)]
    assert kept == [0, 1, 38, 39]
    kept30 = [b for b in range(30) if not pol.quantizes(block=b, step=5, num_steps=50, num_blocks=30)]
    assert kept30 == [0, 1, 28, 29]


QMAX = 'name = "x"\n[attention]\nkind = "quantized"\n[attention.q]\nformat = "mxfp4"\nqmax = {}\n'


@pytest.mark.parametrize("qmax", ["1e-300", "3", "3.0", "12", "1e308", "inf", "nan", "-1"])
def test_qmax_outside_its_meaningful_range_is_refused(tmp_path, qmax):
    path = _write(tmp_path, "q.toml", QMAX.format(qmax))
    with pytest.raises(RecipeError, match=r"attention\.q\.qmax: must be in the open interval \(3, 12\)"):
        load_recipe(path)


@pytest.mark.parametrize("qmax", ["3.01", "6", "7.25", "11.99"])
def test_qmax_inside_the_range_loads(tmp_path, qmax):
    assert load_recipe(_write(tmp_path, "q.toml", QMAX.format(qmax))).attention.q.qmax == float(qmax)


def test_static_scale_must_be_a_normal_float32(tmp_path):
    text = 'name = "x"\n[attention]\nkind = "quantized"\n[attention.p]\nformat = "fp8_e4m3"\nstatic_scale = {}\n'
    with pytest.raises(RecipeError, match=r"static_scale: must be .*2\^-126"):
        load_recipe(_write(tmp_path, "s.toml", text.format("1e-300")))
    assert load_recipe(_write(tmp_path, "s.toml", text.format("0.002232142857142857"))).attention.p.static_scale > 0


def test_every_field_has_a_stated_range():
    from lowbit_video.recipes import SCHEMA, AttentionSpec, DraftSpec, OperandQuant

    keys = {f"attention.{f.name}" for f in dataclasses.fields(AttentionSpec) if f.name not in "qkvp"}
    keys |= {f"attention.<op>.{f.name}" for f in dataclasses.fields(OperandQuant)}
    keys |= {f"attention.draft.{f.name}" for f in dataclasses.fields(DraftSpec)}
    keys |= {"policy.apply_to", "policy.high_precision_blocks", "policy.high_precision_steps"}
    keys -= {"attention.draft"}
    assert keys <= set(SCHEMA), keys - set(SCHEMA)


def test_deep_nesting_is_a_one_line_error_not_a_recursion(tmp_path):
    deep = _write(tmp_path, "deep.toml", 'name = "x"\nbogus = ' + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(RecipeError, match="nested more than 64 deep"):
        load_recipe(deep)
    tables = _write(tmp_path, "tables.toml", "[" + ".".join(f"t{i}" for i in range(200)) + "]\n")
    with pytest.raises(RecipeError, match="nested more than 64 deep"):
        load_recipe(tables)


def test_fp16_is_kept_for_the_unquantized_baseline(tmp_path):
    fake = _write(tmp_path, "fake.toml", 'name = "fp16"\n[attention]\nkind = "quantized"\n[attention.q]\nformat = "int8"\n')
    with pytest.raises(RecipeError, match=r"name: 'fp16' is kept for the unquantized baseline"):
        load_recipe(fake)
    assert load_recipe("fp16").attention.kind == "dense"


def test_include_of_a_folder_and_of_a_shipped_base_from_anywhere(tmp_path):
    (tmp_path / "base").mkdir()
    folder = _write(tmp_path, "f.toml", 'include = "base"\nname = "f"\n')
    with pytest.raises(RecipeError, match=r"include: .*base is a folder, not a TOML file"):
        load_recipe(folder)
    # the README's example: a file outside recipes/ including a shipped base
    mine = _write(tmp_path, "my.toml", 'include = "base/mxattention.toml"\nname = "my"\n[attention.p]\nqmax = 7.0\n')
    a = load_recipe(mine).attention
    assert a.p.qmax == 7.0 and a.q.qmax == 7.25 and a.rotation == "hadamard"
    with pytest.raises(RecipeError, match=r"include: no file 'nope.toml' beside it or in a recipe folder"):
        load_recipe(_write(tmp_path, "n.toml", 'include = "nope.toml"\n'))


def test_the_readme_recipe_example_loads_from_any_folder(tmp_path, repo):
    import re

    block = re.search(r"```toml\n(# my\.toml.*?)```", (repo / "README.md").read_text(), re.S).group(1)
    r = load_recipe(_write(tmp_path, "my.toml", block))
    assert r.name == "mxattention-q7" and r.attention.p.qmax == 7.0 and r.attention.q.qmax == 7.25


def test_keys_not_written_take_their_documented_defaults():
    # the defaults `recipes schema` and the docs state: UOS at Q_max 7.25 in 32-blocks, 128-key tiles,
    # PNQ placement, only self-attention quantized, nothing kept at 16 bit
    r = recipe_from_dict({"name": "x", "attention": {"kind": "quantized", "q": {"format": "mxfp4"}}})
    a, q = r.attention, r.attention.q
    assert (q.rule, q.qmax, q.block_size, q.group, q.granularity) == ("uos", 7.25, 32, 128, "block")
    assert (a.rotation, a.rotation_sigma, a.placement, a.tile_k, a.smooth_q_group, a.draft) == ("none", 1.0, "pnq", 128, 128, None)
    assert not a.k.enabled and not a.p.enabled
    assert (r.policy.apply_to, r.policy.high_precision_blocks, r.policy.high_precision_steps) == (("self",), (), ())
    assert (r.description, r.paper, r.source) == ("", "", "<dict>")


def test_format_specific_keys_apply_to_their_formats_only(tmp_path):
    text = 'name = "x"\n[attention]\nkind = "quantized"\n[attention.q]\nformat = "{}"\n{} = {}\n'
    for fmt, key, value in (("int8", "static_scale", "0.5"), ("mxfp4", "scheme", '"affine"'), ("int4", "outer_scale", '"none"')):
        with pytest.raises(RecipeError, match=rf"attention\.q\.{key}: does not apply to format '{fmt}'"):
            load_recipe(_write(tmp_path, "f.toml", text.format(fmt, key, value)))
