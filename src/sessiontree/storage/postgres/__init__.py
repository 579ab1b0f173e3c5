"""`PostgresSessionStorage`: session files in PostgreSQL, shared by agents on many hosts.

Needs the `postgres` extra (`pip install 'sessiontree[postgres]'`): without psycopg 3
and psycopg-pool, importing this package raises `BackendUnavailableError`.

Paths are keys. A store has a `root` (default: the agent dir of the process that
opens it); an absolute path under the root is stored as its path relative to the
root (`sessions/--proj--/2026-..._id.jsonl`), and a relative path *is* a key. So a
host whose agent dir is `/home/ann/.xcsh/agent` and one whose agent dir is
`/Users/bob/.xcsh/agent` see the same sessions, each under its own absolute paths.
An absolute path outside the root raises `PathOutsideStoreError`.

Durability: appends commit with `synchronous_commit = off` (a committed line
survives the writer's death at once and a server crash after at most a few
hundred ms) and `fsync()` is the barrier, a synchronous commit that flushes the
WAL up to every earlier commit; whole-file writes, renames and blobs commit
synchronously. `durable_appends=True` makes every append synchronous.

One writer per session across hosts: `acquire_lock(path)` takes a session-level
advisory lock on a dedicated connection, so PostgreSQL releases it when the
holder's process or host dies.

Lost connections (a server restart, a killed backend, a failover): pooled
connections are checked on checkout, and an operation whose connection dies
under it runs once more on a fresh one when running it twice cannot do harm:

- reads, `ensure_dir`, `set_mtime`, `remove_tree`, `open_writer`, blob puts
  (content-addressed) are idempotent and simply run again;
- an append knows the byte offset it expects to land at (the writer tracks the
  file's size); the retry first looks for its own bytes in the row at (file id,
  offset) and appends only when they are not there, so a commit that did happen
  is never duplicated and one that did not is never lost (with one writer per
  file, as the session lock ensures: another writer's appends move the end);
- `write_atomic`, `rename` and `unlink` are one transaction each. A failure
  before COMMIT was sent rolled it back: run it again (`write_atomic` only when
  its chunks can be replayed: a sequence, or an iterator nothing was drawn
  from). A failure during COMMIT is ambiguous: the retry asks the database
  whether the transaction's effect is there (the new file row exists, the moved
  row has its new key, the removed row is gone) and runs it again only if not.

A server that is down fails an operation with OSError (EIO) in about a second
(the pool's patience, then a direct connection attempt that is refused), not after
the pool's `timeout`; an unreachable host within `connect_timeout` (default 5 s)
more. A writer whose server lost appends it had committed asynchronously (a
server crash before its WAL reached disk) fails with OSError at its next append
or `fsync()` instead of writing after the hole.

Forked processes: a child shares its parent's sockets, so it never uses or closes
the parent's connections (closing one sends the server a Terminate: it would end the
parent's session, and with a lock's connection, the parent's lock). A storage that
owns its pool makes a new pool for the child at the child's first operation (the
parent's is kept, untouched, for the life of the process); one built on the caller's
pool raises `InheritedHandleError` (the caller gives the child a pool of its own).
A writer or a lock is its opener's: in a child, writing through one raises, and
releasing one does nothing. The child also lets go of its copy of a lock's socket at
the fork, so it never keeps the parent's session locked after the parent is gone.

The modules, one job each::

    _storage  PostgresSessionStorage: the SessionStorage operations, as transactions
    _keys     paths as keys relative to the root
    _schema   schema names, the migrations (the tables), applying them
    _sql      every statement, composed once per schema (`Statements`)
    _pool     connections: the pool of this process, errors as OSError, one retry
    _writer   PostgresSessionWriter: appends, the durability barrier
    _locks    PostgresSessionLock: a session's writer lock for every host
    _blobs    PostgresBlobStore: content-addressed images
    _scan     the session metadata every write folds into the file's row
    _batch    a file's lines by COPY; many new files in one transaction (imports)
    _meta     the listing: SessionMeta from those columns
    _errors   PostgresStoreError, PathOutsideStoreError
"""

from __future__ import annotations

from sessiontree.errors import BackendUnavailableError

try:
    import psycopg  # noqa: F401
    import psycopg_pool  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise BackendUnavailableError(
        "the PostgreSQL storage needs psycopg 3 and psycopg-pool: "
        "pip install 'sessiontree[postgres]'"
    ) from exc

from sessiontree.storage.postgres._blobs import PostgresBlobStore
from sessiontree.storage.postgres._errors import PathOutsideStoreError, PostgresStoreError
from sessiontree.storage.postgres._locks import PostgresSessionLock
from sessiontree.storage.postgres._schema import (
    SCHEMA_VERSION,
    new_schema_name,
    validate_schema_name,
)
from sessiontree.storage.postgres._storage import PostgresSessionStorage, stream_content_rows
from sessiontree.storage.postgres._writer import PostgresSessionWriter

__all__ = [
    "SCHEMA_VERSION",
    "PathOutsideStoreError",
    "PostgresBlobStore",
    "PostgresSessionLock",
    "PostgresSessionStorage",
    "PostgresSessionWriter",
    "PostgresStoreError",
    "new_schema_name",
    "stream_content_rows",
    "validate_schema_name",
]

# The public names say they are `sessiontree.storage.postgres.X`, where they were
# defined before this package had modules (reprs, tracebacks, pickles).
for _obj in (
    PathOutsideStoreError,
    PostgresBlobStore,
    PostgresSessionLock,
    PostgresSessionStorage,
    PostgresSessionWriter,
    PostgresStoreError,
    new_schema_name,
    stream_content_rows,
    validate_schema_name,
):
    _obj.__module__ = __name__
del _obj
