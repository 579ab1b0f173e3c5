"""The module paths the README documented before the packages by job keep working for a
release, with a DeprecationWarning that names the new home."""

from __future__ import annotations

import importlib
import sys

import pytest

SHIMS = {
    "sessiontree.check": ("sessiontree.maintenance", "check_session"),
    "sessiontree.content_index": ("sessiontree.search", "ContentIndex"),
    "sessiontree.naming": ("sessiontree.format", "listing_title"),
    "sessiontree.usage_report": ("sessiontree.reports", "report"),
}


@pytest.mark.parametrize("old", sorted(SHIMS))
def test_an_old_path_warns_and_gives_the_same_objects(old: str) -> None:
    new, name = SHIMS[old]
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=new.replace(".", r"\.")):
        module = importlib.import_module(old)
    assert getattr(module, name) is getattr(importlib.import_module(new), name)
    assert set(module.__all__) <= set(importlib.import_module(new).__all__)


def test_the_top_of_the_package_is_packages_and_few_modules() -> None:
    """Issue 22: packages by job, at most five modules besides __init__, __main__,
    errors and the version."""
    from pathlib import Path

    import sessiontree

    top = Path(sessiontree.__file__).parent
    modules = {p.stem for p in top.glob("*.py")} - {"__init__", "__main__", "errors", "_version"}
    assert len(modules) <= 5, modules
    assert modules <= set(SHIMS_NAMES), modules


SHIMS_NAMES = [old.split(".", 1)[1] for old in SHIMS]
