"""Connections: the pool of this process, database failures as OSError, one more
attempt when a connection dies under an operation.

An operation runs as `Connections.run(path, op, again)`: `op(conn, attempt)` on a
pooled connection and, if that connection dies, once more on a fresh one (as
`again(conn, first)` when running `op` twice could do harm). A pool that keeps an
operation waiting for `_POOL_PATIENCE` seconds makes it ask the server directly
whether it is up. A forked child never touches its parent's connections. (The
package docs say what each operation does about lost connections and forks.)
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final, TypeAlias, TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool, PoolTimeout

from sessiontree._util.closing import keep_forever, process_id
from sessiontree.errors import InheritedHandleError
from sessiontree.storage.postgres._errors import PostgresStoreError

_log = logging.getLogger(__name__)
_T = TypeVar("_T")

# Seconds an operation waits for a pooled connection before it asks the server
# directly whether it is up at all: a down server fails fast instead of after the
# pool's `timeout` (which stays the limit for a pool that is merely busy).
_POOL_PATIENCE: Final = 1.0
# Defaults for the storage's own connections, unless the conninfo sets them: give up
# connecting to an unreachable host after 5 s, and on a host that stops acknowledging
# what we send after 10 s (instead of TCP's ~15 minutes of retransmissions).
_NET_DEFAULTS: Final[dict[str, Any]] = {"connect_timeout": 5, "tcp_user_timeout": 10_000}

Conn: TypeAlias = psycopg.Connection[Any]

_fork_lock = threading.Lock()
"""Serializes a child's first use of an inherited pool (`Connections.pool`)."""


def _forked() -> None:
    """In a forked child: a new `_fork_lock` (another thread may have held the old one)."""
    global _fork_lock
    _fork_lock = threading.Lock()


os.register_at_fork(after_in_child=_forked)


@contextmanager
def io_errors(path: str) -> Iterator[None]:
    """Database failures as the OSError a filesystem would raise."""
    try:
        yield
    except PoolTimeout as exc:
        raise OSError(errno.ETIMEDOUT, f"PostgreSQL connection pool: {exc}", path) from exc
    except pg_errors.ForeignKeyViolation as exc:  # the parent vanished under us
        raise OSError(errno.ENOENT, os.strerror(errno.ENOENT), path) from exc
    except pg_errors.UniqueViolation as exc:
        raise OSError(errno.EEXIST, os.strerror(errno.EEXIST), path) from exc
    except pg_errors.CheckViolation as exc:  # a name that is not one path component
        constraint = exc.diag.constraint_name or "a CHECK constraint"
        raise OSError(errno.EINVAL, f"the database refuses the name ({constraint})", path) from exc
    except psycopg.Error as exc:
        raise OSError(errno.EIO, f"PostgreSQL: {exc}".strip(), path) from exc


class Attempt:
    """One attempt at an operation: whether it sent COMMIT, whether its connection died."""

    __slots__ = ("committing", "dead", "error")

    def __init__(self) -> None:
        self.committing = False
        self.dead = False
        self.error: BaseException | None = None

    @contextmanager
    def on(self, conn: Conn) -> Iterator[Conn]:
        """Run the attempt on `conn`, noting whether a failure came with `conn` dying
        (judged at once: returned to the pool or closed, it no longer says)."""
        try:
            yield conn
        except psycopg.Error:
            self.dead = conn.broken
            raise

    def lost(self, exc: BaseException) -> bool:
        """Whether `exc` is the connection dying (restart, killed backend), as opposed
        to an error of the statement on a live connection."""
        return isinstance(exc, psycopg.OperationalError) and self.dead


@contextmanager
def transaction(conn: Conn, attempt: Attempt) -> Iterator[None]:
    """A transaction that records, in `attempt`, when its body is done and COMMIT goes
    out: a failure after that point is ambiguous (the commit may have happened)."""
    with conn.transaction():
        yield
        attempt.committing = True


def _net_kwargs(conninfo: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """`kwargs` plus `_NET_DEFAULTS` for what neither the conninfo nor `kwargs` set."""
    try:
        given = set(conninfo_to_dict(conninfo)) | set(kwargs)
    except psycopg.Error:  # unparsable: libpq will say so when connecting
        given = set(kwargs)
    if psycopg.pq.version() < 120000:  # libpq before 12 knows no tcp_user_timeout
        given.add("tcp_user_timeout")
    return {k: v for k, v in _NET_DEFAULTS.items() if k not in given} | kwargs


def probe(conninfo: str) -> Conn:
    """A first connection, failing fast with libpq's own message (refused, bad
    password...) as PostgresStoreError, not with a pool timeout."""
    try:
        return psycopg.connect(conninfo, autocommit=True, connect_timeout=10)
    except psycopg.Error as exc:
        raise PostgresStoreError(f"cannot connect to PostgreSQL: {exc}") from exc


class Connections:
    """Where a storage's connections come from.

    Args:
        source: a conninfo (a pool of `min_size` to `max_size` connections, waiting
            at most `timeout` s for one, is made, owned and closed here) or the
            caller's open pool (used, never closed).
        schema: named in the pool's name and in errors.
    """

    def __init__(
        self,
        source: str | ConnectionPool,
        schema: str,
        *,
        min_size: int = 1,
        max_size: int = 8,
        timeout: float = 30.0,
    ) -> None:
        self.schema = schema
        self.closed = False
        self._busy = 0  # connections of the owned pool checked out right now
        self._busy_lock = threading.Lock()
        self._owner = process_id()  # the process whose connections the pool holds
        self._pool_args = (min_size, max_size, timeout)
        if isinstance(source, ConnectionPool):
            self.own_pool = False
            info, kwargs = source.conninfo, source.kwargs
            # psycopg_pool also accepts callables producing them (rotating credentials).
            self.conninfo: str = info() if callable(info) else info
            self.connect_kwargs: dict[str, Any] = _net_kwargs(
                self.conninfo, dict((kwargs() if callable(kwargs) else kwargs) or {})
            )
            self._pool = source
        else:
            self.own_pool = True
            self.conninfo = source
            self.connect_kwargs = _net_kwargs(source, {})
            self._pool = self._new_pool()

    def _new_pool(self) -> ConnectionPool:
        min_size, max_size, timeout = self._pool_args
        return ConnectionPool(
            self.conninfo,
            min_size=min_size,
            max_size=max_size,
            timeout=timeout,
            kwargs={"autocommit": True, **self.connect_kwargs},
            check=self._check_pooled,
            name=f"sessiontree-{self.schema}",
            open=True,
        )

    def pool(self) -> ConnectionPool:
        """The pool of this process: in a forked child, a new one (see the module docs)."""
        if self._owner == process_id():
            return self._pool
        with _fork_lock:
            if self._owner != process_id():
                if not self.own_pool:
                    raise InheritedHandleError(
                        f"PostgreSQL schema {self.schema!r}",
                        self._owner,
                        f"the connection pool of PostgreSQL schema {self.schema!r} was "
                        f"opened by process {self._owner}, which forked this one: a forked "
                        "child cannot use its connections; give the child a storage (or a "
                        "pool) of its own",
                    )
                keep_forever(self._pool)  # the parent's: never used, closed or freed here
                self._busy, self._busy_lock = 0, threading.Lock()
                self._pool = self._new_pool()
                self._owner = process_id()
        return self._pool

    def close(self) -> None:
        """Close the pool if it is owned here (idempotent); in a forked child, only a
        pool made in the child."""
        if not self.closed:
            self.closed = True
            if self.own_pool and self._owner == process_id():
                self._pool.close()

    def _check_pooled(self, conn: Conn) -> None:
        """The owned pool's checkout check (`ConnectionPool.check_connection`)."""
        try:
            ConnectionPool.check_connection(conn)
        except psycopg.Error:
            # One dead connection usually means every idle one died with it (a restart):
            # drop them all now, not one per checkout with the pool's backoff sleep
            # (0 s, 1 s, 2 s...) in between.
            self.purge_idle()
            raise

    def purge_idle(self) -> None:
        """Replace the pool's dead idle connections (best effort)."""
        try:
            self.pool().check()
        except Exception as exc:  # a closed pool, or the server gone again
            _log.debug("checking the pool's connections failed: %s", exc)

    @contextmanager
    def connection(self) -> Iterator[Conn]:
        """A connection for one operation: the pool's, or, when the pool has none for
        `_POOL_PATIENCE` seconds, maybe one straight from the server (`_past_pool`)."""
        if self.closed:
            raise ValueError("PostgresSessionStorage is closed")
        pool = self.pool()
        patience = min(_POOL_PATIENCE, pool.timeout)
        try:
            conn = pool.getconn(patience)
        except PoolTimeout:
            direct = self._past_pool()
            if direct is not None:
                with direct:
                    yield direct
                return
            conn = pool.getconn(max(0.0, pool.timeout - patience))
        with self._busy_lock:
            self._busy += 1
        try:
            with conn:
                yield conn
        finally:
            with self._busy_lock:
                self._busy -= 1
            pool.putconn(conn)

    def _past_pool(self) -> Conn | None:
        """The pool kept us waiting: is the server there at all?

        Unreachable: the connection error, at once (a down server refuses within
        milliseconds). Reachable while the owned pool is not busy with our own work:
        the pool is reconnecting after an outage (with its backoff delays), so this
        direct connection serves the operation. Otherwise None: wait for the pool.
        """
        try:
            conn = psycopg.connect(self.conninfo, **{**self.connect_kwargs, "autocommit": True})
        except psycopg.OperationalError as exc:
            if exc.sqlstate == "53300" or "too many clients" in str(exc):  # up, but full
                return None
            raise
        with self._busy_lock:
            idle_pool = self.own_pool and self._busy < self._pool.max_size
        if idle_pool:
            return conn
        conn.close()
        return None

    def run(
        self,
        path: str,
        op: Callable[[Conn, Attempt], _T],
        again: Callable[[Conn, Attempt], _T] | None = None,
    ) -> _T:
        """`op` on a connection; if that connection dies under it, once more on a fresh one.

        `again(conn, first)` runs instead of `op` the second time, with the first
        attempt (whether it reached COMMIT, its error) to decide what is left to do;
        without it, `op` must be idempotent. Errors become OSErrors naming `path`.
        """
        with io_errors(path):
            first = Attempt()
            try:
                with self.connection() as pooled, first.on(pooled) as conn:
                    return op(conn, first)
            except psycopg.Error as exc:
                if not first.lost(exc):
                    raise
                first.error = exc
                _log.info("%s: PostgreSQL connection lost (%s); trying again", path, exc)
            self.purge_idle()
            with self.connection() as conn:
                return (again or op)(conn, first if again else Attempt())
