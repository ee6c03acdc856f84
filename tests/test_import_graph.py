"""No import circles in lowbit_video/ and kernels/ (shipped as lowbit_video.kernels).

The graph is read from the source with `ast`, nothing is imported. What counts as an edge A -> B:

* every `import` / `from ... import` of a module of the package, wherever it sits in A: at module
  level, inside a function or under `if TYPE_CHECKING`. A function-local import defers loading B
  (start-up time, optional dependencies); A still depends on B, and a circle through it is a circle
  in the design. `from .pkg import name` points at the submodule pkg.name when there is one, else
  at pkg.
* importing B also runs every package above B, so A -> B adds A -> each package containing B,
  except the packages containing A itself (they are already being imported when A runs). This is
  what makes `attention/__init__.py` importing `attention/api.py` part of a circle through any module
  that imports `attention.something`.

A circle is a strongly connected component of more than one module; the failure message lists the
edges inside it with their line numbers.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

ROOTS = ((REPO / "lowbit_video", "lowbit_video"), (REPO / "kernels", "lowbit_video.kernels"))


def package_modules() -> dict[str, tuple[Path, bool]]:
    """{dotted module name: (file, is a package __init__)}."""
    mods: dict[str, tuple[Path, bool]] = {}
    for root, name in ROOTS:
        for path in sorted(root.rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if name == "lowbit_video" and parts[0] == "kernels":
                continue  # lowbit_video/kernels is a link to kernels/ in a source checkout
            is_pkg = parts[-1] == "__init__"
            mods[".".join([name, *(parts[:-1] if is_pkg else parts)])] = (path, is_pkg)
    return mods


def import_graph(mods: dict[str, tuple[Path, bool]]) -> dict[str, dict[str, list[int]]]:
    """{importer: {imported: [line numbers]}} over the modules of `mods`."""

    def existing(name: str) -> str | None:  # the module itself, else the nearest package above it
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, dict[str, list[int]]] = {}
    for mod, (path, is_pkg) in mods.items():
        package = mod if is_pkg else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.split(".")[0] == "lowbit_video"]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]
                                    + ([node.module] if node.module else []))
                elif node.module and node.module.split(".")[0] == "lowbit_video":
                    base = node.module
                else:
                    continue
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            else:
                continue
            for target in filter(None, map(existing, targets)):
                ran = [target]
                above = target.rpartition(".")[0]
                while above:
                    if above in mods and mod != above and not mod.startswith(above + "."):
                        ran.append(above)
                    above = above.rpartition(".")[0]
                for t in ran:
                    if t != mod:
                        edges.setdefault(mod, {}).setdefault(t, []).append(node.lineno)
    return edges


def circles(edges: dict[str, dict[str, list[int]]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    nodes = sorted(set(edges) | {t for ts in edges.values() for t in ts})
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, {}))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges.get(w, {})))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def describe(component: list[str], edges: dict[str, dict[str, list[int]]], mods) -> str:
    lines = [" <-> ".join(component)]
    for a in component:
        for b, where in sorted(edges.get(a, {}).items()):
            if b in component:
                lines.append(f"  {mods[a][0].relative_to(REPO)}:{','.join(map(str, sorted(set(where))))} imports {b}")
    return "\n".join(lines)


def test_no_import_circles():
    mods = package_modules()
    edges = import_graph(mods)
    found = circles(edges)
    assert not found, "import circles:\n" + "\n".join(describe(c, edges, mods) for c in found)


# The checker itself, on small made-up packages: it must find what it is meant to find.


def _graph_of(tmp_path: Path, files: dict[str, str]) -> dict[str, dict[str, list[int]]]:
    mods = {}
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        parts = list(Path(rel).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        mods[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return import_graph(mods)


def test_function_local_import_closes_a_circle(tmp_path):
    edges = _graph_of(tmp_path, {
        "lowbit_video/__init__.py": "",
        "lowbit_video/a.py": "from .b import f\n",
        "lowbit_video/b.py": "def f():\n    from .a import g\n",
    })
    assert circles(edges) == [["lowbit_video.a", "lowbit_video.b"]]


def test_importing_a_submodule_runs_its_package(tmp_path):
    # c imports p.leaf only, but p/__init__ imports p.api, which imports c
    edges = _graph_of(tmp_path, {
        "lowbit_video/__init__.py": "",
        "lowbit_video/p/__init__.py": "from .api import run\n",
        "lowbit_video/p/api.py": "from lowbit_video import c\n",
        "lowbit_video/p/leaf.py": "X = 1\n",
        "lowbit_video/c.py": "def f():\n    from lowbit_video.p.leaf import X\n",
    })
    assert circles(edges) == [["lowbit_video.c", "lowbit_video.p", "lowbit_video.p.api"]]


def test_one_way_imports_and_own_package_are_no_circle(tmp_path):
    # a submodule importing a sibling does not depend on its own package's __init__
    edges = _graph_of(tmp_path, {
        "lowbit_video/__init__.py": "",
        "lowbit_video/p/__init__.py": "from .x import f\nfrom .y import g\n",
        "lowbit_video/p/x.py": "from .y import g\nfrom . import y\n",
        "lowbit_video/p/y.py": "import numpy\nfrom lowbit_video.q import h\n",
        "lowbit_video/q.py": "def h():\n    pass\n",
    })
    assert edges["lowbit_video.p.x"] == {"lowbit_video.p.y": [1, 2]}
    assert circles(edges) == []
