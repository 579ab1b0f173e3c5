"""What only the PostgreSQL backend has: keys, inodes, streaming, migrations, pools.

The shared behaviour is in tests/storage/test_base_conformance.py; this file covers the rest.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sessiontree.layout import StoreParts, store_parts
from tests.conftest import require_module
from tests.pg_support import fresh_schema, pg_storage

psycopg = require_module("psycopg")


@pytest.fixture
def pg(tmp_path: Path) -> Iterator[Any]:
    with pg_storage(root=tmp_path / "agent") as storage:
        storage.ensure_dir(str(tmp_path / "agent" / "sessions" / "--p--"))
        yield storage


def test_paths_are_keys_relative_to_the_root(pg: Any, tmp_path: Path) -> None:
    from sessiontree.storage import RootedStorage
    from sessiontree.storage.postgres import PathOutsideStoreError, PostgresSessionStorage

    root = tmp_path / "agent"
    # Store-wide tools (gc, rm, import/export-files) find sessions/ and blobs/ under it.
    assert isinstance(pg, RootedStorage) and StoreParts(pg, "/elsewhere").root == str(root)
    path = str(root / "sessions" / "--p--" / "s.jsonl")
    assert pg.key_for(path) == "sessions/--p--/s.jsonl"
    assert pg.key_for(str(root)) == "" and pg.key_for(str(root) + "/") == ""
    assert pg.key_for("sessions/--p--/s.jsonl") == "sessions/--p--/s.jsonl"
    assert pg.path_for("sessions/--p--/s.jsonl") == path
    for outside in ("/etc/passwd", str(tmp_path / "agent2" / "x"), "../x", "sessions/../../x"):
        with pytest.raises(PathOutsideStoreError):
            pg.key_for(outside)
    with pytest.raises(ValueError):
        pg.key_for(str(root / "a\x00b"))
    pg.write_text(path, "shared\n")
    # Another host, another home directory: same key, its own absolute path.
    other_root = tmp_path / "home" / "bob" / ".xcsh" / "agent"
    other = PostgresSessionStorage(pg._db.pool(), schema=pg.schema, root=str(other_root))
    other_path = str(other_root / "sessions" / "--p--" / "s.jsonl")
    assert other.read_text(other_path) == "shared\n"
    assert other.list_files(str(other_root / "sessions" / "--p--"), "*.jsonl") == [other_path]
    assert other.stat(other_path).ino == pg.stat(path).ino


def test_ino_is_a_generation_new_on_every_rewrite(pg: Any, tmp_path: Path) -> None:
    directory = tmp_path / "agent" / "sessions" / "--p--"
    path, other = str(directory / "a.jsonl"), str(directory / "b.jsonl")
    pg.write_text(path, "1\n")
    first = pg.stat(path).ino
    writer = pg.open_writer(path)
    writer.write_line("2\n")
    writer.close()
    assert pg.stat(path).ino == first  # appends keep the inode
    pg.write_text(path, "3\n")
    second = pg.stat(path).ino
    assert second != first
    pg.write_text(other, "4\n")
    pg.rename(other, path)  # renamed over: the path now names another inode
    assert pg.stat(path).ino not in (first, second)


def test_one_row_per_append(pg: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "agent" / "sessions" / "--p--" / "a.jsonl")
    writer = pg.open_writer(path)
    for i in range(200):
        writer.write_line(f'{{"n":{i}}}\n')
    writer.fsync()
    writer.close()
    with psycopg.connect(pg._db.conninfo) as conn:
        count, total = conn.execute(
            f'SELECT count(*), sum(length(data)) FROM "{pg.schema}".lines'
        ).fetchone()
    assert count == 200 and total == pg.stat(path).size


def test_streaming_read_is_one_snapshot(pg: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "agent" / "sessions" / "--p--" / "big.jsonl")
    line = b'{"x":"' + b"y" * 1000 + b'"}\n'
    old = line * 10_000  # ~10 MB: several read batches
    pg.write_atomic(path, [old])
    chunks = pg.iter_chunks(path, chunk_size=1 << 20)
    first = next(chunks)
    pg.write_text(path, "replaced\n")  # a rewrite while the reader is half way
    assert first + b"".join(chunks) == old  # the reader keeps its snapshot
    assert pg.read_text(path) == "replaced\n"


def test_awkward_names_are_plain_data(pg: Any, tmp_path: Path) -> None:
    directory = tmp_path / "agent" / "sessions" / "--p%_'x--"
    pg.ensure_dir(str(directory))
    names = ["a'b.jsonl", "100%.jsonl", "under_score.jsonl", "é😀.jsonl", 'q"uote.jsonl']
    for name in names:
        pg.write_text(str(directory / name), name)
    assert pg.list_files(str(directory), "*.jsonl") == [str(directory / n) for n in sorted(names)]
    assert pg.list_files(str(directory), "under?score.jsonl") == [
        str(directory / "under_score.jsonl")
    ]
    pg.ensure_dir(str(tmp_path / "agent" / "sessions" / "--p%_'x--0"))  # sorts after the '/'
    moved = tmp_path / "agent" / "sessions" / "moved"
    pg.rename(str(directory), str(moved))
    assert pg.list_files(str(moved), "*") == [str(moved / n) for n in sorted(names)]
    assert pg.exists(str(tmp_path / "agent" / "sessions" / "--p%_'x--0"))


def test_list_session_meta_over_every_project(pg: Any, tmp_path: Path) -> None:
    sessions = tmp_path / "agent" / "sessions"
    for project in ("--a--", "--b--"):
        pg.ensure_dir(str(sessions / project))
        pg.write_text(
            str(sessions / project / "s.jsonl"),
            f'{{"type":"session","id":"{project}","timestamp":"t","cwd":"/{project}"}}\n',
        )
    pg.write_text(str(tmp_path / "agent" / "elsewhere.jsonl"), "{}\n")
    metas = pg.list_session_meta()
    assert [(m.path, m.id) for m in metas] == [
        (str(sessions / "--a--" / "s.jsonl"), "--a--"),
        (str(sessions / "--b--" / "s.jsonl"), "--b--"),
    ]


def test_title_slot_names_the_session(pg: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "agent" / "sessions" / "--p--" / "slot.jsonl")
    slot = b'{"type":"title","v":1,"title":"From slot","source":"auto","updatedAt":"t","pad":" "}\n'
    pg.write_atomic(path, [slot, b'{"type":"session","id":"s1","timestamp":"t","cwd":"/c"}\n'])
    (meta,) = pg.list_session_meta(os.path.dirname(path))
    assert (meta.valid, meta.id, meta.title, meta.title_source) == (True, "s1", "From slot", "auto")


def test_migrations_are_recorded_and_run_once_even_concurrently() -> None:
    from sessiontree.storage.postgres import (
        SCHEMA_VERSION,
        PostgresSessionStorage,
        PostgresStoreError,
    )

    with fresh_schema() as (url, schema):
        errors: list[BaseException] = []

        def open_one() -> None:
            try:
                PostgresSessionStorage(url, schema=schema, root="/r").close()
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=open_one) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        with psycopg.connect(url) as conn:
            rows = conn.execute(
                f'SELECT version, name FROM "{schema}".schema_migrations ORDER BY version'
            ).fetchall()
            assert [r[0] for r in rows] == list(range(1, SCHEMA_VERSION + 1))
            conn.execute(
                f"INSERT INTO \"{schema}\".schema_migrations (version, name) VALUES (999, 'future')"
            )
        with pytest.raises(PostgresStoreError, match="newer"):
            PostgresSessionStorage(url, schema=schema, root="/r")


def test_caller_owned_pool_is_left_open(tmp_path: Path) -> None:
    from psycopg_pool import ConnectionPool

    from sessiontree.storage.postgres import PostgresSessionStorage

    with (
        fresh_schema() as (url, schema),
        ConnectionPool(url, min_size=1, max_size=2, kwargs={"autocommit": True}, open=True) as pool,
    ):
        storage = PostgresSessionStorage(pool, schema=schema, root=str(tmp_path))
        storage.write_text(str(tmp_path / "f"), "x")
        lock = storage.acquire_lock(str(tmp_path / "f"))  # built from the pool's conninfo
        lock.release()
        storage.close()
        assert not pool.closed
        with pytest.raises(ValueError, match="closed"):
            storage.read_text(str(tmp_path / "f"))


def test_durable_appends_and_barrier(tmp_path: Path) -> None:
    for durable in (False, True):
        with pg_storage(root=tmp_path, durable_appends=durable) as storage:
            writer = storage.open_writer(str(tmp_path / "s.jsonl"))
            writer.write_line("a\n")
            writer.fsync()
            writer.close()
            assert storage.read_text(str(tmp_path / "s.jsonl")) == "a\n"


def test_database_failures_are_oserrors_stored_by_the_writer(pg: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "agent" / "sessions" / "--p--" / "a.jsonl")
    writer = pg.open_writer(path)
    writer.write_line("ok\n")
    with psycopg.connect(pg._db.conninfo, autocommit=True) as conn:
        conn.execute(f'ALTER TABLE "{pg.schema}".lines RENAME TO lines_gone')
        try:
            with pytest.raises(OSError, match="PostgreSQL"):
                writer.write_line("lost\n")
            assert isinstance(writer.get_error(), OSError)
            with pytest.raises(OSError):
                writer.close()
        finally:
            conn.execute(f'ALTER TABLE "{pg.schema}".lines_gone RENAME TO lines')
    assert pg.read_text(path) == "ok\n"


# -- discovery on the index -----------------------------------------------------------------


def _line(obj: dict[str, Any]) -> bytes:
    from sessiontree import serialize_entry

    return serialize_entry(obj).encode() + b"\n"


def _varied_store(agent: Path) -> None:
    """Session files with every kind of title source, odd shapes and broken ones."""
    slot = (
        b'{"type":"title","v":1,"title":"Slot title","source":"user","updatedAt":"t","pad":"  "}\n'
    )

    def header(n: int, **extra: Any) -> dict[str, Any]:
        return {
            "type": "session",
            "version": 3,
            "id": f"{n:016x}",
            "timestamp": f"2026-01-0{n % 9 + 1}T00:00:00.000Z",
            "cwd": f"/proj{n % 2}",
            **extra,
        }

    def message(i: int, role: str, content: Any) -> dict[str, Any]:
        return {
            "type": "message",
            "id": f"{i:08x}",
            "parentId": None,
            "timestamp": "2026-01-01T00:00:00.000Z",
            "message": {"role": role, "content": content, "timestamp": 1_700_000_000_000 + i},
        }

    talk = [
        message(1, "user", [{"type": "image", "data": "x"}, {"type": "text", "text": "look"}]),
        message(2, "assistant", [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]),
        message(3, "toolResult", "tool output"),
        message(4, "user", "second question"),
    ]
    files: dict[str, bytes] = {
        "01-plain.jsonl": b"".join(_line(o) for o in [header(1), *talk]),
        "02-header-title.jsonl": b"".join(
            _line(o) for o in [header(2, title="Header title", titleSource="auto"), *talk]
        ),
        "03-slot.jsonl": slot + b"".join(_line(o) for o in [header(3, title="ignored"), *talk]),
        "04-session-info.jsonl": b"".join(
            _line(o)
            for o in [
                header(4, title="  "),
                *talk,
                {"type": "session_info", "id": "s1", "parentId": None, "name": "  First  "},
                {"type": "session_info", "id": "s2", "parentId": None, "name": " Pi name "},
            ]
        ),
        "05-title-change.jsonl": b"".join(
            _line(o) for o in [header(5), {"type": "title_change", "id": "t", "title": "Omp title"}]
        ),
        "06-cleared.jsonl": b"".join(
            _line(o)
            for o in [
                header(6),
                {"type": "title_change", "id": "t", "title": "gone"},
                {"type": "session_info", "id": "s", "name": None},
                {"type": "compaction", "id": "c", "summary": "s", "shortSummary": "Short one"},
            ]
        ),
        "07-bom-unterminated.jsonl": b"\xef\xbb\xbf"
        + _line(header(7, parentSession="/some/parent.jsonl"))
        + _line(talk[0])
        + _line(talk[3]).rstrip(b"\n"),
        "08-invalid.jsonl": b'{"type":"message"}\n' + _line(header(8)),
        "09-blank-lines-then-header.jsonl": b"\n  \n" + _line(header(9)) + _line(talk[3]),
        "10-torn.jsonl": _line(header(10)) + _line(talk[3]) + b'{"type":"message","id":"x',
        "11-empty.jsonl": b"",
        "12-no-messages.jsonl": _line(header(12)),
        ".13-hidden.jsonl": _line(header(13)),
        "14-not-a-session.txt": _line(header(14)),
    }
    for index, (name, data) in enumerate(files.items()):
        directory = agent / "sessions" / ("--a--" if index % 2 else "--b--")
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / name
        path.write_bytes(data)
        stamp = 1_767_000_000_000_000_000 + index * 1_000_000_000 * (7 if index % 3 else -3)
        os.utime(path, ns=(stamp, stamp))


class _WithoutIndex:
    """The same storage, minus the session index: discovery then scans the files."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name == "list_session_meta":
            raise AttributeError(name)
        return getattr(self._inner, name)


def test_discovery_from_the_index_equals_scanning_the_files(tmp_path: Path) -> None:
    from sessiontree.listing import (
        clear_listing_cache,
        find_most_recent_session,
        get_recent_sessions,
        list_all_sessions,
        list_sessions,
    )
    from sessiontree.maintenance import import_files
    from sessiontree.storage import SessionIndexStorage

    agent = tmp_path / "agent"
    _varied_store(agent)
    with pg_storage(root=agent) as pg:  # same root: the same paths on both sides
        import_files(str(agent), pg)
        scanning = _WithoutIndex(pg)
        assert isinstance(pg, SessionIndexStorage)
        assert not isinstance(scanning, SessionIndexStorage)
        clear_listing_cache()
        on_files = list_all_sessions(store_parts(agent_dir=str(agent)), cache=False)
        indexed = list_all_sessions(store_parts(pg, str(agent)))
        scanned = list_all_sessions(store_parts(scanning, str(agent)), cache=False)
        assert len(on_files) == 10
        assert indexed == on_files == scanned
        for a, b in zip(indexed, on_files, strict=True):
            assert a.all_messages_text == b.all_messages_text
        assert {i.title for i in indexed} >= {"Header title", "Slot title", "Pi name", "Omp title"}
        assert "Short one" in {i.title for i in indexed}
        for project in ("--a--", "--b--"):
            directory = str(agent / "sessions" / project)
            assert list_sessions("/x", store_parts(pg), session_dir=directory) == list_sessions(
                "/x", store_parts(), session_dir=directory, cache=False
            )
            assert find_most_recent_session(directory, storage=pg) == find_most_recent_session(
                directory
            )
            assert get_recent_sessions(directory, 20, storage=pg) == get_recent_sessions(
                directory, 20
            )


def _set_blob_age(pg: Any, digest: str, seconds: float) -> None:
    from psycopg import sql

    with psycopg.connect(pg._db.conninfo, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "UPDATE {}.blobs SET created_at = now() - make_interval(secs => %s) WHERE hash = %s"
            ).format(sql.Identifier(pg.schema)),
            (seconds, digest),
        )


def test_a_re_put_keeps_a_blob_from_gc(pg: Any) -> None:
    blobs = pg.blob_store()
    digest = blobs.put(b"image").hash
    _set_blob_age(pg, digest, 3600)
    old = blobs.mtime(digest)
    assert old is not None and blobs.now() - old > 3500
    blobs.put(b"image")  # a writer about to reference it again
    fresh = blobs.mtime(digest)
    assert fresh is not None and blobs.now() - fresh < 60
    assert not blobs.delete(digest, min_age_seconds=600)
    _set_blob_age(pg, digest, 30)
    blobs.put(b"image")  # used within the last minute: no write needed
    mtime = blobs.mtime(digest)
    assert mtime is not None and blobs.now() - mtime > 25
    _set_blob_age(pg, digest, 700)
    assert blobs.delete(digest, min_age_seconds=600) and not blobs.has(digest)


def test_a_re_put_racing_gc_stores_the_blob_again(pg: Any) -> None:
    blobs = pg.blob_store()
    digest = blobs.put(b"image", "image/png").hash
    _set_blob_age(pg, digest, 3600)
    touch = pg._sql.blob_touch
    deleted: list[bool] = []
    original_execute = psycopg.Connection.execute

    def execute(self: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
        # gc deletes the blob between put's look-up and its touch.
        if query is touch and not deleted:
            deleted.append(True)
            with psycopg.connect(pg._db.conninfo, autocommit=True) as other:
                other.execute(
                    psycopg.sql.SQL("DELETE FROM {}.blobs WHERE hash = %s").format(
                        psycopg.sql.Identifier(pg.schema)
                    ),
                    (digest,),
                )
        return original_execute(self, query, params, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(psycopg.Connection, "execute", execute)
        blobs.put(b"image", "image/png")
    assert deleted and blobs.get(digest) == b"image"
    assert [i.exts for i in blobs.list_info()] == [("png",)]
