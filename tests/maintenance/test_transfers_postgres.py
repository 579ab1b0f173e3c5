"""`import_files` into PostgreSQL, in batches: killed mid-way and run again, run twice
at once, beside a live writer, every session is there once, whole, byte for byte."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from sessiontree.errors import SessionLockError
from sessiontree.maintenance import TransferReport, import_files
from sessiontree.storage import read_chunks
from sessiontree.storage.postgres import PostgresSessionStorage
from tests.pg_support import fresh_schema
from tests.storage.test_postgres_batch import session_bytes

SESSIONS = 30


def _agent(tmp_path: Path, sessions: int = SESSIONS) -> Path:
    """An agent dir of `sessions` sessions over three projects, with old mtimes."""
    agent = tmp_path / "source"
    for n in range(sessions):
        project = agent / "sessions" / f"--p{n % 3}--"
        project.mkdir(parents=True, exist_ok=True)
        path = project / f"2026-01-01T00-00-{n:02d}_{n:08x}.jsonl"
        path.write_bytes(session_bytes(n))
        os.utime(path, ns=(1_700_000_000_000_000_000 + n, 1_700_000_000_000_000_000 + n))
    return agent


def _assert_whole(pg: Any, agent: Path, root: Path) -> None:
    """Every file of `agent` once in `pg` (under `root`), byte for byte, at its mtime;
    nothing else, and no file row a killed transaction left half made."""
    source = sorted(p for p in (agent / "sessions").rglob("*") if p.is_file())
    for p in source:
        there = str(root / p.relative_to(agent))
        assert b"".join(read_chunks(pg, there)) == p.read_bytes(), there
        assert pg.stat(there).mtime_ns == p.stat().st_mtime_ns
    with pg.connection() as conn:
        rows = conn.execute(
            f"SELECT count(*), count(DISTINCT key), count(*) FILTER (WHERE key IS NULL) "
            f"FROM {pg.schema}.nodes WHERE NOT is_dir"
        ).fetchone()
    assert rows == (len(source), len(source), 0)
    assert len(pg.list_session_meta()) == len(source)


# The child imports in batches of 4 and stops for good inside its third batch, in the
# middle of its COPY, once two batches are committed: the parent kills it there.
_CHILD = textwrap.dedent(
    """
    import sys, time
    import sessiontree.maintenance._transfers as transfers
    import sessiontree.storage.postgres._batch as batch
    from sessiontree.maintenance import import_files
    from sessiontree.storage.postgres import PostgresSessionStorage

    url, schema, root, agent, marker = sys.argv[1:]
    transfers._BATCH_FILES = 4
    copied = batch.copy_content
    calls = [0]

    def copy_content(copy, node_id, chunks):
        calls[0] += 1
        if calls[0] == 10:
            open(marker, "w").close()
            time.sleep(600)
        return copied(copy, node_id, chunks)

    batch.copy_content = copy_content
    with PostgresSessionStorage(url, schema=schema, root=root) as pg:
        import_files(agent, pg)
    """
)


def test_killed_mid_import_and_run_again_every_session_once(tmp_path: Path) -> None:
    agent, root, marker = _agent(tmp_path), tmp_path / "agent", tmp_path / "stopped"
    with fresh_schema() as (url, schema):
        child = subprocess.Popen(
            [sys.executable, "-c", _CHILD, url, schema, str(root), str(agent), str(marker)]
        )
        try:
            deadline = time.monotonic() + 60
            while not marker.exists():
                assert child.poll() is None, "the import ended before it was killed"
                assert time.monotonic() < deadline
                time.sleep(0.05)
            os.kill(child.pid, signal.SIGKILL)
        finally:
            child.wait()
        with PostgresSessionStorage(url, schema=schema, root=str(root)) as pg:
            # Two whole batches of four; nothing of the third.
            assert len(pg.list_session_meta()) == 8
            report = import_files(str(agent), pg)
            assert report.files == SESSIONS and not report.skipped
            _assert_whole(pg, agent, root)
            # A third run writes nothing again but what changed since (a session grew).
            inos = {m.path: m.ino for m in pg.list_session_meta()}
            grown = sorted((agent / "sessions").rglob("*.jsonl"))[5]
            with grown.open("ab") as f:
                f.write(b'{"type":"label"}\n')
            again = import_files(str(agent), pg)
            assert again.files == SESSIONS
            _assert_whole(pg, agent, root)
            changed = {p for p, ino in inos.items() if pg.stat(p).ino != ino}
            assert changed == {str(root / grown.relative_to(agent))}


def test_two_imports_of_one_dir_at_once(tmp_path: Path) -> None:
    agent, root = _agent(tmp_path, 60), tmp_path / "agent"
    with fresh_schema() as (url, schema):
        stores = [PostgresSessionStorage(url, schema=schema, root=str(root)) for _ in range(2)]
        try:
            with ThreadPoolExecutor(2) as pool:
                runs = [pool.submit(import_files, str(agent), pg) for pg in stores]
                assert [run.result().files for run in runs] == [60, 60]
            _assert_whole(stores[0], agent, root)
        finally:
            for pg in stores:
                pg.close()


def test_a_live_writer_of_a_target_session_stops_the_import(tmp_path: Path) -> None:
    """A session being appended to in the store stops the import before its batch: the
    batches before are whole, the writer's lines are kept, and once it is done the
    import finishes (the writer's longer file is newer, so it is kept and reported)."""
    agent, root = _agent(tmp_path), tmp_path / "agent"
    with fresh_schema() as (url, schema):
        with (
            PostgresSessionStorage(url, schema=schema, root=str(root)) as pg,
            PostgresSessionStorage(url, schema=schema, root=str(root)) as other,
        ):
            busy = sorted((agent / "sessions").rglob("*.jsonl"))[-1]
            target = str(root / busy.relative_to(agent))
            other.ensure_dir(os.path.dirname(target))
            lock = other.acquire_lock(target)
            writer = other.open_writer(target)
            writer.write_bytes(busy.read_bytes() + b'{"type":"label"}\n')
            report = TransferReport()
            with pytest.raises(SessionLockError, match=re.escape(busy.name)):
                import_files(str(agent), pg, report)
            assert 0 < report.files < SESSIONS
            assert len(pg.list_session_meta()) == report.files + 1
            writer.close()
            lock.release()
            report = import_files(str(agent), pg)
            assert report.files == SESSIONS - 1
            assert [why for _, why in report.skipped] == [
                f"{target} changed after it was copied (newer than the source); not replaced"
            ]
            assert pg.read_text(target).endswith('{"type":"label"}\n')
