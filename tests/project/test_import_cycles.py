"""No module of the package imports itself back, however far round: the import graph
(grimp's, which counts imports inside functions too, and leaves out those only for type
checking) has no circle, and no module takes a sibling from its own package's
`__init__` (`from pkg import _sibling` runs the `__init__` that is importing it)."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import grimp

from tests.conftest import REPO_ROOT

PACKAGE = "sessiontree"
SOURCE = REPO_ROOT / "src"


@cache
def _graph() -> grimp.ImportGraph:
    return grimp.build_graph(
        PACKAGE, include_external_packages=False, exclude_type_checking_imports=True
    )


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def _through_own_package(graph: grimp.ImportGraph) -> list[tuple[str, str]]:
    """(module, package) for each `from package import ...` inside that package."""
    found: list[tuple[str, str]] = []
    for module in sorted(graph.modules):
        relative = Path(*module.split("."))
        path = SOURCE / relative / "__init__.py"
        if not path.exists():
            path = (SOURCE / relative).with_suffix(".py")
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ImportFrom) or node.level or node.module is None:
                continue
            if node.module != PACKAGE and module.startswith(node.module + "."):
                found.append((module, node.module))
    return found


def test_circles_are_found() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert _circles(edges) == [["a", "b", "c"]]


def test_the_package_has_no_import_circle() -> None:
    graph = _graph()
    edges = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    assert _circles(edges) == []


def test_no_module_imports_through_its_own_package() -> None:
    assert _through_own_package(_graph()) == []
