"""A file's content written with COPY, and many new files in one transaction.

`copy_content` streams one file's lines into `lines` and folds their metadata:
`write_atomic` writes one file with it, `create_files` many. An import writes a
store of small files, and each `write_atomic` costs about ten round trips (the
lock, the parent, the old row, the new row, COPY, publish, commit, then its
mtime): `create_files` takes a batch of new files in one transaction of a few
round trips, each file published at the mtime it is given. The batch is whole or
absent after a crash, as each file of it is: so each session is.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final, NamedTuple, TypeAlias

from psycopg import Copy

from sessiontree.errors import SessionLockError
from sessiontree.storage.postgres._keys import split_key
from sessiontree.storage.postgres._locks import lock_id
from sessiontree.storage.postgres._pool import Attempt, Conn, transaction
from sessiontree.storage.postgres._scan import _meta_params, _pg_text, _Scan

if TYPE_CHECKING:
    from sessiontree.storage.postgres._storage import PostgresSessionStorage


def raw_lines(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """Lines with their `\\n` (the last one may lack it); no quadratic joins."""
    pending: list[bytes] = []
    for chunk in chunks:
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            if end < 0:
                break
            if pending:
                pending.append(chunk[start : end + 1])
                yield b"".join(pending)
                pending = []
            else:
                yield chunk[start : end + 1]
            start = end + 1
        if start < len(chunk):
            pending.append(chunk[start:])
    if pending:
        yield b"".join(pending)


class Content(NamedTuple):
    """What `copy_content` wrote of one file: the columns its row is published with."""

    size: int
    newlines: int
    ends: bool
    scan: _Scan

    def columns(self) -> dict[str, Any]:
        """The row's size and metadata, named as `publish` takes them."""
        return {
            "size": self.size,
            "lines": self.newlines,
            "ends": self.ends,
            **_meta_params(self.scan),
            "msgs": self.scan.messages,
        }


def copy_content(copy: Copy, node_id: int, chunks: Iterable[bytes]) -> Content:
    """The chunks, a row per line, into an open `COPY ... lines` (`copy_lines`)."""
    scan = _Scan()
    size = newlines = 0
    ends = True
    for line in raw_lines(chunks):
        ends = line.endswith(b"\n")
        text = scan.feed(line[:-1] if ends else line)
        copy.write_row((node_id, size, line, _pg_text(text)))
        size += len(line)
        newlines += ends
    return Content(size, newlines, ends, scan)


class NewFile(NamedTuple):
    """A file for `create_files`."""

    path: str
    chunks: Callable[[], Iterable[bytes]]
    """Its bytes; called again when a lost connection makes the batch run again."""
    mtime_ns: int | None = None
    """Its mtime (None: the server's clock at the commit)."""
    writer_locked: bool = False
    """Whether a live writer holding the session's lock stops the batch (a `.jsonl`)."""


def _oserror(cls: type[OSError], code: int, path: str) -> OSError:
    return cls(code, os.strerror(code), path)


FileTuple: TypeAlias = tuple[str, Callable[[], Iterable[bytes]], "int | None", bool]
"""A `NewFile` as a plain tuple: what a caller that cannot import this package passes."""


def create_files(storage: PostgresSessionStorage, given: Sequence[FileTuple]) -> list[str]:
    """Write `given` files (`NewFile`s), each new, in one transaction; the paths left
    unwritten because something is there already (the caller decides about those).

    Under every file's path lock (as `write_atomic` takes it) each key is checked: a
    file or directory there leaves that file out; a missing parent, or one that is a
    file, fails the batch (FileNotFoundError, NotADirectoryError), and so does a live
    writer of a `writer_locked` file's session (SessionLockError). Inside `bulk()`
    the commit is asynchronous, as `write_atomic`'s. After a lost connection the
    batch runs again unless its unconfirmed COMMIT happened.
    """
    if not given:
        return []
    files = [NewFile(*f) for f in given]
    keys = [storage.key_for(f.path) for f in files]
    created: list[tuple[int, str]] = []  # a new row and its key: there iff committed
    left: list[str] = []

    def op(conn: Conn, attempt: Attempt) -> list[str]:
        created.clear()
        with transaction(conn, attempt):
            left[:] = _create(storage, conn, files, keys, created)
        return left

    def again(conn: Conn, first: Attempt) -> list[str]:
        if first.committing and created:  # did the unconfirmed COMMIT happen?
            node_id, key = created[0]
            row = conn.execute(storage._sql.key_of, (node_id,)).fetchone()
            if row is not None and row[0] == key:
                return left
        return op(conn, Attempt())

    return storage._db.run(files[0].path, op, again)


def _create(
    storage: PostgresSessionStorage,
    conn: Conn,
    files: Sequence[NewFile],
    keys: list[str],
    created: list[tuple[int, str]],
) -> list[str]:
    s = storage._sql
    schema = storage.schema
    conn.execute(
        s.batch_locks,
        ("off" if storage._bulk else None, sorted({lock_id(schema, "path", k) for k in keys})),
    )
    if any(k == "" for k in keys):
        raise _oserror(IsADirectoryError, errno.EISDIR, files[keys.index("")].path)
    parents = [split_key(k)[0] for k in keys]
    rows = conn.execute(
        s.batch_probe,
        (
            keys,
            [lock_id(schema, "writer", k) for k in keys],
            [f.writer_locked for f in files],
            parents,
        ),
    ).fetchall()
    found = {str(r[0]): (r[1], bool(r[2]), r[3]) for r in rows}
    todo: list[int] = []
    left: list[str] = []
    seen: set[str] = set()
    for i, (f, key) in enumerate(zip(files, keys, strict=True)):
        there, busy, parent_is_dir = found[key]
        if busy:
            raise SessionLockError(f.path, message=f"{f.path}: a writer is active; retry later")
        if parent_is_dir is None:
            raise _oserror(FileNotFoundError, errno.ENOENT, f.path)
        if not parent_is_dir:
            raise _oserror(NotADirectoryError, errno.ENOTDIR, f.path)
        if there is not None or key in seen:
            left.append(f.path)
        else:
            todo.append(i)
        seen.add(key)
    if not todo:
        return left
    names = [split_key(keys[i])[1] for i in todo]
    ids = {
        (str(p), str(n)): int(node_id)
        for node_id, p, n in conn.execute(
            s.new_files, ([parents[i] for i in todo], names)
        ).fetchall()
    }
    columns: dict[str, list[Any]] = {"id": [], "key": [], "mtime": []}
    with conn.cursor() as cur, cur.copy(s.copy_lines) as copy:
        copy.set_types(["int8", "int8", "bytea", "text"])
        for i in todo:
            node_id = ids[(parents[i], split_key(keys[i])[1])]
            content = copy_content(copy, node_id, files[i].chunks())
            for name, value in content.columns().items():
                columns.setdefault(name, []).append(value)
            columns["id"].append(node_id)
            columns["key"].append(keys[i])
            columns["mtime"].append(files[i].mtime_ns)
            created.append((node_id, keys[i]))
    conn.execute(s.publish_many, columns)
    return left


_DIGEST_MAX: Final = 64 << 20
"""Bytes of a file whose digest `file_digests` asks the server for (more: None)."""


def file_digests(
    storage: PostgresSessionStorage, paths: Sequence[str]
) -> dict[str, tuple[int, int, str | None]]:
    """(size, mtime_ns, sha256 hex of the content) of each of `paths` that is a file,
    by path, in one round trip: the server hashes, no content is sent. The hash is
    None for a file over 64 MB."""
    by_key = {storage.key_for(p): p for p in paths}
    rows = storage._db.run(
        paths[0] if paths else storage.root,
        lambda conn, _: conn.execute(
            storage._sql.file_digests, (_DIGEST_MAX, list(by_key))
        ).fetchall(),
    )
    return {by_key[str(k)]: (int(size), int(mtime), digest) for k, size, mtime, digest in rows}
