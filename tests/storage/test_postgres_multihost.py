"""Many hosts, one PostgreSQL store: real processes, each with its own agent dir.

Every child plays a host: it opens the store with a different `root` (as a
machine with another home directory would), so only keys are shared.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.pg_support import fresh_schema

HOST = textwrap.dedent(
    """
    import sys
    from sessiontree import SessionManager
    from sessiontree.storage.postgres import PostgresSessionStorage

    url, schema, root, mode = sys.argv[1:5]
    storage = PostgresSessionStorage(url, schema=schema, root=root, max_size=2)
    session_dir = root + "/sessions/--shared-project--"

    def msg(role, text):
        if role == "user":
            return {"role": "user", "content": text, "timestamp": 1}
        return {"role": "assistant", "content": [{"type": "text", "text": text}],
                "provider": "p", "model": "m", "timestamp": 2}

    if mode == "append":
        count = int(sys.argv[5])
        with SessionManager.create("/shared/project", session_dir, storage=storage) as sm:
            for i in range(count):
                sm.append_message(msg("user" if i % 2 else "assistant", f"{root} {i}"))
            print(storage.key_for(sm.get_session_file()), flush=True)
    elif mode == "hold":
        sm = SessionManager.open(root + "/" + sys.argv[5], storage=storage)
        sm.append_message(msg("user", "holder was here"))
        print("locked", flush=True)
        sys.stdin.readline()  # until the parent says so (or kills us)
        sm.close()
    elif mode == "crash":
        sm = SessionManager.create("/shared/project", session_dir, storage=storage)
        sm.append_message(msg("assistant", "first"))
        print(storage.key_for(sm.get_session_file()), flush=True)
        i = 0
        while True:
            i += 1
            sm.append_message(msg("user", f"entry {i}"))
            if i % 5 == 0:
                sm.flush()
                print(f"flushed {i}", flush=True)
    storage.close()
    """
)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[tuple[str, str]]:
    with fresh_schema() as (url, schema):
        from sessiontree.storage.postgres import PostgresSessionStorage

        # Create the schema once, so the hosts do not all migrate at the same moment.
        PostgresSessionStorage(url, schema=schema, root=str(tmp_path)).close()
        yield url, schema


def host(
    store: tuple[str, str], root: Path, mode: str, *args: str, stdin: Any = None
) -> subprocess.Popen[str]:
    url, schema = store
    return subprocess.Popen(
        [sys.executable, "-c", HOST, url, schema, str(root), mode, *args],
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def open_storage(store: tuple[str, str], root: Path) -> Any:
    from sessiontree.storage.postgres import PostgresSessionStorage

    url, schema = store
    return PostgresSessionStorage(url, schema=schema, root=str(root), max_size=2)


@pytest.mark.slow  # eight processes, 1,200 appends
def test_eight_hosts_append_to_eight_sessions_and_lose_nothing(
    store: tuple[str, str], tmp_path: Path
) -> None:
    from sessiontree import SessionManager, load_entries_from_file

    count = 150
    procs = [host(store, tmp_path / f"host{i}" / "agent", "append", str(count)) for i in range(8)]
    keys = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        keys.append(out.strip())
    assert len(set(keys)) == 8
    reader_root = tmp_path / "reader" / "agent"
    with open_storage(store, reader_root) as storage:
        session_dir = str(reader_root / "sessions" / "--shared-project--")
        paths = storage.list_files(session_dir, "*.jsonl")
        assert sorted(storage.key_for(p) for p in paths) == sorted(keys)
        metas = {m.path: m for m in storage.list_session_meta(session_dir)}
        for i, key in enumerate(keys):
            path = storage.path_for(key)
            entries = load_entries_from_file(path, storage=storage)
            assert len(entries) == count + 1
            texts = [
                e["message"]["content"] if n % 2 else e["message"]["content"][0]["text"]
                for n, e in enumerate(entries[1:])
            ]
            assert texts == [f"{tmp_path / f'host{i}' / 'agent'} {n}" for n in range(count)]
            parents = [e["parentId"] for e in entries[1:]]
            assert parents == [None] + [e["id"] for e in entries[1:-1]]
            assert metas[path].message_count == count
            assert metas[path].size == storage.stat(path).size
            with SessionManager.open(path, storage=storage, read_only=True) as sm:
                assert len(sm.get_entries()) == count


def test_second_host_gets_session_lock_error(store: tuple[str, str], tmp_path: Path) -> None:
    from sessiontree import SessionLockError, SessionManager

    root_a, root_b = tmp_path / "a" / "agent", tmp_path / "b" / "agent"
    with open_storage(store, root_b) as storage:
        with SessionManager.create("/p", str(root_b / "sessions" / "--p--"), storage=storage) as sm:
            sm.append_message({"role": "assistant", "content": [], "timestamp": 1})
            key = storage.key_for(sm.get_session_file() or "")
        holder = host(store, root_a, "hold", key, stdin=subprocess.PIPE)
        try:
            assert holder.stdout is not None and holder.stdin is not None
            assert holder.stdout.readline().strip() == "locked", holder.stderr
            with pytest.raises(SessionLockError) as info:
                SessionManager.open(storage.path_for(key), storage=storage)
            assert info.value.pid == holder.pid
            assert f"pid {holder.pid}" in str(info.value)
            holder.stdin.write("done\n")
            holder.stdin.flush()
            assert holder.wait(timeout=30) == 0
        finally:
            if holder.poll() is None:
                holder.kill()
            holder.communicate()
        with SessionManager.open(storage.path_for(key), storage=storage) as sm:
            assert sm.get_entries()[-1]["message"]["content"] == "holder was here"


def test_killed_writer_releases_its_lock_and_keeps_every_flushed_entry(
    store: tuple[str, str], tmp_path: Path
) -> None:
    from sessiontree import SessionLockError, SessionManager

    proc = host(store, tmp_path / "victim" / "agent", "crash")
    assert proc.stdout is not None
    key = proc.stdout.readline().strip()
    flushed = 0
    while flushed < 100:
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else ""
        flushed = int(line.split()[1])
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    proc.communicate()
    survivor_root = tmp_path / "survivor" / "agent"
    with open_storage(store, survivor_root) as storage:
        path = storage.path_for(key)
        deadline = time.monotonic() + 30
        while True:  # the server notices the dead connection within moments
            try:
                sm = SessionManager.open(path, storage=storage)
                break
            except SessionLockError:
                assert time.monotonic() < deadline, "the dead writer's lock was never released"
                time.sleep(0.1)
        with sm:
            entries = sm.get_entries()
            assert len(entries) >= flushed + 1
            texts = [e["message"]["content"] for e in entries[1:]]
            assert texts == [f"entry {i}" for i in range(1, len(entries))]
            assert [e["parentId"] for e in entries[1:]] == [e["id"] for e in entries[:-1]]
            sm.append_message({"role": "user", "content": "survivor", "timestamp": 3})
        text = storage.read_text(path)
        assert text.endswith("\n") and text.count("\n") == len(entries) + 2


def test_a_dropped_lock_taken_by_another_stops_the_writer(
    store: tuple[str, str], tmp_path: Path
) -> None:
    """If the server drops the lock's connection and another writer takes the lock in
    the gap, the lock is gone for good: stop writing. (Re-taking a lock no one took
    is in tests/storage/test_postgres_restart.py.)"""
    import psycopg

    from sessiontree import SessionLockError, SessionManager
    from sessiontree.session import LOCK_CHECK_SECONDS as _GAP_SECONDS

    root = tmp_path / "agent"
    url, _ = store
    with open_storage(store, root) as storage:
        sm = SessionManager.create("/p", str(root / "sessions" / "--p--"), storage=storage)
        sm.append_message({"role": "assistant", "content": [], "timestamp": 1})
        me = f"sessiontree pid {os.getpid()}"
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name LIKE %s",
                (me + "%",),
            )
        other = storage.acquire_lock(sm.get_session_file() or "")  # its own connection
        try:
            time.sleep(_GAP_SECONDS + 0.1)
            with pytest.raises(SessionLockError) as info:
                sm.append_message({"role": "user", "content": "after", "timestamp": 2})
            assert "writer lock lost" in str(info.value)
            assert "being written by sessiontree pid" in str(info.value)
            with pytest.raises(SessionLockError):
                sm.close()
        finally:
            other.release()
