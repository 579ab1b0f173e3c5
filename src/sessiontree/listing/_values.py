"""Tables of one JSON value per file identity, in the listing cache's file.

The same SQLite file as the native listing (`<agent dir>/cache/sessions-meta.db`,
`_cache`), one family of tables each (`sessiontree._util.cachedb`: a family is
upgraded or rebuilt without touching the others): the foreign listings
(`sessiontree.foreign.store`) and the import records of a store's sessions
(`_imports`). The rule is the listing cache's: a row is valid for one file identity
(path and `stat_identity`: size, mtime_ns, inode, ctime_ns; its users plan what to
read again with `plan_changes`), and every failure degrades to "no cache" (a locked,
read-only or damaged database is passed over or repaired once; the file is only a
cache and safe to delete). Nothing creates an agent dir just to hold a cache.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from sessiontree._util.cachedb import Family, fits_integer, run_cached
from sessiontree._util.fs import utf8_encodable
from sessiontree.format import loads_line, serialize_entry_bytes
from sessiontree.listing._cache import CACHE_DB_NAME, META_DB_APP_ID
from sessiontree.listing._changes import Identity, Known

__all__ = ["IdentityCache", "identity_family"]

T = TypeVar("T")


def identity_family(table: str, version: int) -> Family:
    """The family of one table of JSON values per file identity."""
    return Family(
        name=table,
        version=version,
        schema=(
            f"CREATE TABLE {table} (path TEXT PRIMARY KEY, size INTEGER NOT NULL, "
            "mtime_ns INTEGER NOT NULL, ino INTEGER NOT NULL, value BLOB NOT NULL, "
            "ctime_ns INTEGER NOT NULL) WITHOUT ROWID",
        ),
        tables=(table,),
    )


class IdentityCache:
    """One table of `family` (`identity_family`): path -> (identity, JSON value)."""

    def __init__(self, agent_dir: str | None, family: Family) -> None:
        self.family = family
        self.table = family.tables[0]
        self.path = os.path.join(agent_dir, CACHE_DB_NAME) if agent_dir else None

    def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T | None:
        if self.path is None:
            return None
        return run_cached(self.path, self.family, fn, application_id=META_DB_APP_ID)

    def fetch(self, paths: Iterable[str] | None = None) -> dict[str, Known[Any]]:
        """Cached values of `paths` (every row when None), whatever identity they were
        stored with (`listing.plan_changes` tells which still hold)."""
        wanted = None if paths is None else {p for p in paths if utf8_encodable(p)}

        def run(conn: sqlite3.Connection) -> dict[str, Known[Any]]:
            found: dict[str, Known[Any]] = {}
            query = f"SELECT path, size, mtime_ns, ino, ctime_ns, value FROM {self.table}"
            for row in conn.execute(query):
                if wanted is not None and row[0] not in wanted:
                    continue
                try:
                    found[row[0]] = Known((row[1], row[2], row[3], row[4]), loads_line(row[5]))
                except (ValueError, UnicodeError):
                    continue
            return found

        return self._run(run) or {}

    def store(self, rows: Iterable[tuple[str, Identity, Any]], stale: Iterable[str] = ()) -> None:
        values = [
            (path, *identity, serialize_entry_bytes(value))
            for path, identity, value in rows
            # A file whose identity no INTEGER holds (dated after 2262) is read each time.
            if utf8_encodable(path) and fits_integer(*identity)
        ]
        gone = [(p,) for p in stale if utf8_encodable(p)]
        if not values and not gone:
            return

        def run(conn: sqlite3.Connection) -> None:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany(
                    f"INSERT OR REPLACE INTO {self.table} "
                    "(path, size, mtime_ns, ino, ctime_ns, value) VALUES (?, ?, ?, ?, ?, ?)",
                    values,
                )
                conn.executemany(f"DELETE FROM {self.table} WHERE path = ?", gone)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

        self._run(run)
