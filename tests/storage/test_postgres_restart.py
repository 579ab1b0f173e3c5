"""A live session on PostgreSQL survives server restarts and killed backends.

Every test here runs on a server of this module's own (`pg_support.private_server`),
never on the shared test server: restarting that would break whoever else uses it.
What must hold after each disruption: the next appends and `flush()` succeed, the
reopened file has every entry the live session has, and no error is stored. A
server that is down fails an append with a clear error in about a second per
storage call (the pool's 1 s patience, then a refused direct connection), never
after the pool's 30 s timeout.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from sessiontree import (
    SessionLockError,
    SessionManager,
    SessionPersistenceError,
    SessionWriteConflictError,
)
from sessiontree.session import LOCK_CHECK_SECONDS
from sessiontree.storage.postgres import PostgresSessionStorage, new_schema_name
from tests.pg_support import CuttingProxy, PrivateServer, private_server

# Crash runs: a server of its own, started, restarted, crashed and stopped again and again.
pytestmark = pytest.mark.slow

# A down server must fail a storage call within about a second (see the module
# doc); this bound is far above that and far below the pool's 30 s timeout.
DOWN_SERVER_BOUND = 10.0


@pytest.fixture(scope="module")
def server() -> Iterator[PrivateServer]:
    with private_server() as started:
        # Asynchronous commits reach the disk only with the WAL writer, normally within
        # a few hundred ms; at 10 s, a crash reliably loses the ones not flushed.
        with psycopg.connect(started.url, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET wal_writer_delay = '10s'")
            conn.execute("SELECT pg_reload_conf()")
        yield started


def _open(url: str, agent_dir: Path, **kwargs: Any) -> PostgresSessionStorage:
    kwargs.setdefault("max_size", 4)
    return PostgresSessionStorage(url, root=str(agent_dir), **kwargs)


@pytest.fixture
def schema(server: PrivateServer) -> Iterator[str]:
    name = new_schema_name("st_restart")
    yield name
    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@pytest.fixture
def storage(
    server: PrivateServer, schema: str, agent_dir: Path
) -> Iterator[PostgresSessionStorage]:
    opened = _open(server.url, agent_dir, schema=schema)
    yield opened
    opened.close()


def msg(role: str, text: str) -> dict[str, Any]:
    if role == "user":
        return {"role": "user", "content": text, "timestamp": 1}
    return {
        "role": "assistant",
        "content": [{"type": "text", "text": text}],
        "provider": "p",
        "model": "m",
        "timestamp": 2,
    }


def live_session(storage: PostgresSessionStorage, agent_dir: Path) -> SessionManager:
    """A session on disk (a user and an assistant message) with a few more entries."""
    sm = SessionManager.create("/proj", str(agent_dir / "sessions" / "--proj--"), storage=storage)
    sm.append_message(msg("user", "question"))
    sm.append_message(msg("assistant", "answer"))
    for i in range(3):
        sm.append_message(msg("user", f"before {i}"))
    sm.flush()
    return sm


def assert_all_stored(storage: PostgresSessionStorage, sm: SessionManager) -> None:
    """The stored file, reopened, has exactly the live session's entries."""
    path = sm.get_session_file() or ""
    with SessionManager.open(path, storage=storage, read_only=True) as reopened:
        assert reopened.get_entries() == sm.get_entries()
    assert storage.read_text(path).count("\n") == len(sm.get_entries()) + 1  # + the header


def kill_backends(url: str) -> int:
    """pg_terminate_backend on every client connection but the caller's."""
    with psycopg.connect(url, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
        ).fetchall()
    return len(rows)


def assert_lock_held(storage: PostgresSessionStorage, sm: SessionManager) -> None:
    with pytest.raises(SessionLockError):
        SessionManager.open(sm.get_session_file() or "", storage=storage)


# -- restarts and killed backends ------------------------------------------------------------


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_a_server_restart_loses_nothing(
    server: PrivateServer, storage: PostgresSessionStorage, agent_dir: Path, mode: str
) -> None:
    """`pg_ctl restart`, clean (fast) or as after a crash (immediate): every pooled
    connection and the lock's die; the next appends go through on fresh ones."""
    sm = live_session(storage, agent_dir)
    server.restart(mode)
    sm.append_message(msg("assistant", "right after the restart"))  # dead pooled connections
    sm.append_message(msg("user", "and another"))
    sm.flush()
    time.sleep(LOCK_CHECK_SECONDS + 0.1)  # the next append checks the lock: taken again
    sm.append_message(msg("assistant", "after the lock check"))
    sm.flush()
    assert_lock_held(storage, sm)
    assert_all_stored(storage, sm)
    sm.close()  # no stored error


def test_killed_backends_lose_nothing(
    server: PrivateServer, storage: PostgresSessionStorage, agent_dir: Path
) -> None:
    """pg_terminate_backend on the pooled connections and the lock's, twice."""
    sm = live_session(storage, agent_dir)
    assert kill_backends(server.url) >= 2  # at least one pooled connection and the lock's
    sm.append_message(msg("assistant", "after the first kill"))
    sm.flush()
    assert kill_backends(server.url) >= 2
    time.sleep(LOCK_CHECK_SECONDS + 0.1)
    sm.append_message(msg("user", "after the second kill, with a lock check"))
    sm.append_message(msg("assistant", "and one more"))
    sm.flush()
    assert_lock_held(storage, sm)
    assert_all_stored(storage, sm)
    sm.close()


def test_a_caller_pool_without_a_check_is_covered_by_the_retry(
    server: PrivateServer, schema: str, agent_dir: Path
) -> None:
    """A caller's pool hands out its dead idle connections unchecked: every storage
    call still goes through, on a fresh connection."""
    from psycopg_pool import ConnectionPool

    path = str(agent_dir / "s.jsonl")
    with ConnectionPool(
        server.url, min_size=2, max_size=2, kwargs={"autocommit": True}, open=True
    ) as pool:
        pool.wait()
        store = PostgresSessionStorage(pool, schema=schema, root=str(agent_dir))
        store.ensure_dir(str(agent_dir))
        writer = store.open_writer(path)
        writer.write_line('{"type":"session","version":3,"id":"x","timestamp":"t","cwd":"/"}\n')
        server.restart()
        writer.write_line('{"type":"custom","n":1}\n')
        writer.fsync()
        assert store.stat(path).size == len(store.read_text(path).encode())
        kill_backends(server.url)
        assert store.read_bytes_range(path, 0, 2) == b'{"'
        writer.write_line('{"type":"custom","n":2}\n')
        writer.close()
        assert store.read_text(path).count("\n") == 3
        store.close()
        assert not pool.closed


# -- a server that is down -------------------------------------------------------------------


def test_a_down_server_fails_fast_with_a_clear_error(
    server: PrivateServer, storage: PostgresSessionStorage, agent_dir: Path
) -> None:
    sm = live_session(storage, agent_dir)
    path = sm.get_session_file() or ""
    flushed = sm.get_entries()
    server.halt()
    try:
        start = time.monotonic()
        with pytest.raises(OSError, match="PostgreSQL") as plain:
            storage.stat(path)
        assert time.monotonic() - start < DOWN_SERVER_BOUND
        assert plain.value.filename == path
        start = time.monotonic()
        # Persistence error when the append fails; lock error when the lock check
        # (after a quiet second) comes first. Either way, not a hang.
        with pytest.raises((SessionPersistenceError, SessionLockError)) as info:
            sm.append_message(msg("assistant", "into the void"))
        assert time.monotonic() - start < DOWN_SERVER_BOUND
        assert "PostgreSQL" in str(info.value) and path in str(info.value)
    finally:
        server.resume()
    # Back up: the store serves at once (the pool's reconnect backoff is no wait),
    # and every flushed entry is there.
    with SessionManager.open(path, storage=storage) as again:
        assert again.get_entries() == flushed
        again.append_message(msg("user", "a new writer after the outage"))
    with pytest.raises((SessionPersistenceError, SessionLockError)):
        sm.close()  # the old manager keeps its error


# When the store is unreachable, the rescue copy of the in-memory session goes to a
# local file (SessionFile.rescue falls back to <agent dir>/rescue/).
def test_a_down_server_rescue_copy_is_a_local_file(
    server: PrivateServer, storage: PostgresSessionStorage, agent_dir: Path
) -> None:
    sm = live_session(storage, agent_dir)
    for i in range(2):
        sm.append_message(msg("user", f"unflushed {i}"))
    server.halt()
    try:
        with pytest.raises((SessionPersistenceError, SessionLockError)) as info:
            sm.append_message(msg("assistant", "refused"))
    finally:
        server.resume()
    saved = Path(_saved_copy(info.value))
    assert saved.is_file()  # a local file: the store was down
    kept = {json.loads(line).get("id") for line in saved.read_text().splitlines()}
    assert {e["id"] for e in sm.get_entries()} <= kept  # the whole in-memory session
    with pytest.raises((SessionPersistenceError, SessionLockError)):
        sm.close()


# -- cut connections: a commit the client never heard of -------------------------------------


@pytest.fixture
def proxy(server: PrivateServer) -> Iterator[CuttingProxy]:
    params = conninfo_to_dict(server.url)
    relay = CuttingProxy(str(params["host"]), int(params["port"]))
    yield relay
    relay.close()


@pytest.fixture
def cut_storage(
    server: PrivateServer, proxy: CuttingProxy, schema: str, agent_dir: Path
) -> Iterator[PostgresSessionStorage]:
    opened = _open(proxy.url(server.url), agent_dir, schema=schema)
    opened.ensure_dir(str(agent_dir))
    yield opened
    opened.close()


HEADER = '{"type":"session","version":3,"id":"x","timestamp":"t","cwd":"/"}\n'


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("header_written", [True, False], ids=["one-statement", "transaction"])
def test_an_append_cut_before_or_after_its_commit_lands_once(
    cut_storage: PostgresSessionStorage,
    proxy: CuttingProxy,
    agent_dir: Path,
    when: str,
    header_written: bool,
) -> None:
    """The connection dies with the append sent: before the server got it (nothing
    committed), or after it committed (the client never heard). Either way the line
    is stored exactly once and the writer carries on."""
    path = str(agent_dir / "s.jsonl")
    writer = cut_storage.open_writer(path)
    lines = [HEADER] if header_written else []
    for line in lines:
        writer.write_line(line)
    # Before the header, an append is a transaction: cut at its COMMIT.
    marker = b"CUT-HERE" if header_written else b"COMMIT"
    line = '{"type":"custom","id":"CUT-HERE"}\n' if header_written else HEADER
    proxy.arm(marker, when)
    writer.write_line(line)
    assert proxy.cuts == 1
    lines.append(line)
    writer.write_line('{"type":"custom","id":"next"}\n')
    lines.append('{"type":"custom","id":"next"}\n')
    writer.fsync()
    writer.close()
    assert writer.get_error() is None
    assert cut_storage.read_text(path) == "".join(lines)
    (meta,) = cut_storage.list_session_meta(str(agent_dir))
    assert (meta.valid, meta.line_count, meta.size) == (True, len(lines), len("".join(lines)))


def _nameless_rows(server: PrivateServer, storage: PostgresSessionStorage) -> int:
    """File rows of rewrites that never committed (there should be none)."""
    with psycopg.connect(server.url, autocommit=True) as conn:
        query = sql.SQL("SELECT count(*) FROM {}.nodes WHERE key IS NULL").format(
            sql.Identifier(storage.schema)
        )
        row = conn.execute(query).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_rewrite_cut_at_its_commit_is_done_once(
    server: PrivateServer,
    cut_storage: PostgresSessionStorage,
    proxy: CuttingProxy,
    agent_dir: Path,
    when: str,
) -> None:
    path = str(agent_dir / "s.jsonl")
    cut_storage.write_text(path, "old\n")
    old = cut_storage.stat(path).ino
    proxy.arm(b"COMMIT", when)
    cut_storage.write_atomic(path, [b"new 1\n", b"new 2\n"])  # a list: can be sent again
    assert proxy.cuts == 1
    assert cut_storage.read_text(path) == "new 1\nnew 2\n"
    assert cut_storage.stat(path).ino != old
    assert _nameless_rows(server, cut_storage) == 0  # no half-written file left behind


def test_a_rewrite_cut_mid_stream_from_a_generator_fails_cleanly(
    server: PrivateServer, cut_storage: PostgresSessionStorage, proxy: CuttingProxy, agent_dir: Path
) -> None:
    """Chunks from a generator cannot be replayed: the rewrite fails, the old file stays."""
    path = str(agent_dir / "s.jsonl")
    cut_storage.write_text(path, "old\n")

    def chunks() -> Iterator[bytes]:
        yield b"new 1\n"
        yield b"CUT-HERE" * 10_000 + b"\n"  # past the first COPY buffer: cut mid-stream

    proxy.arm(b"CUT-HERE", "before")
    with pytest.raises(OSError, match="PostgreSQL") as info:
        cut_storage.write_atomic(path, chunks())
    assert info.value.filename == path
    assert cut_storage.read_text(path) == "old\n"
    assert _nameless_rows(server, cut_storage) == 0


@pytest.mark.parametrize("when", ["before", "after"])
def test_rename_and_unlink_cut_at_their_commit_are_done_once(
    cut_storage: PostgresSessionStorage, proxy: CuttingProxy, agent_dir: Path, when: str
) -> None:
    a, b = str(agent_dir / "a"), str(agent_dir / "b")
    cut_storage.write_text(a, "x\n")
    proxy.arm(b"COMMIT", when)
    cut_storage.rename(a, b)
    assert proxy.cuts == 1
    assert not cut_storage.exists(a) and cut_storage.read_text(b) == "x\n"
    proxy.arm(b"COMMIT", when)
    cut_storage.unlink(b)  # never FileNotFoundError for its own unconfirmed delete
    assert proxy.cuts == 2
    assert not cut_storage.exists(b)


# -- commits the server lost -----------------------------------------------------------------


def test_fsync_is_durable_across_a_crash(
    server: PrivateServer, schema: str, agent_dir: Path
) -> None:
    """Regression: the barrier was a transaction that wrote no WAL, which PostgreSQL
    commits asynchronously whatever synchronous_commit says; a crash right after
    `fsync()` lost the appends it had promised were durable."""
    path = str(agent_dir / "s.jsonl")
    lines = [HEADER] + [f'{{"type":"custom","n":{i}}}\n' for i in range(5)]
    with _open(server.url, agent_dir, schema=schema) as store:
        store.ensure_dir(str(agent_dir))
        writer = store.open_writer(path)
        for line in lines:
            writer.write_line(line)
        writer.fsync()
        server.restart("immediate")
    with _open(server.url, agent_dir, schema=schema) as fresh:  # a new process, as it were
        assert fresh.read_text(path) == "".join(lines)


def test_a_bulk_import_is_durable_across_a_crash(
    server: PrivateServer, schema: str, agent_dir: Path
) -> None:
    """Regression, as above: `bulk()` commits its files asynchronously and ends with
    the same barrier, which did not flush them."""
    paths = [str(agent_dir / f"{i}.jsonl") for i in range(5)]
    with _open(server.url, agent_dir, schema=schema) as store:
        store.ensure_dir(str(agent_dir))
        with store.bulk():
            for path in paths:
                store.write_atomic(path, [HEADER.encode()])
        server.restart("immediate")
    with _open(server.url, agent_dir, schema=schema) as fresh:
        assert [fresh.read_text(path) for path in paths] == [HEADER] * len(paths)


def _saved_copy(error: BaseException) -> str:
    saved = getattr(error, "saved_to", None)
    if saved:
        return str(saved)
    assert "saved to " in str(error), error
    return str(error).rsplit("saved to ", 1)[1].strip()


def test_a_crash_losing_unflushed_appends_loses_nothing_of_the_live_session(
    server: PrivateServer, storage: PostgresSessionStorage, agent_dir: Path
) -> None:
    """Appends not yet flushed die with the server (they were committed asynchronously).
    The live session has them: the writer must notice the hole, never append after
    it, and the rescue copy must hold the whole session."""
    sm = live_session(storage, agent_dir)
    for i in range(3):
        sm.append_message(msg("user", f"unflushed {i}"))
    server.restart("immediate")
    try:
        sm.append_message(msg("assistant", "after the crash"))
        sm.flush()
    except (SessionPersistenceError, SessionWriteConflictError) as exc:
        assert "lost committed appends" in str(exc) or isinstance(exc, SessionWriteConflictError)
        with SessionManager.open(_saved_copy(exc), storage=storage, read_only=True) as rescued:
            kept = {e["id"] for e in rescued.get_entries()}
        assert {e["id"] for e in sm.get_entries()} <= kept
        path = sm.get_session_file() or ""
        with SessionManager.open(path, storage=storage, read_only=True) as stored:
            on_file = stored.get_entries()
        assert on_file == sm.get_entries()[: len(on_file)]  # a prefix: no hole, no stray line
        with pytest.raises(type(exc)):
            sm.close()  # the error stays
    else:  # the crash happened to lose nothing
        assert_all_stored(storage, sm)
        sm.close()


def lose_appends_after_the_header(server: PrivateServer, storage: PostgresSessionStorage) -> None:
    """What a crash before the WAL flush leaves: the line rows gone, the size back."""
    s = sql.Identifier(storage.schema)
    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "WITH gone AS (DELETE FROM {}.lines WHERE off > 0 "
                "RETURNING file_id, length(data) AS n) "
                "UPDATE {}.nodes SET size = size - gone.n FROM gone WHERE id = gone.file_id"
            ).format(s, s)
        )


def test_appends_the_server_lost_fail_the_writer_instead_of_leaving_a_hole(
    server: PrivateServer, storage: PostgresSessionStorage, agent_dir: Path
) -> None:
    """A server crash loses the asynchronous commits not yet in its WAL on disk; the
    live writer must not append after that hole. (The loss is made here as the
    crash leaves it: the last line's row gone and the file row's size back.)"""
    path = str(agent_dir / "s.jsonl")
    storage.ensure_dir(str(agent_dir))
    writer = storage.open_writer(path)
    writer.write_line(HEADER)
    writer.write_line('{"type":"custom","n":1}\n')
    lose_appends_after_the_header(server, storage)
    with pytest.raises(OSError, match="lost committed appends") as info:
        writer.write_line('{"type":"custom","n":2}\n')
    assert info.value.filename == path
    assert storage.read_text(path) == HEADER  # nothing written after the hole
    with pytest.raises(OSError, match="lost committed appends"):
        writer.close()  # the error is stored

    other = storage.open_writer(path)  # knows the file as it is now
    other.write_line('{"type":"custom","n":1}\n')
    lose_appends_after_the_header(server, storage)
    with pytest.raises(OSError, match="lost committed appends"):
        other.fsync()  # the durability barrier notices too
