"""A package whose names are imported on first use (PEP 562), as `sessiontree` itself.

A package's `__init__` that imports every module of it makes whoever needs one name pay
for all of them: `sessiontree list` imported the session loader, the checker and the
context builder to list files. Such a package keeps its imports for type checkers only
(`if TYPE_CHECKING:`), says where each name lives, and takes its `__getattr__` from here.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports", "lazy_table"]


def lazy_exports(package: str, where: Mapping[str, str]) -> Callable[[str], Any]:
    """The `__getattr__` of `package`: a name of `where` is imported from its module (a
    module of the package by its short name, `_manager`, or a whole `sessiontree.` name)
    the first time it is asked for, then kept as the package's own attribute. The
    package's `__dir__` is set too: it names every name of `where`."""

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        full = module if module.startswith("sessiontree.") else f"{package}.{module}"
        value = getattr(importlib.import_module(full), name)
        setattr(sys.modules[package], name, value)  # later lookups skip this function
        return value

    module = sys.modules.get(package)
    if module is not None:
        # dir() (completion, pydoc, inspect) names what is not loaded yet too, as it
        # did when the package imported every module.
        def __dir__() -> list[str]:
            return sorted({*vars(module), *where})

        module.__dir__ = __dir__  # type: ignore[method-assign]
    return __getattr__


def lazy_table(modules: Mapping[str, str]) -> dict[str, str]:
    """`lazy_exports`'s table from each module's names (separated by blanks)."""
    return {name: module for module, names in modules.items() for name in names.split()}
