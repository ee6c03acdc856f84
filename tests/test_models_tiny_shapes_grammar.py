import pytest

from lowbit_video.models.tiny_shapes import (
    BACKGROUNDS,
    COLORS,
    MOTIONS,
    SHAPES,
    ClipSpec,
    ObjectSpec,
    all_prompts,
    balanced_prompts,
    parse_prompt,
    read_prompts,
    sample_prompts,
    vocabulary,
)


def test_round_trip_every_prompt():
    prompts = all_prompts()
    assert len(prompts) == len(set(prompts)) == 8 * 3 * 6 * 3 - 3 * 6  # white-on-white left out
    for p in prompts:
        spec = parse_prompt(p)
        assert spec.prompt == p
        assert spec.single_object and len(spec.objects) == 1


def test_example_parses_to_expected_spec():
    spec = parse_prompt("a red circle moving left on a black background")
    assert spec == ClipSpec((ObjectSpec("red", "circle", "moving left"),), "black")
    assert spec.objects[0].rgb == COLORS["red"] and spec.background_rgb == BACKGROUNDS["black"]


def test_parse_is_lenient_about_case_spacing_period_and_article():
    canon = "an orange square static on a white background"
    for text in ["An Orange Square STATIC on a white background.", "  a orange   square static on a white background  ",
                 canon]:
        assert parse_prompt(text).prompt == canon


@pytest.mark.parametrize("text, word", [
    ("a purple circle static on a black background", "purple"),
    ("a red hexagon static on a black background", "hexagon"),
    ("a red circle moving sideways on a black background", "sideways"),
    ("a red circle spinning on a black background", "spinning"),
    ("a red circle static on a pink background", "pink"),
    ("a red circle static on a black backdrop", "backdrop"),
])
def test_unknown_word_raises_naming_it(text, word):
    with pytest.raises(ValueError, match=f"'{word}'") as e:
        parse_prompt(text)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("text", [
    "",
    "a circle red static on a black background",
    "a red circle on a black background",
    "a red circle static on a black",
    "a red circle static on a black background background",
    "a red circle moving on a black background",
    "a red circle static",
    "a red circle static and a blue square static and a green triangle static on a black background",
])
def test_malformed_prompts_raise_one_line_value_error(text):
    with pytest.raises(ValueError) as e:
        parse_prompt(text)
    assert "\n" not in str(e.value)


def test_object_coloured_like_background_is_rejected():
    with pytest.raises(ValueError, match="white"):
        parse_prompt("a white circle static on a white background")
    with pytest.raises(ValueError, match="background"):
        ClipSpec((ObjectSpec("white", "square", "growing"),), "white")
    with pytest.raises(ValueError, match="white"):
        parse_prompt("a red circle static and a white square growing on a white background")


def test_specs_are_frozen_and_validated():
    spec = parse_prompt("a red circle static on a black background")
    with pytest.raises(AttributeError):
        spec.background = "gray"
    with pytest.raises(ValueError, match="'purple'"):
        ObjectSpec("purple", "circle", "static")
    with pytest.raises(ValueError, match="'moving sideways'"):
        ObjectSpec("red", "circle", "moving sideways")
    assert ClipSpec([ObjectSpec("red", "circle", "static")], "black").objects == spec.objects  # list -> tuple
    assert hash(spec) == hash(parse_prompt(spec.prompt))


def test_two_object_prompt_parses_and_round_trips():
    text = "a red circle moving left and a blue square static on a black background"
    spec = parse_prompt(text)
    assert spec.objects == (ObjectSpec("red", "circle", "moving left"), ObjectSpec("blue", "square", "static"))
    assert spec.prompt == text and not spec.single_object
    two = all_prompts(single_object=False)
    assert two[: len(all_prompts())] == all_prompts()
    for p in two[len(all_prompts()):: 997]:
        assert parse_prompt(p).prompt == p and len(parse_prompt(p).objects) == 2


def test_vocabulary_covers_every_word_and_nothing_else():
    vocab = vocabulary()
    assert vocab == sorted(set(vocab))
    used = {w for p in all_prompts(single_object=False) for w in p.split()}
    assert used == set(vocab)
    assert set(COLORS) | set(SHAPES) | set(BACKGROUNDS) | {"moving", "static", "growing"} <= set(vocab)


def test_sample_prompts_deterministic_distinct_and_seeded():
    a = sample_prompts(50, seed=3)
    assert a == sample_prompts(50, seed=3)
    assert a != sample_prompts(50, seed=4)
    assert len(set(a)) == 50 and set(a) <= set(all_prompts())
    many = sample_prompts(1000, seed=0)
    assert len(many) == 1000 and set(many) == set(all_prompts())
    assert sample_prompts(0, seed=0) == []


def test_balanced_prompts_cover_every_value():
    ps = balanced_prompts(24, seed=0)
    assert len(set(ps)) == 24 and ps == balanced_prompts(24, seed=0)
    specs = [parse_prompt(p) for p in ps]
    assert {s.objects[0].color for s in specs} == set(COLORS)
    assert {s.objects[0].shape for s in specs} == set(SHAPES)
    assert {s.objects[0].motion for s in specs} == set(MOTIONS)
    assert {s.background for s in specs} == set(BACKGROUNDS)


def test_read_prompts_skips_comments_and_names_bad_line(tmp_path):
    f = tmp_path / "p.txt"
    f.write_text("# header\n\na red circle static on a black background\n  # indented comment\n")
    assert read_prompts(f) == ["a red circle static on a black background"]
    f.write_text("# header\na red circle static on a black background\na red blob static on a black background\n")
    with pytest.raises(ValueError, match=r"p.txt:3: .*'blob'"):
        read_prompts(f)


def test_unknown_words_are_answered_with_the_vocabulary():
    with pytest.raises(ValueError) as e:
        parse_prompt("a purple circle static on a black background")
    msg = str(e.value)
    assert "unknown word 'purple'" in msg and "\n" not in msg
    for word in (*COLORS, *SHAPES, *MOTIONS, *BACKGROUNDS):
        assert word in msg, word


def test_a_prompt_file_that_is_not_utf8_is_named(tmp_path):
    f = tmp_path / "latin1.txt"
    f.write_bytes("a red circle static on a black background\n# caf\xe9\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin1.txt:2: not UTF-8 text \(byte 0xe9 at offset 47\)"):
        read_prompts(f)


def test_the_model_card_states_the_whole_vocabulary(repo):
    import re

    text = " ".join((repo / "lowbit_video" / "models" / "tiny_shapes" / "MODEL_CARD.md").read_text().split())
    for role, words in (("colours", COLORS), ("shapes", SHAPES), ("motions", MOTIONS), ("backgrounds", BACKGROUNDS)):
        assert re.search(rf"{role} {re.escape(', '.join(words))}[;.( ]", text), role
