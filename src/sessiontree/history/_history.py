"""Prompt history: a small SQLite store for recalling and searching past prompts.

Separate from session files (those replay conversations; this serves the prompt
recall/search UX). One database, by default ``<agent dir>/history.db``, shared
with the TypeScript agents. xcsh's schema (the spec's), plus FTS5 prefix indexes
and delete/update triggers that their code never notices::

    history(id INTEGER PRIMARY KEY AUTOINCREMENT, prompt, created_at, cwd)
    history_fts                  # FTS5 external-content index over history.prompt
    history_ai/_ad/_au           # triggers keeping history_fts in sync

Each store's file is written as its own agent writes it. oh-my-pi 18 has a schema of
its own (`prompt TEXT NOT NULL UNIQUE`, `session_id`; 18.3.4 adds `use_count` and
its session index's tables) and reads no other (it fails with "no such column:
session_id" on a file of the schema above whose `user_version` is 1): a new file in
oh-my-pi's agent dir (`~/.omp/agent`, or `open(..., agent="omp")`) is created with
oh-my-pi 18.2.3's DDL, index, FTS table, trigger and `user_version` (1), exactly;
anywhere else with the schema above. A file in oh-my-pi's schema is used as it is,
nothing added: `add()` updates a prompt's row as oh-my-pi does (latest time and cwd,
no session, one more use), the prompt in oh-my-pi's form (`_omp_prompt`), and leaves
its other columns and tables alone. A file in the schema above found in oh-my-pi's
agent dir keeps (or gets back) `user_version` 0, which makes oh-my-pi convert it to
its own schema the next time it opens it.

`add()` never blocks on the database: rows go to a queue that a daemon thread
writes in batches, one transaction per batch. A batch that fails for a reason
other than the database being unusable is retried row by row, so one bad row
costs only itself (logged). Should the thread itself die, every later call
raises `SessionPersistenceError` saying how many prompts were not saved::

    history = HistoryStorage.open()
    history.add("fix the failing test", cwd="/repo")
    history.search("fail te", 10)  # [HistoryEntry(id=..., prompt='fix the failing test', ...)]

An instance belongs to the process that made it: its worker thread does not exist in
a forked child, and SQLite forbids using a connection across a fork (closing it
included: a rollback in the child would undo the parent's transaction in the
wal-index they share). In a child, `open()` makes the child its own instance; the
inherited one raises `InheritedHandleError` on every use, and its `close` (the
child's at-exit one too) touches neither its connections nor its thread.

`read_history` reads the same file without writing to it (no schema upgrade, no
file creation), for tools that only look: the CLI's `history`. Both read through
one query (`_select`), so they find the same prompts for the same text.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

from sessiontree._util.closing import ClosesOnExit, keep_forever, process_id
from sessiontree._util.env import agent_dir_or_default
from sessiontree.errors import InheritedHandleError, SessionPersistenceError, SessionTreeError
from sessiontree.layout import native_agent_of

__all__ = [
    "MAX_LIMIT",
    "MAX_QUERY_WORDS",
    "SCHEMA_VERSION",
    "HistoryEntry",
    "HistoryStorage",
    "read_history",
]

_log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
"""Format version in ``PRAGMA user_version`` of a file in the schema above; 0: only
TypeScript agents wrote it, or it is in oh-my-pi's store (whose `user_version` 1 means
oh-my-pi's own schema)."""

MAX_LIMIT = 1000
"""Upper bound of the ``limit`` of `get_recent` and `search`."""

MAX_QUERY_WORDS = 16
"""`search` uses the first this many distinct words of a query."""

_BUSY_TIMEOUT_S = 5.0

# strftime('%s') instead of unixepoch(): unixepoch() needs SQLite >= 3.38, and a
# schema whose default calls it breaks every older SQLite that opens this file.
_CREATE_TABLE = """CREATE TABLE IF NOT EXISTS history (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    prompt TEXT NOT NULL,
    created_at INTEGER NOT NULL DEFAULT (CAST(strftime('%s','now') AS INTEGER)),
    cwd TEXT
)"""

# prefix='1 2 3': without prefix indexes FTS5 answers a short prefix query (what
# an incremental search box sends first) by merging the doclists of every term
# with that prefix: at 100k prompts "t" took 25-30 ms, "the" 2-3 ms. With them,
# such a query reads one doclist (0.2 ms), for a database ~55% larger (39 -> 60
# MB) and background inserts ~80% slower (~70 us a prompt). The option is
# internal to FTS5: the TypeScript agents' insert trigger works unchanged.
_CREATE_FTS = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS history_fts"
    " USING fts5(prompt, content='history', content_rowid='id', prefix='1 2 3')"
)

# Names match the TypeScript agents' so that both create the same objects (two
# differently named insert triggers would index every prompt twice).
_SCHEMA = (
    _CREATE_TABLE,
    "CREATE INDEX IF NOT EXISTS idx_history_created_at ON history(created_at DESC)",
    _CREATE_FTS,
    """CREATE TRIGGER IF NOT EXISTS history_ai AFTER INSERT ON history BEGIN
    INSERT INTO history_fts(rowid, prompt) VALUES (new.id, new.prompt);
END""",
    """CREATE TRIGGER IF NOT EXISTS history_ad AFTER DELETE ON history BEGIN
    INSERT INTO history_fts(history_fts, rowid, prompt) VALUES ('delete', old.id, old.prompt);
END""",
    """CREATE TRIGGER IF NOT EXISTS history_au AFTER UPDATE ON history BEGIN
    INSERT INTO history_fts(history_fts, rowid, prompt) VALUES ('delete', old.id, old.prompt);
    INSERT INTO history_fts(rowid, prompt) VALUES (new.id, new.prompt);
END""",
)

# oh-my-pi 18.2.3's schema (src/session/history-storage.ts), as it creates a new file:
# the same statements, whitespace included, so that sqlite_master holds the same text.
# 18.3.4 adds its `use_count` column to such a file itself (ALTER TABLE, no rewrite).
_OMP_DATA_VERSION = 1
"""oh-my-pi's `HISTORY_DATA_VERSION`: below it, oh-my-pi rebuilds the table on open."""
_OMP_TABLE = """CREATE TABLE IF NOT EXISTS history (
\tid INTEGER PRIMARY KEY AUTOINCREMENT,
\tprompt TEXT NOT NULL UNIQUE,
\tcreated_at INTEGER NOT NULL DEFAULT (CAST(strftime('%s','now') AS INTEGER)),
\tcwd TEXT,
\tsession_id TEXT
)"""
_OMP_FTS = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS history_fts"
    " USING fts5(prompt, content='history', content_rowid='id')",
    """CREATE TRIGGER IF NOT EXISTS history_ai AFTER INSERT ON history BEGIN
\tINSERT INTO history_fts(rowid, prompt) VALUES (new.id, new.prompt);
END""",
    "INSERT INTO history_fts(history_fts) VALUES('rebuild')",
)
_OMP_SCHEMA = (
    _OMP_TABLE,
    "CREATE INDEX IF NOT EXISTS idx_history_created_at ON history(created_at DESC)",
    *_OMP_FTS,
    f"PRAGMA user_version = {_OMP_DATA_VERSION}",
)

_INSERT = "INSERT INTO history (prompt, created_at, cwd) VALUES (?, ?, ?)"
# oh-my-pi's table holds a prompt once (`prompt TEXT NOT NULL UNIQUE`): adding one it holds
# updates that row with the latest submission's time, cwd and session (none here), as
# oh-my-pi's own upsert does; 18.3.4's `use_count` counts the submissions.
_UPSERT = (
    _INSERT + " ON CONFLICT(prompt) DO UPDATE SET created_at = excluded.created_at,"
    " cwd = excluded.cwd"
)
_UPSERT_SESSION = ", session_id = NULL"
_UPSERT_COUNT = ", use_count = history.use_count + 1"
_LAST_PROMPT = "SELECT prompt FROM history ORDER BY id DESC LIMIT 1"
# Both reads pick the `limit` rows with the highest ids and only then sort them
# by (created_at, id). Ids grow in add() order, so those are the newest prompts,
# and the inner ORDER BY ... LIMIT stops after `limit` rows. Sorting the whole
# table or every FTS match by created_at instead cost 80 ms (get_recent: a burst
# of adds shares one created_at second, which the index cannot order by id) and
# 20-100 ms (search for a common prefix) at 100k prompts. The results differ
# only where created_at disagrees with insertion order: a clock that stepped
# back, or two processes adding within the same second or so.
_RECENT = """SELECT id, prompt, created_at, cwd FROM (
    SELECT id, prompt, created_at, cwd FROM history ORDER BY id DESC LIMIT ?
) ORDER BY created_at DESC, id DESC"""
_SEARCH = """SELECT id, prompt, created_at, cwd FROM history WHERE id IN (
    SELECT rowid FROM history_fts WHERE history_fts MATCH ? ORDER BY rowid DESC LIMIT ?
) ORDER BY created_at DESC, id DESC"""

_SURROGATES = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One stored prompt."""

    id: int
    prompt: str
    created_at: int
    """Seconds since the epoch, taken when `HistoryStorage.add` was called."""
    cwd: str | None


class HistoryStorage(ClosesOnExit):
    """Thread-safe prompt history backed by SQLite with an FTS5 index.

    Use `open` to share one instance per database file; the constructor makes a
    private one. Reads first wait for this instance's queued adds, so a read
    always sees every `add` made before it (no wait when nothing is queued).
    `path` is the resolved database path.
    """

    _registry: ClassVar[dict[str, HistoryStorage]] = {}
    _registry_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(
        self, db_path: str | os.PathLike[str] | None = None, *, agent: str | None = None
    ) -> None:
        omp = _agent_of(db_path, agent) == "omp"
        self.path = _resolve(db_path)
        _create_private_file(self.path)
        writer = _connect(self.path)
        reader: sqlite3.Connection | None = None
        try:
            _ensure_schema(writer, omp=omp)
            # In oh-my-pi's file a prompt is stored in oh-my-pi's form (`_omp_prompt`).
            self._omp_form = _prompt_is_unique(writer)
            reader = _connect(self.path, read_only=True)
            row = reader.execute(_LAST_PROMPT).fetchone()
        except BaseException:
            if reader is not None:
                reader.close()
            writer.close()
            raise
        self._owner = process_id()
        self._writer = writer  # used by the worker thread only
        self._reader = reader
        self._last_prompt: str | None = row[0] if row else None

        self._cond = threading.Condition()  # guards the queue, counters and flags
        self._pending: list[tuple[str, int, str | None]] = []
        self._queued = 0  # rows ever queued
        self._done = 0  # rows ever handled by the worker (written, or dropped on error)
        self._closing = False
        self._worker_exited = False
        self._error: SessionPersistenceError | None = None  # set if the worker died
        self._read_lock = threading.Lock()  # one reader connection shared by all threads
        self._closed = False
        self._worker = threading.Thread(
            target=self._run, name=f"sessiontree-history:{self.path}", daemon=True
        )
        self._worker.start()
        # The worker is a daemon so it never keeps the process alive; write what is
        # still queued at exit, since the last prompt before quitting is often the
        # one the user wants back.
        atexit.register(self.close)
        _instances.add(self)

    @classmethod
    def open(
        cls, db_path: str | os.PathLike[str] | None = None, *, agent: str | None = None
    ) -> HistoryStorage:
        """Return the open instance for `db_path` (default ``<agent dir>/history.db``).

        Paths are compared after resolving symlinks; after `close` a new instance
        is created. Missing directory and file are created private to the user.
        A new file gets the schema of the agent whose store it is in: `agent`
        (``"omp"``: oh-my-pi's; any other: the spec's), by default the agent whose
        agent dir the file is in by its name (`~/.omp/agent`: oh-my-pi), as given or
        where a symlink leads.

        Raises:
            sqlite3.Error: the file is not a usable SQLite database.
        """
        path = _resolve(db_path)
        with HistoryStorage._registry_lock:
            storage = HistoryStorage._registry.get(path)
            if storage is None or storage._owner != process_id():
                storage = cls(db_path, agent=agent)
                HistoryStorage._registry[path] = storage
            return storage

    def add(self, prompt: str, cwd: str | None = None) -> None:
        """Queue `prompt` (trimmed) for storage without waiting for the database.

        Empty prompts and a prompt equal to the previous one added are ignored.

        Raises:
            ValueError: the storage is closed.
            SessionPersistenceError: the writer thread died; nothing more can be saved.
        """
        self._check_owner()
        text = _valid_text(_omp_prompt(prompt) if self._omp_form else prompt.strip())
        if not text:
            return
        row = (text, int(time.time()), None if cwd is None else _valid_text(cwd))
        with self._cond:
            if self._error is not None:
                raise self._error
            if self._closing:
                raise ValueError("HistoryStorage is closed")
            if text == self._last_prompt:
                return
            self._last_prompt = text
            self._pending.append(row)
            self._queued += 1
            self._cond.notify_all()

    def flush(self) -> None:
        """Wait until every prompt added before this call is committed.

        A prompt that cannot be written is logged and skipped rather than raised,
        as is a batch that fails because the database is unusable (locked past the
        busy timeout, read-only, disk full).

        Raises:
            SessionPersistenceError: the writer thread died (it names how many
                prompts were not saved).
            InheritedHandleError: in a forked child (see the module docstring).
        """
        self._check_owner()
        with self._cond:
            target = self._queued
            self._cond.wait_for(lambda: self._done >= target or self._worker_exited)
            if self._error is not None:
                raise self._error

    def get_recent(self, limit: int) -> list[HistoryEntry]:
        """Return up to `limit` (clamped to 0..1000) prompts, newest first."""
        return self._read(None, limit)

    def search(self, query: str, limit: int) -> list[HistoryEntry]:
        """Return up to `limit` prompts containing every word of `query`, newest first.

        Each whitespace-separated word is a prefix: ``"fix te"`` finds "fixed the
        tests". Words are quoted, so FTS5 syntax in `query` is plain text; words
        with no letters or digits (``-``, ``*``, emoji) constrain nothing, and
        only the first `MAX_QUERY_WORDS` distinct words count.
        """
        return self._read(query, limit)

    def close(self) -> None:
        """Write queued prompts, stop the worker and close the database; idempotent.

        Raises:
            SessionPersistenceError: (once, after closing) the writer thread had
                died, so prompts were not saved.
        """
        if self._owner != process_id():
            # A forked child's copy: its worker is not here, its locks may be held by
            # threads that are not here, its connections are the parent's.
            self._closed = True
            atexit.unregister(self.close)
            return
        # Held throughout, so an open() racing with close() gets a fresh instance.
        with HistoryStorage._registry_lock:
            with self._cond:
                self._closing = True
                self._cond.notify_all()
            if threading.current_thread() is not self._worker:
                self._worker.join()
            if HistoryStorage._registry.get(self.path) is self:
                del HistoryStorage._registry[self.path]
            with self._read_lock:
                first = not self._closed
                if first:
                    self._closed = True
                    self._reader.close()
                    self._writer.close()
        atexit.unregister(self.close)
        if first and self._error is not None:
            raise self._error

    def __repr__(self) -> str:
        state = "closed" if self._closing else "open"
        return f"<HistoryStorage {self.path!r} {state}>"

    def _check_owner(self) -> None:
        if self._owner != process_id():
            raise InheritedHandleError(self.path, self._owner)

    def _read(self, query: str | None, limit: int) -> list[HistoryEntry]:
        self._check_owner()
        self.flush()
        with self._read_lock:
            if self._closed:
                raise ValueError("HistoryStorage is closed")
            return _select(self._reader, query, limit, fts=True)

    def _run(self) -> None:
        """Worker loop: take everything queued, write it in one transaction, repeat."""
        batch: list[tuple[str, int, str | None]] = []
        try:
            while True:
                with self._cond:
                    self._cond.wait_for(lambda: self._pending or self._closing)
                    if not self._pending:
                        return
                    batch, self._pending = self._pending, []
                self._write(batch)
                with self._cond:
                    self._done += len(batch)
                    batch = []
                    self._cond.notify_all()
        except BaseException as exc:
            # _write handles every Exception; this is a failure of the loop itself
            # (or a BaseException). Nothing can be written any more: say so now,
            # and make every later call raise instead of queueing into the void.
            with self._cond:
                lost = len(batch) + len(self._pending)
                self._pending = []
                error = SessionPersistenceError(
                    f"{self.path}: the prompt history writer stopped "
                    f"({type(exc).__name__}: {exc}); {lost} prompt(s) were not saved "
                    "and no more can be",
                    self.path,
                )
                error.__cause__ = exc
                self._error = error
            _log.error("%s", error, exc_info=exc)
        finally:
            # Wakes flush() even if the loop died, so it can never hang.
            with self._cond:
                self._worker_exited = True
                self._cond.notify_all()

    def _write(self, batch: list[tuple[str, int, str | None]]) -> None:
        """Write `batch` in one transaction; on failure, row by row, skipping bad rows.

        History is a convenience: losing a prompt must not break the turn that
        produced it, so failures are logged instead of raised into the caller.
        """
        try:
            self._insert(batch)
        except sqlite3.OperationalError:
            # Locked past the busy timeout, read-only, I/O error, disk full: the
            # database, not a row, is at fault, and retrying each row would wait
            # out the busy timeout once per row.
            _log.warning("could not save %d prompt(s) to %s", len(batch), self.path, exc_info=True)
        except Exception:
            # Something in the batch (a value that cannot be bound, a row too big,
            # a transient MemoryError): retry each row alone, so only a bad row is lost.
            self._write_rows(batch)

    def _write_rows(self, batch: list[tuple[str, int, str | None]]) -> None:
        for n, row in enumerate(batch):
            try:
                self._insert([row])
            except sqlite3.OperationalError:
                left = len(batch) - n
                _log.warning("could not save %d prompt(s) to %s", left, self.path, exc_info=True)
                return
            except Exception:
                self._skip(row)

    def _insert(self, rows: list[tuple[str, int, str | None]]) -> None:
        with _transaction(self._writer):
            # Looked at in each batch: a TypeScript agent may change the table meanwhile
            statement = _insert_statement(self._writer)
            if statement != _INSERT:
                # oh-my-pi's table (perhaps made so since open, by oh-my-pi converting
                # ours): its form of each prompt, or it holds one prompt twice.
                rows = [(_omp_prompt(text), at, cwd) for text, at, cwd in rows]
                rows = [row for row in rows if row[0]]
            self._writer.executemany(statement, rows)

    def _skip(self, row: tuple[str, int, str | None]) -> None:
        # The text is not logged: prompts can hold secrets.
        _log.warning(
            "could not save a prompt of %d chars (added at %d) to %s; skipped",
            len(row[0]),
            row[1],
            self.path,
            exc_info=True,
        )


_instances: weakref.WeakSet[HistoryStorage] = weakref.WeakSet()
"""Every open instance of this process (for the fork hook)."""


def _forked() -> None:
    """In a forked child: the parent's instances are not handed out by `open()`, the
    registry's lock is new (another thread may have held it at the fork), and their
    connections are never freed here (freeing closes them: see the module docstring)."""
    HistoryStorage._registry_lock = threading.Lock()
    HistoryStorage._registry = {}
    for storage in list(_instances):
        if not storage._closed:
            keep_forever(storage._writer)
            keep_forever(storage._reader)
    _instances.clear()


os.register_at_fork(after_in_child=_forked)


def read_history(
    db_path: str | os.PathLike[str] | None = None, query: str | None = None, limit: int = 50
) -> list[HistoryEntry]:
    """Newest-first prompts from `history.db` (default: the agent dir's), opened
    read-only; [] when there is none.

    With `query` (not only whitespace), the prompts `HistoryStorage.search` finds
    for it: every word a prefix, the same validation (text that is not UTF-8, such
    as a command-line argument decoded with surrogateescape, is searched for as
    `add` would have stored it). A file without the FTS index (written by an old
    agent) is scanned with LIKE instead. Nothing is created, upgraded or written.

    Raises:
        SessionTreeError: the file is not a readable SQLite database (it names it).
    """
    path = os.fspath(db_path) if db_path is not None else _default_db_path()
    if not os.path.isfile(path):
        return []
    if query is not None and not query.split():
        query = None
    try:
        conn = _connect_read_only(path)
        try:
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
            if "history" not in tables:
                return []
            return _select(conn, query, limit, fts="history_fts" in tables)
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise SessionTreeError(f"{path}: cannot read the prompt history: {exc}") from exc


def _connect_read_only(path: str) -> sqlite3.Connection:
    """A connection that cannot write `path` nor create anything beside it."""
    from urllib.parse import quote

    # With no -wal file there is no live writer with uncommitted pages: read the
    # file as immutable, which (unlike mode=ro on a WAL database) creates no
    # -shm/-wal files. Otherwise those files exist already and mode=ro is safe.
    params = "mode=ro" if os.path.exists(path + "-wal") else "mode=ro&immutable=1"
    # surrogateescape: an agent dir whose name is not UTF-8 is percent-encoded byte
    # for byte, as SQLite opens it.
    where = quote(os.path.abspath(path), safe="/", errors="surrogateescape")
    conn = sqlite3.connect(f"file:{where}?{params}", uri=True, timeout=_BUSY_TIMEOUT_S)
    try:
        conn.execute("PRAGMA query_only = ON")
    except BaseException:
        conn.close()
        raise
    return conn


def _select(
    conn: sqlite3.Connection, query: str | None, limit: int, *, fts: bool
) -> list[HistoryEntry]:
    """The one read of prompts: up to `limit` (clamped), newest first; with `query`,
    those holding every word of it as a prefix (`_fts_query`), else all.

    `fts=False` (a file without the index) scans with LIKE for the same words.
    """
    limit = _clamp(limit)
    if limit == 0:
        return []
    if query is None:
        rows = conn.execute(_RECENT, (limit,)).fetchall()
    elif not fts:
        words = _query_words(query)
        if not words:
            return []
        rows = _like_rows(conn, words, limit)
    else:
        match = _fts_query(query)
        if not match:
            return []
        try:
            rows = conn.execute(_SEARCH, (match, limit)).fetchall()
        except sqlite3.OperationalError:
            # Quoting (and removing NUL) leaves FTS5 nothing to reject; this is the
            # last line of defence that keeps search from ever raising.
            _log.warning("history search failed for %r", query, exc_info=True)
            return []
    return [HistoryEntry(int(r[0]), str(r[1]), int(r[2]), r[3]) for r in rows]


def _like_rows(conn: sqlite3.Connection, words: list[str], limit: int) -> list[Any]:
    """Rows holding every word (anywhere: LIKE has no word boundaries), newest first."""
    where = " AND ".join("prompt LIKE ? ESCAPE '\\'" for _ in words)
    params: list[object] = [
        "%" + w.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%" for w in words
    ]
    params.append(limit)
    return conn.execute(
        "SELECT id, prompt, created_at, cwd FROM (SELECT id, prompt, created_at, cwd "
        f"FROM history WHERE {where} ORDER BY id DESC LIMIT ?) "
        "ORDER BY created_at DESC, id DESC",
        params,
    ).fetchall()


def _agent_of(db_path: str | os.PathLike[str] | None, agent: str | None) -> str:
    """Whose store the database is in: `agent`, else the agent dir holding it by name,
    the path as given (a symlinked `~/.omp` is still oh-my-pi's) or the file it is (a
    `~/.pi/agent/history.db` linked to oh-my-pi's, to share it, is oh-my-pi's file)."""
    if agent is not None:
        return agent
    given = _default_db_path() if db_path is None else db_path
    by_name = native_agent_of(os.path.dirname(os.path.abspath(given)))
    if native_agent_of(os.path.dirname(_resolve(given))) == "omp":
        return "omp"
    return by_name


def _default_db_path() -> str:
    """`<agent dir>/history.db` of the configured agent dir: `HistoryStorage.open()`'s."""
    return os.path.join(agent_dir_or_default(), "history.db")


def _resolve(db_path: str | os.PathLike[str] | None) -> str:
    return os.path.realpath(_default_db_path() if db_path is None else os.fspath(db_path))


def _create_private_file(path: str) -> None:
    """Create the directory (0700) and database file (0600) if missing.

    Prompts can hold secrets. SQLite gives the -wal and -shm files the mode of
    the database file, so creating it first makes those private too. Existing
    files and directories keep their mode.
    """
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        os.makedirs(os.path.dirname(directory), exist_ok=True)
        try:
            os.mkdir(directory, 0o700)
            os.chmod(directory, 0o700)  # mkdir applies the umask
        except FileExistsError:
            pass
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    os.close(fd)
    os.chmod(path, 0o600)


def _connect(path: str, *, read_only: bool = False) -> sqlite3.Connection:
    # isolation_level=None: no implicit transactions, `_transaction` is explicit.
    # check_same_thread=False: the writer is used by the worker thread, the reader
    # by any thread under `_read_lock`.
    conn = sqlite3.connect(
        path, timeout=_BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
    )
    try:
        if read_only:
            conn.execute("PRAGMA query_only = ON")
        else:
            conn.execute("PRAGMA journal_mode = WAL")  # readers never wait for the writer
        # Safe in WAL mode: a power loss may drop the last commits, never corrupt.
        conn.execute("PRAGMA synchronous = NORMAL")
    except BaseException:
        conn.close()
        raise
    return conn


@contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    # IMMEDIATE takes the write lock up front, so a busy database makes BEGIN
    # wait (busy timeout) rather than failing a statement midway.
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _schema_sql(conn: sqlite3.Connection, name: str) -> str | None:
    row = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (name,)).fetchone()
    return None if row is None else str(row[0])


def _ensure_schema(conn: sqlite3.Connection, *, omp: bool) -> None:
    """Make the database usable in one transaction; idempotent.

    A new file gets oh-my-pi's schema in oh-my-pi's store (`omp`), else ours
    (`SCHEMA_VERSION`). A file in oh-my-pi's schema is left as it is. Checks go by
    what is in the file rather than by ``user_version`` alone: older TypeScript
    agents share the file and never set the version.
    """
    with _transaction(conn):
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        table = _schema_sql(conn, "history")
        if table is None and omp:
            for statement in _OMP_SCHEMA:
                conn.execute(statement)
            return
        if table is not None and _prompt_is_unique(conn):
            # oh-my-pi's own table: written as oh-my-pi writes it, nothing of ours
            # added; only an index it lost is made again, as oh-my-pi would on open.
            if _schema_sql(conn, "history_fts") is None:
                for statement in _OMP_FTS:
                    conn.execute(statement)
            return
        if "unixepoch(" in (table or ""):
            _convert_unixepoch_table(conn)
        fts_sql = _schema_sql(conn, "history_fts")
        if fts_sql is not None and "prefix" not in fts_sql.lower():
            # Created by a TypeScript agent: recreate it with the prefix indexes.
            conn.execute("DROP TABLE history_fts")
            fts_sql = None
        for statement in _SCHEMA:
            conn.execute(statement)
        if fts_sql is None:
            # A new index over existing rows (a file from before FTS, or one
            # whose index was dropped) starts empty: fill it from the table.
            conn.execute("INSERT INTO history_fts(history_fts) VALUES('rebuild')")
        if omp:
            # Our schema in oh-my-pi's store (an older agent's file, or one an earlier
            # sessiontree made here): version 0 makes oh-my-pi 18 rebuild it into its
            # own schema on its next open; at 1 it would fail ("no such column").
            if version != 0:
                conn.execute("PRAGMA user_version = 0")
        elif version < SCHEMA_VERSION:
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def _prompt_is_unique(conn: sqlite3.Connection) -> bool:
    """Whether the `history` table holds a prompt once (`UNIQUE`): oh-my-pi 18's."""
    for _, name, is_unique, *_ in conn.execute("PRAGMA index_list(history)"):
        if is_unique:
            info = conn.execute("SELECT name FROM pragma_index_info(?)", (name,))
            if [row[0] for row in info] == ["prompt"]:
                return True
    return False


def _insert_statement(conn: sqlite3.Connection) -> str:
    """The statement that adds a prompt to this file's `history` table: a plain insert
    into ours, oh-my-pi's upsert into one whose `prompt` is UNIQUE (oh-my-pi's)."""
    if not _prompt_is_unique(conn):
        return _INSERT
    columns = {row[1] for row in conn.execute("PRAGMA table_info(history)")}
    statement = _UPSERT
    if "session_id" in columns:
        statement += _UPSERT_SESSION
    if "use_count" in columns:
        statement += _UPSERT_COUNT
    return statement


def _convert_unixepoch_table(conn: sqlite3.Connection) -> None:
    """Copy a table whose created_at default calls unixepoch() into the portable schema.

    SQLite cannot change a column default in place. The caller recreates the
    index, FTS table and triggers, and rebuilds the FTS index.
    """
    # Dropped first: renaming the table would carry its triggers along.
    for statement in (
        "DROP TRIGGER IF EXISTS history_ai",
        "DROP TRIGGER IF EXISTS history_ad",
        "DROP TRIGGER IF EXISTS history_au",
        "DROP TABLE IF EXISTS history_fts",
        "DROP INDEX IF EXISTS idx_history_created_at",
        "ALTER TABLE history RENAME TO history_legacy",
        _CREATE_TABLE,
        "INSERT INTO history (id, prompt, created_at, cwd)"
        " SELECT id, prompt, created_at, cwd FROM history_legacy",
        "DROP TABLE history_legacy",
    ):
        conn.execute(statement)


# JavaScript's `\s` (and what String.prototype.trim removes): its WhiteSpace and
# LineTerminator characters, which are not Python's whitespace (no \x1c-\x1f nor \x85,
# but U+FEFF).
_JS_SPACE = (
    "\t\n\x0b\x0c\r \u00a0\u1680"
    + "".join(map(chr, range(0x2000, 0x200B)))
    + ("\u2028\u2029\u202f\u205f\u3000\ufeff")
)
_JS_LINE_END_PADDING = re.compile("[" + re.escape(_JS_SPACE.replace("\n", "")) + "]+\n")


def _omp_prompt(prompt: str) -> str:
    """A prompt as oh-my-pi stores it (`normalizePrompt`): CRLF and CR as LF, each line's
    trailing whitespace dropped, the whole trimmed, all by JavaScript's whitespace."""
    text = prompt.replace("\r\n", "\n").replace("\r", "\n")
    return _JS_LINE_END_PADDING.sub("\n", text).strip(_JS_SPACE)


def _clamp(limit: int) -> int:
    return max(0, min(int(limit), MAX_LIMIT))


def _valid_text(text: str) -> str:
    """Replace lone surrogates (e.g. from undecodable paths), which SQLite cannot store."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATES.sub("\ufffd", text)
    return text


def _query_words(query: str) -> list[str]:
    """The words of a query that a search uses: valid text, no NUL, no repeats, the
    first `MAX_QUERY_WORDS`."""
    # NUL ends the query text for the FTS5 parser ("unterminated string").
    text = _valid_text(query).replace("\0", " ")
    # Each word costs ~0.3 ms at 100k prompts; a longer query is a paste, which
    # its first words already pin down; the dropped ones could only narrow it.
    return list(dict.fromkeys(text.split()))[:MAX_QUERY_WORDS]  # drop repeats, keep order


def _fts_query(query: str) -> str:
    """Turn free text into an FTS5 query requiring a prefix match of every word.

    ``fix a"b`` becomes ``"fix"* "a""b"*``. Words are joined by juxtaposition
    (implicit AND), which FTS5 lets skip a word that tokenizes to nothing; an
    explicit AND would make such a word match no row at all.
    """
    return " ".join('"' + word.replace('"', '""') + '"*' for word in _query_words(query))
