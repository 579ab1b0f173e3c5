"""Two imports of one source at once (two `sessiontree import --all` runs): each asks
what was imported before, then writes. Found by running two at once: both wrote every
session (22 sessions for 11). The importer asks again under the store's import lock, so
the one that writes second is refused; on files and in PostgreSQL, in real processes."""

from __future__ import annotations

import multiprocessing
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from sessiontree.foreign import AlreadyImportedError, find_imports
from sessiontree.foreign.claude import read_claude_session
from sessiontree.foreign.importer import import_session
from sessiontree.layout import StoreParts, store_parts
from tests.conftest import REAL_FILES, unavailable

CLAUDE = REAL_FILES / "foreign" / "claude"


def _source(tmp_path: Path, n: int = 0) -> Path:
    sources = sorted(CLAUDE.glob("*.jsonl")) if CLAUDE.is_dir() else []
    if not sources:
        unavailable("no real Claude Code file")
    source = tmp_path / "claude" / f"11111111-2222-3333-4444-{n:012d}.jsonl"
    source.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(sources[n % len(sources)], source)
    return source


@contextmanager
def _parts(backend: str, root: Path, pg: tuple[str, str] | None = None) -> Iterator[StoreParts]:
    """The store in `root`: its files, or a PostgreSQL schema (`pg`: url, schema)."""
    agent_dir = str(root / "agent")
    if backend == "files":
        yield store_parts(agent_dir=agent_dir)
        return
    from sessiontree.storage.postgres import PostgresSessionStorage

    assert pg is not None
    storage = PostgresSessionStorage(pg[0], schema=pg[1], root=str(root), max_size=2)
    try:
        yield store_parts(storage, agent_dir=agent_dir)
    finally:
        storage.close()


@contextmanager
def _backend(backend: str) -> Iterator[tuple[str, str] | None]:
    if backend == "files":
        yield None
        return
    from tests.pg_support import fresh_schema

    with fresh_schema() as pg:
        yield pg


BACKENDS = ["files", "postgresql"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_imports_that_asked_at_once_import_a_source_once(tmp_path: Path, backend: str) -> None:
    source = _source(tmp_path)
    with _backend(backend) as pg, _parts(backend, tmp_path / "root", pg) as parts:
        asked = find_imports(parts)  # what each run found before either wrote
        first = import_session(read_claude_session(str(source)), parts, earlier=asked)
        with pytest.raises(AlreadyImportedError) as refused:
            import_session(read_claude_session(str(source)), parts, earlier=asked)
        assert refused.value.earlier.path == first.path
        assert len(find_imports(parts)) == 1


def _import_after_asking(
    sources: list[str],
    root: str,
    backend: str,
    pg: tuple[str, str] | None,
    asked_both: threading.Barrier,
) -> list[str]:
    """One run: asks, waits until the other has asked too, then imports each source."""
    outcomes = []
    with _parts(backend, Path(root), pg) as parts:
        asked = find_imports(parts)
        asked_both.wait()
        for source in sources:
            try:
                import_session(read_claude_session(source), parts, earlier=asked)
            except AlreadyImportedError:
                outcomes.append("refused")
            else:
                outcomes.append("imported")
    return outcomes


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_processes_that_asked_at_once_import_each_source_once(
    tmp_path: Path, backend: str
) -> None:
    sources = [str(_source(tmp_path, n)) for n in range(4)]
    root = str(tmp_path / "root")
    context = multiprocessing.get_context("spawn")
    with _backend(backend) as pg, context.Manager() as manager:
        asked_both = manager.Barrier(2)
        with context.Pool(2) as pool:
            runs = [
                pool.apply_async(_import_after_asking, (order, root, backend, pg, asked_both))
                for order in (sources, sources[::-1])  # one from each end: they meet
            ]
            outcomes = [run.get(timeout=300) for run in runs]
        assert sorted(outcomes[0] + outcomes[1]) == ["imported"] * 4 + ["refused"] * 4
        with _parts(backend, Path(root), pg) as parts:
            found = find_imports(parts)
    assert sorted(e.source_path for e in found) == sorted(sources)
