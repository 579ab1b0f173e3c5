"""Missing test prerequisites skip locally but fail under CI (review item 11)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import conftest
from conftest import REPO_ROOT, require_module, shared_fixture, unique_prefix


def test_shared_fixtures_are_found_beside_the_repository() -> None:
    assert conftest.SHARED_FIXTURES == REPO_ROOT.parent / "shared" / "fixtures"
    assert (REPO_ROOT / "pyproject.toml").is_file()


@pytest.mark.parametrize("ci", ["", "true"])
def test_a_missing_shared_fixture_skips_locally_and_fails_in_ci(
    ci: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(conftest, "SHARED_FIXTURES", tmp_path)
    monkeypatch.setenv("CI", ci)
    (tmp_path / "there.jsonl").write_text("{}\n")
    assert shared_fixture("there.jsonl") == tmp_path / "there.jsonl"
    outcome = pytest.fail.Exception if ci else pytest.skip.Exception
    with pytest.raises(outcome, match=r"missing\.jsonl is missing"):
        shared_fixture("missing.jsonl")


@pytest.mark.parametrize("ci", ["", "1"])
def test_a_missing_module_skips_locally_and_fails_in_ci(
    ci: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI", ci)
    assert require_module("json").dumps([]) == "[]"
    outcome = pytest.fail.Exception if ci else pytest.skip.Exception
    with pytest.raises(outcome):
        require_module("sessiontree_no_such_module")


def test_no_test_finds_prerequisites_its_own_way() -> None:
    """Hard-coded fixture paths and bare importorskip/skipif-on-exists skip silently in CI."""
    own_way = re.compile(r"/work/shared|importorskip\(|skipif\([^)]*exists\(\)")
    offenders = [
        f"{path.name}:{n}"
        for path in sorted(Path(__file__).parent.glob("*.py"))
        if path.name not in ("conftest.py", Path(__file__).name)
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if own_way.search(line) and not line.lstrip().startswith(("#", '"""'))
    ]
    assert offenders == []


def test_unique_prefix_is_unique_even_within_one_millisecond() -> None:
    # Two ids of the same millisecond and process differ only in their last digits.
    a, b, c = "0cb48a6fe377e000", "0cb48a6fe377e001", "0cb48a7000000000"
    assert unique_prefix(a, [a, b, c]) == a
    assert unique_prefix(c, [a, b, c]) == "0cb48a70"  # at least 8 characters
    assert unique_prefix("0123456789abcdef", ["fedcba9876543210"]) == "01234567"
