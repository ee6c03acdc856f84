from lowbit_video.models.tiny_shapes import BACKGROUNDS, COLORS, MOTIONS, SHAPES, balanced_prompts, parse_prompt, read_prompts


def test_shapes_txt_is_the_balanced_set_and_covers_the_grammar(repo):
    path = repo / "prompts" / "shapes.txt"
    assert path.read_text().startswith("#")
    prompts = read_prompts(path)
    assert prompts == balanced_prompts(24, seed=0)  # regenerate the file if the grammar changes
    specs = [parse_prompt(p) for p in prompts]
    assert all(s.single_object for s in specs) and len(set(prompts)) == len(prompts)
    assert {s.objects[0].color for s in specs} == set(COLORS)
    assert {s.objects[0].shape for s in specs} == set(SHAPES)
    assert {s.objects[0].motion for s in specs} == set(MOTIONS)
    assert {s.background for s in specs} == set(BACKGROUNDS)
    # every non-comment line is already canonical
    lines = [ln for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    assert lines == prompts


def test_smoke_txt_parses(repo):
    prompts = read_prompts(repo / "prompts" / "smoke.txt")
    assert 2 <= len(prompts) <= 3
    assert all(parse_prompt(p).single_object for p in prompts)
