"""The search index of a PostgreSQL store: every session's text, usage and import
markers in the store's own schema, so `search` and the usage report read no session.

The tables (`_pg_tables`, made on first use): ``search_files``
(per session file, by its node id: the node's size and mtime when it was read, where
reading stopped and the state there, the header), ``search_entries`` (one row per
entry with text: where its line is, id, role, time, and its casefolded text under a
pg_trgm GIN index), ``search_usage`` and ``search_imports``. The rows are made by the
content index's own reading (`_index_rows.read_jsonl`), so both stores hold the same.

**Refresh, not the writes.** `refresh` brings the rows of the sessions asked about up to
date before a search or a report: one query finds the files whose node (id, size,
mtime) is not the one read; only those are read, a file that only grew (same node, a
longer size, the row holding its last indexed byte unchanged) from the end of its
last complete line. Appends stay one statement each, and a writer that knows nothing
of these tables (an older sessiontree, another host) cannot make a search wrong: its
writes change the node's size or mtime, or its id, and the next refresh reads them.
A batch of files is read and written in one REPEATABLE READ transaction (the bytes
and the stamp of one snapshot) under an advisory lock, so two refreshes never index
the same file at once. A file whose values a text column cannot hold (a NUL, a lone
surrogate in an id) is not indexed: the search reads it, as any file the refresh
could not bring up to date.

**Queries.** `hits` asks for the entries whose stored text holds every literal of the
query (`LIKE`, answered by the trigram index), newest first, and verifies each against
its line read from ``lines`` in the same pass, as the file store's index does: the
index never changes what is found. `usage` gives the files, replies and import markers
the usage report counts.
"""

from __future__ import annotations

import hashlib
import re
import sys
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from sessiontree.format import ImportMarker, UsageRecord, loads_object
from sessiontree.search._content_index import Refreshed
from sessiontree.search._hits import Filters, SearchHit, entry_hit
from sessiontree.search._index_rows import (
    PHASE_OK,
    FileState,
    IndexedFile,
    Rows,
    SessionSource,
    index_text,
    read_jsonl,
)
from sessiontree.search._pg_tables import ensure_tables
from sessiontree.search._query import Matcher
from sessiontree.storage import SessionStorage

if TYPE_CHECKING:
    from psycopg import Connection, sql

    from sessiontree.storage.postgres import PostgresSessionStorage

__all__ = ["PostgresIndex", "postgres_index"]

_BATCH_BYTES = 32 << 20  # bytes read per transaction
_BATCH_FILES = 2000
_HELD_ROWS = 50_000  # rows held before they are copied to the server
_PAGE = 500  # candidates verified per round trip
_PREFETCH_BYTES = 1 << 20  # files up to this size are fetched with others, in one query
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
# Refreshes of one store's index wait for each other (a session-level lock: the
# server drops it with a dead connection).
_LOCK = "SELECT pg_advisory_lock(hashtextextended('sessiontree search index ' || %s, 0))"
_UNLOCK = "SELECT pg_advisory_unlock(hashtextextended('sessiontree search index ' || %s, 0))"

# -- statements (`{s}` the store's schema)

# Every file under sessions/ (a range of the key index: cheaper than naming 10,000
# keys), and the keys named elsewhere.
_PLAN = """
SELECT n.key, n.id, n.size,
       f.file_id IS NULL OR f.size <> n.size OR f.mtime_ns <> n.mtime_ns
FROM {s}.nodes n LEFT JOIN {s}.search_files f ON f.file_id = n.id
WHERE ((n.key >= 'sessions/' AND n.key < 'sessions0') OR n.key = ANY(%s)) AND NOT n.is_dir
"""
# Under the lock, in the batch's snapshot: each file's node and what the index holds
# of it; `grown`: the row that held the last byte read is still there, unchanged.
_STATE = """
SELECT n.key, n.id, n.size, n.mtime_ns, f.file_id, f.size, f.mtime_ns, f.scan_offset,
       f.line, f.phase, f.session_id, f.cwd, f.parent, f.created, f.entries, f.text_bytes,
       f.tail_md5 IS NOT NULL AND f.tail_md5 = (SELECT md5(l.data) FROM {s}.lines l
           WHERE l.file_id = n.id AND l.off = f.tail_off)
FROM {s}.nodes n LEFT JOIN {s}.search_files f ON f.file_id = n.id
WHERE n.key = ANY(%s) AND NOT n.is_dir
"""
_TAIL = """
SELECT off, md5(data) FROM {s}.lines WHERE file_id = %s AND off < %s
ORDER BY off DESC LIMIT 1
"""
_BYTES = """
SELECT off, data FROM {s}.lines WHERE file_id = %s AND off >= %s AND off < %s ORDER BY off
"""
_RANGE = """
SELECT substring(data FROM (greatest(%(s)s - off, 0) + 1)::int
FOR (%(e)s - greatest(off, %(s)s))::int) FROM {s}.lines
WHERE file_id = %(id)s AND off < %(e)s AND off >= (SELECT coalesce(max(off), 0)
FROM {s}.lines WHERE file_id = %(id)s AND off <= %(s)s) ORDER BY off
"""
# The bytes of many small files at once: from the row holding each one's start.
_PREFETCH = """
SELECT l.file_id, l.off, l.data
FROM unnest(%s::bigint[], %s::bigint[], %s::bigint[]) AS u(id, lo, hi)
JOIN {s}.lines l ON l.file_id = u.id AND l.off < u.hi AND l.off >= coalesce((SELECT max(m.off)
    FROM {s}.lines m WHERE m.file_id = u.id AND m.off <= u.lo), 0)
ORDER BY l.file_id, l.off
"""
_FORGET_FILE = "DELETE FROM {s}.search_files WHERE file_id = %s"
_FORGET_FROM = [
    f"DELETE FROM {{s}}.{table} WHERE file_id = %s AND off >= %s"
    for table in ("search_entries", "search_usage", "search_imports")
]
_FORGET_GONE = """
DELETE FROM {s}.search_files f WHERE NOT EXISTS (SELECT 1 FROM {s}.nodes n
WHERE n.id = f.file_id)
"""
_SAVE_FILE = """
INSERT INTO {s}.search_files (file_id, size, mtime_ns, scan_offset, tail_off, tail_md5,
    line, phase, entries, text_bytes, final_phase, session_id, cwd, parent, created,
    final_entries)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (file_id) DO UPDATE SET size = excluded.size, mtime_ns = excluded.mtime_ns,
    scan_offset = excluded.scan_offset, tail_off = excluded.tail_off,
    tail_md5 = excluded.tail_md5, line = excluded.line, phase = excluded.phase,
    entries = excluded.entries, text_bytes = excluded.text_bytes,
    final_phase = excluded.final_phase, session_id = excluded.session_id,
    cwd = excluded.cwd, parent = excluded.parent, created = excluded.created,
    final_entries = excluded.final_entries
"""
_COPY_ENTRIES = (
    "COPY {s}.search_entries (file_id, off, line, len, entry_id, role, ts, text) FROM STDIN"
)
_COPY_USAGE = (
    "COPY {s}.search_usage (file_id, off, line, entry_id, ts, provider, model, response_id, "
    "input, output, cache_read, cache_write, cost, cache_write_1h) FROM STDIN"
)
_COPY_IMPORTS = (
    "COPY {s}.search_imports (file_id, off, line, source, source_id, version, extra_ids) FROM STDIN"
)
_LINES = """
SELECT u.i, substring(string_agg(l.data, ''::bytea ORDER BY l.off)
    FROM (u.off - min(l.off))::int + 1 FOR u.len::int)
FROM unnest(%s::int[], %s::bigint[], %s::bigint[], %s::bigint[]) AS u(i, id, off, len)
JOIN {s}.lines l ON l.file_id = u.id AND l.off < u.off + u.len
    AND l.off >= (SELECT max(m.off) FROM {s}.lines m WHERE m.file_id = u.id AND m.off <= u.off)
GROUP BY u.i, u.off, u.len
"""
_FILES = """
SELECT f.file_id, f.size, f.final_phase, f.session_id, f.cwd, f.parent, f.created,
       f.final_entries
FROM {s}.search_files f WHERE f.file_id = ANY(%s)
"""
_USAGE = """
SELECT u.file_id, u.entry_id, u.line, u.ts, u.provider, u.model, u.response_id, u.input,
       u.output, u.cache_read, u.cache_write, u.cost, u.cache_write_1h
FROM {s}.search_usage u WHERE u.file_id = ANY(%s) ORDER BY u.file_id, u.line
"""
_IMPORTS = """
SELECT file_id, line, source, source_id, version, extra_ids FROM {s}.search_imports
WHERE file_id = ANY(%s) ORDER BY file_id, line
"""


def postgres_index(storage: SessionStorage) -> PostgresIndex | None:
    """The search index of `storage` when it is a PostgreSQL store, else None (the
    PostgreSQL package is looked at only when it was imported: a file store's search
    never loads psycopg)."""
    module = sys.modules.get("sessiontree.storage.postgres")
    if module is None or not isinstance(storage, module.PostgresSessionStorage):
        return None
    return PostgresIndex(storage)


class _Unstorable(ValueError):
    """A value a text column cannot hold."""


def _text(value: str | None) -> str | None:
    if value is not None and _UNSTORABLE.search(value) is not None:
        raise _Unstorable(value)
    return value


@dataclass(slots=True)
class _Pending:
    """Rows read in a batch, waiting for their COPY."""

    entries: list[tuple[Any, ...]] = field(default_factory=list)
    usage: list[tuple[Any, ...]] = field(default_factory=list)
    imports: list[tuple[Any, ...]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.entries) + len(self.usage) + len(self.imports)

    def add(self, file_id: int, rows: Rows) -> None:
        """The rows of `rows`, checked for what a text column holds (before any is kept)."""
        entries = [
            (file_id, off, line, length, _text(entry_id), _text(role), ts, text)
            for (line, off, length, entry_id, role, ts, _), text in zip(
                rows.entries, rows.texts, strict=True
            )
        ]
        usage = [
            (
                file_id,
                off,
                line,
                _text(r.entry_id),
                r.timestamp,
                _text(r.provider),
                _text(r.model),
                _text(r.response_id),
                r.input,
                r.output,
                r.cache_read,
                r.cache_write,
                r.cost,
                r.cache_write_1h,
            )
            for line, off, r in rows.usage
        ]
        imports = [
            (
                file_id,
                off,
                line,
                _text(m.source),
                _text(m.source_id),
                m.version,
                [_text(i) for i in m.extra_ids],
            )
            for line, off, m in rows.imports
        ]
        self.entries += entries
        self.usage += usage
        self.imports += imports


class _StoredFile:
    """One stored file's bytes, by its node id, in the refresh's snapshot: what
    `read_jsonl` reads (`ChunkedReads`), so the rows and the stamp saved with them
    are of the same bytes."""

    def __init__(
        self,
        index: PostgresIndex,
        conn: Connection[Any],
        file_id: int,
        size: int,
        rows: list[tuple[int, bytes]] | None,
    ):
        self._index = index
        self._conn = conn
        self._id = file_id
        self._size = size
        self.rows = rows
        """The rows fetched with other files' (None: read here), from the one
        holding the start."""

    def iter_chunks(self, path: str, chunk_size: int = 1 << 20) -> Iterator[bytes]:
        if self.rows is not None:
            data = self._fetched(0, self._size)
            return iter([data[i : i + chunk_size] for i in range(0, len(data), chunk_size)])
        return self._stream(chunk_size)

    def _fetched(self, start: int, end: int) -> bytes:
        assert self.rows is not None
        if not self.rows:
            return b""
        base = self.rows[0][0]
        return b"".join(data for _, data in self.rows)[start - base : end - base]

    def tail(self, committed: int) -> tuple[int, str] | None:
        """(offset, md5) of the row holding the byte before `committed`."""
        rows = [r for r in self.rows or () if r[0] < committed]
        if rows:
            return rows[-1][0], hashlib.md5(rows[-1][1]).hexdigest()
        row = self._conn.execute(self._index.q(_TAIL), (self._id, committed)).fetchone()
        return (int(row[0]), str(row[1])) if row else None

    def _stream(self, chunk_size: int) -> Iterator[bytes]:
        from sessiontree.storage.postgres import stream_content_rows  # psycopg: loaded

        query = self._index.q(_BYTES)
        return stream_content_rows(self._conn, query, self._id, self._size, chunk_size)

    def read_bytes_range(self, path: str, offset: int, length: int) -> bytes:
        end = min(self._size, offset + max(0, length))
        if offset >= end:
            return b""
        if self.rows is not None:
            return self._fetched(offset, end)
        with self._conn.cursor(binary=True) as cur:
            rows = cur.execute(self._index.q(_RANGE), {"s": offset, "e": end, "id": self._id})
            return b"".join(r[0] for r in rows.fetchall())


@dataclass(slots=True)
class _Todo:
    """A file to read: its node as the batch's snapshot sees it, and where to start."""

    key: str
    node_id: int
    size: int
    mtime_ns: int
    start: int
    state: FileState


class PostgresIndex:
    """The search index of one PostgreSQL store (see the module docstring)."""

    def __init__(self, storage: PostgresSessionStorage) -> None:
        self.storage = storage
        self._statements: dict[str, sql.Composed] = {}

    def q(self, text: str) -> sql.Composed:
        """`text` with `{s}` the store's schema (composed once)."""
        composed = self._statements.get(text)
        if composed is None:
            from psycopg import sql

            composed = sql.SQL(text).format(s=sql.Identifier(self.storage.schema))
            self._statements[text] = composed
        return composed

    def keys(self, sources: Sequence[SessionSource]) -> tuple[dict[str, str], list[str]]:
        """{key: path} of the sources the index can hold, and the paths of the rest (a
        loader's session, a path outside the store)."""
        keys: dict[str, str] = {}
        rest: list[str] = []
        for source in sources:
            if source.load is not None:
                rest.append(source.path)
                continue
            try:
                keys[self.storage.key_for(source.path)] = source.path
            except ValueError:
                rest.append(source.path)
        return keys, rest

    # -- refresh

    def refresh(
        self,
        sources: Sequence[SessionSource],
        progress: Callable[[int, int], None] | None = None,
    ) -> tuple[Refreshed, dict[int, str], list[str]]:
        """Bring the rows of `sources` up to date (see the module docstring); returns
        what was done (`stale`: files it could not index), {node id: path} of the
        sources it holds as they are now, and the paths of the others (to be read).
        `progress(bytes_done, bytes_total)` is called after each transaction."""
        keys, rest = self.keys(sources)
        result = Refreshed()
        with self.storage.connection() as conn:
            ensure_tables(conn, self.storage.schema, self.q)
        elsewhere = [k for k in keys if not k.startswith("sessions/")]
        ids: dict[str, int] = {}
        changed: dict[str, int] = {}
        with self.storage.connection() as conn:
            for key, node_id, size, stale in conn.execute(self.q(_PLAN), (elsewhere,)):
                if key in keys:
                    ids[key] = int(node_id)
                    if stale:
                        changed[key] = int(size)
            if changed:
                self._refresh(conn, changed, keys, ids, result, progress)
        # Not a file of the store (gone, a directory): the search reads it and says why.
        unreadable = [path for key, path in keys.items() if key not in ids]
        stale = set(result.stale)
        covered = {ids[k]: p for k, p in keys.items() if k in ids and p not in stale}
        return result, covered, rest + unreadable

    def _refresh(
        self,
        conn: Connection[Any],
        changed: dict[str, int],
        keys: dict[str, str],
        ids: dict[str, int],
        result: Refreshed,
        progress: Callable[[int, int], None] | None,
    ) -> None:
        conn.execute(_LOCK, (self.storage.schema,))
        try:
            pending = list(changed)[::-1]
            total = sum(changed.values())
            while pending:
                batch = [pending.pop() for _ in range(min(_BATCH_FILES, len(pending)))]
                with conn.transaction():
                    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                    todo = self._plan(conn, batch, ids)
                    # Files past the batch's bytes wait for the next transaction.
                    batch_bytes = 0
                    for n, item in enumerate(todo):
                        batch_bytes += item.size - item.start
                        if batch_bytes > _BATCH_BYTES and n:
                            pending += [t.key for t in todo[n:]][::-1]
                            del todo[n:]
                            break
                    self._index(conn, todo, keys, result)
                    conn.execute(self.q(_FORGET_GONE))
                if progress is not None:
                    done = total - sum(changed[k] for k in pending)
                    progress(done, total)
        finally:
            conn.execute(_UNLOCK, (self.storage.schema,))

    def _plan(self, conn: Connection[Any], batch: list[str], ids: dict[str, int]) -> list[_Todo]:
        """The files of `batch` to read, in its snapshot, their old rows forgotten;
        `ids` follows each key to its node in the snapshot (a file replaced since the
        first look is read as it is now)."""
        rows = {str(r[0]): r for r in conn.execute(self.q(_STATE), (batch,))}
        todo = []
        grown: list[tuple[int, int]] = []  # rows from the old end on are read again
        replaced: list[tuple[int]] = []
        for key in batch:
            row = rows.get(key)
            if row is None:
                ids.pop(key, None)  # gone since: the search names it
                continue
            node_id, size, mtime_ns, known = int(row[1]), int(row[2]), int(row[3]), row[4]
            ids[key] = node_id
            if known is not None and row[5] == size and row[6] == mtime_ns:
                continue  # another refresh read it meanwhile
            start, state = 0, FileState()
            if known is not None and row[16] and size >= row[5] and row[7] > 0:
                start = int(row[7])
                line, phase, session_id, cwd, parent, created, entries = row[8:15]
                state = FileState(
                    line, phase, session_id, cwd, parent, created, entries, int(row[15])
                )
                grown.append((node_id, start))
            elif known is not None:
                replaced.append((node_id,))
            todo.append(_Todo(key, node_id, size, mtime_ns, start, state))
        with conn.cursor() as cur:  # pipelined: one round trip each
            for forget in _FORGET_FROM:
                cur.executemany(self.q(forget), grown)
            cur.executemany(self.q(_FORGET_FILE), replaced)
        return todo

    def _index(
        self, conn: Connection[Any], todo: list[_Todo], keys: dict[str, str], result: Refreshed
    ) -> None:
        """Read the files of `todo` and write their rows."""
        pending = _Pending()
        saves: list[tuple[Any, ...]] = []
        fetched = self._prefetch(conn, todo)
        for item in todo:
            path = keys[item.key]
            stored = _StoredFile(self, conn, item.node_id, item.size, fetched.get(item.node_id))
            held = _Pending()

            def sink(part: Rows, node_id: int = item.node_id, held: _Pending = held) -> None:
                held.add(node_id, part)

            try:
                rows, committed, saved, final = read_jsonl(
                    cast(SessionStorage, stored),  # reads only: iter_chunks, read_bytes_range
                    path,
                    item.start,
                    item.size,
                    item.state,
                    0,
                    sink=sink,
                )
                held.add(item.node_id, rows)
                header = (_text(final.session_id), _text(final.cwd), _text(final.parent))
            except _Unstorable:
                result.stale.append(path)
                conn.execute(self.q(_FORGET_FILE), (item.node_id,))
                continue
            tail = stored.tail(committed) if committed else None
            saves.append(
                (
                    item.node_id,
                    item.size,
                    item.mtime_ns,
                    committed,
                    tail[0] if tail else None,
                    tail[1] if tail else None,
                    saved.line,
                    saved.phase,
                    saved.entries,
                    saved.text_bytes,
                    final.phase,
                    *header,
                    final.created,
                    final.entries,
                )
            )
            pending.entries += held.entries
            pending.usage += held.usage
            pending.imports += held.imports
            if len(pending) >= _HELD_ROWS:
                self._write(conn, saves, pending)
                saves, pending = [], _Pending()
            result.bytes_read += item.size - item.start
            result.files_read += 1
            result.entries_added += len(held.entries)
        self._write(conn, saves, pending)

    def _prefetch(
        self, conn: Connection[Any], todo: list[_Todo]
    ) -> dict[int, list[tuple[int, bytes]]]:
        """The rows of the small files of `todo` (each one's from its start), by file."""
        small = [t for t in todo if t.size - t.start <= _PREFETCH_BYTES]
        out: dict[int, list[tuple[int, bytes]]] = {t.node_id: [] for t in small}
        if not small:
            return out
        with conn.cursor(binary=True) as cur:
            cur.execute(
                self.q(_PREFETCH),
                (
                    [t.node_id for t in small],
                    [t.start for t in small],
                    [t.size for t in small],
                ),
            )
            for file_id, off, data in cur:
                out[int(file_id)].append((int(off), bytes(data)))
        return out

    def _write(
        self, conn: Connection[Any], saves: list[tuple[Any, ...]], pending: _Pending
    ) -> None:
        """The files' rows (pipelined: one round trip), then theirs (COPY)."""
        with conn.cursor() as cur:
            cur.executemany(self.q(_SAVE_FILE), saves)
            for statement, rows in (
                (_COPY_ENTRIES, pending.entries),
                (_COPY_USAGE, pending.usage),
                (_COPY_IMPORTS, pending.imports),
            ):
                if rows:
                    with cur.copy(self.q(statement)) as copy:
                        for row in rows:
                            copy.write_row(row)

    # -- queries

    def hits(
        self,
        files: dict[int, str],
        matcher: Matcher,
        filters: Filters,
    ) -> Generator[tuple[int, SearchHit]]:
        """The hits in `files` ({node id: path}, as `refresh` returns them), each with
        its key (its time, -1 for none), newest first: entries whose text holds every
        literal of the query, verified against their lines. Close the iterator when
        done with it early.

        Newest first is the order of an index on the time: a common word's first
        page comes from the newest entries, a rare one's from the trigram index."""
        from psycopg import sql

        where = [sql.SQL("e.file_id = ANY(%s::bigint[])")]
        args: list[Any] = [list(files)]
        for literal in matcher.literals:
            where.append(sql.SQL("e.text LIKE %s"))
            args.append("%" + _like_escape(index_text(literal)) + "%")
        if filters.roles is not None:
            where.append(sql.SQL("e.role = ANY(%s)"))
            args.append(sorted(filters.roles))
        if filters.since is not None:
            where.append(sql.SQL("e.ts >= %s"))
            args.append(filters.since)
        if filters.until is not None:
            where.append(sql.SQL("e.ts <= %s"))
            args.append(filters.until)
        query = sql.SQL(
            "SELECT f.session_id, e.file_id, e.line, e.off, e.len, e.entry_id, "
            "coalesce(e.ts, -1) AS t FROM {s}.search_entries e "
            "JOIN {s}.search_files f ON f.file_id = e.file_id WHERE {where} ORDER BY t DESC"
        ).format(s=sql.Identifier(self.storage.schema), where=sql.SQL(" AND ").join(where))
        with self.storage.connection() as conn, conn.transaction():
            with conn.cursor(name="search_candidates") as candidates:
                candidates.execute(query, args)
                while True:
                    page = candidates.fetchmany(_PAGE)
                    if not page:
                        return
                    raw = self._lines(conn, page)
                    for i, (session_id, file_id, line, _, _, entry_id, t) in enumerate(page):
                        entry = loads_object(raw[i]) if i in raw else None
                        if entry is None:
                            continue
                        if entry_id is not None and entry.get("id") != entry_id:
                            continue  # the file changed since the refresh
                        hit = entry_hit(
                            files[file_id], session_id or "", entry, int(line), matcher, filters
                        )
                        if hit is not None:
                            yield int(t), hit

    def _lines(self, conn: Connection[Any], page: list[tuple[Any, ...]]) -> dict[int, bytes]:
        """The raw lines of a page of candidates, by their position in it."""
        with conn.cursor(binary=True) as cur:
            rows = cur.execute(
                self.q(_LINES),
                (
                    list(range(len(page))),
                    [r[1] for r in page],
                    [r[3] for r in page],
                    [r[4] for r in page],
                ),
            ).fetchall()
        out = {}
        for i, data in rows:
            if data is not None and len(data) == page[i][4]:
                out[int(i)] = bytes(data)
        return out

    def usage(
        self, covered: dict[int, str]
    ) -> tuple[list[IndexedFile], dict[int, list[UsageRecord]], dict[int, list[ImportMarker]]]:
        """The files `covered` names ({node id: path}, as `refresh` returns them) as the
        index holds them, in that order (a scan's), their replies' usage in file order
        and their import markers, by file id."""
        with self.storage.connection() as conn:
            held = {
                int(r[0]): IndexedFile(
                    int(r[0]),
                    covered[int(r[0])],
                    "jsonl",
                    int(r[1]),
                    r[2] == PHASE_OK,
                    r[3],
                    r[4],
                    r[5],
                    r[6],
                    int(r[7]),
                )
                for r in conn.execute(self.q(_FILES), (list(covered),)).fetchall()
            }
            files = [held[i] for i in covered if i in held]
            ids = [f.id for f in files]
            records: dict[int, list[UsageRecord]] = {i: [] for i in ids}
            make = UsageRecord._make
            for row in conn.execute(self.q(_USAGE), (ids,)).fetchall():  # fetchall: faster
                records[row[0]].append(make(row[1:]))
            markers: dict[int, list[ImportMarker]] = {}
            for file_id, line, source, source_id, version, extra in conn.execute(
                self.q(_IMPORTS), (ids,)
            ).fetchall():
                markers.setdefault(int(file_id), []).append(
                    ImportMarker(int(line), source, source_id, int(version), tuple(extra))
                )
        return files, records, markers


def _like_escape(text: str) -> str:
    """`text` as a LIKE pattern matching itself (backslash is LIKE's escape)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
