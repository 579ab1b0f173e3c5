"""The content index's database: its tables, opening it, write transactions, entry keys.

One family of tables (`INDEX_FAMILY`, `sessiontree._util.cachedb`) in
`<agent dir>/cache/content-index.db`: ``files`` (one row per session file: its
identity and `FileMark`, where reading stopped, its header), ``entries`` (one row per
entry with text: where its line is), ``fts`` (the casefolded text's words, a contentless
FTS5 table keyed like ``entries``), ``terms`` and ``terms_fts`` (every word once, and its
trigrams: `_terms`), ``meta``, and the usage rows (`_usage_rows`).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from typing import Final

from sessiontree._util.cachedb import CacheDB, Family, open_cache
from sessiontree.search._usage_rows import USAGE_SCHEMA, USAGE_TABLES

__all__ = [
    "INDEX_DB_NAME",
    "INDEX_FAMILY",
    "KEY_MAX",
    "EntryKeys",
    "open_index_db",
    "write_transaction",
]

INDEX_DB_NAME: Final = os.path.join("cache", "content-index.db")
"""The content index, relative to the agent dir."""

_APPLICATION_ID = 0x53544958  # "STIX": tells our database from any other at that path
_LOCK_TIMEOUT = 1.0
_ASKED_AT_ONCE = 500  # keys in one query (SQLite before 3.32 takes 999 parameters)
KEY_MAX: Final = 1 << 62
"""The largest entry key (an entry's time in ms, moved up past keys taken)."""

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
    *USAGE_SCHEMA,
    """CREATE VIRTUAL TABLE fts USING fts5(
        text, content='', detail=none, columnsize=0, tokenize='ascii'
    )""",
    """CREATE TABLE terms (id INTEGER PRIMARY KEY, term TEXT NOT NULL UNIQUE)""",
    """CREATE VIRTUAL TABLE terms_fts USING fts5(
        term, content='', detail=none, columnsize=0, tokenize='trigram case_sensitive 1'
    )""",
)
INDEX_FAMILY: Final = Family(
    name="content_index",
    # 2: usage rows for what pi 1.6 counts besides replies (`counted_usage`)
    # 3: no import markers (kept once, in the listing cache: `listing.import_records`)
    # 4: words (`_terms`) in the FTS table, not trigrams; the vocabulary in ``terms``
    # 5: usage rows hold 1-hour cache writes (`cache_write_1h`) and a Claude Code
    #    transcript's inline sidechain replies (`format.ExtraUsage`): read again
    # 6: usage rows hold no negative count (`format.usage_record` and the other agents'
    #    readers count one as 0): rows an older one kept negative are read again; and
    #    the verdict in ``meta`` (`_verdict`), which every writer must drop: an older
    #    sessiontree leaves a newer index alone, so none writes without dropping it
    version=6,
    schema=_SCHEMA,
    tables=("meta", "files", "entries", *USAGE_TABLES, "fts", "terms", "terms_fts"),
)
"""The index's tables in its cache file (`sessiontree._util.cachedb`)."""


class EntryKeys:
    """Allocates entry keys: the entry's time in ms, or the next free number after it.

    Its memory stays bounded however many entries a refresh writes: which of a file's
    times are keys already is asked of the table, in one query for the file's rows
    (rows written earlier in the transaction included), and only a time that
    collided remembers where its next free key is."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.next: dict[int, int] = {}
        """A time that collided: every key from it up to this one is taken."""
        self.max_shift = 0

    def take_all(self, times: Sequence[int]) -> list[int]:
        """A key for each of `times` (of rows about to be written, in order)."""
        wanted = [min(max(ms, 1), KEY_MAX) for ms in times]
        asked = list(dict.fromkeys(wanted))
        stored: set[int] = set()
        for at in range(0, len(asked), _ASKED_AT_ONCE):
            part = asked[at : at + _ASKED_AT_ONCE]
            stored.update(
                row[0]
                for row in self.conn.execute(
                    f"SELECT key FROM entries WHERE key IN ({', '.join('?' * len(part))})",
                    part,
                )
            )
        known = set(asked)  # keys whose being stored is known (`stored`) without a query
        mine: set[int] = set()  # keys taken here, not written yet
        keys = []
        for ms in wanted:
            key = self.next.get(ms, ms)
            while key in mine or key in stored or (key not in known and self._stored(key)):
                key += 1
            mine.add(key)
            if key != ms:
                self.next[ms] = key + 1
                if key - ms > self.max_shift:
                    self.max_shift = key - ms
            keys.append(key)
        return keys

    def _stored(self, key: int) -> bool:
        return (
            self.conn.execute("SELECT 1 FROM entries WHERE key = ?", (key,)).fetchone() is not None
        )


class write_transaction:
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


def open_index_db(path: str, create: bool) -> CacheDB | None:
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
