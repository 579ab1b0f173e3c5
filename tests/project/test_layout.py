"""The tests mirror the source, and the source keeps to rooms of one job.

Every test file is in `tests/<package>/` for a package of `sessiontree` (`_util` as
`util`), named after a module of that package (its leading `_` dropped) or a subpackage, or
after the package itself, with an optional `_<aspect>`: `session/test_manager_model.py`
tests `session/_manager.py`. What spans the project is in the folders of `SPANNING`. Every
test folder is a package, so two folders may hold a file of the same name. No module of
the source is over 1,000 lines, and no test names an issue of this project by number: a
test says what it checks (a link to another project's issue is a fact about that project,
and stays).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

SRC = REPO_ROOT / "src" / "sessiontree"
TESTS = REPO_ROOT / "tests"
SPANNING = {
    "project": "what spans the project: prerequisites, documents, public API, environment, "
    "benchmarks, the suite's profiles, this layout, the data-loss regressions",
    "interop": "what the TypeScript peers wrote or judge: the differential tests",
}
MAX_MODULE_LINES = 1_000

ISSUE_NUMBER = re.compile(
    r"\b(?:issues?|pr|pull request|bug|ticket)\s*#?\d+"
    r"|(?<![&\w/])#(?!\d{3}\b|\d{6}\b|\d{8}\b)\d+\b(?![0-9a-fA-F;])",
    re.IGNORECASE,
)
"""An issue named by number: `issue 21.3`, `PR 7`, `#12`. Not a link (`.../issues/123`, a
fact about another project), an HTML entity (`&#106;`), nor a colour (`#333`, `#000000`)."""


def package_modules() -> dict[str, set[str]]:
    """Each test folder a package gives, with the names its test files may start with."""
    folders: dict[str, set[str]] = {}
    for package in sorted(SRC.iterdir()):
        if not (package / "__init__.py").is_file():
            continue
        name = package.name.lstrip("_")
        modules = {name}
        for child in package.iterdir():
            if child.suffix == ".py" and child.name != "__init__.py":
                modules.add(child.stem.lstrip("_"))
            elif (child / "__init__.py").is_file():
                modules.add(child.name.lstrip("_"))
        folders[name] = modules
    return folders


def misplaced(tests: Path, folders: dict[str, set[str]]) -> list[str]:
    """The test files of `tests` outside the layout, each with what is wrong."""
    found = []
    for path in sorted(tests.rglob("test_*.py")):
        relative = path.relative_to(tests)
        if relative.parts[0] == "data":
            continue
        if len(relative.parts) != 2:
            found.append(f"{relative}: not in a folder of tests/ (one level down)")
            continue
        folder, stem = relative.parts[0], path.stem.removeprefix("test_")
        if not (path.parent / "__init__.py").is_file():
            found.append(f"{relative}: tests/{folder}/ has no __init__.py")
        if folder in SPANNING:
            continue
        if folder not in folders:
            found.append(f"{relative}: no package sessiontree.{folder} (nor _{folder})")
        elif not any(stem == m or stem.startswith(m + "_") for m in folders[folder]):
            known = ", ".join(sorted(folders[folder]))
            found.append(f"{relative}: named after no module of {folder} ({known})")
    return found


def test_every_test_file_is_named_after_what_it_tests() -> None:
    assert misplaced(TESTS, package_modules()) == []


def test_the_layout_check_catches_what_it_is_for(tmp_path: Path) -> None:
    folders = {"session": {"session", "manager", "file"}, "util": {"util", "fs"}}
    for name in (
        "test_top.py",
        "session/test_manager_model.py",
        "session/test_managers.py",
        "session/test_session.py",
        "util/test_fs.py",
        "project/test_anything.py",
        "gone/test_discovery.py",
        "data/test_fixture.py",
    ):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).touch()
    for folder in ("session", "project", "gone"):
        (tmp_path / folder / "__init__.py").touch()
    assert misplaced(tmp_path, folders) == [
        "gone/test_discovery.py: no package sessiontree.gone (nor _gone)",
        "session/test_managers.py: named after no module of session (file, manager, session)",
        "test_top.py: not in a folder of tests/ (one level down)",
        "util/test_fs.py: tests/util/ has no __init__.py",
    ]


def test_no_module_is_over_a_thousand_lines() -> None:
    lengths = {
        str(path.relative_to(SRC)): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted(SRC.rglob("*.py"))
    }
    assert {name: n for name, n in lengths.items() if n > MAX_MODULE_LINES} == {}


def test_no_test_names_an_issue_by_number() -> None:
    files = [
        path
        for pattern in ("*.py", "*.ts")
        for path in sorted(TESTS.rglob(pattern))
        if "data" not in path.relative_to(TESTS).parts and path != Path(__file__)
    ]
    assert len(files) > 100
    offenders = [
        f"{path.relative_to(TESTS)}:{n}: {line.strip()}"
        for path in files
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if ISSUE_NUMBER.search(line)
    ]
    assert offenders == []


@pytest.mark.parametrize(
    ("line", "names_one"),
    [
        ('"""Finding sessions (issue 23): titles are searched."""', True),
        ("# --- family: copies across agent dirs (issue 21.3) ---", True),
        ("# fixed in #12, see Issue #7", True),
        ("# the sidechain replay ccusage deduplicates (ccusage PR #1155)", True),
        ("# https://github.com/ryoppippi/ccusage/pull/1155", False),
        ("# as upstream decided in github.com/x/y/issues/123", False),
        ('"[click](&#106;avascript:alert(1))",', False),
        ('style = "color: #333; background: #000000"', False),
        ("assert issues == 3", False),
    ],
)
def test_the_issue_pattern_catches_what_it_is_for(line: str, names_one: bool) -> None:
    assert bool(ISSUE_NUMBER.search(line)) is names_one
