"""The content index's database: its tables, opening it, write transactions, entry keys.

One family of tables (`INDEX_FAMILY`, `sessiontree._util.cachedb`) in
`<agent dir>/cache/content-index.db`: ``files`` (one row per session file: its
identity and `FileMark`, where reading stopped, its header), ``entries`` (one row per
entry with text: where its line is), ``fts`` (the casefolded text, a contentless FTS5
table keyed like ``entries``), ``meta``, and the usage rows (`_usage_rows`).
"""

from __future__ import annotations

import os
import sqlite3
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
        text, content='', detail=none, columnsize=0, tokenize='trigram case_sensitive 1'
    )""",
)
INDEX_FAMILY: Final = Family(
    name="content_index",
    # 2: usage rows for what pi 1.6 counts besides replies (`counted_usage`)
    # 3: no import markers (kept once, in the listing cache: `listing.import_records`)
    # 4: the 1-hour share of cache writes (`UsageRecord.cache_write_1h`); Claude Code
    # transcripts read again for their inline sidechains' usage
    version=4,
    schema=_SCHEMA,
    tables=("meta", "files", "entries", *USAGE_TABLES, "fts"),
)
"""The index's tables in its cache file (`sessiontree._util.cachedb`)."""


class EntryKeys:
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
        ms = min(max(ms, 1), KEY_MAX)
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
