"""Writers: appends to one stored file, one row and one statement per `write_bytes`.

Appends commit asynchronously and `fsync()` is the durability barrier; an append
that lost its connection is retried at the offset it expected without being
duplicated; a file that shrank under the writer fails the append (the package
docs: durability, lost connections).
"""

from __future__ import annotations

import errno
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from sessiontree._util.closing import process_id
from sessiontree.storage._base import WriterState
from sessiontree.storage.postgres._pool import Attempt, Conn
from sessiontree.storage.postgres._scan import (
    _AWAITING_HEADER,
    _meta_params,
    _pg_text,
    _Scan,
    _texts,
)

if TYPE_CHECKING:
    from sessiontree.storage.postgres._storage import PostgresSessionStorage


def _shrunk(path: str, size: int, expected: int) -> OSError:
    return OSError(
        errno.EIO,
        f"the stored file has {size} bytes, fewer than the {expected} this writer wrote: "
        "PostgreSQL lost committed appends (a server crash before they reached its WAL on "
        "disk), or another writer truncated it",
        path,
    )


class _Append(NamedTuple):
    """One `write_bytes`, as its retry needs it."""

    data: bytes
    complete: Sequence[bytes]
    """The lines `data` completes, each without its newline: those carry metadata."""
    newlines: int
    ends: bool
    """Whether `data` ends with a newline."""
    expected: int
    """Where `data` must land: the file's size as this writer knows it."""


class PostgresSessionWriter(WriterState):
    """Appends to one stored file: one row and one statement per `write_bytes`.

    Follows the file it opened (its row id) through renames; after the file was
    replaced or removed, writes go nowhere, as into an unlinked inode. Tracks the
    file's end as it wrote it (`_off`): an append that lost its connection is
    retried at that offset without duplicating it, and a file that shrank under
    the writer (lost commits) fails the append instead of leaving a hole.
    """

    __slots__ = (
        "_closed",
        "_ends",
        "_error",
        "_id",
        "_off",
        "_owner",
        "_state",
        "_storage",
        "path",
    )

    def __init__(
        self,
        storage: PostgresSessionStorage,
        node_id: int,
        path: str,
        state: int,
        ends: bool,
        size: int = 0,
    ) -> None:
        self._storage = storage
        self._id = node_id
        self._state = state
        self._ends = ends
        self._off = size
        self._error: BaseException | None = None
        self._closed = False
        self._owner = process_id()
        self.path = path

    def write_bytes(self, data: bytes) -> None:
        """Append pre-encoded bytes (normally one complete line) in one statement."""
        self._check()
        if not data:
            return
        try:
            self._append(bytes(data))
        except Exception as exc:
            self._error = exc
            raise

    def write_line(self, line: str) -> None:
        """Append `line` (already newline-terminated), UTF-8 encoded."""
        self.write_bytes(line.encode("utf-8"))

    def _append(self, data: bytes) -> None:
        s = self._storage._sql
        pieces = data.split(b"\n")
        # Complete lines only: a piece continuing an unterminated line, or one the
        # next write will finish, carries no metadata of its own.
        complete = pieces[:-1]
        if not self._ends and complete:
            complete = complete[1:]
        a = _Append(data, complete, len(pieces) - 1, data.endswith(b"\n"), self._off)

        def op(conn: Conn, _: Attempt) -> int | None:
            return self._append_once(conn, a)

        def again(conn: Conn, _: Attempt) -> int | None:
            # The first try's connection died: maybe before, maybe after its commit.
            # Its bytes at the offset it expected mean it committed.
            with conn.transaction():
                row = conn.execute(s.lock_file_row, (self._id,)).fetchone()
                if row is None:
                    return None  # the file was replaced or removed meanwhile
                if conn.execute(s.line_at, (self._id, a.expected, data)).fetchone() is not None:
                    self._state = int(row[2])
                    return a.expected
                return self._append_once(conn, a)

        off = self._storage._db.run(self.path, op, again)
        if off is not None:
            self._off = off + len(data)
        self._ends = a.ends

    def _append_once(self, conn: Conn, a: _Append) -> int | None:
        """Append `a.data`; the offset it landed at, None when the file is gone."""
        storage = self._storage
        s = storage._sql
        if self._state == _AWAITING_HEADER:
            return self._append_slow(conn, a)
        scan = _Scan(self._state, line_no=2)  # past any title slot
        text = _texts(scan.feed(p) for p in a.complete)
        row = conn.execute(
            s.append,
            {
                "n": len(a.data),
                "nl": a.newlines,
                "ends": a.ends,
                "msgs": scan.messages,
                "first": _pg_text(scan.first_message),
                "act": scan.activity,
                "name_set": scan.name_set,
                "name": _pg_text(scan.name),
                "short": _pg_text(scan.short_summary),
                "id": self._id,
                "off": a.expected,
                "sync": "on" if storage.durable_appends else "off",
                "data": a.data,
                "text": text,
            },
        ).fetchone()
        if row is not None:
            return int(row[0])
        size = conn.execute(s.file_size, (self._id,)).fetchone()
        if size is not None and int(size[0]) < a.expected:
            raise _shrunk(self.path, int(size[0]), a.expected)
        return None  # the file was replaced or removed: the bytes go nowhere

    def _append_slow(self, conn: Conn, a: _Append) -> int | None:
        """An append while the header is still to come: read and update the state."""
        s = self._storage._sql
        with conn.transaction():
            row = conn.execute(s.lock_file_row, (self._id,)).fetchone()
            if row is None:
                return None  # the file was replaced or removed: the bytes go nowhere
            size, line_count, state = int(row[0]), int(row[1]), int(row[2])
            if size < a.expected:
                raise _shrunk(self.path, size, a.expected)
            scan = _Scan(state, line_no=int(line_count))
            # A title slot read by an earlier write (the header is still to come).
            scan.slot, scan.slot_title = bool(row[3]), row[4]
            scan.slot_source = scan.title_source = row[5]
            text = _texts(scan.feed(p) for p in a.complete)
            conn.execute(
                s.append_slow,
                {"n": len(a.data), "nl": a.newlines, "ends": a.ends, **_meta_params(scan)}
                | {"msgs": scan.messages, "id": self._id},
            )
            conn.execute(s.insert_line, (self._id, size, a.data, text))
        self._state = scan.state
        return size

    def flush(self) -> None:
        """Every write is already committed; re-raises a stored error."""
        self._check()

    def fsync(self) -> None:
        """Durability barrier: a synchronous commit flushes the WAL past every append.

        Also checks that the server still has every byte this writer appended (a
        crash of the server loses the asynchronous commits not yet on disk).
        """
        self._check()
        if self._storage.durable_appends:
            return
        s = self._storage._sql
        try:
            row = self._storage._db.run(
                self.path, lambda conn, _: conn.execute(s.writer_barrier, (self._id,)).fetchone()
            )
            size = row[0] if row is not None else None  # None: the file is gone
            if size is not None and int(size) < self._off:
                raise _shrunk(self.path, int(size), self._off)
        except Exception as exc:
            self._error = exc
            raise

    def close(self) -> None:
        """Release the writer; raises the stored error, if any."""
        if self._close_state():
            self._raise_stored()
