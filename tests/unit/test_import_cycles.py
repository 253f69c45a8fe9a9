"""The structure drawn from jobcenter's imports has no cycle, type-only imports included.

Every import of every module counts, wherever it stands: at the top, under `if
TYPE_CHECKING:` or inside a function. A cycle means two modules each need the other to be
read, which is what a newcomer cannot untangle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import jobcenter

PACKAGE = Path(jobcenter.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules `name` imports (a `from X import Y` of a module Y counts as Y)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in modules else base)
    return {target for target in found if target in modules and target != name}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_sees_relative_type_only_and_function_level_imports(tmp_path: Path) -> None:
    module = tmp_path / "mod.py"
    module.write_text(
        "from typing import TYPE_CHECKING\n"
        "from . import sibling\n"
        "from ..top import name\n"
        "if TYPE_CHECKING:\n"
        "    from pkg.hinted import Hint\n"
        "def late() -> None:\n"
        "    import pkg.lazy\n"
    )
    known = {name: module for name in ["pkg.sub.sibling", "pkg.top", "pkg.hinted", "pkg.lazy"]}
    found = _imports("pkg.sub.mod", module, known)
    assert found == {"pkg.sub.sibling", "pkg.top", "pkg.hinted", "pkg.lazy"}
    assert "jobcenter.storage.store" in _graph()["jobcenter.client"]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_of_the_package_is_part_of_an_import_cycle() -> None:
    cycles = _cycles(_graph())
    assert cycles == [], "import cycles (each a set of modules that import one another):\n" + (
        "\n".join(" <-> ".join(cycle) for cycle in cycles)
    )
