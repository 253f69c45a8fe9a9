"""The rooms a newcomer reads: in the folders listed here, no module is longer than a room
should be, and no import runs in a circle (imports under TYPE_CHECKING and inside functions
count too: a cycle for type hints only is still a knot to untie when reading)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "jobcenter"
FOLDERS = ["runtime", "cli"]  # the folders held to this so far
MODULE_LINES_MAX = 800  # past this a module holds more than one concern


def _modules(folder: str) -> dict[str, Path]:
    """Dotted name -> file, for every module under jobcenter/<folder>."""
    found = {}
    for path in sorted((PACKAGE / folder).rglob("*.py")):
        parts = ["jobcenter", *path.relative_to(PACKAGE).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of `known` that `name` imports, wherever the import statement stands."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parents = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parents, *([node.module] if node.module else [])])
            targets += [base, *(f"{base}.{alias.name}" for alias in node.names)]
    found = set()
    for target in targets:
        while target and target not in known:  # a name imported from a module: the module
            target = target.rpartition(".")[0]
        if target and target != name:
            found.add(target)
    return found


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of `graph` (its modules in order, the first repeated), or None."""
    done: set[str] = set()
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        if module in path:
            return [*path[path.index(module) :], module]
        if module in done:
            return None
        path.append(module)
        for imported in sorted(graph[module]):
            found = visit(imported)
            if found:
                return found
        path.pop()
        done.add(module)
        return None

    for module in sorted(graph):
        found = visit(module)
        if found:
            return found
    return None


@pytest.mark.parametrize("folder", FOLDERS)
def test_no_module_is_longer_than_a_room(folder: str) -> None:
    lines = {name: len(path.read_text().splitlines()) for name, path in _modules(folder).items()}
    too_long = {name: n for name, n in lines.items() if n > MODULE_LINES_MAX}
    assert not too_long, f"modules over {MODULE_LINES_MAX} lines: {too_long}"


@pytest.mark.parametrize("folder", FOLDERS)
def test_no_import_cycle(folder: str) -> None:
    modules = _modules(folder)
    graph = {name: _imports(name, path, set(modules)) for name, path in modules.items()}
    cycle = _cycle(graph)
    assert cycle is None, f"import cycle in jobcenter/{folder}: {' -> '.join(cycle or [])}"


def test_the_cycle_finder_finds_a_type_only_cycle(tmp_path: Path) -> None:
    """The check above can fail: a cycle through a TYPE_CHECKING import is found."""
    (tmp_path / "a.py").write_text("from . import b\n")
    (tmp_path / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import thing\n"
    )
    known = {"pkg.a", "pkg.b"}
    graph = {f"pkg.{m}": _imports(f"pkg.{m}", tmp_path / f"{m}.py", known) for m in "ab"}
    assert _cycle(graph) == ["pkg.a", "pkg.b", "pkg.a"]
