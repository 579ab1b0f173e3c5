"""Two imports of one source at once (two `sessiontree import --all` runs): each asks
what was imported before, then writes. Found by running two at once: both wrote every
session (22 sessions for 11). The importer asks again under the store's import lock, so
the one that writes second is refused."""

from __future__ import annotations

import multiprocessing
import shutil
import threading
from pathlib import Path

import pytest

from sessiontree.foreign import AlreadyImportedError, find_imports
from sessiontree.foreign.claude import read_claude_session
from sessiontree.foreign.importer import import_session
from sessiontree.layout import store_parts
from tests.conftest import REAL_FILES, unavailable

CLAUDE = REAL_FILES / "foreign" / "claude"


def _source(tmp_path: Path) -> Path:
    sources = sorted(CLAUDE.glob("*.jsonl")) if CLAUDE.is_dir() else []
    if not sources:
        unavailable("no real Claude Code file")
    source = tmp_path / "claude" / "11111111-2222-3333-4444-555555555555.jsonl"
    source.parent.mkdir(parents=True)
    shutil.copyfile(sources[0], source)
    return source


def test_two_imports_that_asked_at_once_import_a_source_once(tmp_path: Path) -> None:
    source = _source(tmp_path)
    parts = store_parts(agent_dir=str(tmp_path / "agent"))
    asked = find_imports(parts)  # what each run found before either wrote
    first = import_session(read_claude_session(str(source)), parts, earlier=asked)
    with pytest.raises(AlreadyImportedError) as refused:
        import_session(read_claude_session(str(source)), parts, earlier=asked)
    assert refused.value.earlier.path == first.path
    assert len(find_imports(parts)) == 1


def _import_after_asking(source: str, agent_dir: str, asked_both: threading.Barrier) -> str:
    """One run: asks, waits until the other has asked too, then imports."""
    parts = store_parts(agent_dir=agent_dir)
    asked = find_imports(parts)
    asked_both.wait()
    try:
        import_session(read_claude_session(source), parts, earlier=asked)
    except AlreadyImportedError:
        return "refused"
    return "imported"


def test_two_processes_that_asked_at_once_import_a_source_once(tmp_path: Path) -> None:
    source = _source(tmp_path)
    agent_dir = str(tmp_path / "agent")
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager:
        asked_both = manager.Barrier(2)
        with context.Pool(2) as pool:
            runs = [
                pool.apply_async(_import_after_asking, (str(source), agent_dir, asked_both))
                for _ in range(2)
            ]
            outcomes = sorted(run.get() for run in runs)
    assert outcomes == ["imported", "refused"]
    assert len(find_imports(store_parts(agent_dir=agent_dir))) == 1


def test_imports_into_postgresql_ask_again_under_its_lock(tmp_path: Path) -> None:
    from tests.pg_support import pg_storage

    source = _source(tmp_path)
    with pg_storage(tmp_path / "root") as storage:
        parts = store_parts(storage, agent_dir=str(tmp_path / "root" / "agent"))
        asked = find_imports(parts)
        first = import_session(read_claude_session(str(source)), parts, earlier=asked)
        with pytest.raises(AlreadyImportedError) as refused:
            import_session(read_claude_session(str(source)), parts, earlier=asked)
        assert refused.value.earlier.path == first.path
        assert len(find_imports(parts)) == 1
