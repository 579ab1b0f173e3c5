"""The content index: every session's searchable text in SQLite FTS5, and its usage.

`<agent dir>/cache/content-index.db` (0600, derived data, safe to delete) holds,
per session file, what `search` and the usage reports need:

* ``entries``: one row per entry with text (`export.entry_text`: user, assistant
  and thinking text, tool calls and results, custom messages, summaries,
  labels): where its line is (line number, byte offset, length), its id, role
  and time. The text itself is not stored: hits are verified, and snippets cut,
  from the session file's own line.
* ``fts``: a contentless FTS5 table over the casefolded text, `trigram`
  tokenizer (`detail=none`): every substring of three characters or more of a
  query must be a trigram of any text that contains it, so a query's trigrams
  select a superset of the matching entries, in the index's key order. The key
  of an entry is its time (epoch ms, moved up to the next free number on a
  collision), so the newest entries come first (`search` restores the exact
  order of entries moved past another) and a time range is a key range.
* ``usage`` and ``imports``: each assistant message's usage and each
  `foreign_session_import` marker, for `sessiontree.reports._usage`.

**Refresh.** `ContentIndex.refresh(sources)` stats every source and compares it
with the `FileMark` the listing cache's change detection uses
(`listing.stat_identity`, `listing.only_appended`): an unchanged file (size,
mtime, inode and ctime) is not read, a file that only grew
is read from the end of its last complete line, anything else is read again from
the start. An entry deleted from the index stays in the FTS table as a dead row
(SQLite before 3.43 cannot delete from a contentless table): it joins no entry
row, so it costs space only; when dead text outweighs live text the index is
rebuilt. The file follows the rules of every cache database (`sessiontree._util.cachedb`):
an older index is rebuilt, a damaged one deleted and made again; another program's
database or a newer sessiontree's index is left alone (search then reads the files).

Sources are our JSONL files, or any session a loader turns into entries
(`SessionSource.load`, for other agents' formats): those are re-read whole when
they change, and their entries are found again by position.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sqlite3
import stat as stat_module
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Final

from sessiontree._util.cachedb import CacheDB, Family, is_damage, is_locked, open_cache
from sessiontree._util.closing import process_id
from sessiontree._util.foreground import pause_point
from sessiontree._util.fs import utf8_encodable
from sessiontree.errors import InheritedHandleError
from sessiontree.format import (
    USAGE_KINDS,
    Entry,
    ImportMarker,
    UsageRecord,
    allow_deep_nesting,
    entry_role,
    entry_text,
    head_kind,
    import_marker,
    loads_line,
    loads_object,
    parse_iso_ms,
    serialize_entry_bytes,
    usage_record,
)
from sessiontree.listing import (
    MARK_HEAD_BYTES,
    MARK_TAIL_BYTES,
    FileMark,
    mark_file,
    marked_as_read,
    only_appended,
    same_identity,
    stat_identity,
)
from sessiontree.storage import (
    SessionStorage,
    default_storage,
    read_chunks,
    read_range,
    read_range_chunks,
)

__all__ = [
    "INDEX_DB_NAME",
    "MIN_QUERY_CHARS",
    "Candidate",
    "ContentIndex",
    "IndexStats",
    "IndexedFile",
    "Loader",
    "Refreshed",
    "SessionSource",
    "index_text",
    "query_trigrams",
    "read_source",
]

INDEX_DB_NAME: Final = os.path.join("cache", "content-index.db")
"""The content index, relative to the agent dir."""
MIN_QUERY_CHARS: Final = 3
"""A literal shorter than this has no trigram: the index cannot answer it."""

_APPLICATION_ID = 0x53544958  # "STIX": tells our database from any other at that path
_CHUNK = 1 << 20
_BATCH_BYTES = 32 << 20  # read per write transaction (other processes get the lock between)
_BATCH_ROWS = 100_000
_HELD_BYTES = 16 << 20  # rows of one file held before they are written (a big file's)
_LOCK_TIMEOUT = 1.0
_REBUILD_DEAD_BYTES = 64 << 20
_KEY_MAX = 1 << 62
_PHASE_START, _PHASE_OK, _PHASE_INVALID = 0, 1, 2
_BOM = b"\xef\xbb\xbf"
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")

Loader = Callable[[str], tuple[Entry | None, Sequence[Entry]]]
"""Reads a session of another format: (header or None when it is not one, entries)."""


@dataclass(frozen=True, slots=True)
class SessionSource:
    """A session the index covers: our JSONL file at `path`, or, with `load`, a
    file of another format whose entries `load(path)` returns. `identity`, with
    `load`, gives (size, mtime_ns, ino, ctime_ns) of a session that is not one file's stat
    (a session of an OpenCode database, named by a path under the database file)."""

    path: str
    load: Loader | None = field(default=None, compare=False)
    kind: str = "jsonl"
    identity: Callable[[str], tuple[int, int, int, int]] | None = field(default=None, compare=False)


def index_text(text: str) -> str:
    """What the index holds for `text` (and what a query is cut from): casefolded,
    with NUL and lone surrogates (which SQLite cannot take) as U+FFFD. Character by
    character, so a substring of `text` maps to a substring of the result."""
    folded = text.casefold()
    if _UNSTORABLE.search(folded) is None:
        return folded
    return _UNSTORABLE.sub("\ufffd", folded)


def query_trigrams(literal: str) -> list[str]:
    """The distinct trigrams of `index_text(literal)` ([] when it is too short)."""
    text = index_text(literal)
    return list(dict.fromkeys(text[i : i + 3] for i in range(len(text) - 2)))


def _match_expression(trigrams: Iterable[str]) -> str:
    # detail=none has no positions: each trigram is its own one-token phrase.
    return " AND ".join('"' + t.replace('"', '""') + '"' for t in trigrams)


@dataclass(frozen=True, slots=True)
class Candidate:
    """An indexed entry whose text holds every trigram of a query (verify it)."""

    path: str
    kind: str
    session_id: str
    line: int
    offset: int
    """Byte offset of the entry's line; -1 for a loader source (`line` is the position)."""
    length: int
    entry_id: str | None
    role: str
    timestamp: int | None
    key: int
    """The index's key: at or after `timestamp`, before the key of any later entry's."""


@dataclass(frozen=True, slots=True)
class IndexedFile:
    """What the index knows of one session file."""

    id: int
    path: str
    kind: str
    size: int
    valid: bool
    """False: not a session (no valid header)."""
    session_id: str | None
    cwd: str | None
    parent: str | None
    created: int | None
    entries: int


@dataclass(slots=True)
class Refreshed:
    """What a refresh did."""

    files_read: int = 0
    bytes_read: int = 0
    entries_added: int = 0
    removed: int = 0
    stale: list[str] = field(default_factory=list)
    """Sources the index does not cover as they are now (locked out, unreadable,
    a name SQLite cannot store): read these files directly."""
    rebuilt: bool = False


@dataclass(frozen=True, slots=True)
class IndexStats:
    """Sizes of the index (the benchmarks report them)."""

    files: int
    entries: int
    text_bytes: int
    """UTF-8 bytes of the casefolded text indexed (live entries)."""
    db_bytes: int
    """The database with its -wal file (everything the index takes on disk)."""
    fts_bytes: int
    dead_bytes: int


_SCHEMA = (
    """CREATE TABLE meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID""",
    """CREATE TABLE files (
        id INTEGER PRIMARY KEY,
        path TEXT NOT NULL UNIQUE,
        kind TEXT NOT NULL,
        size INTEGER NOT NULL,
        mtime_ns INTEGER NOT NULL,
        ino INTEGER NOT NULL,
        ctime_ns INTEGER NOT NULL DEFAULT -1,
        scan_offset INTEGER NOT NULL,
        head_len INTEGER NOT NULL,
        head BLOB NOT NULL,
        tail BLOB NOT NULL,
        line INTEGER NOT NULL,
        phase INTEGER NOT NULL,
        session_id TEXT,
        cwd TEXT,
        parent TEXT,
        created INTEGER,
        entries INTEGER NOT NULL,
        tail_entries INTEGER NOT NULL,
        text_bytes INTEGER NOT NULL,
        tail_text_bytes INTEGER NOT NULL
    )""",
    """CREATE TABLE entries (
        key INTEGER PRIMARY KEY,
        file INTEGER NOT NULL,
        line INTEGER NOT NULL,
        offset INTEGER NOT NULL,
        length INTEGER NOT NULL,
        entry_id TEXT,
        role TEXT NOT NULL,
        ts INTEGER,
        text_bytes INTEGER NOT NULL
    )""",
    "CREATE INDEX entries_file ON entries (file, offset)",
    """CREATE TABLE usage (
        file INTEGER NOT NULL,
        line INTEGER NOT NULL,
        offset INTEGER NOT NULL,
        entry_id TEXT,
        ts INTEGER,
        provider TEXT NOT NULL,
        model TEXT NOT NULL,
        response_id TEXT,
        input INTEGER NOT NULL,
        output INTEGER NOT NULL,
        cache_read INTEGER NOT NULL,
        cache_write INTEGER NOT NULL,
        cost REAL
    )""",
    "CREATE INDEX usage_file ON usage (file, offset)",
    """CREATE TABLE imports (
        file INTEGER NOT NULL,
        line INTEGER NOT NULL,
        offset INTEGER NOT NULL,
        source TEXT NOT NULL,
        source_id TEXT NOT NULL,
        version INTEGER NOT NULL,
        extra TEXT NOT NULL
    )""",
    "CREATE INDEX imports_file ON imports (file, offset)",
    """CREATE VIRTUAL TABLE fts USING fts5(
        text, content='', detail=none, columnsize=0, tokenize='trigram case_sensitive 1'
    )""",
)
INDEX_FAMILY: Final = Family(
    name="content_index",
    version=2,  # 2: usage rows for what pi 1.6 counts besides replies (`counted_usage`)
    schema=_SCHEMA,
    tables=("meta", "files", "entries", "usage", "imports", "fts"),
)
"""The index's tables in its cache file (`sessiontree._util.cachedb`)."""


# ---------------------------------------------------------------------------- reading


@dataclass(slots=True)
class _FileState:
    """Where reading a file stands (saved at the last complete line)."""

    line: int = 0
    phase: int = _PHASE_START
    session_id: str | None = None
    cwd: str | None = None
    parent: str | None = None
    created: int | None = None
    entries: int = 0
    text_bytes: int = 0


@dataclass(slots=True)
class _Rows:
    """Rows read from one file, waiting to be written."""

    entries: list[tuple[int, int, int, str | None, str, int | None, int]] = field(
        default_factory=list
    )  # (line, offset, length, entry id, role, ts, text bytes) + text in `texts`
    texts: list[str] = field(default_factory=list)
    order: list[int] = field(default_factory=list)  # the time each key is allocated from
    usage: list[tuple[int, int, UsageRecord]] = field(default_factory=list)  # (line, offset, rec)
    imports: list[tuple[int, int, ImportMarker]] = field(default_factory=list)
    want_text: bool = True
    held: int = 0
    """About how many bytes the rows hold (text, and a little per row)."""
    head_seen: bytes | None = None
    """The file's first bytes as this read saw them (None: it began further on)."""
    tail_seen: bytes = b""
    """The last bytes this read saw."""


def _text_of(entry: Entry) -> str:
    try:
        return entry_text(entry)
    except RecursionError:  # tool arguments nested deeper than json.dumps goes by default
        return allow_deep_nesting(partial(entry_text, entry))


def _add_entry(
    rows: _Rows, st: _FileState, entry: Entry, line: int, offset: int, length: int, order: int
) -> None:
    st.entries += 1
    text = _text_of(entry) if rows.want_text else ""
    if text:
        ts = parse_iso_ms(entry.get("timestamp"))
        stored = index_text(text)
        size = len(stored.encode("utf-8"))
        entry_id = entry.get("id")
        rows.entries.append(
            (
                line,
                offset,
                length,
                entry_id if isinstance(entry_id, str) else None,
                entry_role(entry),
                ts,
                size,
            )
        )
        rows.texts.append(stored)
        rows.order.append(ts if ts is not None else 0)  # no time: after every timed entry
        rows.held += size + 200
        st.text_bytes += size
    kind = entry.get("type")
    if kind == "message" or kind in USAGE_KINDS:
        record = usage_record(entry, line)
        if record is not None:
            rows.usage.append((line, offset, record))
            rows.held += 300
    elif kind == "custom":
        marker = import_marker(entry, line)
        if marker is not None:
            rows.imports.append((line, offset, marker))


def _feed(rows: _Rows, st: _FileState, raw: bytes, number: int, offset: int, order: int) -> None:
    """One non-blank line: before the header, the title slot / header / junk; after, an entry."""
    if st.phase == _PHASE_START:
        value = loads_object(raw)
        if value is None:
            return  # malformed or not an object: skipped, as the loader does
        kind = head_kind(value, number == 1)
        if kind == "slot":
            return
        if kind == "invalid":
            st.phase = _PHASE_INVALID
            return
        st.phase = _PHASE_OK
        st.session_id = str(value["id"])
        cwd = value.get("cwd")
        st.cwd = cwd if isinstance(cwd, str) else None
        parent = value.get("parentSession")
        st.parent = parent if isinstance(parent, str) and parent else None
        st.created = parse_iso_ms(value.get("timestamp"))
        return
    value = loads_object(raw)
    if value is not None:
        _add_entry(rows, st, value, number, offset, len(raw), order)


def _read_jsonl(
    storage: SessionStorage,
    path: str,
    start: int,
    end: int,
    st: _FileState,
    order: int,
    want_text: bool = True,
    sink: Callable[[_Rows], None] | None = None,
) -> tuple[_Rows, int, _FileState, _FileState]:
    """Read `path`'s bytes [start, end) from state `st` (`want_text`: for the FTS table).

    Returns the rows, the committed offset (end of the last complete line; 0 while
    no header was found), the state there, and the state after an unterminated
    last line (rows of that line have offsets at or past the committed offset).
    `sink` takes the rows read so far whenever they hold `_HELD_BYTES` (the rows
    returned are the rest): a big file is indexed in bounded memory.
    """
    rows = _Rows(want_text=want_text)
    base = start  # file offset where the current (unfinished) line starts
    parts: list[bytes] = []  # its bytes so far (no quadratic joining of a huge line)
    number = st.line
    if start == 0:
        chunks: Iterable[bytes] = read_chunks(storage, path, _CHUNK)
    else:
        chunks = read_range_chunks(storage, path, start, end, _CHUNK)
    remaining = end - start
    at_start = start == 0  # a BOM may still have to be dropped
    head_seen: bytes | None = b"" if start == 0 else None
    tail_seen = b""
    try:
        for chunk in chunks:
            if remaining <= 0 or st.phase == _PHASE_INVALID:
                break
            pause_point()  # a web page a person waits for goes first
            if len(chunk) > remaining:
                chunk = chunk[:remaining]
            remaining -= len(chunk)
            # What the file held as it was read, for the mark taken after (a file
            # rewritten meanwhile is not then taken for one only appended to).
            if head_seen is not None and len(head_seen) < MARK_HEAD_BYTES:
                head_seen += chunk[: MARK_HEAD_BYTES - len(head_seen)]
            tail_seen = (tail_seen + chunk[-MARK_TAIL_BYTES:])[-MARK_TAIL_BYTES:]
            if at_start:
                chunk = b"".join(parts) + chunk
                parts = []
                if len(chunk) < 3 and _BOM.startswith(chunk) and remaining > 0:
                    parts.append(chunk)
                    continue
                at_start = False
                if chunk.startswith(_BOM):
                    chunk = chunk[3:]
                    base = 3
            find = chunk.find
            nl = find(b"\n")
            if nl < 0:
                parts.append(chunk)
                continue
            raw = b"".join(parts) + chunk[:nl] if parts else chunk[:nl]
            parts = []
            pos = 0
            while True:
                number += 1
                if raw and not raw.isspace() and st.phase != _PHASE_INVALID:
                    _feed(rows, st, raw, number, base, order)
                    if sink is not None and rows.held >= _HELD_BYTES:
                        sink(rows)
                        rows = _Rows(want_text=want_text)
                st.line = number
                base += len(raw) + 1
                pos = nl + 1
                nl = find(b"\n", pos)
                if nl < 0:
                    break
                raw = chunk[pos:nl]
            if pos < len(chunk):
                parts.append(chunk[pos:])
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
    rows.head_seen, rows.tail_seen = head_seen, tail_seen
    if st.phase == _PHASE_INVALID:
        if remaining > 0:  # not a session: the read stopped, its last bytes are not the file's
            rows.tail_seen = b""
        return rows, end, st, st
    committed = base
    final = st
    tail = b"".join(parts)
    if tail and not tail.isspace():
        final = dataclasses.replace(st)
        _feed(rows, final, tail, number + 1, base, order)
    if st.phase == _PHASE_START:
        return rows, 0, _FileState(), final  # nothing decided: start over next time
    return rows, committed, st, final


def read_source(
    source: SessionSource, storage: SessionStorage | None = None
) -> tuple[IndexedFile, list[UsageRecord], list[ImportMarker]]:
    """What the index would hold of one source, read now (no text): for stores the
    index does not cover. Raises OSError when it cannot be read."""
    storage = default_storage(storage)
    if source.load is not None:
        rows, final = _read_loaded(source.load, source.path, want_text=False)
        size = 0
        try:
            size = storage.stat(source.path).size
        except (OSError, ValueError):
            pass
    else:
        size = storage.stat(source.path).size
        rows, _, _, final = _read_jsonl(storage, source.path, 0, size, _FileState(), 0, False)
    info = IndexedFile(
        -1,
        source.path,
        source.kind,
        size,
        final.phase == _PHASE_OK,
        final.session_id,
        final.cwd,
        final.parent,
        final.created,
        final.entries,
    )
    return info, [r for _, _, r in rows.usage], [m for _, _, m in rows.imports]


def _read_loaded(load: Loader, path: str, want_text: bool = True) -> tuple[_Rows, _FileState]:
    header, entries = load(path)
    st = _FileState()
    rows = _Rows(want_text=want_text)
    if header is None:
        st.phase = _PHASE_INVALID
        return rows, st
    st.phase = _PHASE_OK
    session_id = header.get("id")
    st.session_id = str(session_id) if session_id is not None else os.path.basename(path)
    cwd = header.get("cwd")
    st.cwd = cwd if isinstance(cwd, str) else None
    parent = header.get("parentSession")
    st.parent = parent if isinstance(parent, str) and parent else None
    st.created = parse_iso_ms(header.get("timestamp"))
    for position, entry in enumerate(entries, start=1):
        if isinstance(entry, dict):
            _add_entry(rows, st, entry, position, -1, 0, st.created or 0)
    st.line = len(entries)
    return rows, st


# ---------------------------------------------------------------------------- keys


class _Keys:
    """Allocates entry keys: the entry's time in ms, or the next free number after it."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.taken: set[int] = set()
        self.next: dict[int, int] = {}
        self.known_all = False
        self.max_shift = 0
        self.version: int | None = None

    def begin(self) -> None:
        """At each write transaction: whether every stored key is one we took (the
        table was empty when we started, and no other connection wrote since)."""
        version = self.conn.execute("PRAGMA data_version").fetchone()[0]
        if self.known_all and version == self.version:
            return
        empty = self.conn.execute("SELECT 1 FROM entries LIMIT 1").fetchone() is None
        self.known_all = empty
        if empty:
            self.taken.clear()
            self.next.clear()

    def end(self) -> None:
        """After our commit (our own commits leave `data_version` alone)."""
        self.version = self.conn.execute("PRAGMA data_version").fetchone()[0]

    def take(self, ms: int) -> int:
        ms = min(max(ms, 1), _KEY_MAX)
        key = self.next.get(ms, ms)
        while key in self.taken or (
            not self.known_all
            and self.conn.execute("SELECT 1 FROM entries WHERE key = ?", (key,)).fetchone()
        ):
            key += 1
        self.taken.add(key)
        self.next[ms] = key + 1
        if key - ms > self.max_shift:
            self.max_shift = key - ms
        return key


# ---------------------------------------------------------------------------- the index


class ContentIndex:
    """The content index of one agent dir (see the module docstring)."""

    def __init__(self, path: str, db: CacheDB) -> None:
        self.path = path
        self._db = db
        self._owner = process_id()
        self._keys = _Keys(db.conn)
        self._files: dict[int, tuple[str, str, str]] | None = None

    @property
    def _conn(self) -> sqlite3.Connection:
        """The connection, in the process that opened it only: SQLite forbids using one
        across a fork (a forked child raises InheritedHandleError)."""
        if self._owner != process_id():
            raise InheritedHandleError(self.path, self._owner)
        return self._db.conn

    # -- opening

    @classmethod
    def open(cls, agent_dir: str, *, create: bool = True) -> ContentIndex | None:
        """The index of `agent_dir`, created (or rebuilt) as needed; None when it cannot
        be used (no agent dir, an unwritable cache dir, a directory or another program's
        database in its place, a newer sessiontree's index)."""
        if not os.path.isdir(agent_dir):
            return None  # never create an agent dir just to hold a cache
        path = os.path.join(agent_dir, INDEX_DB_NAME)
        db = _open_db(path, create)
        return cls(path, db) if db is not None else None

    def close(self) -> None:
        """Close the connection; in a forked child, keep the parent's (never closed
        here: a close rolls back what the parent may be in the middle of)."""
        self._db.close()

    def __enter__(self) -> ContentIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def reset(self) -> bool:
        """Empty the index, to be built again from the files (after it was found damaged,
        or when dead text outweighs the live): its tables made afresh, or the file
        itself when SQLite cannot read it. False when that cannot be done now (another
        process holds the index, the file cannot be replaced): the index is as it was,
        or closed when it was damaged."""
        conn = self._conn  # never from a forked child
        try:
            self._db.rebuild(INDEX_FAMILY)
        except sqlite3.Error as exc:
            if not is_damage(exc) or not self._db.discard():
                return False
            fresh = _open_db(self.path, True)
            if fresh is None:
                return False
            self._db = fresh
            conn = fresh.conn
        self._keys = _Keys(conn)
        self._files = None
        return True

    # -- refresh

    def refresh(
        self,
        sources: Sequence[SessionSource],
        *,
        storage: SessionStorage | None = None,
        progress: Callable[[int, int], None] | None = None,
        prune: bool = False,
    ) -> Refreshed:
        """Bring the index up to date with `sources` (see the module docstring).

        `progress(bytes_done, bytes_total)` is called while files are read.
        `prune` also forgets indexed files that no longer exist (whatever `sources`
        holds). Raises sqlite3.DatabaseError when the database is damaged.
        """
        storage = default_storage(storage)
        result = Refreshed()
        if self._should_rebuild() and self.reset():
            result.rebuilt = True
        conn = self._conn
        known: dict[str, tuple[int, tuple[int, ...]]] = {
            row[0]: (row[1], tuple(row[2:]))
            for row in conn.execute("SELECT path, id, size, mtime_ns, ino, ctime_ns FROM files")
        }
        todo: list[tuple[SessionSource, tuple[int, int, int, int]]] = []
        gone: list[int] = []
        listed = set()
        for source in sources:
            listed.add(source.path)
            try:
                identity: tuple[int, int, int, int]
                if source.load is not None and source.identity is not None:
                    identity = source.identity(source.path)
                else:
                    st = os.stat(source.path)
                    if not stat_module.S_ISREG(st.st_mode):
                        continue
                    identity = stat_identity(st)
            except OSError:
                row = known.get(source.path)
                if row is not None:
                    gone.append(row[0])
                continue
            if not utf8_encodable(source.path):
                result.stale.append(source.path)
                continue
            row = known.get(source.path)
            if row is not None and same_identity(row[1], identity):
                continue
            todo.append((source, identity))
        if prune:
            gone += [row[0] for p, row in known.items() if p not in listed and not _exists(p)]
        if not todo and not gone:
            return result
        total = sum(identity[0] for _, identity in todo)
        done = 0
        pending = todo[::-1]  # popped from the end, in `sources` order
        try:
            if gone:
                with _write(conn):
                    for file_id in gone:
                        self._forget(file_id, None)
                    result.removed = len(gone)
            while pending:
                batch_bytes = 0
                batch_rows = 0
                with _write(conn):
                    self._keys.begin()
                    while pending and batch_bytes < _BATCH_BYTES and batch_rows < _BATCH_ROWS:
                        source, identity = pending.pop()
                        # A savepoint per file: a big file's rows are written as it is
                        # read, and one that fails halfway leaves none of them.
                        conn.execute("SAVEPOINT file")
                        try:
                            read, added = self._index_file(source, storage, identity)
                        except sqlite3.Error:
                            raise
                        except Exception:  # unreadable, or a loader that failed on it
                            conn.execute("ROLLBACK TO file")
                            conn.execute("RELEASE file")
                            result.stale.append(source.path)
                            continue
                        conn.execute("RELEASE file")
                        result.files_read += 1 if read else 0
                        result.bytes_read += read
                        result.entries_added += added
                        batch_bytes += read
                        batch_rows += added
                        done += identity[0]
                        if progress is not None:
                            progress(done, total)
                    self._save_meta()
                self._keys.end()
        except sqlite3.OperationalError as exc:
            if not is_locked(exc):
                raise
            result.stale += [source.path for source, _ in pending]
        self._files = None
        return result

    def _should_rebuild(self) -> bool:
        dead = self._meta("dead_bytes", 0)
        if dead < _REBUILD_DEAD_BYTES:
            return False
        live = self._conn.execute(
            "SELECT coalesce(sum(text_bytes + tail_text_bytes), 0) FROM files"
        ).fetchone()[0]
        return bool(dead > live)

    def _meta(self, key: str, default: int) -> int:
        row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return int(row[0]) if row is not None and isinstance(row[0], int) else default

    def _save_meta(self) -> None:
        if self._keys.max_shift > self._meta("max_shift", 0):
            self._conn.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES ('max_shift', ?)",
                (self._keys.max_shift,),
            )

    def _forget(self, file_id: int, from_offset: int | None) -> None:
        """Delete a file's rows (from `from_offset` on: its unterminated last line);
        None: the file itself too."""
        conn = self._conn
        where: str = "file = ?"
        args: tuple[int, ...] = (file_id,)
        if from_offset is not None:
            where, args = ("file = ? AND offset >= ?", (file_id, from_offset))
        dead = conn.execute(
            f"SELECT coalesce(sum(text_bytes), 0) FROM entries WHERE {where}", args
        ).fetchone()[0]
        for table in ("entries", "usage", "imports"):
            conn.execute(f"DELETE FROM {table} WHERE {where}", args)
        if from_offset is None:
            conn.execute("DELETE FROM files WHERE id = ?", (file_id,))
        if dead:
            conn.execute(
                "INSERT INTO meta (key, value) VALUES ('dead_bytes', ?) "
                "ON CONFLICT (key) DO UPDATE SET value = value + excluded.value",
                (dead,),
            )

    def _index_file(
        self, source: SessionSource, storage: SessionStorage, identity: tuple[int, int, int, int]
    ) -> tuple[int, int]:
        """Read what is new in one file (`listing.stat_identity` when it was stat'ed);
        returns (bytes read, entries added)."""
        conn = self._conn
        path = source.path
        size, mtime_ns, ino, ctime_ns = identity
        row = conn.execute(
            "SELECT id, kind, size, mtime_ns, ino, scan_offset, head_len, head, tail, line, "
            "phase, session_id, cwd, parent, created, entries, text_bytes, ctime_ns "
            "FROM files WHERE path = ?",
            (path,),
        ).fetchone()
        if row is not None and same_identity((row[2], row[3], row[4], row[17]), identity):
            return 0, 0  # another process brought it up to date meanwhile
        st = _FileState()
        start = 0
        file_id: int | None = None
        before: FileMark | None = None  # the mark the lines appended are read after
        if row is not None:
            file_id = row[0]
            mark = FileMark(row[2], row[3], row[4], row[5], row[6], row[7], row[8])
            if (
                source.load is None
                and row[1] == source.kind
                and only_appended(storage, path, mark, size, ino)
            ):
                before = mark
                start = mark.offset
                st = _FileState(row[9], row[10], row[11], row[12], row[13], row[14], row[15])
                st.text_bytes = row[16]
                self._forget(file_id, start)
            else:
                self._forget(file_id, None)
                file_id = None
        order = mtime_ns // 1_000_000
        flushed = 0  # entries written while the file was read
        if source.load is not None:
            rows, final = _read_loaded(source.load, path)
            committed, saved, head_len = 0, final, 0
        else:
            if file_id is None:
                # A row to hang the rows written as the file is read on (the same
                # transaction completes it below, or none of it is kept).
                file_id = conn.execute(
                    "INSERT INTO files (path, kind, size, mtime_ns, ino, scan_offset, head_len,"
                    " head, tail, line, phase, entries, tail_entries, text_bytes,"
                    " tail_text_bytes) VALUES (?, ?, -1, -1, -1, 0, 0, x'', x'', 0, 0, 0, 0, 0, 0)",
                    (path, source.kind),
                ).lastrowid
            assert file_id is not None
            written = file_id

            def sink(part: _Rows) -> None:
                nonlocal flushed
                flushed += len(part.entries)
                self._write_rows(written, part)

            rows, committed, saved, final = _read_jsonl(
                storage, path, start, size, st, order, sink=sink
            )
            head_len = _head_len(storage, path) if committed else 0
        if source.load is not None and source.identity is not None:
            mark = FileMark(size, mtime_ns, ino, 0, 0, b"", b"")  # no file to mark
        else:
            mark = mark_file(storage, path, size, mtime_ns, ino, committed, head_len)
            if source.load is None and not _read_as_marked(
                storage, path, mark, rows, before, start, size, ino
            ):
                # Rewritten while it was read: none of it is kept (the savepoint), and
                # the next refresh reads it again.
                raise OSError(f"{path}: changed while it was read")
        values = (
            path,
            source.kind,
            size,
            mtime_ns,
            ino,
            ctime_ns,
            committed,
            mark.head_len,
            mark.head,
            mark.tail,
            saved.line,
            final.phase,
            final.session_id,
            final.cwd,
            final.parent,
            final.created,
            saved.entries,
            final.entries - saved.entries,
            saved.text_bytes,
            final.text_bytes - saved.text_bytes,
        )
        columns = (
            "path, kind, size, mtime_ns, ino, ctime_ns, scan_offset, head_len, head, tail, line, "
            "phase, session_id, cwd, parent, created, entries, tail_entries, text_bytes, "
            "tail_text_bytes"
        )
        if file_id is None:
            file_id = conn.execute(
                f"INSERT INTO files ({columns}) VALUES ({', '.join('?' * 20)})", values
            ).lastrowid
        else:
            sets = ", ".join(f"{c.strip()} = ?" for c in columns.split(","))
            conn.execute(f"UPDATE files SET {sets} WHERE id = ?", (*values, file_id))
        assert file_id is not None
        self._write_rows(file_id, rows)
        return size - start, flushed + len(rows.entries)

    def _write_rows(self, file_id: int, rows: _Rows) -> None:
        conn = self._conn
        take = self._keys.take
        keys = [take(ms) for ms in rows.order]
        conn.executemany(
            "INSERT INTO entries (key, file, line, offset, length, entry_id, role, ts, text_bytes) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(key, file_id, *row) for key, row in zip(keys, rows.entries, strict=True)],
        )
        conn.executemany(
            "INSERT INTO fts (rowid, text) VALUES (?, ?)", zip(keys, rows.texts, strict=True)
        )
        conn.executemany(
            "INSERT INTO usage (file, line, offset, entry_id, ts, provider, model, response_id, "
            "input, output, cache_read, cache_write, cost) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    file_id,
                    line,
                    offset,
                    r.entry_id,
                    r.timestamp,
                    r.provider,
                    r.model,
                    r.response_id,
                    r.input,
                    r.output,
                    r.cache_read,
                    r.cache_write,
                    r.cost,
                )
                for line, offset, r in rows.usage
            ],
        )
        conn.executemany(
            "INSERT INTO imports (file, line, offset, source, source_id, version, extra) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    file_id,
                    line,
                    offset,
                    m.source,
                    m.source_id,
                    m.version,
                    serialize_entry_bytes(list(m.extra_ids)).decode("utf-8", "replace"),
                )
                for line, offset, m in rows.imports
            ],
        )

    # -- queries

    def _file_names(self) -> dict[int, tuple[str, str, str]]:
        if self._files is None:
            self._files = {
                row[0]: (row[1], row[2], row[3] or "")
                for row in self._conn.execute("SELECT id, path, kind, session_id FROM files")
            }
        return self._files

    def file_count(self) -> int:
        """How many files the index holds."""
        return len(self._file_names())

    def file_ids(self, paths: Iterable[str]) -> dict[str, int]:
        """The ids of those of `paths` the index holds."""
        wanted = set(paths)
        return {p: i for i, (p, _, _) in self._file_names().items() if p in wanted}

    def candidates(
        self,
        trigrams: Sequence[str],
        *,
        files: Iterable[int] | None = None,
        roles: Sequence[str] | None = None,
        since: int | None = None,
        until: int | None = None,
    ) -> Iterator[Candidate]:
        """Indexed entries holding every trigram, newest first (by key), lazily.

        `files` limits to those file ids; `roles` to those roles; `since`/`until`
        (epoch ms, inclusive) to entries with a time in that range.
        """
        if not trigrams:
            raise ValueError("a query needs at least one trigram")
        sql = [
            "SELECT e.file, e.line, e.offset, e.length, e.entry_id, e.role, e.ts, e.key "
            "FROM fts JOIN entries e ON e.key = fts.rowid WHERE fts MATCH ?"
        ]
        args: list[object] = [_match_expression(trigrams)]
        if since is not None:
            sql.append("AND fts.rowid >= ? AND e.ts >= ?")
            args += [max(since, 0), since]
        if until is not None:
            sql.append("AND fts.rowid <= ? AND e.ts <= ?")
            args += [min(until + self._meta("max_shift", 0), _KEY_MAX), until]
        if roles:
            sql.append(f"AND e.role IN ({', '.join('?' * len(roles))})")
            args += list(roles)
        conn = self._conn
        if files is not None:
            conn.execute("CREATE TEMP TABLE IF NOT EXISTS scope (id INTEGER PRIMARY KEY)")
            conn.execute("DELETE FROM temp.scope")
            conn.executemany("INSERT INTO temp.scope (id) VALUES (?)", [(f,) for f in files])
            sql.append("AND e.file IN (SELECT id FROM temp.scope)")
        sql.append("ORDER BY fts.rowid DESC")
        names = self._file_names()
        cursor = conn.execute(" ".join(sql), args)
        try:
            for file_id, line, offset, length, entry_id, role, ts, key in cursor:
                name = names.get(file_id)
                if name is None:
                    continue
                yield Candidate(
                    name[0], name[1], name[2], line, offset, length, entry_id, role, ts, key
                )
        finally:
            cursor.close()

    def files(self, paths: Iterable[str] | None = None) -> list[IndexedFile]:
        """What the index holds of `paths` (every file when None)."""
        rows = self._conn.execute(
            "SELECT id, path, kind, size, phase, session_id, cwd, parent, created, "
            "entries + tail_entries FROM files"
        ).fetchall()
        wanted = set(paths) if paths is not None else None
        return [
            IndexedFile(r[0], r[1], r[2], r[3], r[4] == _PHASE_OK, r[5], r[6], r[7], r[8], r[9])
            for r in rows
            if wanted is None or r[1] in wanted
        ]

    def usage_records(self, file_ids: Iterable[int]) -> dict[int, list[UsageRecord]]:
        """Assistant messages' usage per file, in file order."""
        ids = set(file_ids)
        out: dict[int, list[UsageRecord]] = {i: [] for i in ids}
        make = UsageRecord._make
        current = -1
        records: list[UsageRecord] | None = None
        for row in self._conn.execute(
            "SELECT file, entry_id, line, ts, provider, model, response_id, input, output, "
            "cache_read, cache_write, cost FROM usage ORDER BY file, line"
        ):
            if row[0] != current:
                current = row[0]
                records = out.get(current)
            if records is not None:
                records.append(make(row[1:]))
        return out

    def import_markers(self, file_ids: Iterable[int]) -> dict[int, list[ImportMarker]]:
        """`foreign_session_import` markers per file, in file order."""
        ids = set(file_ids)
        out: dict[int, list[ImportMarker]] = {}
        for file_id, line, source, source_id, version, extra in self._conn.execute(
            "SELECT file, line, source, source_id, version, extra FROM imports ORDER BY file, line"
        ):
            if file_id in ids:
                values = loads_line(extra)
                out.setdefault(file_id, []).append(
                    ImportMarker(line, source, source_id, version, tuple(values))
                )
        return out

    def stats(self) -> IndexStats:
        conn = self._conn
        files, text = conn.execute(
            "SELECT count(*), coalesce(sum(text_bytes + tail_text_bytes), 0) FROM files"
        ).fetchone()
        entries = conn.execute("SELECT count(*) FROM entries").fetchone()[0]
        try:  # pages of the FTS tables, where SQLite has the dbstat table
            fts = conn.execute(
                "SELECT coalesce(sum(pgsize), 0) FROM dbstat WHERE name LIKE 'fts%'"
            ).fetchone()[0]
        except sqlite3.OperationalError:
            fts = conn.execute("SELECT coalesce(sum(length(block)), 0) FROM fts_data").fetchone()[0]
        size = 0
        for suffix in ("", "-wal"):
            try:
                size += os.path.getsize(self.path + suffix)
            except OSError:
                pass
        return IndexStats(files, entries, text, size, fts, self._meta("dead_bytes", 0))


def _head_len(storage: SessionStorage, path: str) -> int:
    """Bytes up to the end of the header line (title slot included), at most 4 KB."""
    data = read_range(storage, path, 0, 4096)
    end = 0
    for number, line in enumerate(data.split(b"\n")[:-1], start=1):
        end += len(line) + 1
        text = line[3:] if number == 1 and line.startswith(_BOM) else line
        if not text.strip():
            continue
        value = loads_object(text)
        if value is not None and head_kind(value, number == 1) == "slot":
            continue
        if value is not None:
            return end
    return min(end, 4096) or min(len(data), 4096)


def _exists(path: str) -> bool:
    try:
        os.stat(path)
    except OSError:
        return False
    return True


def _read_as_marked(
    storage: SessionStorage,
    path: str,
    mark: FileMark,
    rows: _Rows,
    before: FileMark | None,
    start: int,
    size: int,
    ino: int,
) -> bool:
    """Whether `mark`, taken after `rows` were read from `start` to `size`, holds the
    bytes the read saw (`listing.marked_as_read`). A read of lines appended (`before`:
    the mark it followed) sees no head and often less than the tail window: the old
    part must still be as `before` marked it, and the bytes before `start` in the
    tail window (read now) complete what the read saw."""
    tail = rows.tail_seen
    if before is not None:
        if not only_appended(storage, path, before, size, ino):
            return False
        low = max(0, size - MARK_TAIL_BYTES)
        if low < start:
            try:
                tail = read_range(storage, path, low, start - low) + tail
            except OSError:
                return False
    return marked_as_read(mark, rows.head_seen, tail)


class _write:
    """A write transaction that takes the database's write lock at its start."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> None:
        self.conn.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        if kind is None:
            self.conn.execute("COMMIT")
        else:
            try:
                self.conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass


def _open_db(path: str, create: bool) -> CacheDB | None:
    db = open_cache(
        path,
        (INDEX_FAMILY,),
        application_id=_APPLICATION_ID,
        timeout=_LOCK_TIMEOUT,
        create=create,
    )
    if db is None:
        return None
    try:
        if db.has(INDEX_FAMILY):
            # The -wal file shrinks back after a build.
            db.conn.execute("PRAGMA journal_size_limit=4194304")
            return db
    except sqlite3.Error:
        pass
    db.close()
    return None
