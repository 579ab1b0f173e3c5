"""The content index: every session's searchable text in SQLite FTS5 (and the usage rows).

`<agent dir>/cache/content-index.db` (0600, derived data, safe to delete) holds,
per session file, what `search` and the usage reports need:

* ``entries``: one row per entry with text (`export.entry_text`: user, assistant
  and thinking text, tool calls and results, custom messages, summaries,
  labels): where its line is (line number, byte offset, length), its id, role
  and time. The text itself is not stored: hits are verified, and snippets cut,
  from the session file's own line.
* ``fts``: a contentless FTS5 table over the casefolded text's words (`_terms`: the
  `ascii` tokenizer, `detail=none`), and the vocabulary (``terms``, with a trigram
  table over it): a query's literal text is cut into pieces, each a whole word, the
  start or end of one, or inside one; the words holding each piece, found in the
  vocabulary, select a superset of the matching entries, in the index's key order.
  The key
  of an entry is its time (epoch ms, moved up to the next free number on a
  collision), so the newest entries come first (`search` restores the exact
  order of entries moved past another) and a time range is a key range.
* the usage rows (`_usage_rows`: table ``usage``): each assistant message's usage,
  for `sessiontree.reports._usage`, read by the same pass over the file.

**Refresh.** `ContentIndex.refresh(sources)` stats every source and plans against the
``files`` rows with the file-identity index every cache uses (`listing.plan_changes`,
`listing.grown_from`), after one set comparison of the sources' identities with the
rows' (a store where nothing changed is told by it alone): an unchanged file (size,
mtime, inode and ctime) is not read, a file that only grew is read from the end of its
last complete line, anything else is read again from the start. An entry deleted from
the index stays in the FTS table as a dead row (SQLite before 3.43 cannot delete from a
contentless table): it joins no entry row, so it costs space only; when dead text
outweighs live text the index is rebuilt. The file follows the rules of every cache
database (`sessiontree._util.cachedb`): an older index is rebuilt, a damaged one deleted
and made again; another program's database or a newer sessiontree's index is left alone
(search then reads the files).

Sources are our JSONL files, or any session a loader turns into entries
(`SessionSource.load`, for other agents' formats): those are re-read whole when
they change, and their entries are found again by position.


**Many new files** (a first build) are read, and their text cut into words, by
forked workers (`_read_ahead`) while this process writes what they send, in the same
order and in the same transactions as it would have read them itself: the index is the
same. A build killed halfway leaves the files of its committed transactions indexed
(each file's rows and its ``files`` row commit together): the next refresh reads the rest.

Modules by job: `_index_db` (tables, opening, transactions, keys), `_index_rows`
(reading a session into rows), `_read_ahead` (new files read in workers), `_usage_rows`
(the usage report's rows), this one (the index: refresh and queries).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import (
    Callable,
    Collection,
    Container,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from dataclasses import dataclass, field
from typing import Final, TypeVar

from sessiontree._util.cachedb import CacheDB, is_damage, is_locked
from sessiontree._util.closing import process_id
from sessiontree._util.fs import utf8_encodable
from sessiontree.errors import InheritedHandleError
from sessiontree.format import UsageRecord
from sessiontree.listing import (
    FileMark,
    Known,
    grown_from,
    plan_changes,
)
from sessiontree.listing._marks import UNTRUSTED, Stat
from sessiontree.search._index_db import (
    INDEX_DB_NAME,
    INDEX_FAMILY,
    KEY_MAX,
    EntryKeys,
    open_index_db,
    write_transaction,
)
from sessiontree.search._index_rows import (
    PHASE_OK,
    FileState,
    IndexedFile,
    Read,
    Rows,
    SessionSource,
    read_file,
)
from sessiontree.search._read_ahead import read_ahead
from sessiontree.search._terms import (
    MAX_TERMS,
    cut_all,
    holds,
    literal_pieces,
    quoted,
)
from sessiontree.search._usage_rows import (
    USAGE_TABLES,
    usage_records,
    usage_records_of,
    write_usage_rows,
)
from sessiontree.search._verdict import VERDICT_KEY, Source, identities, verdict
from sessiontree.storage import SessionStorage, default_storage

__all__ = ["Candidate", "ContentIndex", "IndexStats", "Refreshed"]

T = TypeVar("T")

_BATCH_BYTES = 32 << 20  # read per write transaction (other processes get the lock between)
_BATCH_ROWS = 100_000
_REBUILD_DEAD_BYTES = 64 << 20
_FILE_COLUMNS = (
    "path, kind, size, mtime_ns, ino, ctime_ns, scan_offset, head_len, head, tail, line, "
    "phase, session_id, cwd, parent, created, entries, tail_entries, text_bytes, "
    "tail_text_bytes"
)
_UPDATE_FILE = (
    "UPDATE files SET "
    + ", ".join(f"{c.strip()} = ?" for c in _FILE_COLUMNS.split(","))
    + " WHERE id = ?"
)
_INSERT_FILE = (
    f"INSERT INTO files ({_FILE_COLUMNS}) "
    f"VALUES ({', '.join('?' for _ in _FILE_COLUMNS.split(','))})"
)


_PENDING_TERMS = 200_000  # new words held before they are written to the vocabulary
_FTS_HELD = 6 << 20  # characters of text held for the FTS table before they are written
NOTHING: Final = ""
"""`ContentIndex.match` when no indexed entry can hold the literals."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """An indexed entry whose text holds every piece of a query (verify it)."""

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


class ContentIndex:
    """The content index of one agent dir (see the module docstring)."""

    def __init__(self, path: str, db: CacheDB) -> None:
        self.path = path
        self._db = db
        self._owner = process_id()
        self._keys = EntryKeys(db.conn)
        self._files: dict[int, tuple[str, str, str] | None] | None = None
        self._ids: dict[str, int] | None = None
        self._exact: set[str] | None = None  # the files the index holds: the last sources
        self._new_terms: set[bytes] = set()  # words of the rows written, for ``terms``
        self._fts_rows: list[tuple[int, str]] = []  # for the FTS table, before the commit
        self._fts_held = 0

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
        db = open_index_db(path, create)
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
            fresh = open_index_db(self.path, True)
            if fresh is None:
                return False
            self._db = fresh
            conn = fresh.conn
        self._keys = EntryKeys(conn)
        self._files = self._ids = self._exact = None
        return True

    def answer(self, ask: Callable[[ContentIndex], T]) -> T | None:
        """`ask(self)`, asked once more after the index was rebuilt when it turns out
        damaged (or its tables are not as this version reads them); None when it cannot
        answer (locked, read-only, damaged beyond a rebuild). Closes the index."""
        try:
            for attempt in range(2):
                try:
                    return ask(self)
                except sqlite3.DatabaseError as exc:
                    if is_locked(exc) or attempt or not self.reset():
                        break
        finally:
            self.close()
        return None

    # -- refresh

    def refresh(
        self,
        sources: Sequence[Source],
        *,
        listed: Iterable[Stat] | None = None,
        storage: SessionStorage | None = None,
        progress: Callable[[int, int], None] | None = None,
        prune: bool = False,
    ) -> Refreshed:
        """Bring the index up to date with `sources` (paths of our JSONL files, or
        `SessionSource`s; see the module docstring).

        `listed`: the stats a listing took of (some of) the files a moment before
        (`listing.ListingRows.stats`), used instead of a stat of each.
        `progress(bytes_done, bytes_total)` is called while files are read.
        `prune` also forgets indexed files that no longer exist (whatever `sources`
        holds). Raises sqlite3.DatabaseError when the database is damaged.
        """
        storage = default_storage(storage)
        result = Refreshed()
        self._files = self._ids = self._exact = (
            None  # what another process wrote since is read again
        )
        if self._should_rebuild() and self.reset():
            result.rebuilt = True
        conn = self._conn
        stats, failed, paths = identities(sources, listed)
        digest = verdict(stats, sources) if not failed else None
        # What another connection wrote from here on is seen (`_keep_verdict`).
        version = self._data_version()
        kept = self._meta_text(VERDICT_KEY)
        if digest is not None and kept is not None and kept[:-2] == digest:
            # The last complete refresh left the index holding these very stats: nothing
            # to compare (`_verdict`). ":e": it holds no other file either.
            if kept.endswith(":e"):
                self._exact = {s[0] for s in stats}
                return result
            if not prune:
                return result
        # Most refreshes find nothing to do: the sources' identities, compared as one set
        # with the rows' (one query, no object per row), say so without planning. A row
        # stat'ed within its mtime's tick (`UNTRUSTED`) is never the file as it is now.
        if not prune and not failed and stats:
            held = set(
                conn.execute(
                    "SELECT path, size, mtime_ns, ino, ctime_ns FROM files WHERE ctime_ns != ?",
                    (UNTRUSTED,),
                )
            )
            if held.issuperset(stats):
                exact: set[str] | None = None
                if len(held) == len(stats) and len(held) == self.file_count():
                    exact = {s[0] for s in stats}  # each row's file, once: `covering` is cheap
                    self._exact = exact = exact if len(exact) == len(held) else None
                if digest is not None:
                    self._keep_verdict(digest, exact is not None, version, wait=False)
                return result
        # Plan (no file is read): the sources' identities against the `files` rows.
        known: dict[str, Known[int]] = {}
        for row in conn.execute("SELECT path, id, size, mtime_ns, ino, ctime_ns FROM files"):
            known[row[0]] = Known((row[2], row[3], row[4], row[5]), row[1])
        gone = [known[path].value for path in failed if path in known]
        if not all(map(utf8_encodable, paths)):
            result.stale += [s[0] for s in stats if not utf8_encodable(s[0])]
            stats = [s for s in stats if utf8_encodable(s[0])]
        plan = plan_changes(stats, known, paths)
        if plan.to_read:
            # Objects for the files read only: a search's sources are mostly paths.
            loaders = {s.path: s for s in sources if not isinstance(s, str)}
            todo = [(loaders.get(s[0]) or SessionSource(s[0]), s) for s, _ in plan.to_read]
        else:
            todo = []
        if prune:  # rows of files not among `sources` may be other stores': gone if deleted
            gone += [known[p].value for p in plan.gone if not _exists(p)]
        if not todo and not gone:
            if digest is not None and not result.stale:
                self._keep_verdict(digest, self._holds_only(stats), version, wait=False)
            return result
        total = sum(s[1] for _, s in todo)
        done = 0
        at = 0  # the next of `todo` to index
        ahead = read_ahead(todo, known, storage)
        try:
            if gone:
                with write_transaction(conn):
                    self._drop_verdict()
                    for file_id in gone:
                        self._forget(file_id, None)
                    result.removed = len(gone)
            while at < len(todo):
                batch_bytes = 0
                batch_rows = 0
                with write_transaction(conn):
                    self._drop_verdict()
                    self._fts_rows.clear()  # a transaction that failed leaves none
                    while (
                        at < len(todo) and batch_bytes < _BATCH_BYTES and batch_rows < _BATCH_ROWS
                    ):
                        source, listed_as = todo[at]
                        prepared = ahead.take(at)
                        at += 1
                        if ahead.terms:
                            self._new_terms |= ahead.terms
                            ahead.terms.clear()
                        try:
                            read, added = self._index_file(source, storage, listed_as, prepared)
                        except sqlite3.Error:
                            raise
                        except Exception:  # unreadable, or a loader that failed on it
                            result.stale.append(source.path)
                            continue
                        result.files_read += 1 if read else 0
                        result.bytes_read += read
                        result.entries_added += added
                        batch_bytes += read
                        batch_rows += added
                        done += listed_as[1]
                        if progress is not None:
                            progress(done, total)
                    self._flush_fts()
                    self._save_terms()
                    self._save_meta()
        except sqlite3.OperationalError as exc:
            if not is_locked(exc):
                raise
            result.stale += [source.path for source, _ in todo[at:]]
        finally:
            ahead.close()
        self._files = self._ids = self._exact = None
        if digest is not None and not result.stale:
            only = self._holds_only(stats)
            if self._keep_verdict(digest, only, version, wait=True) and only:
                self._exact = {s[0] for s in stats}
        return result

    def _data_version(self) -> int:
        """A number that changes whenever another connection commits a write."""
        version: int = self._conn.execute("PRAGMA data_version").fetchone()[0]
        return version

    def _holds_only(self, stats: Sequence[Stat]) -> bool:
        """Whether the index holds no file but those of `stats` (each of which it
        holds, after a complete refresh)."""
        return len({s[0] for s in stats}) == self.file_count()

    def _drop_verdict(self) -> None:
        """Forget the verdict (in every write transaction of a refresh, first: what it
        writes may make it untrue)."""
        self._conn.execute("DELETE FROM meta WHERE key = ?", (VERDICT_KEY,))

    def _keep_verdict(self, digest: str, exact: bool, version: int, *, wait: bool) -> bool:
        """Keep `digest` as the verdict of a refresh that found (or made) every source's
        row as stat'ed, when no other connection wrote the index since it read the rows
        (`version`: `_data_version` then). `wait`: for the write lock as long as any
        write does (else not at all: a search does not wait to save the next one a
        comparison). Whether it was kept."""
        conn = self._conn
        value = digest + (":e" if exact else ":p")
        if self._meta_text(VERDICT_KEY) == value:
            return True
        waited = conn.execute("PRAGMA busy_timeout").fetchone()[0]
        if not wait:
            conn.execute("PRAGMA busy_timeout = 0")
        try:
            with write_transaction(conn):
                if self._data_version() != version:
                    return False
                conn.execute(
                    "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (VERDICT_KEY, value)
                )
        except sqlite3.OperationalError as exc:
            if not is_locked(exc):
                raise
            return False
        finally:
            if not wait:
                conn.execute(f"PRAGMA busy_timeout = {int(waited)}")
        return True

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

    def _meta_text(self, key: str) -> str | None:
        row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row is not None and isinstance(row[0], str) else None

    def _save_terms(self) -> None:
        """Add the words of the rows written to the vocabulary (each word once; a word
        whose rows were rolled back stays: it only costs a little space)."""
        if not self._new_terms:
            return
        conn = self._conn
        before = conn.execute("SELECT coalesce(max(id), 0) FROM terms").fetchone()[0]
        conn.executemany(
            "INSERT OR IGNORE INTO terms (term) VALUES (?)",
            ((t.decode("utf-8"),) for t in self._new_terms),
        )
        self._new_terms.clear()
        conn.execute(
            "INSERT INTO terms_fts (rowid, term) SELECT id, term FROM terms WHERE id > ?",
            (before,),
        )

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
        for table in ("entries", *USAGE_TABLES):
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
        self,
        source: SessionSource,
        storage: SessionStorage,
        listed_as: Stat,
        prepared: Read | None = None,
    ) -> tuple[int, int]:
        """Read what is new in one file (listed with its `listing.stat_identity`);
        returns (bytes read, entries added). Raises what reading it raised (OSError,
        a loader's error) having written nothing. `prepared`: the whole file read
        already, its text cut (`_read_ahead`)."""
        conn = self._conn
        path, size, mtime_ns, ino, ctime_ns = listed_as
        row = conn.execute(
            "SELECT id, kind, size, mtime_ns, ino, scan_offset, head_len, head, tail, line, "
            "phase, session_id, cwd, parent, created, entries, text_bytes, ctime_ns "
            "FROM files WHERE path = ?",
            (path,),
        ).fetchone()
        if row is not None and Known((row[2], row[3], row[4], row[17]), None).same_as(listed_as):
            return 0, 0  # another process brought it up to date meanwhile
        st = FileState()
        start = 0
        file_id: int | None = row[0] if row is not None else None
        forget_from: int | None = None  # what of the file's rows to forget (None: all)
        before: FileMark | None = None  # the mark the lines appended are read after
        if row is not None and prepared is None:
            mark = FileMark(row[2], row[3], row[4], row[5], row[6], row[7], row[8])
            if (
                source.load is None
                and row[1] == source.kind
                and grown_from(storage, listed_as, mark)
            ):
                before = mark
                start = forget_from = mark.offset
                st = FileState(row[9], row[10], row[11], row[12], row[13], row[14], row[15])
                st.text_bytes = row[16]
        order = mtime_ns // 1_000_000
        flushed = 0  # entries written while the file was read
        begun = False  # whether the file's old rows are forgotten and its row is there

        def begin() -> int:
            """Forget the file's old rows and make sure it has a row to hang new ones on
            (completed below, in the same transaction)."""
            nonlocal file_id, begun
            if file_id is not None:
                self._forget(file_id, forget_from)
                if forget_from is None:
                    file_id = None
            if file_id is None:
                file_id = conn.execute(
                    "INSERT INTO files (path, kind, size, mtime_ns, ino, scan_offset, head_len,"
                    " head, tail, line, phase, entries, tail_entries, text_bytes,"
                    " tail_text_bytes) VALUES (?, ?, -1, -1, -1, 0, 0, x'', x'', 0, 0, 0, 0, 0, 0)",
                    (path, source.kind),
                ).lastrowid
            begun = True
            assert file_id is not None
            return file_id

        def sink(part: Rows) -> None:
            # A big file's rows are written as it is read, under a savepoint: one that
            # fails halfway leaves none of them.
            nonlocal flushed
            if not begun:
                self._flush_fts()  # the rows held from here on are this file's alone
                conn.execute("SAVEPOINT file")
                begin()
            assert file_id is not None
            flushed += len(part.entries)
            self._write_rows(file_id, part)

        if prepared is not None:
            mark, rows, committed, saved, final = prepared
        else:
            try:
                mark, rows, committed, saved, final = read_file(
                    source, storage, listed_as, st, start, before, order, sink
                )
            except sqlite3.Error:
                raise
            except Exception:
                if begun:
                    conn.execute("ROLLBACK TO file")
                    conn.execute("RELEASE file")
                    self._fts_rows.clear()
                raise
        if begun:
            conn.execute("RELEASE file")
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
        if not begun and file_id is None:  # a new file: its row in one statement
            written = conn.execute(_INSERT_FILE, values).lastrowid
        else:
            written = file_id if begun else begin()
            conn.execute(_UPDATE_FILE, (*values, written))
        assert written is not None
        self._write_rows(written, rows, prepared is not None)
        return size - start, flushed + len(rows.entries)

    def _write_rows(self, file_id: int, rows: Rows, cut_already: bool = False) -> None:
        """Write a file's rows; `cut_already`: their texts are what the FTS table takes,
        their words in the vocabulary to come (`_read_ahead`)."""
        conn = self._conn
        keys = self._keys.take_all(rows.order)
        conn.executemany(
            "INSERT INTO entries (key, file, line, offset, length, entry_id, role, ts, text_bytes) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(key, file_id, *row) for key, row in zip(keys, rows.entries, strict=True)],
        )
        new_terms = self._new_terms
        texts = rows.texts
        if not cut_already:
            texts, terms = cut_all(texts)
            new_terms.update(terms)
        self._fts_rows += zip(keys, texts, strict=True)
        self._fts_held += sum(map(len, texts))
        if self._fts_held > _FTS_HELD:
            self._flush_fts()
        if len(new_terms) > _PENDING_TERMS:
            self._save_terms()
        write_usage_rows(conn, file_id, rows.usage)

    def _flush_fts(self) -> None:
        """Write the FTS rows held, by key: FTS5 flushes what it holds in memory into a
        new segment whenever a rowid is lower than the one before (a file's keys, its
        entries' times, are below the last file's as often as not), so rows written file
        by file made a segment per file and a third more work merging them."""
        rows = self._fts_rows
        if rows:
            rows.sort()
            self._conn.executemany("INSERT INTO fts (rowid, text) VALUES (?, ?)", rows)
            rows.clear()
        self._fts_held = 0

    # -- queries

    def _file_ids(self) -> dict[str, int]:
        """Each indexed file's id by path (one query; no object per file but the pair)."""
        if self._ids is None:
            self._ids = dict(self._conn.execute("SELECT path, id FROM files"))
        return self._ids

    def _file_name(self, file_id: int) -> tuple[str, str, str] | None:
        """(path, kind, session id) of an indexed file, asked for the files a query's
        candidates are in only (a search's hits are in a few of the store's files)."""
        names = self._files
        if names is None:
            names = self._files = {}
        if file_id not in names:
            row = self._conn.execute(
                "SELECT path, kind, session_id FROM files WHERE id = ?", (file_id,)
            ).fetchone()
            names[file_id] = (row[0], row[1], row[2] or "") if row is not None else None
        return names[file_id]

    def file_count(self) -> int:
        """How many files the index holds."""
        if self._ids is not None:
            return len(self._ids)
        count: int = self._conn.execute("SELECT count(*) FROM files").fetchone()[0]
        return count

    def covering(self, paths: Iterable[str]) -> tuple[Container[str], Collection[int] | None]:
        """(those of `paths` the index holds, the ids of their files; None: every file
        the index holds, when it holds nothing else)."""
        wanted = set(paths)
        if self._exact is not None and wanted == self._exact:
            return wanted, None  # the refresh found every file and nothing else held
        ids = self.file_ids(wanted)
        return ids, None if len(ids) == self.file_count() else list(ids.values())

    def file_ids(self, paths: Iterable[str]) -> dict[str, int]:
        """The ids of those of `paths` the index holds."""
        held = self._file_ids()
        return {p: held[p] for p in dict.fromkeys(paths) if p in held}

    def match(self, literals: Iterable[str]) -> str | None:
        """The FTS query for entries holding every one of `literals` (casefolded, see
        `_terms`): a superset of them. `NOTHING` when no indexed entry can hold them;
        None when their pieces are too short or too common to narrow the search."""
        parts: dict[str, None] = {}
        for literal in literals:
            for kind, piece in literal_pieces(literal):
                if kind == "term":
                    parts[quoted([piece])[0]] = None
                elif kind == "prefix":
                    parts[quoted([piece])[0] + "*"] = None
                else:
                    terms = self._terms_holding(kind, piece)
                    if terms is None:
                        continue
                    if not terms:
                        return NOTHING
                    parts["(" + " OR ".join(quoted(terms)) + ")"] = None
        return " AND ".join(parts) if parts else None

    def _terms_holding(self, kind: str, piece: str) -> list[str] | None:
        """The vocabulary's terms holding `piece` (as `kind` says); None: too many."""
        trigrams = dict.fromkeys(piece[i : i + 3] for i in range(len(piece) - 2))
        held = holds(kind, piece)
        found: list[str] = []
        cursor = self._conn.execute(
            "SELECT t.term FROM terms_fts JOIN terms t ON t.id = terms_fts.rowid "
            "WHERE terms_fts MATCH ?",
            (" AND ".join(quoted(trigrams)),),
        )
        try:
            for (term,) in cursor:
                if held(term):
                    found.append(term)
                    if len(found) > MAX_TERMS:
                        return None
        finally:
            cursor.close()
        return found

    def candidates(
        self,
        match: str,
        *,
        files: Iterable[int] | None = None,
        roles: Sequence[str] | None = None,
        since: int | None = None,
        until: int | None = None,
    ) -> Iterator[Candidate]:
        """Indexed entries that `match` (an FTS query: `match`) selects, newest first
        (by key), lazily.

        `files` limits to those file ids; `roles` to those roles; `since`/`until`
        (epoch ms, inclusive) to entries with a time in that range.
        """
        if match == NOTHING:
            return
        sql = [
            "SELECT e.file, e.line, e.offset, e.length, e.entry_id, e.role, e.ts, e.key "
            "FROM fts JOIN entries e ON e.key = fts.rowid WHERE fts MATCH ?"
        ]
        args: list[object] = [match]
        if since is not None:
            sql.append("AND fts.rowid >= ? AND e.ts >= ?")
            args += [max(since, 0), since]
        if until is not None:
            sql.append("AND fts.rowid <= ? AND e.ts <= ?")
            args += [min(until + self._meta("max_shift", 0), KEY_MAX), until]
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
        name_of = self._file_name
        cursor = conn.execute(" ".join(sql), args)
        try:
            for file_id, line, offset, length, entry_id, role, ts, key in cursor:
                name = name_of(file_id)
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
            IndexedFile(r[0], r[1], r[2], r[3], r[4] == PHASE_OK, r[5], r[6], r[7], r[8], r[9])
            for r in rows
            if wanted is None or r[1] in wanted
        ]

    def usage_records(self, file_ids: Iterable[int]) -> dict[int, list[UsageRecord]]:
        """Assistant messages' usage per file, in file order (`_usage_rows`)."""
        return usage_records(self._conn, file_ids)

    def usage_records_of(self, files: Mapping[int, str]) -> dict[int, list[UsageRecord]]:
        """`usage_records` of a few files (id -> path), looked up (a report reads a batch
        at a time); a file whose id names another path now is left out."""
        return usage_records_of(self._conn, files)

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


def _exists(path: str) -> bool:
    try:
        os.stat(path)
    except OSError:
        return False
    return True
