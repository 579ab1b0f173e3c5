"""`PostgresSessionStorage.create_files`: many new files in one transaction, as
`write_atomic` writes each (bytes, metadata), never over a file or a live writer."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sessiontree.errors import SessionLockError
from sessiontree.storage import read_chunks
from tests.pg_support import pg_storage


@pytest.fixture
def pg(tmp_path: Path) -> Iterator[Any]:
    with pg_storage(root=tmp_path) as storage:
        yield storage


def session_bytes(n: int) -> bytes:
    """A small pi session (a header, a titled exchange), and a line cut short at the end
    for every third one."""
    lines = [
        {"type": "session", "version": 3, "id": f"s{n}", "timestamp": "2026-01-01T00:00:00Z"}
        | {"cwd": f"/p{n}"},
        {"type": "message", "id": "a", "parentId": None, "timestamp": "2026-01-01T00:00:01Z"}
        | {"message": {"role": "user", "content": f"question {n} \u00e9", "timestamp": 1}},
        {"type": "session_info", "id": "b", "parentId": "a", "name": f"Session {n}"}
        | {"timestamp": "2026-01-01T00:00:02Z"},
    ]
    data = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
    return data + (b'{"type":"mess' if n % 3 == 0 else b"")


def _new(path: Path, data: bytes, mtime_ns: int | None = None) -> tuple[Any, ...]:
    return (str(path), lambda: iter((data[:7], data[7:])), mtime_ns, True)


def test_new_files_are_written_as_write_atomic_writes_them(pg: Any, tmp_path: Path) -> None:
    batch_dir, single_dir = tmp_path / "sessions" / "batch", tmp_path / "sessions" / "single"
    pg.ensure_dir(str(batch_dir))
    pg.ensure_dir(str(single_dir))
    files = [_new(batch_dir / f"{n}.jsonl", session_bytes(n), 10**18 + n) for n in range(7)]
    assert pg.create_files(files) == []
    for n in range(7):
        pg.write_atomic(str(single_dir / f"{n}.jsonl"), [session_bytes(n)])
        path = str(batch_dir / f"{n}.jsonl")
        assert b"".join(read_chunks(pg, path)) == session_bytes(n)
        assert pg.stat(path).mtime_ns == 10**18 + n
    batch, single = (pg.list_session_meta(str(d), with_text=True) for d in (batch_dir, single_dir))
    assert len(batch) == 7
    assert [_listed(m) for m in batch] == [_listed(m) for m in single]
    assert {m.title for m in batch} == {f"Session {n}" for n in range(7)}


def _listed(meta: Any) -> dict[str, Any]:
    """What the listing says of a file, but where and when it is."""
    gone = ("path", "mtime", "mtime_ns", "ino")
    return {k: v for k, v in dataclasses.asdict(meta).items() if k not in gone}


def test_what_is_there_is_left_out_and_returned(pg: Any, tmp_path: Path) -> None:
    d = tmp_path / "sessions" / "p"
    pg.ensure_dir(str(d / "a-dir.jsonl"))
    pg.write_atomic(str(d / "old.jsonl"), [b"old\n"])
    files = [
        _new(d / "old.jsonl", b"new\n"),
        _new(d / "a-dir.jsonl", b"x\n"),
        _new(d / "fresh.jsonl", b"fresh\n"),
        _new(d / "fresh.jsonl", b"twice\n"),
    ]
    left = pg.create_files(files)
    assert left == [str(d / "old.jsonl"), str(d / "a-dir.jsonl"), str(d / "fresh.jsonl")]
    assert pg.read_text(str(d / "old.jsonl")) == "old\n"
    assert pg.read_text(str(d / "fresh.jsonl")) == "fresh\n"
    assert pg.create_files([]) == []


def test_a_live_writer_or_a_missing_parent_fails_the_whole_batch(pg: Any, tmp_path: Path) -> None:
    d = tmp_path / "sessions" / "p"
    pg.ensure_dir(str(d))
    held = pg.acquire_lock(str(d / "busy.jsonl"))
    try:
        with pytest.raises(SessionLockError, match=r"busy\.jsonl"):
            pg.create_files([_new(d / "first.jsonl", b"1\n"), _new(d / "busy.jsonl", b"2\n")])
        assert not pg.exists(str(d / "first.jsonl"))
        # Only a session's writer lock counts: a file flagged as none is written.
        data = (str(d / "busy.jsonl"), lambda: [b"2\n"], None, False)
        assert pg.create_files([data]) == []
    finally:
        held.release()
    with pytest.raises(FileNotFoundError):
        pg.create_files([_new(d / "ok.jsonl", b"1\n"), _new(d / "none" / "x.jsonl", b"2\n")])
    pg.write_atomic(str(d / "file"), [b"f\n"])
    with pytest.raises(NotADirectoryError):
        pg.create_files([_new(d / "file" / "x.jsonl", b"2\n")])
    assert not pg.exists(str(d / "ok.jsonl"))


def test_a_failing_reader_rolls_the_batch_back(pg: Any, tmp_path: Path) -> None:
    d = tmp_path / "sessions" / "p"
    pg.ensure_dir(str(d))

    def broken() -> Iterator[bytes]:
        yield b'{"half":'
        raise OSError("the disk went away")

    with pytest.raises(OSError, match="went away"):
        pg.create_files([_new(d / "a.jsonl", b"a\n"), (str(d / "b.jsonl"), broken, None, True)])
    assert pg.list_files(str(d), "*") == []
    with pg.connection() as conn:
        row = conn.execute(f"SELECT count(*) FROM {pg.schema}.nodes WHERE key IS NULL").fetchone()
    assert row == (0,)


def test_file_digests_are_the_servers_hashes_of_the_files_there(pg: Any, tmp_path: Path) -> None:
    d = tmp_path / "sessions" / "p"
    pg.ensure_dir(str(d / "sub"))
    pg.write_atomic(str(d / "a.jsonl"), [b"one\n", b"two"])
    pg.write_atomic(str(d / "empty.jsonl"), [])
    paths = [str(d / n) for n in ("a.jsonl", "empty.jsonl", "sub", "missing.jsonl")]
    found = pg.file_digests(paths)
    assert set(found) == set(paths[:2])
    for path, data in zip(paths, (b"one\ntwo", b""), strict=False):
        st = pg.stat(path)
        assert found[path] == (len(data), st.mtime_ns, hashlib.sha256(data).hexdigest())
