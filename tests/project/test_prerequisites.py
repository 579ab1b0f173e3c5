"""The suite runs from the repository alone: its files are in it, and a prerequisite from
outside it (a module, a peer) skips locally but fails under CI."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests import conftest
from tests.conftest import REPO_ROOT, real_file, require_module, unique_prefix


def test_the_real_files_are_in_the_repository() -> None:
    """Every real session file SOURCES.md lists is committed under tests/data/real."""
    assert conftest.REAL_FILES == REPO_ROOT / "tests" / "data" / "real"
    sources = (conftest.REAL_FILES / "foreign" / "SOURCES.md").read_text(encoding="utf-8")
    files = sorted(p for p in (conftest.REAL_FILES / "foreign").rglob("*") if p.is_file())
    named = [p for p in files if p.name != "SOURCES.md"]
    assert len(named) == 37  # Claude Code 12, Codex 10, Copilot 3, Gemini 7, OpenCode 5
    assert all(p.name.split("__", 1)[0] in sources for p in named)
    assert real_file("pi-v1-large-session.jsonl").stat().st_size > 900_000


def test_a_missing_real_file_fails_wherever_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(conftest, "REAL_FILES", tmp_path)
    (tmp_path / "there.jsonl").write_text("{}\n")
    assert real_file("there.jsonl") == tmp_path / "there.jsonl"
    with pytest.raises(pytest.fail.Exception, match=r"missing\.jsonl is missing"):
        real_file("missing.jsonl")


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
        for path in sorted((REPO_ROOT / "tests").rglob("*.py"))
        if path.name not in ("conftest.py", Path(__file__).name)
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if own_way.search(line) and not line.lstrip().startswith(("#", '"""'))
    ]
    assert offenders == []


OUTSIDE = re.compile(
    r"/work/shared|/tmp/anchors|ANCHORS(?:16)?_DIR|\.\./shared"
    r"|\.parents?(?:\[\d+\])?\s*/\s*[\"']shared[\"']"
)
"""A path of one machine, or a sibling of the checkout: the peers' old install dirs, the
shared directory beside the repository."""


def test_nothing_names_a_path_outside_the_repository() -> None:
    """The tests, scripts (the peers' setup and oracles included), benchmarks and CI run
    from a clone anywhere: none of them names a path outside it."""
    roots = [REPO_ROOT / d for d in ("tests", "scripts", "benchmarks", ".ci")]
    files = [
        path
        for root in roots
        for path in sorted(root.rglob("*"))
        if path.is_file()
        and "data" not in path.relative_to(REPO_ROOT).parts
        and path.suffix not in (".pyc", ".gz")
        and path != Path(__file__)
    ]
    assert len(files) > 100
    offenders = [
        f"{path.relative_to(REPO_ROOT)}:{n}: {line.strip()}"
        for path in files
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert offenders == []


def test_the_outside_pattern_catches_what_it_is_for() -> None:
    caught = [
        'PEERS_DIR = ROOT.parent / "shared" / "peers"',
        'GEN = Path(__file__).resolve().parents[2] / "shared" / "peers" / "gen.py"',
        'default=Path("/work/shared/peers")',
        'Path(os.environ.get("ANCHORS_DIR", "/tmp/anchors"))',
        "see ../shared/peers/README.md",
    ]
    assert [line for line in caught if not OUTSIDE.search(line)] == []
    assert not OUTSIDE.search('REPO_ROOT / "scripts" / "peers" / "oracle"')


def test_the_peers_setup_says_which_peers_are_missing(tmp_path: Path) -> None:
    """`scripts/peers/setup --check` (no network) fails, naming them, when peers are not
    installed where $SESSIONTREE_PEERS says; tests/peers.py finds none there either."""
    setup = REPO_ROOT / "scripts" / "peers" / "setup"
    env = {**os.environ, "SESSIONTREE_PEERS": str(tmp_path)}
    done = subprocess.run([setup, "--check"], capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 1
    assert f"not installed in {tmp_path}: pi pi16 omp" in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_unique_prefix_is_unique_even_within_one_millisecond() -> None:
    # Two ids of the same millisecond and process differ only in their last digits.
    a, b, c = "0cb48a6fe377e000", "0cb48a6fe377e001", "0cb48a7000000000"
    assert unique_prefix(a, [a, b, c]) == a
    assert unique_prefix(c, [a, b, c]) == "0cb48a70"  # at least 8 characters
    assert unique_prefix("0123456789abcdef", ["fedcba9876543210"]) == "01234567"
