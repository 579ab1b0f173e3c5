"""`lazy_exports`: the packages whose names are imported on first use.

Importing such a package loads none of its modules; each name of its `__all__` is
found where `_WHERE` says (the module type checkers are shown under TYPE_CHECKING);
a name it does not have is an AttributeError naming it.
"""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import sessiontree

LAZY_PACKAGES = (
    "format",
    "layout",
    "listing",
    "maintenance",
    "reports",
    "search",
    "session",
    "storage",
    "store",
)
SRC = Path(sessiontree.__file__).parent


def _type_checking_imports(package: str) -> dict[str, str]:
    """What the package's `if TYPE_CHECKING:` block imports: name -> module."""
    tree = ast.parse((SRC / package / "__init__.py").read_text())
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for stmt in node.body:
                if isinstance(stmt, ast.ImportFrom) and stmt.module:
                    found.update({a.asname or a.name: stmt.module for a in stmt.names})
    return found


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_every_name_is_where_the_table_says(package: str) -> None:
    module = importlib.import_module(f"sessiontree.{package}")
    where: dict[str, str] = module._WHERE
    assert sorted(where) == sorted(module.__all__)
    shown = _type_checking_imports(package)
    assert set(shown) == set(where)
    for name, source in where.items():
        full = source if source.startswith("sessiontree.") else f"sessiontree.{package}.{source}"
        assert shown[name] == full, name
        assert getattr(module, name) is getattr(importlib.import_module(full), name)
    with pytest.raises(AttributeError, match=f"sessiontree.{package}.*'no_such_name'"):
        _ = module.no_such_name


def test_importing_a_package_loads_none_of_its_modules(tmp_path: Path) -> None:
    script = (
        "import json, sys\n"
        f"for p in {list(LAZY_PACKAGES)!r}: __import__('sessiontree.' + p)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('sessiontree.'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    loaded = set(json.loads(out.stdout))
    private = {m for m in loaded if any(part.startswith("_") for part in m.split(".")[2:])}
    assert private == set()
    assert {f"sessiontree.{p}" for p in LAZY_PACKAGES} <= loaded


def test_dir_of_a_fresh_package_names_its_names() -> None:
    # dir() (completion, pydoc, inspect.getmembers) named only what was loaded: the
    # reports and search packages, eager before they were lazy, lost their names there.
    code = (
        "import importlib, json\n"
        f"packages = {list(LAZY_PACKAGES)!r}\n"
        "missing = {}\n"
        "for p in packages:\n"
        "    m = importlib.import_module('sessiontree.' + p)\n"
        "    missing[p] = sorted(set(m.__all__) - set(dir(m)))\n"
        "print(json.dumps(missing))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert json.loads(done.stdout) == {p: [] for p in LAZY_PACKAGES}
