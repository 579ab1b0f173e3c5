"""OpenCode's SQLite database (`opencode.db`), read without ever getting in OpenCode's way.

A session of the database is named by a path under the database file,
`<data dir>/opencode.db/<session id>`, so it can be listed, shown and imported as
any session file is.

**Never a lock that blocks OpenCode.** OpenCode opens its database in WAL mode.
While OpenCode runs, the `-wal` file exists and a read-only connection
(`mode=ro`) reads the last committed state from the database and the WAL; in WAL
mode a reader never blocks the writer (it only keeps a checkpoint from going past
what it reads, for the few milliseconds it reads). When there is no `-wal` file
(OpenCode is not running: it checkpoints and removes it on close), the database is
opened `immutable=1`: no lock at all, and no `-wal`/`-shm` file is created beside
the user's database. A rollback journal (`-journal`, a database not in WAL mode
being written) means a write is half done: the database is skipped, with an
error that names it. Every query of one session runs in one read transaction, so
what is read is one committed state.

Anything that goes wrong (the database is locked past a short wait, damaged, not
an OpenCode database) is an OSError naming the database: a listing passes over it
with a warning, a command reports it; it is never fatal to the rest.

**Rows are untrusted.** A session id becomes a path (`<db>/<id>`): a row whose id
is not a safe file name (a separator, `..`, a NUL; an absolute path would name any
file) is skipped with a warning. A timestamp of another type or out of range reads
as 0, and the parent links are followed once each, however they loop.
"""

from __future__ import annotations

import logging
import math
import os
import sqlite3
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from typing import Any

from sessiontree._util.fs import open_read
from sessiontree.foreign._records import Damaged
from sessiontree.foreign.opencode import CHILD_DEPTH, OpenCodeSession
from sessiontree.format import loads_line
from sessiontree.layout import is_safe_name

__all__ = [
    "DatabaseError",
    "DbSession",
    "epoch_ms",
    "is_opencode_db",
    "list_db_sessions",
    "load_db_session",
    "open_db",
    "session_bytes",
    "split_db_path",
    "usable_id",
]

log = logging.getLogger("sessiontree")

_BUSY_TIMEOUT = 0.25
_SQLITE_MAGIC = b"SQLite format 3\x00"
_BYTES = (
    "octet_length(data)" if sqlite3.sqlite_version_info >= (3, 43) else "length(CAST(data AS BLOB))"
)
_MAX_MS = (2**63 - 1) // 1_000_000  # 2262-04-11: its nanoseconds still fit in 64 bits


class DatabaseError(OSError):
    """The database cannot be read now (named in the message)."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(0, reason, path)
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.filename}: {self.reason}"


def is_opencode_db(path: str) -> bool:
    """Whether `path` is an SQLite database file (by its first bytes)."""
    try:
        with open_read(path) as f:
            return f.read(16) == _SQLITE_MAGIC
    except OSError:
        return False


def split_db_path(path: str) -> tuple[str, str] | None:
    """(database, session id) of a `<db file>/<session id>` path, else None."""
    database, name = os.path.split(os.path.abspath(path))
    if not name or not os.path.isfile(database) or not is_opencode_db(database):
        return None
    return database, name


def _uri(path: str, immutable: bool) -> str:
    query = "mode=ro&immutable=1" if immutable else "mode=ro"
    return f"file:{urllib.parse.quote(os.path.abspath(path))}?{query}"


@contextmanager
def open_db(path: str) -> Iterator[sqlite3.Connection]:
    """A read-only connection (see the module doc); DatabaseError when it cannot be had.

    SQLite keeps `-journal`, `-wal` and `-shm` beside the real file of a database
    reached through a symlink: they are looked for there. A `-wal` without its `-shm`
    (no SQLite has the database open: a copied store, a WAL that is garbage) is not
    read: a reader would create the `-shm`; the database reads as last checkpointed.
    """
    real = os.path.realpath(path)
    try:
        journal = os.path.getsize(real + "-journal")
    except FileNotFoundError:
        journal = 0
    except OSError as exc:
        raise DatabaseError(path, f"cannot be read: {exc.strerror or exc}") from None
    if journal > 0:
        raise DatabaseError(path, "being written (a rollback journal is present); skipped")
    immutable = not (os.path.exists(real + "-wal") and os.path.exists(real + "-shm"))
    try:
        conn = sqlite3.connect(
            _uri(real, immutable),
            uri=True,
            timeout=_BUSY_TIMEOUT,
            isolation_level=None,
            check_same_thread=False,
        )
    except sqlite3.Error as exc:
        raise DatabaseError(path, f"cannot be opened: {exc}") from None
    with closing(conn):
        try:
            conn.execute("PRAGMA query_only = 1")
            tables = {
                row[0]
                for row in conn.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table' "
                    "AND name IN ('session', 'message', 'part')"
                )
            }
        except sqlite3.Error as exc:
            raise DatabaseError(path, _why(exc)) from None
        if tables != {"session", "message", "part"}:
            raise DatabaseError(path, "not an OpenCode database (no session/message/part tables)")
        yield conn


def _why(exc: sqlite3.Error) -> str:
    text = str(exc)
    if "locked" in text or "busy" in text:
        return f"being written ({text}); skipped"
    return f"cannot be read: {text}"


@contextmanager
def _reading(path: str, conn: sqlite3.Connection) -> Iterator[None]:
    """One read transaction (one committed state); sqlite errors as DatabaseError."""
    try:
        conn.execute("BEGIN")
        try:
            yield
        finally:
            conn.execute("COMMIT")
    except sqlite3.Error as exc:
        raise DatabaseError(path, _why(exc)) from None


@dataclass(frozen=True, slots=True)
class DbSession:
    """A session row, with what tells whether it changed: its messages' count and
    last update (OpenCode updates a message row when its response completes) and its
    parts' count (the parts of a response come before that update)."""

    id: str
    parent_id: str | None
    directory: str
    title: str
    created_ms: int
    updated_ms: int
    messages: int
    parts: int
    parts_updated: int = 0
    """Its parts' `time_updated`, summed and last, as one number (a part rewritten in
    place changes it)."""


def epoch_ms(value: object) -> int:
    """A timestamp column as epoch milliseconds; 0 for what OpenCode never writes there
    (text, a blob, NaN or infinity, a time before 1970 or one whose nanoseconds, as a
    session's modification time, would not fit in 64 bits)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    if isinstance(value, float) and not math.isfinite(value):
        return 0
    return int(value) if 0 <= value <= _MAX_MS else 0


def usable_id(session_id: object) -> bool:
    """Whether a session id can name a session (`<db>/<id>`): a safe file name."""
    return isinstance(session_id, str) and is_safe_name(session_id)


def list_db_sessions(
    path: str, session_id: str | None = None, *, warn: bool = False
) -> list[DbSession]:
    """Every session of the database, or the one with `session_id` (DatabaseError when
    it cannot be read). `warn`: log each row skipped for its id (see the module doc)."""
    # the identity on disk noted before the read transaction begins: what it reads is
    # then at least as new as the identity its part signals are cached under
    disk = _disk_identity(os.path.realpath(path))
    with open_db(path) as conn, _reading(path, conn):
        return _sessions(conn, session_id, path if warn else None, path, disk)


def _columns(conn: sqlite3.Connection, table: str) -> frozenset[str]:
    """The columns `table` has (`PRAGMA table_info`): a database of another OpenCode
    release is read by the columns that are there."""
    return frozenset(str(row[1]) for row in conn.execute(f"PRAGMA table_info({table})"))


def _pick(columns: frozenset[str], prefix: str, name: str) -> str:
    """`prefix.name` when the column exists, else NULL (read as absent)."""
    return f"{prefix}.{name}" if name in columns else "NULL"


# The part signal of each database, as last computed: (the database's identity on
# disk, its parts' signal per session). A process that lists often (the web app,
# `archive --watch`) reads the part table again only when the database changed.
_PART_SIGNALS: dict[str, tuple[tuple[int, ...], dict[str, tuple[int, int, int]]]] = {}
_PART_SIGNALS_LOCK = threading.Lock()


def _disk_identity(path: str) -> tuple[int, ...]:
    """What changes on disk with any committed write: the database file's and its
    WAL's inode, size and mtime (0s for a file that is not there)."""
    found: list[int] = []
    for name in (path, path + "-wal"):
        try:
            st = os.stat(name)
        except OSError:
            found += [0, 0, 0]
        else:
            found += [st.st_ino, st.st_size, st.st_mtime_ns]
    return tuple(found)


def _part_signals(
    conn: sqlite3.Connection,
    path: str | None,
    part_columns: frozenset[str],
    disk: tuple[int, ...] | None = None,
) -> dict[str, tuple[int, int, int]]:
    """Per session: its parts' count, last `time_updated` and sum of `time_updated`.

    A part updated in place (OpenCode rewrites a tool part as it runs, and marks old
    tool outputs compacted long after) changes no count and no message row; OpenCode
    sets its `time_updated`, which moves the session's last update or the sum. No index
    of OpenCode's has `time_updated`, so this is one pass over the part table's rows
    (their leading columns: the `data` after them, in overflow pages for a big part, is
    not read), done only when the database changed on disk since the last one (see
    `_PART_SIGNALS`). Without a `time_updated` column, the count alone (from the
    session index). `disk`: the database's identity noted before `conn`'s read
    transaction began (else noted now, and nothing is cached: a write committed
    between the transaction's start and now would be cached as not there)."""
    if "session_id" not in part_columns:
        return {}
    if "time_updated" not in part_columns:
        return {
            str(sid): (int(count), 0, 0)
            for sid, count in conn.execute(
                "SELECT session_id, COUNT(*) FROM part GROUP BY session_id"
            )
        }
    key = os.path.realpath(path) if path is not None else None
    cacheable = disk is not None
    if disk is None and key is not None:
        disk = _disk_identity(key)
    if key is not None:
        with _PART_SIGNALS_LOCK:
            cached = _PART_SIGNALS.get(key)
        if cached is not None and cached[0] == disk:
            return cached[1]
    signals: dict[str, tuple[int, int, int]] = {}
    for sid, count, last, total in conn.execute(
        "SELECT session_id, COUNT(*), MAX(time_updated), TOTAL(time_updated) "
        "FROM part GROUP BY session_id"
    ):
        signals[str(sid)] = (int(count), epoch_ms(last), int(total) & 0x7FFFFFFFFFFF)
    if cacheable and key is not None and disk is not None and disk == _disk_identity(key):
        with _PART_SIGNALS_LOCK:
            _PART_SIGNALS[key] = (disk, signals)
    return signals


def _sessions(
    conn: sqlite3.Connection,
    session_id: str | None = None,
    warn: str | None = None,
    path: str | None = None,
    disk: tuple[int, ...] | None = None,
) -> list[DbSession]:
    session_columns = _columns(conn, "session")
    if "id" not in session_columns:
        raise DatabaseError(
            path or warn or "opencode.db", "its session table has no id column; skipped"
        )
    message_columns = _columns(conn, "message")
    part_columns = _columns(conn, "part")
    where = "" if session_id is None else "WHERE s.id = ? "
    joined = "session_id" in message_columns
    count = "COUNT(m.rowid)" if joined else "0"
    last = f"MAX({_pick(message_columns, 'm', 'time_updated')})" if joined else "NULL"
    join = "LEFT JOIN message m ON m.session_id = s.id " if joined else ""
    pick = [_pick(session_columns, "s", c) for c in _SESSION_FIELDS]
    rows = conn.execute(
        f"SELECT s.id, {', '.join(pick)}, {count}, {last} FROM session s "
        f"{join}{where}GROUP BY s.id",
        () if session_id is None else (session_id,),
    ).fetchall()
    signals = _part_signals(conn, path or warn, part_columns, disk)
    found = []
    for row in rows:
        if not usable_id(row[0]):
            if warn is not None:
                log.warning(
                    "%s: a session row whose id %r cannot name a session: skipped", warn, row[0]
                )
            continue
        parts, part_last, part_sum = signals.get(row[0], (0, 0, 0))
        found.append(
            DbSession(
                row[0],
                row[1] if isinstance(row[1], str) and row[1] else None,
                row[2] if isinstance(row[2], str) else "",
                row[3] if isinstance(row[3], str) else "",
                epoch_ms(row[4]),
                max(epoch_ms(row[5]), epoch_ms(row[7])),
                int(row[6] or 0),
                parts,
                (part_sum * 1_000_003 + part_last) & 0x7FFF_FFFF_FFFF,
            )
        )
    return found


_SESSION_FIELDS = ("parent_id", "directory", "title", "time_created", "time_updated")


# Session columns and where `Session.Info` (what `opencode export` writes) keeps them.
_INFO = {
    "id": "id",
    "slug": "slug",
    "project_id": "projectID",
    "workspace_id": "workspaceID",
    "directory": "directory",
    "path": "path",
    "parent_id": "parentID",
    "title": "title",
    "version": "version",
    "agent": "agent",
}
_JSON_COLUMNS = frozenset({"summary_diffs", "revert", "permission", "goal", "model", "metadata"})


def _info(row: sqlite3.Row) -> dict[str, Any]:
    info: dict[str, Any] = {}
    time: dict[str, Any] = {}
    summary: dict[str, Any] = {}
    for column in row.keys():
        value = row[column]
        if value is None:
            continue
        if column in _JSON_COLUMNS and isinstance(value, str):
            try:
                value = loads_line(value)
            except (ValueError, UnicodeError):
                pass
        if column in _INFO:
            info[_INFO[column]] = value
        elif column.startswith("time_"):
            time[column[len("time_") :]] = value
        elif column.startswith("summary_"):
            summary[column[len("summary_") :]] = value
        elif column == "share_url":
            info["share"] = {"url": value}
        else:
            info[column] = value
    if time:
        info["time"] = time
    if summary:
        info["summary"] = summary
    return info


def _load(
    path: str,
    conn: sqlite3.Connection,
    session_id: str,
    depth: int,
    damaged: list[Damaged],
    seen: set[str],
) -> OpenCodeSession | None:
    """The session with its messages, parts and (down to `CHILD_DEPTH`) its children,
    each session once however the parent links loop (`seen`)."""
    seen.add(session_id)
    conn.row_factory = sqlite3.Row
    try:
        row = conn.execute("SELECT * FROM session WHERE id = ?", (session_id,)).fetchone()
    finally:
        conn.row_factory = None
    if row is None:
        return None
    size = 0
    parts: dict[str, list[dict[str, Any]]] = {}
    for part_id, message_id, data in conn.execute(
        "SELECT id, message_id, data FROM part WHERE session_id = ? ORDER BY message_id, id",
        (session_id,),
    ):
        size += len(data.encode("utf-8", "surrogatepass")) if isinstance(data, str) else 0
        value = _json(data)
        if value is None:
            damaged.append(Damaged(0, f"{path}: part {part_id}: not a JSON object"))
            continue
        value.update({"id": part_id, "sessionID": session_id, "messageID": message_id})
        parts.setdefault(str(message_id), []).append(value)
    messages: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
    for message_id, data in conn.execute(
        "SELECT id, data FROM message WHERE session_id = ? ORDER BY time_created, id",
        (session_id,),
    ):
        size += len(data.encode("utf-8", "surrogatepass")) if isinstance(data, str) else 0
        value = _json(data)
        if value is None:
            damaged.append(Damaged(0, f"{path}: message {message_id}: not a JSON object"))
            continue
        value.update({"id": message_id, "sessionID": session_id})
        messages.append((value, parts.get(str(message_id), [])))
    session = OpenCodeSession(
        _info(row), messages, os.path.join(os.path.abspath(path), session_id), size
    )
    if depth < CHILD_DEPTH and "parent_id" in _columns(conn, "session"):
        children = [
            r[0]
            for r in conn.execute(
                "SELECT id FROM session WHERE parent_id = ? ORDER BY time_created, id",
                (session_id,),
            )
            if usable_id(r[0]) and r[0] not in seen
        ]
        seen.update(children)  # a child also reached deeper down is read here, once
        for child_id in children:
            child = _load(path, conn, child_id, depth + 1, [], seen)
            if child is not None:
                session.children.append(child)
    return session


def _json(data: object) -> dict[str, Any] | None:
    """A row's JSON object, parsed as `JSON.parse` does (OpenCode wrote it with
    `JSON.stringify`: a string cut in the middle of an emoji holds a lone surrogate
    escape, which orjson refuses); None when it is no JSON object."""
    if not isinstance(data, str | bytes):
        return None
    try:
        value = loads_line(data)
    except (ValueError, UnicodeError):
        return None
    return value if isinstance(value, dict) else None


def load_db_session(path: str, session_id: str, *, children: bool = True) -> OpenCodeSession:
    """One session of the database with its messages and parts (and its child
    sessions'), read in one transaction. A row that is not JSON is skipped and
    reported. Raises DatabaseError, or FileNotFoundError for no such session."""
    damaged: list[Damaged] = []
    with open_db(path) as conn, _reading(path, conn):
        session = _load(path, conn, session_id, 0 if children else CHILD_DEPTH, damaged, set())
    if session is None:
        raise FileNotFoundError(2, "No such OpenCode session", os.path.join(path, session_id))
    session.damaged = damaged
    return session


@dataclass(frozen=True, slots=True)
class DbListing:
    """What a listing shows of a session that its row does not say."""

    first_prompt: str | None
    roles: dict[str, int]
    tool_calls: bool
    size: int
    last_ms: int | None


def session_bytes(path: str, session_id: str) -> int:
    """Bytes of the session's message and part rows."""
    with open_db(path) as conn, _reading(path, conn):
        total = 0
        for table in ("message", "part"):
            found = conn.execute(
                f"SELECT SUM({_BYTES}) FROM {table} WHERE session_id = ?", (session_id,)
            ).fetchone()
            total += int(found[0] or 0)
    return total


def describe_db_sessions(
    path: str, session_ids: list[str]
) -> dict[str, tuple[DbSession, DbListing]]:
    """Each session's row and `DbListing`, in one read of the database (a session no
    longer there is left out)."""
    found: dict[str, tuple[DbSession, DbListing]] = {}
    disk = _disk_identity(os.path.realpath(path))  # before the read (`list_db_sessions`)
    with open_db(path) as conn, _reading(path, conn):
        rows = {row.id: row for row in _sessions(conn, path=path, disk=disk)}
        for session_id in session_ids:
            if session_id in rows:
                found[session_id] = (rows[session_id], _describe(conn, session_id))
    return found


def _describe(conn: sqlite3.Connection, session_id: str) -> DbListing:
    """The first prompt, message roles and size of a session, reading its message rows
    (small: the content is in the parts) and the parts of its first prompts only."""
    roles: dict[str, int] = {}
    tool_calls = False
    first_prompt: str | None = None
    last_ms: int | None = None
    users: list[str] = []
    for message_id, data, updated in conn.execute(
        "SELECT id, data, time_updated FROM message WHERE session_id = ? ORDER BY time_created, id",
        (session_id,),
    ):
        value = _json(data) or {}
        role = value.get("role")
        if isinstance(role, str):
            roles[role] = roles.get(role, 0) + 1
        if role == "user":
            users.append(str(message_id))
        if value.get("finish") == "tool-calls":
            tool_calls = True
        last_ms = max(last_ms or 0, epoch_ms(updated)) or last_ms
    for message_id in users[:5]:
        texts = []
        for (data,) in conn.execute(
            # OpenCode joins a message's parts on its session too.
            "SELECT data FROM part WHERE message_id = ? AND session_id = ? ORDER BY id",
            (message_id, session_id),
        ):
            part = _json(data) or {}
            if (
                part.get("type") == "text"
                and isinstance(part.get("text"), str)
                and not part.get("synthetic")
                and not part.get("ignored")
            ):
                texts.append(part["text"])
        text = " ".join(" ".join(texts).split())
        if text:
            first_prompt = text
            break
    size = 0
    for table in ("message", "part"):
        found = conn.execute(
            f"SELECT SUM({_BYTES}) FROM {table} WHERE session_id = ?", (session_id,)
        ).fetchone()
        size += int(found[0] or 0)
    return DbListing(first_prompt, roles, tool_calls, size, last_ms)
