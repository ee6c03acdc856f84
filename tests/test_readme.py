"""The README is read in two minutes: short, narrow, set-up first, its links and figures real.

Everything longer lives in docs/; these checks keep it that way and keep every relative link of README.md and
docs/*.md pointing at a file that exists, every shipped recipe in the recipe table, and every figure of the
"Measured" table on the results page it links, with a command for it below the table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MAX_LINES = 200
MAX_WIDTH = 120

FENCE = re.compile(r"^```.*?^```", re.S | re.M)
CODE_SPAN = re.compile(r"`[^`]*`")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _lines() -> list[str]:
    return README.read_text(encoding="utf-8").splitlines()


def _section(title: str) -> str:
    """The text of the README's `## title` section, up to the next `## `."""
    text = README.read_text(encoding="utf-8")
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert m, f"README has no '## {title}' section"
    return m.group(1)


def relative_links(markdown: str) -> list[str]:
    """Link targets outside code (fenced blocks, code spans) that are not URLs or in-page anchors."""
    prose = CODE_SPAN.sub("", FENCE.sub("", markdown))
    targets = [t for t in LINK.findall(prose) if not re.match(r"[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]
    return [t.split("#", 1)[0] for t in targets]


def test_relative_links_skip_code_urls_and_anchors():
    text = ("see [a](docs/a.md#part), ![p](results/p.png), [web](https://x.org/y.md), [top](#top)\n"
            "`[not](code.md)` and\n```\n[nor](fenced.md)\n```\n")
    assert relative_links(text) == ["docs/a.md", "results/p.png"]


def test_readme_is_at_most_200_lines_of_at_most_120_characters():
    lines = _lines()
    assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines (at most {MAX_LINES}): move detail to docs/"
    wide = [(n, len(line)) for n, line in enumerate(lines, 1) if len(line) > MAX_WIDTH]
    assert not wide, f"lines wider than {MAX_WIDTH} characters (line, width): {wide}"


def test_readme_opens_with_the_two_set_up_commands():
    lines = [line for line in _lines() if line.strip()]
    assert lines[0].startswith("# "), "the README opens with its title"
    assert lines[1].startswith("```"), "the first thing after the title is the set-up block"
    block = lines[2:lines.index("```", 2)]
    commands = [line.split("#", 1)[0].strip() for line in block]
    assert [c for c in commands if c] == ["make demo", "make test"]


@pytest.mark.parametrize("page", [README, *sorted((ROOT / "docs").glob("*.md"))], ids=lambda p: p.name)
def test_every_relative_link_resolves(page):
    missing = [t for t in relative_links(page.read_text(encoding="utf-8")) if not (page.parent / t).exists()]
    assert not missing, f"{page.relative_to(ROOT)} links to missing files: {missing}"


def test_every_docs_page_is_reached_from_the_readme():
    docs = sorted((ROOT / "docs").glob("*.md"))
    assert docs, "docs/ holds the pages the README points to"
    reached, todo = set(), [README.resolve()]
    while todo:
        page = todo.pop()
        for target in relative_links(page.read_text(encoding="utf-8")):
            path = (page.parent / target).resolve()
            if path.suffix == ".md" and path.is_file() and path not in reached:
                reached.add(path)
                todo.append(path)
    unreached = [p.name for p in docs if p.resolve() not in reached]
    assert not unreached, f"docs pages no link from the README leads to: {unreached}"


def test_the_recipe_table_lists_every_shipped_recipe(monkeypatch):
    from lowbit_video.recipes import available_recipes

    monkeypatch.delenv("LOWBIT_VIDEO_RECIPES", raising=False)  # the shipped recipes only, not a user's folder

    table = set(re.findall(r"^\| `([a-z0-9][a-z0-9.-]*)` \|", _section("Recipes"), re.M))
    assert table == set(available_recipes())


def _measured_rows() -> list[tuple[str, str, str]]:
    """(row number, figure cell, linked results page) of each row of the Measured table."""
    rows = re.findall(r"^\| (\d+) \| (.*?) \| (.*?) \|$", _section("Measured"), re.M)
    out = []
    for number, what, figure in rows:
        pages = relative_links(what)
        assert len(pages) == 1 and pages[0].startswith("results/"), f"row {number} links one results page"
        out.append((number, figure, pages[0]))
    return out


def test_every_measured_figure_is_on_the_results_page_it_links():
    rows = _measured_rows()
    assert len(rows) >= 5
    for number, figure, page in rows:
        text = (ROOT / page).read_text(encoding="utf-8")
        values = re.findall(r"\d+(?:\.\d+)?", figure)
        assert values, f"row {number} holds a figure"
        absent = [v for v in values if not re.search(rf"(?<![\d.]){re.escape(v)}(?![\d])", text)]
        assert not absent, f"row {number}: {absent} not on {page}"


def test_every_measured_row_has_a_command_that_exists():
    from test_results_layout import _check_command

    block = re.search(r"```bash\n(.*?)```", _section("Measured"), re.S).group(1)
    commands = [c.strip() for c in re.split(r"(?<!\\)\n", block) if c.strip()]
    labelled = {}
    for command in commands:
        line, _, label = command.partition("#")
        reason = _check_command(line.strip())
        assert reason is None, f"{line.strip()[:60]}...: {reason}"
        if label.strip():
            labelled[label.strip()] = line
    assert sorted(labelled, key=int) == [n for n, _, _ in _measured_rows()], "one labelled command per row"
