"""Locks: a session's writer lock for every host, held by a dedicated connection.

A session-level advisory lock on a connection of its own: PostgreSQL releases it
when the holder's process or host dies. A lock is its taker's: a forked child
neither verifies nor releases it, and lets go of its copy of the lock's socket at
the fork (`_forked`).
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import re
import socket
import weakref
from typing import TYPE_CHECKING, Any

import psycopg

from sessiontree._util.closing import keep_forever, process_id
from sessiontree.errors import InheritedHandleError, SessionLockError

if TYPE_CHECKING:
    from sessiontree.storage.postgres._storage import PostgresSessionStorage

_log = logging.getLogger(__name__)


def lock_id(schema: str, space: str, key: str) -> int:
    """The advisory lock id of `key` in `space` ("path", "writer", "migrate") of a schema."""
    digest = hashlib.blake2b(
        f"sessiontree\x00{schema}\x00{space}\x00{key}".encode(), digest_size=8
    ).digest()
    return int.from_bytes(digest, "big", signed=True)


_held_locks: weakref.WeakSet[PostgresSessionLock] = weakref.WeakSet()
"""Every `PostgresSessionLock` of this process that holds its lock (for the fork hook)."""


def _forked() -> None:
    """In a forked child: the child's copies of the parent's lock sockets closed (the
    server keeps a connection, and its lock, while any process has its socket open).
    The connections themselves are kept, never freed here: freeing one would warn,
    closing it would send the server a Terminate and unlock the parent."""
    for lock in list(_held_locks):
        conn = lock._conn
        if conn is None:
            continue
        keep_forever(conn)
        try:
            os.close(conn.fileno())
        except (OSError, psycopg.Error):
            pass
    _held_locks.clear()


os.register_at_fork(after_in_child=_forked)


class PostgresSessionLock:
    """A session's writer lock: an advisory lock held by a dedicated connection (its
    taker's: in a forked child it is neither verified nor released)."""

    def __init__(self, storage: PostgresSessionStorage, session_file: str, lock_id: int) -> None:
        self.session_file = session_file
        self._owner = process_id()
        self._conn: psycopg.Connection[Any] | None = None
        self._conninfo = storage._db.conninfo
        self._lock_id = lock_id
        me = f"sessiontree pid {os.getpid()} on {socket.gethostname()}"[:63]
        self._kwargs = dict(storage._db.connect_kwargs)
        self._kwargs.update(
            autocommit=True,
            application_name=me,
            # A host that vanishes without closing its socket loses the lock in ~1 min.
            keepalives=1,
            keepalives_idle=30,
            keepalives_interval=10,
            keepalives_count=3,
        )
        self._conn = self._take()
        _held_locks.add(self)

    def _take(self) -> psycopg.Connection[Any]:
        """A new connection holding the lock; SessionLockError when another one holds it."""
        path = self.session_file
        try:
            conn = psycopg.connect(self._conninfo, **self._kwargs)
        except psycopg.Error as exc:
            raise OSError(errno.EIO, f"PostgreSQL: {exc}", path) from exc
        try:
            row = conn.execute("SELECT pg_try_advisory_lock(%s)", (self._lock_id,)).fetchone()
            if row is None or not row[0]:
                holder = _lock_holder(conn, self._lock_id)
                raise SessionLockError(path, _holder_pid(holder), holder=holder)
        except psycopg.Error as exc:
            conn.close()
            raise OSError(errno.EIO, f"PostgreSQL: {exc}", path) from exc
        except BaseException:
            conn.close()
            raise
        return conn

    @property
    def held(self) -> bool:
        """Whether this object still holds the lock."""
        return self._conn is not None

    def verify(self) -> None:
        """Raise SessionLockError unless this object holds the lock.

        When the lock's connection died (a server restart, a killed backend), the
        server released the lock with it: it is taken again on a new connection
        unless another process took it meanwhile (SessionLockError naming it) or
        the server cannot be reached (SessionLockError). A file changed by another
        writer in the gap is the manager's to notice (it checks the file itself).
        """
        path = self.session_file
        if self._owner != process_id():
            raise InheritedHandleError(path, self._owner)
        conn = self._conn
        if conn is None:
            raise SessionLockError(path, message=f"{path}: writer lock released")
        try:
            conn.execute("SELECT 1")
            return
        except psycopg.Error as exc:
            lost = exc
        self._conn = None
        conn.close()
        try:
            self._conn = self._take()
        except SessionLockError as exc:
            raise SessionLockError(
                path, exc.pid, f"{path}: writer lock lost ({lost}); {exc}"
            ) from lost
        except OSError as exc:
            raise SessionLockError(
                path, message=f"{path}: writer lock lost ({lost}) and not taken again: {exc}"
            ) from lost
        _log.warning("%s: writer lock lost (%s) and taken again", path, lost)

    def release(self) -> None:
        """Unlock, and close the lock's connection (idempotent); in a forked child,
        let go of it without a word to the server (the lock is the parent's)."""
        conn, self._conn = self._conn, None
        _held_locks.discard(self)
        if conn is None:
            return
        if self._owner != process_id():
            keep_forever(conn)  # freeing it would warn; closing it would unlock the parent
            return
        try:
            # Unlocked before the close returns: a server lets go of a closed connection's
            # locks a moment later, and a probe (`lock_held`) right after would see it held.
            conn.execute("SELECT pg_advisory_unlock(%s)", (self._lock_id,))
        except psycopg.Error:
            pass  # the connection is gone, and its lock with it
        conn.close()

    def __del__(self) -> None:
        self.release()


def _lock_holder(conn: psycopg.Connection[Any], lock_id: int) -> str | None:
    """The application_name of the connection holding an advisory lock, if visible."""
    unsigned = lock_id & 0xFFFFFFFFFFFFFFFF
    try:
        row = conn.execute(
            "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
            "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
            "AND l.classid = %s::bigint::oid AND l.objid = %s::bigint::oid",
            (unsigned >> 32, unsigned & 0xFFFFFFFF),
        ).fetchone()
    except psycopg.Error:
        return None
    return str(row[0]) if row and row[0] else None


def _holder_pid(holder: str | None) -> int | None:
    match = re.match(r"sessiontree pid (\d+)", holder or "")
    return int(match.group(1)) if match else None
