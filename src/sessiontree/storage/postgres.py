"""`PostgresSessionStorage`: session files in PostgreSQL, shared by agents on many hosts.

Paths are keys. A store has a `root` (default: the agent dir of the process that
opens it); an absolute path under the root is stored as its path relative to the
root (`sessions/--proj--/2026-..._id.jsonl`), and a relative path *is* a key. So a
host whose agent dir is `/home/ann/.xcsh/agent` and one whose agent dir is
`/Users/bob/.xcsh/agent` see the same sessions, each under its own absolute paths.
An absolute path outside the root raises `PathOutsideStoreError`.

Tables (in `schema`, created and migrated by the package, see `_MIGRATIONS`)::

    nodes   one row per directory or file: the "inode". `id` is the inode number
            (`stat().ino`): a full rewrite creates a new row, so the manager's
            ino/size/tail conflict check works across hosts unchanged. Files also
            carry their session metadata, kept up to date by every write in the
            same statement or transaction (see `list_session_meta`).
    lines   the content: one row per appended line (per `write_bytes` call),
            keyed by (file id, byte offset). An append is one INSERT and one
            UPDATE of the file's row, O(1) in the session's size.
    blobs   content-addressed images (`PostgresBlobStore`).

Semantics follow the filesystem: `write_atomic` and `rename` are one transaction
(readers see the old or the new file), a writer keeps appending to the file it
opened (a replaced file's writer writes into the void, like an unlinked inode),
missing parents are FileNotFoundError. Database failures surface as OSError
(EIO; ETIMEDOUT when the pool is exhausted), as filesystem failures do.

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
(`_POOL_PATIENCE`, then a direct connection attempt that is refused), not after
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
"""

from __future__ import annotations

import builtins
import errno
import hashlib
import logging
import os
import posixpath
import re
import secrets
import socket
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, Final, TypeVar

from sessiontree._util.closing import ClosesOnExit, keep_forever, process_id
from sessiontree._util.env import get_agent_dir
from sessiontree._util.fs import glob_match_name, name_problem, utf8_prefix_text
from sessiontree.errors import (
    BackendUnavailableError,
    InheritedHandleError,
    SessionLockError,
    SessionTreeError,
)
from sessiontree.format import (
    content_text,
    entry_name,
    head_kind,
    head_title,
    head_title_source,
    listing_title,
    loads_line,
    parse_iso_ms,
    session_name,
)
from sessiontree.storage._base import SessionMeta, StorageStat, WriterState
from sessiontree.storage._blobs import (
    BLOB_REF_PREFIX,
    BlobInfo,
    BlobPutResult,
    BlobStatus,
    _intact,
    _warn_damaged,
    _warn_replaced,
    blob_extension_for_mime_type,
    check_hash,
    is_blob_extension,
)

try:
    import psycopg
    from psycopg import errors as pg_errors
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict
    from psycopg_pool import ConnectionPool, PoolTimeout
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise BackendUnavailableError(
        "the PostgreSQL storage needs psycopg 3 and psycopg-pool: "
        "pip install 'sessiontree[postgres]'"
    ) from exc

__all__ = [
    "SCHEMA_VERSION",
    "PathOutsideStoreError",
    "PostgresBlobStore",
    "PostgresSessionLock",
    "PostgresSessionStorage",
    "PostgresSessionWriter",
    "PostgresStoreError",
    "validate_schema_name",
]

_log = logging.getLogger(__name__)
_T = TypeVar("_T")

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SCHEMA_RE: Final = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_BOM: Final = b"\xef\xbb\xbf"
_READ_BATCH: Final = 4 << 20  # bytes of content fetched per round trip when streaming
# Server time in ns (microsecond resolution): every host agrees on one clock.
_NOW_NS: Final = "((floor(extract(epoch FROM clock_timestamp()) * 1000000))::bigint * 1000)"
# Seconds an operation waits for a pooled connection before it asks the server
# directly whether it is up at all: a down server fails fast instead of after the
# pool's `timeout` (which stays the limit for a pool that is merely busy).
_POOL_PATIENCE: Final = 1.0
_REPORTED_ROWS: Final = 20  # rows a migration names one by one in its warning
# Defaults for the storage's own connections, unless the conninfo sets them: give up
# connecting to an unreachable host after 5 s, and on a host that stops acknowledging
# what we send after 10 s (instead of TCP's ~15 minutes of retransmissions).
_NET_DEFAULTS: Final[dict[str, Any]] = {"connect_timeout": 5, "tcp_user_timeout": 10_000}


class PostgresStoreError(SessionTreeError):
    """The PostgreSQL store cannot be used: bad schema name, unreachable server, newer schema."""


class PathOutsideStoreError(PostgresStoreError, ValueError):
    """An absolute path that is not under the store's root (it has no key)."""

    def __init__(self, path: str, root: str) -> None:
        super().__init__(f"{path}: outside the store root {root}")
        self.path = path
        self.root = root


def validate_schema_name(schema: str) -> str:
    """`schema` if it is a plain lowercase identifier (not `pg_*`), else PostgresStoreError."""
    if not isinstance(schema, str) or not _SCHEMA_RE.fullmatch(schema) or schema.startswith("pg_"):
        raise PostgresStoreError(
            f"invalid schema name {schema!r}: use lowercase letters, digits and _ "
            "(at most 63, not starting with a digit or pg_)"
        )
    return schema


# -- migrations ------------------------------------------------------------------------------

# What a `nodes` row must be (the CHECK of migration 2, and the query that finds the
# rows from before it that are not): the root, or a row whose name is one path
# component (`_fs.name_problem`: a NUL never fits in a text) and whose key is its
# parent's key and its name. chr(92) is a backslash, Windows' separator.
_NODE_OK: Final = (
    "(key = '' AND parent IS NULL AND name = '') OR (parent IS NOT NULL "
    "AND name NOT IN ('', '.', '..') AND strpos(name, '/') = 0 "
    "AND strpos(name, chr(92)) = 0 AND octet_length(name) <= 255 "
    "AND (key IS NULL OR key = CASE WHEN parent = '' THEN name ELSE parent || '/' || name END))"
)
# A blob's sidecar extensions (`blobs.is_blob_extension`): none holds a '/', so joined
# by '/' they split back into the same ones, each matched by the pattern.
_EXT_RE: Final = "[a-zA-Z0-9][a-zA-Z0-9._-]{{0,31}}"  # braces doubled for sql.SQL.format
_EXTS_OK: Final = (
    "array_position(exts, NULL) IS NULL AND strpos(array_to_string(exts, ''), '/') = 0 "
    f"AND (cardinality(exts) = 0 OR array_to_string(exts, '/') ~ '^{_EXT_RE}(/{_EXT_RE})*$')"
)

# Ordered, never reordered or edited once released: a store records the versions it
# has applied, and each step runs in one transaction. `{s}` is the schema.
_MIGRATIONS: Final[tuple[tuple[int, str, str], ...]] = (
    (
        1,
        "nodes, lines and blobs",
        # key/parent/name use the C collation: byte order sorts like Python's sorted()
        # and makes `key >= 'a/' AND key < 'a0'` an index range over a directory's subtree.
        # A NULL key is a file being written by write_atomic (invisible until renamed).
        f"""
        CREATE TABLE {{s}}.nodes (
            id bigserial PRIMARY KEY,
            key text COLLATE "C" UNIQUE,
            parent text COLLATE "C" REFERENCES {{s}}.nodes (key) ON DELETE CASCADE,
            name text COLLATE "C" NOT NULL,
            is_dir boolean NOT NULL,
            size bigint NOT NULL DEFAULT 0,
            line_count bigint NOT NULL DEFAULT 0,
            ends_with_newline boolean NOT NULL DEFAULT true,
            mtime_ns bigint NOT NULL,
            meta_state smallint NOT NULL DEFAULT 0,
            header_id text,
            cwd text,
            slot boolean NOT NULL DEFAULT false,
            slot_title text,
            header_title text,
            title_source text,
            session_name text,
            short_summary text,
            parent_session text,
            created text,
            message_count integer NOT NULL DEFAULT 0,
            first_message text,
            last_activity_ms bigint
        );
        CREATE INDEX nodes_parent_idx ON {{s}}.nodes (parent, name);
        INSERT INTO {{s}}.nodes (key, parent, name, is_dir, mtime_ns)
            VALUES ('', NULL, '', true, {_NOW_NS});
        CREATE TABLE {{s}}.lines (
            file_id bigint NOT NULL REFERENCES {{s}}.nodes (id) ON DELETE CASCADE,
            off bigint NOT NULL,
            data bytea NOT NULL,
            msg_text text,
            PRIMARY KEY (file_id, off)
        );
        CREATE TABLE {{s}}.blobs (
            hash text PRIMARY KEY CHECK (hash ~ '^[0-9a-f]{{{{64}}}}$'),
            data bytea NOT NULL,
            size bigint NOT NULL,
            exts text[] NOT NULL DEFAULT ARRAY[]::text[],
            created_at timestamptz NOT NULL DEFAULT now()
        );
        """,
    ),
    (
        2,
        "names are single path components",
        # NOT VALID: rows already there are not checked (a store with a bad row still
        # opens; `_migrate` reports them and every reader skips them), new and changed
        # rows are.
        f"""
        ALTER TABLE {{s}}.nodes ADD CONSTRAINT nodes_name_is_a_component
            CHECK ({_NODE_OK}) NOT VALID;
        ALTER TABLE {{s}}.blobs ADD CONSTRAINT blobs_exts_are_extensions
            CHECK ({_EXTS_OK}) NOT VALID;
        """,
    ),
)
SCHEMA_VERSION: Final = _MIGRATIONS[-1][0]


# -- session metadata ------------------------------------------------------------------------

# meta_state: what the lines so far make of the file, as the loader reads it.
_AWAITING_HEADER: Final = 0
_SESSION: Final = 1
_NOT_A_SESSION: Final = 2


class _Scan:
    """Session metadata folded from complete lines, with the loader's rules."""

    __slots__ = (
        "activity",
        "created",
        "cwd",
        "first_message",
        "header_id",
        "header_title",
        "line_no",
        "messages",
        "name",
        "name_set",
        "parent_session",
        "short_summary",
        "slot",
        "slot_source",
        "slot_title",
        "state",
        "title_source",
    )

    def __init__(self, state: int = _AWAITING_HEADER, line_no: int = 0) -> None:
        self.state = state
        self.line_no = line_no
        self.header_id: str | None = None
        self.cwd: str | None = None
        self.header_title: str | None = None
        self.title_source: str | None = None
        self.parent_session: str | None = None
        self.created: str | None = None
        self.slot = False
        self.slot_title: str | None = None
        self.slot_source: str | None = None
        self.name: str | None = None  # the latest session_info name / title_change title
        self.name_set = False  # whether the lines fed set (or cleared) `name`
        self.short_summary: str | None = None  # the latest compaction shortSummary
        self.messages = 0
        self.first_message: str | None = None
        self.activity: int | None = None

    def feed(self, raw: bytes) -> str | None:
        """Fold one line (without its newline); returns its message text, if any."""
        self.line_no += 1
        if self.state == _NOT_A_SESSION:
            return None
        if self.line_no == 1 and raw.startswith(_BOM):
            raw = raw[3:]
        if not raw or raw.isspace():
            return None
        try:
            value = loads_line(raw)
        except (ValueError, UnicodeError, RecursionError):
            return None
        if not isinstance(value, dict):
            return None
        if self.state == _AWAITING_HEADER:
            self._header(value)
            return None
        kind = value.get("type")
        if kind != "message":
            name = entry_name(value)
            if name is not None:  # the latest name entry decides; a blank one clears
                self.name, self.name_set = name, True
            elif kind == "compaction":
                short = value.get("shortSummary")
                if isinstance(short, str):
                    self.short_summary = short
            return None
        self.messages += 1
        message = value.get("message")
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            return None
        stamp = message.get("timestamp")
        if isinstance(stamp, (int, float)) and not isinstance(stamp, bool):
            at: int | None = int(stamp)
        else:
            at = parse_iso_ms(value.get("timestamp"))
        if at is not None and (self.activity is None or at > self.activity):
            self.activity = at
        text = content_text(message.get("content"))
        if text and self.first_message is None and message.get("role") == "user":
            self.first_message = text
        return text or None

    def _header(self, value: dict[str, Any]) -> None:
        kind = head_kind(value, self.line_no == 1)
        if kind == "slot":
            self.slot = True
            self.slot_title = value.get("title")
            source = value.get("source")
            self.slot_source = self.title_source = source if isinstance(source, str) else None
            return
        if kind == "invalid":
            self.state = _NOT_A_SESSION
            return
        self.state = _SESSION

        def text(key: str) -> str | None:
            item = value.get(key)
            return item if isinstance(item, str) else None

        self.header_id = text("id")
        self.cwd = text("cwd")
        self.parent_session = text("parentSession")
        self.created = text("timestamp")
        self.header_title = text("title")
        self.title_source = head_title_source(self.slot, self.slot_source, value.get("titleSource"))


def _raw_lines(chunks: Iterable[bytes]) -> Iterator[bytes]:
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


# -- helpers ---------------------------------------------------------------------------------


def _oserror(cls: type[OSError], code: int, path: str) -> OSError:
    return cls(code, os.strerror(code), path)


@contextmanager
def _io(path: str) -> Iterator[None]:
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


class _Try:
    """One attempt at an operation: whether it sent COMMIT, whether its connection died."""

    __slots__ = ("committing", "dead", "error")

    def __init__(self) -> None:
        self.committing = False
        self.dead = False
        self.error: BaseException | None = None

    @contextmanager
    def on(self, conn: psycopg.Connection[Any]) -> Iterator[psycopg.Connection[Any]]:
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
def _tx(conn: psycopg.Connection[Any], attempt: _Try) -> Iterator[None]:
    """A transaction that records, in `attempt`, when its body is done and COMMIT goes
    out: a failure after that point is ambiguous (the commit may have happened)."""
    with conn.transaction():
        yield
        attempt.committing = True


class _Replayable:
    """`chunks`, remembering whether any was drawn: a one-shot iterator can be
    written again only if nothing was."""

    __slots__ = ("_chunks", "drawn")

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = chunks
        self.drawn = False

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._chunks:
            self.drawn = True
            yield chunk

    @property
    def replayable(self) -> bool:
        return not self.drawn or isinstance(self._chunks, (list, tuple))


def _shrunk(path: str, size: int, expected: int) -> OSError:
    return OSError(
        errno.EIO,
        f"the stored file has {size} bytes, fewer than the {expected} this writer wrote: "
        "PostgreSQL lost committed appends (a server crash before they reached its WAL on "
        "disk), or another writer truncated it",
        path,
    )


def _net_kwargs(conninfo: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """`kwargs` plus `_NET_DEFAULTS` for what neither the conninfo nor `kwargs` set."""
    try:
        given = set(conninfo_to_dict(conninfo)) | set(kwargs)
    except psycopg.Error:  # unparsable: libpq will say so when connecting
        given = set(kwargs)
    if psycopg.pq.version() < 120000:  # libpq before 12 knows no tcp_user_timeout
        given.add("tcp_user_timeout")
    return {k: v for k, v in _NET_DEFAULTS.items() if k not in given} | kwargs


def _stat(node_id: int, size: int, mtime_ns: int) -> StorageStat:
    return StorageStat(
        size=size,
        mtime=_EPOCH + timedelta(microseconds=mtime_ns // 1000),
        mtime_ms=mtime_ns / 1e6,
        mtime_ns=mtime_ns,
        ino=node_id,
    )


def _split_key(key: str) -> tuple[str, str]:
    parent, _, name = key.rpartition("/")
    return parent, name


def _child_key(parent: str, name: str) -> str:
    return f"{parent}/{name}" if parent else name


def _key_ok(key: str) -> bool:
    """Whether every component of a key read from the database is a plain name, so
    that it becomes a path under the root and nowhere else."""
    return all(name_problem(part) is None for part in key.split("/"))


class _Sql:
    """Every statement, composed once with the schema as a quoted identifier."""

    def __init__(self, schema: str) -> None:
        s = sql.Identifier(schema)

        def q(text: str) -> sql.Composed:
            return sql.SQL(text.replace("NOW_NS", _NOW_NS)).format(s=s)

        self.node = q("SELECT id, is_dir, size, mtime_ns FROM {s}.nodes WHERE key = %s")
        self.node_kinds = q("SELECT key, is_dir FROM {s}.nodes WHERE key = ANY(%s)")
        self.is_dir = q("SELECT is_dir FROM {s}.nodes WHERE key = %s")
        self.exists = q("SELECT 1 FROM {s}.nodes WHERE key = %s")
        self.make_dirs = q(
            "INSERT INTO {s}.nodes (key, parent, name, is_dir, mtime_ns) "
            "SELECT k, p, n, true, NOW_NS FROM unnest(%s::text[], %s::text[], %s::text[]) "
            "AS u(k, p, n) ON CONFLICT (key) DO NOTHING"
        )
        self.children = q(
            "SELECT name, key FROM {s}.nodes WHERE parent = %s AND is_dir = %s AND key IS NOT NULL"
        )
        # Rows a reader skips (`_NODE_OK`): from before migration 2, or written around it.
        self.bad_nodes = q(
            f"SELECT key, parent, name FROM {{s}}.nodes WHERE NOT ({_NODE_OK}) ORDER BY id"
        )
        self.bad_exts = q(
            f"SELECT hash, exts FROM {{s}}.blobs WHERE NOT ({_EXTS_OK}) ORDER BY hash"
        )
        self.has_children = q("SELECT 1 FROM {s}.nodes WHERE parent = %s LIMIT 1")
        self.xact_lock = q("SELECT pg_advisory_xact_lock(%s)")
        self.xact_lock2 = q("SELECT pg_advisory_xact_lock(%s), pg_advisory_xact_lock(%s)")
        self.new_file = q(
            "INSERT INTO {s}.nodes (key, parent, name, is_dir, mtime_ns) "
            "VALUES (%s, %s, %s, false, NOW_NS) RETURNING id"
        )
        self.delete_node = q("DELETE FROM {s}.nodes WHERE id = %s")
        self.delete_file = q("DELETE FROM {s}.nodes WHERE key = %s AND NOT is_dir RETURNING id")
        self.delete_children = q("DELETE FROM {s}.nodes WHERE parent = %s")
        self.copy_lines = q(
            "COPY {s}.lines (file_id, off, data, msg_text) FROM STDIN (FORMAT BINARY)"
        )
        self.publish = q(
            "UPDATE {s}.nodes SET key = %(key)s, size = %(size)s, line_count = %(lines)s, "
            "ends_with_newline = %(ends)s, mtime_ns = NOW_NS, meta_state = %(state)s, "
            "header_id = %(hid)s, cwd = %(cwd)s, slot = %(slot)s, slot_title = %(stitle)s, "
            "header_title = %(htitle)s, title_source = %(tsrc)s, session_name = %(name)s, "
            "short_summary = %(short)s, parent_session = %(psess)s, created = %(created)s, "
            "message_count = %(msgs)s, first_message = %(first)s, "
            "last_activity_ms = %(act)s WHERE id = %(id)s"
        )
        self.truncate_lines = q("DELETE FROM {s}.lines WHERE file_id = %s")
        self.reset_file = q(
            "UPDATE {s}.nodes SET size = 0, line_count = 0, ends_with_newline = true, "
            "mtime_ns = greatest(mtime_ns + 1, NOW_NS), meta_state = 0, header_id = NULL, "
            "cwd = NULL, slot = false, slot_title = NULL, header_title = NULL, "
            "title_source = NULL, session_name = NULL, short_summary = NULL, "
            "parent_session = NULL, "
            "created = NULL, message_count = 0, first_message = NULL, "
            "last_activity_ms = NULL WHERE id = %s"
        )
        self.writer_state = q(
            "SELECT meta_state, ends_with_newline, size FROM {s}.nodes WHERE id = %s"
        )
        # One statement per append: bump the file's size and metadata, insert the
        # line at the old size. `set_config(..., true)` makes this commit asynchronous.
        # Nothing happens when the file is gone or shorter than the writer knows it
        # (`off`: the writer's end of file), so a line never lands after a hole.
        self.append = q(
            "WITH f AS (UPDATE {s}.nodes SET size = size + %(n)s, "
            "line_count = line_count + %(nl)s, ends_with_newline = %(ends)s, "
            "mtime_ns = greatest(mtime_ns + 1, NOW_NS), "
            "message_count = message_count + %(msgs)s, "
            "first_message = coalesce(first_message, %(first)s), "
            "session_name = CASE WHEN %(name_set)s THEN %(name)s ELSE session_name END, "
            "short_summary = coalesce(%(short)s, short_summary), "
            "last_activity_ms = greatest(last_activity_ms, %(act)s) "
            "WHERE id = %(id)s AND size >= %(off)s RETURNING size - %(n)s AS off), "
            "c AS (SELECT set_config('synchronous_commit', %(sync)s, true)) "
            "INSERT INTO {s}.lines (file_id, off, data, msg_text) "
            "SELECT %(id)s, f.off, %(data)s, %(text)s FROM f, c RETURNING off"
        )
        self.file_size = q("SELECT size FROM {s}.nodes WHERE id = %s")
        self.key_of = q("SELECT key FROM {s}.nodes WHERE id = %s")
        # Did an append whose commit went unconfirmed land? Its bytes at its offset.
        self.line_at = q("SELECT 1 FROM {s}.lines WHERE file_id = %s AND off = %s AND data = %s")
        self.lock_file_row = q(
            "SELECT size, line_count, meta_state, slot, slot_title, title_source "
            "FROM {s}.nodes WHERE id = %s FOR UPDATE"
        )
        self.append_slow = q(
            "UPDATE {s}.nodes SET size = size + %(n)s, line_count = line_count + %(nl)s, "
            "ends_with_newline = %(ends)s, mtime_ns = greatest(mtime_ns + 1, NOW_NS), "
            "meta_state = %(state)s, header_id = %(hid)s, cwd = %(cwd)s, "
            "slot = %(slot)s, slot_title = %(stitle)s, header_title = %(htitle)s, "
            "title_source = %(tsrc)s, session_name = %(name)s, short_summary = %(short)s, "
            "parent_session = %(psess)s, "
            "created = %(created)s, message_count = message_count + %(msgs)s, "
            "first_message = coalesce(first_message, %(first)s), "
            "last_activity_ms = greatest(last_activity_ms, %(act)s) WHERE id = %(id)s"
        )
        self.insert_line = q(
            "INSERT INTO {s}.lines (file_id, off, data, msg_text) VALUES (%s, %s, %s, %s)"
        )
        # The durability barrier: a synchronous commit of a transaction that wrote WAL
        # flushes the WAL up to its commit record, past every earlier (asynchronous)
        # commit. It must write: PostgreSQL commits a transaction that wrote no WAL
        # asynchronously whatever synchronous_commit says (an xid alone is not enough).
        # So it rewrites one row unchanged: the writer's file row (returning its size),
        # or the root's after a bulk import.
        self.barrier = q(
            "WITH c AS (SELECT set_config('synchronous_commit', 'on', true)) "
            "UPDATE {s}.nodes SET mtime_ns = mtime_ns FROM c WHERE key = ''"
        )
        self.writer_barrier = q(
            "WITH c AS (SELECT set_config('synchronous_commit', 'on', true)) "
            "UPDATE {s}.nodes SET size = size FROM c WHERE id = %s RETURNING size"
        )
        self.all_data = q(
            "SELECT n.is_dir, l.data FROM {s}.nodes n LEFT JOIN {s}.lines l "
            "ON l.file_id = n.id WHERE n.key = %s ORDER BY l.off"
        )
        self.range = q(
            "SELECT substring(data FROM (greatest(%(s)s - off, 0) + 1)::int "
            "FOR (%(e)s - greatest(off, %(s)s))::int) FROM {s}.lines "
            "WHERE file_id = %(id)s AND off < %(e)s AND off >= (SELECT coalesce(max(off), 0) "
            "FROM {s}.lines WHERE file_id = %(id)s AND off <= %(s)s) ORDER BY off"
        )
        self.batch = q(
            "SELECT off, data FROM {s}.lines WHERE file_id = %s AND off >= %s AND off < %s "
            "ORDER BY off"
        )
        self.file_for_read = q("SELECT id, size FROM {s}.nodes WHERE key = %s AND NOT is_dir")
        self.move_file = q("UPDATE {s}.nodes SET key = %s, parent = %s, name = %s WHERE id = %s")
        # Directory rename: the directory and its subtree, in one statement.
        self.move_tree = q(
            "UPDATE {s}.nodes SET "
            "key = %(dst)s || substr(key, %(n)s + 1), "
            "parent = CASE WHEN key = %(src)s THEN %(dparent)s "
            "ELSE %(dst)s || substr(parent, %(n)s + 1) END, "
            "name = CASE WHEN key = %(src)s THEN %(dname)s ELSE name END "
            "WHERE key = %(src)s OR (key >= %(lo)s AND key < %(hi)s)"
        )
        # `%s` NULL keeps the session's synchronous_commit; 'off' inside bulk().
        self.set_mtime = q(
            "UPDATE {s}.nodes SET mtime_ns = %s FROM (SELECT set_config('synchronous_commit', "
            "coalesce(%s, current_setting('synchronous_commit')), true)) AS c WHERE key = %s"
        )
        self.write_lock = q(
            "SELECT pg_advisory_xact_lock(%s), set_config('synchronous_commit', "
            "coalesce(%s, current_setting('synchronous_commit')), true)"
        )
        self.meta_columns = (
            "n.key, n.size, n.line_count, n.mtime_ns, n.meta_state, n.header_id, n.cwd, "
            "n.slot, n.slot_title, n.header_title, n.session_name, n.short_summary, "
            "n.title_source, "
            "n.parent_session, n.created, n.message_count, n.first_message, "
            "n.last_activity_ms, n.id"
        )
        text_col = (
            ", (SELECT string_agg(l.msg_text, ' ' ORDER BY l.off) FROM {s}.lines l "
            "WHERE l.file_id = n.id AND l.msg_text IS NOT NULL)"
        )
        where_jsonl = (
            "NOT n.is_dir AND n.key IS NOT NULL AND n.name LIKE '%%.jsonl' "
            "AND n.name NOT LIKE '.%%'"
            f" AND ({_NODE_OK})"  # a row readers skip (`invalid_names`)
        )
        for with_text in (False, True):
            cols = self.meta_columns + (text_col if with_text else "")
            setattr(
                self,
                f"meta_dir_{with_text}",
                q(f"SELECT {cols} FROM {{s}}.nodes n WHERE n.parent = %s AND {where_jsonl}"),
            )
            setattr(
                self,
                f"meta_tree_{with_text}",
                q(
                    f"SELECT {cols} FROM {{s}}.nodes n WHERE n.key >= %s AND n.key < %s "
                    f"AND {where_jsonl}"
                ),
            )
        # `created_at` is when the blob was last put: a re-put of a blob older than a
        # minute refreshes it (as `BlobStore.put` touches the file), and `gc` never
        # deletes a blob put within its minimum age (10 minutes).
        self.blob_touch = q(
            "UPDATE {s}.blobs SET created_at = now() WHERE hash = %s RETURNING exts"
        )
        self.blob_info = q(
            "SELECT hash, size, extract(epoch FROM created_at)::float8, exts FROM {s}.blobs "
            "ORDER BY hash"
        )
        self.blob_hashes = q("SELECT hash FROM {s}.blobs ORDER BY hash")
        self.blob_mtime = q(
            "SELECT extract(epoch FROM created_at)::float8 FROM {s}.blobs WHERE hash = %s"
        )
        self.blob_now = q("SELECT extract(epoch FROM clock_timestamp())::float8")
        self.blob_delete = q(
            "DELETE FROM {s}.blobs WHERE hash = %s "
            "AND created_at <= clock_timestamp() - make_interval(secs => %s)"
        )
        self.blob_insert = q(
            "INSERT INTO {s}.blobs (hash, data, size, exts) VALUES (%s, %s, %s, %s) "
            "ON CONFLICT (hash) DO NOTHING"
        )
        self.blob_add_ext = q(
            "UPDATE {s}.blobs SET exts = array_append(exts, %s) "
            "WHERE hash = %s AND NOT (%s = ANY(exts))"
        )
        self.blob_get = q("SELECT data FROM {s}.blobs WHERE hash = %s")
        self.blob_has = q("SELECT 1 FROM {s}.blobs WHERE hash = %s")
        self.blob_list = q("SELECT hash, exts FROM {s}.blobs ORDER BY hash")
        self.migrations_table = q(
            "CREATE TABLE IF NOT EXISTS {s}.schema_migrations (version integer PRIMARY KEY, "
            "name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        self.create_schema = q("CREATE SCHEMA IF NOT EXISTS {s}")
        self.current_version = q("SELECT coalesce(max(version), 0) FROM {s}.schema_migrations")
        self.record_version = q("INSERT INTO {s}.schema_migrations (version, name) VALUES (%s, %s)")
        self.migration_bodies = {
            version: sql.SQL(body).format(s=s) for version, _, body in _MIGRATIONS
        }


# -- the storage -----------------------------------------------------------------------------


class PostgresSessionStorage(ClosesOnExit):
    """`SessionStorage` in a PostgreSQL schema, shared by every host that opens it.

    Args:
        conninfo: a libpq connection string or `postgresql://` URL (the storage then
            owns a connection pool and closes it in `close()`), or an open
            `psycopg_pool.ConnectionPool` that the caller keeps and closes (its
            connections should be autocommit; the storage manages transactions).
        schema: where the tables live; created and migrated on open.
        root: the absolute directory that paths are relative to (default: the
            agent dir). Hosts sharing a store each use their own root.
        durable_appends: commit every append synchronously (slower; by default
            `fsync()`/`SessionManager.flush()` is the durability barrier).
        min_size, max_size, timeout: the owned pool's size and wait limit. A
            session being loaded or fully rewritten holds one connection while
            blobs use another, so keep `max_size >= 2`. The owned pool checks a
            connection before handing it out; when it has none within a second,
            the server is asked directly (see the module docs on lost connections).

    Example::

        with PostgresSessionStorage("postgresql://agent@db/agents") as storage:
            sm = SessionManager.create("/work/proj", storage=storage)
    """

    def __init__(
        self,
        conninfo: str | ConnectionPool,
        *,
        schema: str = "sessiontree",
        root: str | None = None,
        durable_appends: bool = False,
        migrate: bool = True,
        min_size: int = 1,
        max_size: int = 8,
        timeout: float = 30.0,
    ) -> None:
        self.schema = validate_schema_name(schema)
        self.root = os.path.normpath(os.path.abspath(root if root is not None else get_agent_dir()))
        self._root_prefix = self.root if self.root.endswith(os.sep) else self.root + os.sep
        self.durable_appends = durable_appends
        self._sql = _Sql(self.schema)
        self._blobs: PostgresBlobStore | None = None
        self._closed = False
        self._bulk = 0
        self._busy = 0  # connections of the owned pool checked out right now
        self._busy_lock = threading.Lock()
        self._owner = process_id()  # the process whose connections the pool holds
        if isinstance(conninfo, ConnectionPool):
            self._pool = conninfo
            self._own_pool = False
            info, kwargs = conninfo.conninfo, conninfo.kwargs
            # psycopg_pool also accepts callables producing them (rotating credentials).
            self._conninfo: str = info() if callable(info) else info
            self._connect_kwargs: dict[str, Any] = _net_kwargs(
                self._conninfo, dict((kwargs() if callable(kwargs) else kwargs) or {})
            )
        else:
            self._conninfo = conninfo
            self._connect_kwargs = _net_kwargs(conninfo, {})
            # Fail fast with libpq's own message (refused, bad password...), not a pool timeout.
            try:
                probe = psycopg.connect(conninfo, autocommit=True, connect_timeout=10)
            except psycopg.Error as exc:
                raise PostgresStoreError(f"cannot connect to PostgreSQL: {exc}") from exc
            try:
                if migrate:
                    self._migrate(probe)
            finally:
                probe.close()
            self._own_pool = True
            self._pool_args = (min_size, max_size, timeout)
            self._pool = self._new_pool()
            return
        if migrate:
            self.migrate()

    # -- lifecycle ---------------------------------------------------------------------------

    def _new_pool(self) -> ConnectionPool:
        min_size, max_size, timeout = self._pool_args
        return ConnectionPool(
            self._conninfo,
            min_size=min_size,
            max_size=max_size,
            timeout=timeout,
            kwargs={"autocommit": True, **self._connect_kwargs},
            check=self._check_pooled,
            name=f"sessiontree-{self.schema}",
            open=True,
        )

    def _pool_here(self) -> ConnectionPool:
        """The pool of this process: in a forked child, a new one (see the module docs)."""
        if self._owner == process_id():
            return self._pool
        with _fork_lock:
            if self._owner != process_id():
                if not self._own_pool:
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
        """Close the connection pool if this storage created it (idempotent); in a
        forked child, only a pool made in the child."""
        if not self._closed:
            self._closed = True
            if self._own_pool and self._owner == process_id():
                self._pool.close()

    def __repr__(self) -> str:
        return f"PostgresSessionStorage(schema={self.schema!r}, root={self.root!r})"

    @contextmanager
    def bulk(self) -> Iterator[None]:
        """Commit whole-file writes asynchronously inside, with one durability barrier at the end.

        For imports of many files: each file is still atomic, but the WAL is flushed
        once at the end instead of once per file.
        """
        self._bulk += 1
        try:
            yield
        finally:
            self._bulk -= 1
            if not self._bulk:
                self._run(self.root, lambda conn, _: conn.execute(self._sql.barrier))

    def migrate(self) -> int:
        """Create the schema and apply pending migrations; returns the schema version."""
        with _io(self.schema), self._pool_here().connection() as conn:
            return self._migrate(conn)

    def _migrate(self, conn: psycopg.Connection[Any]) -> int:
        s = self._sql
        # Hosts starting together queue here; each step is its own transaction.
        lock = self._lock_id("migrate", "")
        conn.execute("SELECT pg_advisory_lock(%s)", (lock,))
        try:
            with conn.transaction():
                conn.execute(s.create_schema)
                conn.execute(s.migrations_table)
            row = conn.execute(s.current_version).fetchone()
            current = int(row[0]) if row else 0
            if current > SCHEMA_VERSION:
                raise PostgresStoreError(
                    f"schema {self.schema!r} is at version {current}, newer than this "
                    f"sessiontree understands ({SCHEMA_VERSION}): upgrade sessiontree"
                )
            checked_names = current >= 2
            for version, name, _ in _MIGRATIONS:
                if version <= current:
                    continue
                with conn.transaction():
                    conn.execute(s.migration_bodies[version])
                    conn.execute(s.record_version, (version, name))
                current = version
            if not checked_names:
                self._report_invalid(self._invalid_names(conn))
            return current
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (lock,))

    def invalid_names(self) -> list[tuple[str, str]]:
        """(path, why) of every row that readers skip because its name cannot be a path:
        a node whose name is not one path component (`..`, `a/b`, empty, longer than
        NAME_MAX...) or whose key is not its parent's key and name, and a blob with a
        sidecar extension that is not one (`<root>/blobs/<hash>`).

        The schema refuses such rows since version 2; older ones stay (nothing is
        deleted) and `list_dirs`, `list_files`, `list_session_meta` and the blob
        listings leave them out.
        """
        return self._run(self.root, lambda conn, _: self._invalid_names(conn))

    def _invalid_names(self, conn: psycopg.Connection[Any]) -> list[tuple[str, str]]:
        found = []
        for key, parent, name in conn.execute(self._sql.bad_nodes).fetchall():
            where = os.path.join(self.path_for(parent), name) if parent is not None else key
            problem = name_problem(name) if parent is not None else None
            if problem is None and parent is None:
                problem = "a row without a parent"
            elif problem is None:
                problem = f"its key {key!r} is not its directory's key and its name"
            found.append((str(where), f"a database row not used as a path: {problem}"))
        blob_dir = os.path.join(self.root, "blobs")
        for digest, exts in conn.execute(self._sql.bad_exts).fetchall():
            bad = [e for e in exts if not is_blob_extension(e)]
            found.append(
                (
                    os.path.join(blob_dir, str(digest)),
                    f"a database row not used as a path: sidecar extension(s) {bad!r}",
                )
            )
        return found

    def _report_invalid(self, found: list[tuple[str, str]]) -> None:
        """Warn about rows the schema's CHECK (migration 2) found already there."""
        for where, why in found[:_REPORTED_ROWS]:
            _log.warning("%s (schema %s): %s; left as it is, skipped", where, self.schema, why)
        if len(found) > _REPORTED_ROWS:
            _log.warning(
                "%d more such rows in schema %s (PostgresSessionStorage.invalid_names lists them)",
                len(found) - _REPORTED_ROWS,
                self.schema,
            )

    # -- keys --------------------------------------------------------------------------------

    def key_for(self, path: str) -> str:
        """The key of `path`: relative to the root ('' is the root itself)."""
        p = os.fspath(path)
        if "\x00" in p:
            raise ValueError("embedded null byte")
        if os.path.isabs(p):
            norm = os.path.normpath(p)
            if norm == self.root:
                return ""
            if not norm.startswith(self._root_prefix):
                raise PathOutsideStoreError(p, self.root)
            rel = norm[len(self._root_prefix) :]
        else:
            rel = posixpath.normpath(p.replace(os.sep, "/"))
            if rel == ".":
                return ""
            if rel == ".." or rel.startswith("../"):
                raise PathOutsideStoreError(p, self.root)
        return rel.replace(os.sep, "/")

    def path_for(self, key: str) -> str:
        """This host's absolute path of a key."""
        return os.path.join(self.root, *key.split("/")) if key else self.root

    def _lock_id(self, space: str, key: str) -> int:
        digest = hashlib.blake2b(
            f"sessiontree\x00{self.schema}\x00{space}\x00{key}".encode(), digest_size=8
        ).digest()
        return int.from_bytes(digest, "big", signed=True)

    # -- connections ---------------------------------------------------------------------------

    def _check_pooled(self, conn: psycopg.Connection[Any]) -> None:
        """The owned pool's checkout check (`ConnectionPool.check_connection`)."""
        try:
            ConnectionPool.check_connection(conn)
        except psycopg.Error:
            # One dead connection usually means every idle one died with it (a restart):
            # drop them all now, not one per checkout with the pool's backoff sleep
            # (0 s, 1 s, 2 s...) in between.
            self._purge_idle()
            raise

    def _purge_idle(self) -> None:
        """Replace the pool's dead idle connections (best effort)."""
        try:
            self._pool_here().check()
        except Exception as exc:  # a closed pool, or the server gone again
            _log.debug("checking the pool's connections failed: %s", exc)

    @contextmanager
    def _conn(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection for one operation: the pool's, or, when the pool has none for
        `_POOL_PATIENCE` seconds, maybe one straight from the server (`_past_pool`)."""
        if self._closed:
            raise ValueError("PostgresSessionStorage is closed")
        pool = self._pool_here()
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

    def _past_pool(self) -> psycopg.Connection[Any] | None:
        """The pool kept us waiting: is the server there at all?

        Unreachable: the connection error, at once (a down server refuses within
        milliseconds). Reachable while the owned pool is not busy with our own work:
        the pool is reconnecting after an outage (with its backoff delays), so this
        direct connection serves the operation. Otherwise None: wait for the pool.
        """
        try:
            conn = psycopg.connect(self._conninfo, **{**self._connect_kwargs, "autocommit": True})
        except psycopg.OperationalError as exc:
            if exc.sqlstate == "53300" or "too many clients" in str(exc):  # up, but full
                return None
            raise
        with self._busy_lock:
            idle_pool = self._own_pool and self._busy < self._pool.max_size
        if idle_pool:
            return conn
        conn.close()
        return None

    def _run(
        self,
        path: str,
        op: Callable[[psycopg.Connection[Any], _Try], _T],
        again: Callable[[psycopg.Connection[Any], _Try], _T] | None = None,
    ) -> _T:
        """`op` on a connection; if that connection dies under it, once more on a fresh one.

        `again(conn, first)` runs instead of `op` the second time, with the first
        attempt (whether it reached COMMIT, its error) to decide what is left to do;
        without it, `op` must be idempotent. Errors become OSErrors naming `path`.
        """
        with _io(path):
            first = _Try()
            try:
                with self._conn() as pooled, first.on(pooled) as conn:
                    return op(conn, first)
            except psycopg.Error as exc:
                if not first.lost(exc):
                    raise
                first.error = exc
                _log.info("%s: PostgreSQL connection lost (%s); trying again", path, exc)
            self._purge_idle()
            with self._conn() as conn:
                return (again or op)(conn, first if again else _Try())

    def _node(self, conn: psycopg.Connection[Any], key: str) -> tuple[int, bool, int, int] | None:
        row = conn.execute(self._sql.node, (key,)).fetchone()
        return (int(row[0]), bool(row[1]), int(row[2]), int(row[3])) if row else None

    def _file_node(
        self, conn: psycopg.Connection[Any], key: str, path: str
    ) -> tuple[int, bool, int, int]:
        node = self._node(conn, key)
        if node is None:
            raise _oserror(FileNotFoundError, errno.ENOENT, path)
        if node[1]:
            raise _oserror(IsADirectoryError, errno.EISDIR, path)
        return node

    def _check_parent(self, conn: psycopg.Connection[Any], key: str, path: str) -> None:
        if key == "":
            raise _oserror(IsADirectoryError, errno.EISDIR, path)
        row = conn.execute(self._sql.is_dir, (_split_key(key)[0],)).fetchone()
        if row is None:
            raise _oserror(FileNotFoundError, errno.ENOENT, path)
        if not row[0]:
            raise _oserror(NotADirectoryError, errno.ENOTDIR, path)

    # -- SessionStorage ----------------------------------------------------------------------

    def ensure_dir(self, path: str) -> None:
        """Create `path` and its parents if missing (FileExistsError over a file)."""
        key = self.key_for(path)
        if key == "":
            return
        parts = key.split("/")
        chain = ["/".join(parts[: i + 1]) for i in range(len(parts))]

        def op(conn: psycopg.Connection[Any], _: _Try) -> None:
            for attempt in range(2):
                kinds = dict(conn.execute(self._sql.node_kinds, (chain,)).fetchall())
                for k in chain:
                    if k in kinds and not kinds[k]:
                        raise _oserror(FileExistsError, errno.EEXIST, path)
                missing = [k for k in chain if k not in kinds]
                if not missing or attempt:
                    return
                parents = [_split_key(k)[0] for k in missing]
                names = [_split_key(k)[1] for k in missing]
                conn.execute(self._sql.make_dirs, (missing, parents, names))
                # A second pass catches a file another host created at the same key.

        self._run(path, op)

    def exists(self, path: str) -> bool:
        """Whether a file or directory exists at `path`."""
        key = self.key_for(path)
        return self._run(
            path, lambda conn, _: conn.execute(self._sql.exists, (key,)).fetchone() is not None
        )

    def write_text(self, path: str, content: str) -> None:
        """Atomically replace `path` with `content` (UTF-8)."""
        self.write_atomic(path, (content.encode("utf-8"),))

    def stat(self, path: str) -> StorageStat:
        """Size, mtime (server clock) and ino (the file's row id; new on every rewrite)."""
        key = self.key_for(path)
        node = self._run(path, lambda conn, _: self._node(conn, key))
        if node is None:
            raise _oserror(FileNotFoundError, errno.ENOENT, path)
        node_id, is_dir, size, mtime_ns = node
        return _stat(node_id, 0 if is_dir else size, mtime_ns)

    def _children(self, dir: str, is_dir: bool) -> list[str]:
        """Names in `dir`; a row whose name is no path component is left out (see
        `invalid_names`): a shared database's `..` must never become a path."""
        key = self.key_for(dir)
        rows = self._run(
            dir, lambda conn, _: conn.execute(self._sql.children, (key, is_dir)).fetchall()
        )
        return sorted(
            str(name)
            for name, child in rows
            if name_problem(name) is None and child == _child_key(key, name)
        )

    def list_files(self, dir: str, pattern: str) -> list[str]:
        """Full paths of the files directly in `dir` matching `pattern`, sorted."""
        names = [n for n in self._children(dir, False) if glob_match_name(n, pattern)]
        return [os.path.join(dir, n) for n in names]

    def read_text(self, path: str) -> str:
        """The whole file as text (invalid UTF-8 becomes U+FFFD)."""
        key = self.key_for(path)

        def op(conn: psycopg.Connection[Any], _: _Try) -> list[tuple[Any, ...]]:
            with conn.cursor(binary=True) as cur:
                return cur.execute(self._sql.all_data, (key,)).fetchall()

        rows = self._run(path, op)
        if not rows:
            raise _oserror(FileNotFoundError, errno.ENOENT, path)
        if rows[0][0]:
            raise _oserror(IsADirectoryError, errno.EISDIR, path)
        return b"".join(r[1] for r in rows if r[1] is not None).decode("utf-8", "replace")

    def read_text_prefix(self, path: str, max_bytes: int) -> str:
        """At most `max_bytes` from the start (only those rows are read)."""
        return utf8_prefix_text(self.read_bytes_range(path, 0, max(0, max_bytes)))

    def rename(self, path: str, new_path: str) -> None:
        """Move a file or directory in one transaction, replacing a file at `new_path`."""
        src, dst = self.key_for(path), self.key_for(new_path)
        s = self._sql
        moved: list[int] = []  # the row being moved (its id survives the move)

        def op(conn: psycopg.Connection[Any], attempt: _Try) -> None:
            with _tx(conn, attempt):
                self._rename(conn, src, dst, path, new_path, moved)

        def again(conn: psycopg.Connection[Any], first: _Try) -> None:
            if first.committing and moved:  # did the unconfirmed COMMIT happen?
                row = conn.execute(s.key_of, (moved[-1],)).fetchone()
                if row is not None and row[0] == dst:
                    return
            op(conn, _Try())

        self._run(path, op, again)

    def _rename(
        self,
        conn: psycopg.Connection[Any],
        src: str,
        dst: str,
        path: str,
        new_path: str,
        moved: list[int],
    ) -> None:
        s = self._sql
        a, b = sorted((self._lock_id("path", src), self._lock_id("path", dst)))
        conn.execute(s.xact_lock2, (a, b))
        node = self._node(conn, src)
        if node is None:
            raise _oserror(FileNotFoundError, errno.ENOENT, path)
        self._check_parent(conn, dst, new_path)
        if src == dst:
            return
        moved.append(node[0])
        target = self._node(conn, dst)
        parent, name = _split_key(dst)
        if not node[1]:
            if target is not None:
                if target[1]:
                    raise _oserror(IsADirectoryError, errno.EISDIR, new_path)
                conn.execute(s.delete_node, (target[0],))
            conn.execute(s.move_file, (dst, parent, name, node[0]))
            return
        if src == "":
            raise _oserror(OSError, errno.EBUSY, path)
        if target is not None and not target[1]:
            raise _oserror(NotADirectoryError, errno.ENOTDIR, new_path)
        if dst.startswith(src + "/"):
            raise _oserror(OSError, errno.EINVAL, new_path)
        if target is not None:
            if conn.execute(s.has_children, (dst,)).fetchone() is not None:
                raise _oserror(OSError, errno.ENOTEMPTY, new_path)
            conn.execute(s.delete_node, (target[0],))
        conn.execute(
            s.move_tree,
            {
                "src": src,
                "dst": dst,
                "n": len(src),
                "dparent": parent,
                "dname": name,
                "lo": src + "/",
                "hi": src + "0",  # '0' follows '/': the subtree is [src/, src0)
            },
        )

    def unlink(self, path: str) -> None:
        """Remove a file; FileNotFoundError when missing, IsADirectoryError for a directory."""
        key = self.key_for(path)
        s = self._sql
        removed: list[int] = []

        def op(conn: psycopg.Connection[Any], attempt: _Try) -> None:
            with _tx(conn, attempt):
                conn.execute(s.xact_lock, (self._lock_id("path", key),))
                row = conn.execute(s.delete_file, (key,)).fetchone()
                if row is None:
                    if conn.execute(s.exists, (key,)).fetchone() is not None:
                        raise _oserror(IsADirectoryError, errno.EISDIR, path)
                    raise _oserror(FileNotFoundError, errno.ENOENT, path)
                removed.append(int(row[0]))

        def again(conn: psycopg.Connection[Any], first: _Try) -> None:
            # An unconfirmed COMMIT that happened: the row is gone, and running the
            # delete again would wrongly say FileNotFoundError.
            if first.committing and removed:
                if conn.execute(s.key_of, (removed[-1],)).fetchone() is None:
                    return
            op(conn, _Try())

        self._run(path, op, again)

    def open_writer(self, path: str, flags: str = "a") -> PostgresSessionWriter:
        """An appending (`"a"`) or truncating (`"w"`) writer; creates the file if missing."""
        if flags not in ("a", "w"):
            raise ValueError(f"unsupported writer flags {flags!r} (use 'a' or 'w')")
        key = self.key_for(path)
        s = self._sql

        # Idempotent, so it may run twice: creating a file that exists opens it, and
        # truncating a truncated file changes nothing.
        def op(conn: psycopg.Connection[Any], attempt: _Try) -> PostgresSessionWriter:
            with _tx(conn, attempt):
                conn.execute(s.xact_lock, (self._lock_id("path", key),))
                self._check_parent(conn, key, path)
                node = self._node(conn, key)
                if node is None:
                    parent, name = _split_key(key)
                    row = conn.execute(s.new_file, (key, parent, name)).fetchone()
                    assert row is not None
                    node_id = int(row[0])
                else:
                    if node[1]:
                        raise _oserror(IsADirectoryError, errno.EISDIR, path)
                    node_id = node[0]
                    if flags == "w":
                        conn.execute(s.truncate_lines, (node_id,))
                        conn.execute(s.reset_file, (node_id,))
                state = conn.execute(s.writer_state, (node_id,)).fetchone()
                assert state is not None
            return PostgresSessionWriter(
                self, node_id, path, int(state[0]), bool(state[1]), int(state[2])
            )

        return self._run(path, op)

    # -- capabilities ------------------------------------------------------------------------

    def iter_chunks(self, path: str, chunk_size: int = 1 << 20) -> Iterator[bytes]:
        """The file's bytes in `chunk_size` pieces, from one consistent snapshot.

        FileNotFoundError is raised by this call; the rows are then streamed in
        batches of about 4 MB inside one REPEATABLE READ transaction, so a
        concurrent rewrite never tears the read. A connection lost before the
        first chunk is retried; one lost after it fails the read (OSError).
        """
        if chunk_size <= 0:
            raise ValueError("chunk_size must be positive")
        key = self.key_for(path)
        self._run(path, lambda conn, _: self._file_node(conn, key, path))
        return self._stream(key, path, chunk_size)

    def _stream(self, key: str, path: str, chunk_size: int) -> Iterator[bytes]:
        with _io(path):
            first = _Try()
            started = False
            try:
                for chunk in self._stream_once(key, path, chunk_size, first):
                    started = True
                    yield chunk
                return
            except psycopg.Error as exc:
                if started or not first.lost(exc):
                    raise
                _log.info("%s: PostgreSQL connection lost (%s); reading again", path, exc)
            self._purge_idle()
            yield from self._stream_once(key, path, chunk_size, _Try())

    def _stream_once(self, key: str, path: str, chunk_size: int, attempt: _Try) -> Iterator[bytes]:
        s = self._sql
        buffer = bytearray()
        with self._conn() as pooled, attempt.on(pooled) as conn, conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            row = conn.execute(s.file_for_read, (key,)).fetchone()
            if row is None:
                raise _oserror(FileNotFoundError, errno.ENOENT, path)
            file_id, size = int(row[0]), int(row[1])
            pos = 0
            with conn.cursor(binary=True) as cur:
                while pos < size:
                    rows = cur.execute(s.batch, (file_id, pos, pos + _READ_BATCH)).fetchall()
                    if not rows:
                        break
                    for off, data in rows:
                        buffer += data
                        pos = int(off) + len(data)
                    while len(buffer) >= chunk_size:
                        yield bytes(buffer[:chunk_size])
                        del buffer[:chunk_size]
        if buffer:
            yield bytes(buffer)

    def read_bytes_range(self, path: str, offset: int, length: int) -> bytes:
        """Up to `length` bytes from `offset` (negative: from the end); reads only those rows."""
        key = self.key_for(path)

        def op(conn: psycopg.Connection[Any], _: _Try) -> bytes:
            node_id, _is_dir, size, _mtime = self._file_node(conn, key, path)
            start = max(0, size + offset) if offset < 0 else offset
            end = min(size, start + max(0, length))
            if start >= end:
                return b""
            with conn.cursor(binary=True) as cur:
                rows = cur.execute(self._sql.range, {"s": start, "e": end, "id": node_id})
                return b"".join(r[0] for r in rows.fetchall())

        return self._run(path, op)

    def write_atomic(self, path: str, chunks: Iterable[bytes]) -> None:
        """Replace `path` with the concatenated chunks in one transaction (a new inode).

        The content is streamed with COPY into a new, nameless file row that takes
        the name at commit; a failure (also one raised by `chunks`) rolls
        everything back, leaving the old file as it was.
        """
        key = self.key_for(path)
        s = self._sql
        source = _Replayable(chunks)
        created: list[int] = []  # the new file row: it exists iff the transaction committed

        def op(conn: psycopg.Connection[Any], attempt: _Try) -> None:
            with _tx(conn, attempt):
                created.append(self._write_atomic(conn, key, path, source))

        def again(conn: psycopg.Connection[Any], first: _Try) -> None:
            if first.committing and created:  # did the unconfirmed COMMIT happen?
                row = conn.execute(s.key_of, (created[-1],)).fetchone()
                if row is not None and row[0] == key:
                    return
                # Not committed (or replaced by another host since: then ours comes last).
            if not source.replayable:  # the chunks are spent: nothing to write again
                assert first.error is not None
                raise first.error
            op(conn, _Try())

        self._run(path, op, again)

    def _write_atomic(
        self, conn: psycopg.Connection[Any], key: str, path: str, chunks: Iterable[bytes]
    ) -> int:
        s = self._sql
        commit_mode = "off" if self._bulk else None
        conn.execute(s.write_lock, (self._lock_id("path", key), commit_mode))
        self._check_parent(conn, key, path)
        old = self._node(conn, key)
        if old is not None and old[1]:
            raise _oserror(IsADirectoryError, errno.EISDIR, path)
        parent, name = _split_key(key)
        row = conn.execute(s.new_file, (None, parent, name)).fetchone()
        assert row is not None
        node_id = int(row[0])
        scan = _Scan()
        size = newlines = 0
        ends = True
        with conn.cursor() as cur, cur.copy(s.copy_lines) as copy:
            copy.set_types(["int8", "int8", "bytea", "text"])
            for line in _raw_lines(chunks):
                ends = line.endswith(b"\n")
                text = scan.feed(line[:-1] if ends else line)
                copy.write_row((node_id, size, line, text))
                size += len(line)
                newlines += ends
        if old is not None:
            conn.execute(s.delete_node, (old[0],))
        conn.execute(
            s.publish,
            {
                "key": key,
                "size": size,
                "lines": newlines,
                "ends": ends,
                **_meta_params(scan),
                "msgs": scan.messages,
                "id": node_id,
            },
        )
        return node_id

    def fsync_dir(self, path: str) -> None:
        """Structural changes commit synchronously: only checks that the directory exists."""
        key = self.key_for(path)
        row = self._run(path, lambda conn, _: conn.execute(self._sql.is_dir, (key,)).fetchone())
        if row is None:
            raise _oserror(FileNotFoundError, errno.ENOENT, path)
        if not row[0]:
            raise _oserror(NotADirectoryError, errno.ENOTDIR, path)

    def list_dirs(self, dir: str) -> list[str]:
        """Full paths of the directories directly in `dir`, sorted ([] if missing)."""
        return [os.path.join(dir, n) for n in self._children(dir, True)]

    def remove_tree(self, path: str) -> None:
        """Remove a directory and its subtree in one statement; missing is fine."""
        key = self.key_for(path)

        def op(conn: psycopg.Connection[Any], attempt: _Try) -> None:  # idempotent
            with _tx(conn, attempt):
                node = self._node(conn, key)
                if node is None:
                    return
                if not node[1]:
                    raise _oserror(NotADirectoryError, errno.ENOTDIR, path)
                if key == "":
                    conn.execute(self._sql.delete_children, ("",))  # the root itself stays
                else:
                    conn.execute(self._sql.delete_node, (node[0],))  # children cascade

        self._run(path, op)

    def acquire_lock(self, path: str) -> PostgresSessionLock:
        """Take the session's writer lock for every host using this store.

        A session-level advisory lock on a dedicated connection: PostgreSQL drops
        it when this process dies or its host stops answering TCP keepalives.
        """
        key = self.key_for(path)
        return PostgresSessionLock(self, path, self._lock_id("writer", key))

    def blob_store(self) -> PostgresBlobStore:
        """The blob store in this schema, shared by every host."""
        if self._blobs is None:
            self._blobs = PostgresBlobStore(self)
        return self._blobs

    def list_session_meta(
        self, dir: str | None = None, *, with_text: bool = False
    ) -> list[SessionMeta]:
        """Metadata of the `*.jsonl` files directly in `dir` (None: every one under
        `<root>/sessions`), sorted by path, from the metadata columns alone."""
        s = self._sql
        if dir is None:
            query = getattr(s, f"meta_tree_{with_text}")
            params: tuple[str, ...] = ("sessions/", "sessions0")
        else:
            query = getattr(s, f"meta_dir_{with_text}")
            params = (self.key_for(dir),)
        base = dir
        rows = self._run(dir or self.root, lambda conn, _: conn.execute(query, params).fetchall())
        metas = []
        for row in rows:
            key = str(row[0])
            if not _key_ok(key) or (base is not None and _split_key(key)[0] != params[0]):
                continue  # a row readers skip (`invalid_names`)
            if base is not None:
                path = os.path.join(base, _split_key(key)[1])
            else:
                path = self.path_for(key)
            mtime_ns = int(row[3])
            common: dict[str, Any] = {
                "path": path,
                "size": int(row[1]),
                "line_count": int(row[2]),
                "mtime": _EPOCH + timedelta(microseconds=mtime_ns // 1000),
                "mtime_ns": mtime_ns,
                "ino": int(row[18]),
            }
            if row[4] != _SESSION:
                metas.append(SessionMeta(valid=False, **common))
                continue
            slot, slot_title, header_title, name, short = row[7:12]
            metas.append(
                SessionMeta(
                    valid=True,
                    id=row[5],
                    cwd=row[6],
                    title=listing_title(
                        session_name(head_title(slot, slot_title, header_title), name), short
                    ),
                    title_source=row[12],
                    parent_session=row[13],
                    created=row[14],
                    message_count=int(row[15]),
                    first_message=row[16],
                    last_activity_ms=int(row[17]) if row[17] is not None else None,
                    all_messages_text=(row[19] or "") if with_text else None,
                    **common,
                )
            )
        metas.sort(key=lambda m: m.path)
        return metas

    def set_mtime(self, path: str, mtime_ns: int) -> None:
        """Set a file's or directory's mtime (like `os.utime`; used by imports)."""
        key = self.key_for(path)
        commit_mode = "off" if self._bulk else None
        cur = self._run(
            path, lambda conn, _: conn.execute(self._sql.set_mtime, (mtime_ns, commit_mode, key))
        )
        if cur.rowcount == 0:
            raise _oserror(FileNotFoundError, errno.ENOENT, path)


def _meta_params(scan: _Scan) -> dict[str, Any]:
    return {
        "state": scan.state,
        "hid": scan.header_id,
        "cwd": scan.cwd,
        "slot": scan.slot,
        "stitle": scan.slot_title,
        "htitle": scan.header_title,
        "tsrc": scan.title_source,
        "name": scan.name,
        "short": scan.short_summary,
        "psess": scan.parent_session,
        "created": scan.created,
        "first": scan.first_message,
        "act": scan.activity,
    }


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
        ends = data.endswith(b"\n")
        newlines = len(pieces) - 1
        expected = self._off

        def op(conn: psycopg.Connection[Any], _: _Try) -> int | None:
            return self._append_once(conn, data, complete, newlines, ends, expected)

        def again(conn: psycopg.Connection[Any], _: _Try) -> int | None:
            # The first try's connection died: maybe before, maybe after its commit.
            # Its bytes at the offset it expected mean it committed.
            with conn.transaction():
                row = conn.execute(s.lock_file_row, (self._id,)).fetchone()
                if row is None:
                    return None  # the file was replaced or removed meanwhile
                if conn.execute(s.line_at, (self._id, expected, data)).fetchone() is not None:
                    self._state = int(row[2])
                    return expected
                return self._append_once(conn, data, complete, newlines, ends, expected)

        off = self._storage._run(self.path, op, again)
        if off is not None:
            self._off = off + len(data)
        self._ends = ends

    def _append_once(
        self,
        conn: psycopg.Connection[Any],
        data: bytes,
        complete: Sequence[bytes],
        newlines: int,
        ends: bool,
        expected: int,
    ) -> int | None:
        """Append `data`; the offset it landed at, None when the file is gone."""
        storage = self._storage
        s = storage._sql
        if self._state == _AWAITING_HEADER:
            return self._append_slow(conn, data, complete, newlines, ends, expected)
        scan = _Scan(self._state, line_no=2)  # past any title slot
        texts = [t for t in (scan.feed(p) for p in complete) if t]
        row = conn.execute(
            s.append,
            {
                "n": len(data),
                "nl": newlines,
                "ends": ends,
                "msgs": scan.messages,
                "first": scan.first_message,
                "act": scan.activity,
                "name_set": scan.name_set,
                "name": scan.name,
                "short": scan.short_summary,
                "id": self._id,
                "off": expected,
                "sync": "on" if storage.durable_appends else "off",
                "data": data,
                "text": " ".join(texts) or None,
            },
        ).fetchone()
        if row is not None:
            return int(row[0])
        size = conn.execute(s.file_size, (self._id,)).fetchone()
        if size is not None and int(size[0]) < expected:
            raise _shrunk(self.path, int(size[0]), expected)
        return None  # the file was replaced or removed: the bytes go nowhere

    def _append_slow(
        self,
        conn: psycopg.Connection[Any],
        data: bytes,
        complete: Sequence[bytes],
        newlines: int,
        ends: bool,
        expected: int,
    ) -> int | None:
        """An append while the header is still to come: read and update the state."""
        s = self._storage._sql
        with conn.transaction():
            row = conn.execute(s.lock_file_row, (self._id,)).fetchone()
            if row is None:
                return None  # the file was replaced or removed: the bytes go nowhere
            size, line_count, state = int(row[0]), int(row[1]), int(row[2])
            if size < expected:
                raise _shrunk(self.path, size, expected)
            scan = _Scan(state, line_no=int(line_count))
            # A title slot read by an earlier write (the header is still to come).
            scan.slot, scan.slot_title = bool(row[3]), row[4]
            scan.slot_source = scan.title_source = row[5]
            texts = [t for t in (scan.feed(p) for p in complete) if t]
            conn.execute(
                s.append_slow,
                {"n": len(data), "nl": newlines, "ends": ends, **_meta_params(scan)}
                | {"msgs": scan.messages, "id": self._id},
            )
            conn.execute(s.insert_line, (self._id, size, data, " ".join(texts) or None))
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
            row = self._storage._run(
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


_fork_lock = threading.Lock()
"""Serializes a child's first use of an inherited storage (`_pool_here`)."""

_held_locks: weakref.WeakSet[PostgresSessionLock] = weakref.WeakSet()
"""Every `PostgresSessionLock` of this process that holds its lock (for the fork hook)."""


def _forked() -> None:
    """In a forked child: a new `_fork_lock` (another thread may have held the old one),
    and the child's copies of the parent's lock sockets closed (the server keeps a
    connection, and its lock, while any process has its socket open). The connections
    themselves are kept, never freed here: see the module docs."""
    global _fork_lock
    _fork_lock = threading.Lock()
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
        self._conninfo = storage._conninfo
        self._lock_id = lock_id
        me = f"sessiontree pid {os.getpid()} on {socket.gethostname()}"[:63]
        self._kwargs = dict(storage._connect_kwargs)
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
        """Unlock by closing the lock's connection (idempotent); in a forked child,
        let go of it without a word to the server (the lock is the parent's)."""
        conn, self._conn = self._conn, None
        _held_locks.discard(self)
        if conn is None:
            return
        if self._owner != process_id():
            keep_forever(conn)  # freeing it would warn; closing it would unlock the parent
            return
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


class PostgresBlobStore:
    """Content-addressed blobs in the store's `blobs` table (`BlobStoreLike`,
    `CollectableBlobStore`).

    Inserts are insert-if-absent, so hosts putting the same image race harmlessly;
    a blob's image extensions are remembered so an export can recreate the
    `<hash>.<ext>` sidecars a file store has. A blob's mtime (`created_at`, the
    server's clock) is its last put: a re-put refreshes it when it is over a minute
    old, so `gc` (which deletes only blobs older than 10 minutes, checked in the
    DELETE itself) never takes a blob a writer is about to reference.
    """

    def __init__(self, storage: PostgresSessionStorage) -> None:
        self._storage = storage
        self.dir = os.path.join(storage.root, "blobs")
        s = sql.Identifier(storage.schema)
        # The server hashes the stored bytes, so a re-put or `verify` never fetches them.
        self._state_sql = sql.SQL(
            "SELECT exts, created_at < now() - interval '60 seconds', "
            "encode(sha256(data), 'hex') = hash FROM {s}.blobs WHERE hash = %s"
        ).format(s=s)
        self._repair_sql = sql.SQL(
            "UPDATE {s}.blobs SET data = %s, size = %s, created_at = now() "
            "WHERE hash = %s RETURNING exts"
        ).format(s=s)
        self._verify_sql = sql.SQL(
            "SELECT encode(sha256(data), 'hex') = hash FROM {s}.blobs WHERE hash = %s"
        ).format(s=s)

    def put(self, data: bytes, mime_type: str | None = None) -> BlobPutResult:
        """Store `data` under its sha256 (sent only when the blob is new or damaged)."""
        digest = hashlib.sha256(data).hexdigest()
        ext = blob_extension_for_mime_type(mime_type)
        s = self._storage._sql
        path = os.path.join(self.dir, digest)

        def op(conn: psycopg.Connection[Any], _: _Try) -> None:  # content-addressed: idempotent
            row = conn.execute(self._state_sql, (digest,)).fetchone()
            if row is not None and not row[2]:
                # Stored bytes that do not hash to their name: the caller's are the true ones.
                _warn_replaced(f"{path} (table {self._storage.schema}.blobs)")
                row = conn.execute(self._repair_sql, (bytes(data), len(data), digest)).fetchone()
            elif row is not None and row[1]:
                # A fresh use keeps the blob from gc; if gc took it meanwhile, insert it.
                row = conn.execute(s.blob_touch, (digest,)).fetchone()
            if row is None:
                conn.execute(s.blob_insert, (digest, bytes(data), len(data), [ext] if ext else []))
            if ext and (row is None or ext not in row[0]):
                conn.execute(s.blob_add_ext, (ext, digest, ext))

        self._storage._run(self.dir, op)
        return BlobPutResult(
            digest, path, BLOB_REF_PREFIX + digest, f"{path}.{ext}" if ext else None
        )

    def get(self, hash: str) -> bytes | None:
        """The blob's bytes, or None when missing or damaged (a warning names it);
        InvalidBlobRefError for a bad hash."""
        digest = check_hash(hash)

        def op(conn: psycopg.Connection[Any], _: _Try) -> tuple[Any, ...] | None:
            with conn.cursor(binary=True) as cur:
                return cur.execute(self._storage._sql.blob_get, (digest,)).fetchone()

        row = self._storage._run(self.dir, op)
        if row is None:
            return None
        data = bytes(row[0])
        if not _intact(data, digest):
            _warn_damaged(
                f"{os.path.join(self.dir, digest)} (table {self._storage.schema}.blobs)", len(data)
            )
            return None
        return data

    def verify(self, hash: str) -> BlobStatus:
        """Whether the blob is there and holds bytes that hash to its name (the server hashes)."""
        digest = check_hash(hash)
        row = self._storage._run(
            self.dir, lambda conn, _: conn.execute(self._verify_sql, (digest,)).fetchone()
        )
        if row is None:
            return "missing"
        return "ok" if row[0] else "damaged"

    def has(self, hash: str) -> bool:
        """Whether the blob exists; InvalidBlobRefError for a bad hash."""
        digest = check_hash(hash)
        return self._query(self._storage._sql.blob_has, (digest,)) != []

    def sync(self) -> None:
        """Nothing to do: blob inserts commit synchronously."""

    def add_extension(self, hash: str, ext: str) -> None:
        """Remember a `<hash>.<ext>` sidecar of a stored blob (file-store imports)."""
        digest = check_hash(hash)
        if not is_blob_extension(ext):
            raise ValueError(f"invalid blob extension {ext!r}")
        self._storage._run(
            self.dir,
            lambda conn, _: conn.execute(self._storage._sql.blob_add_ext, (ext, digest, ext)),
        )

    def list(self) -> list[tuple[str, list[str]]]:
        """Every blob's hash and its sidecar extensions, by hash."""
        rows = self._query(self._storage._sql.blob_list)
        return [(str(h), [str(e) for e in exts if is_blob_extension(e)]) for h, exts in rows]

    def list_hashes(self) -> builtins.list[str]:
        """Every stored blob's hash, sorted."""
        rows = self._query(self._storage._sql.blob_hashes)
        return [str(r[0]) for r in rows]

    def list_info(self) -> builtins.list[BlobInfo]:
        """Every stored blob with its size and mtime (server clock), sorted by hash."""
        rows = self._query(self._storage._sql.blob_info)
        return [
            BlobInfo(
                str(h), int(size), float(mtime), tuple(e for e in exts if is_blob_extension(e))
            )
            for h, size, mtime, exts in rows
        ]

    def mtime(self, hash: str) -> float | None:
        """When the blob was last put (epoch seconds, server clock), None when missing."""
        digest = check_hash(hash)
        rows = self._query(self._storage._sql.blob_mtime, (digest,))
        return float(rows[0][0]) if rows else None

    def now(self) -> float:
        """The server's clock (epoch seconds): what `mtime` is measured on."""
        ((now,),) = self._query(self._storage._sql.blob_now)
        return float(now)

    def delete(self, hash: str, *, min_age_seconds: float = 0.0) -> bool:
        """Remove the blob unless it was put less than `min_age_seconds` ago (one statement,
        so a concurrent re-put either keeps it or comes after); True when removed."""
        digest = check_hash(hash)
        s = self._storage._sql

        def op(conn: psycopg.Connection[Any], _: _Try) -> bool:
            cur = conn.execute(s.blob_delete, (digest, float(min_age_seconds)))
            return bool(cur.rowcount > 0)

        def again(conn: psycopg.Connection[Any], _: _Try) -> bool:
            # The first DELETE may have gone through unconfirmed: gone now counts as removed.
            return op(conn, _) or conn.execute(s.blob_has, (digest,)).fetchone() is None

        return self._storage._run(self.dir, op, again)

    def _query(
        self, query: sql.Composed, params: tuple[Any, ...] = ()
    ) -> builtins.list[tuple[Any, ...]]:
        return self._storage._run(self.dir, lambda conn, _: conn.execute(query, params).fetchall())


def new_schema_name(prefix: str = "sessiontree") -> str:
    """A fresh, valid schema name (`<prefix>_<random hex>`), e.g. for tests."""
    return validate_schema_name(f"{prefix}_{secrets.token_hex(6)}")
