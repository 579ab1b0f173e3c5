"""The listing caches: scan records kept in process, and on disk in
`<agent dir>/cache/sessions-meta.db` (the `listing` family of that cache file, see
`sessiontree._util.cachedb`; the foreign listings keep families of their own there).

Every failure of the on-disk cache degrades to "no cache": a locked or unwritable file
is passed over, rows that cannot be read make the family rebuild once.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Final, TypeVar

from sessiontree._util.cachedb import Family, fits_integer, run_cached
from sessiontree._util.fs import utf8_encodable
from sessiontree.storage import HostFilesystem, SessionStorage

if TYPE_CHECKING:
    from sessiontree.listing._marks import Stat
    from sessiontree.listing._scan import Record

__all__ = [
    "CACHE_DB_NAME",
    "DIR_ROWS_FAMILY",
    "LISTING_FAMILY",
    "META_DB_APP_ID",
    "DirRecords",
    "MetaDB",
    "cache_lock",
    "clear_listing_cache",
]

T = TypeVar("T")

CACHE_DB_NAME = os.path.join("cache", "sessions-meta.db")
"""The persistent listing cache, relative to the agent dir."""

META_DB_APP_ID: Final = 0x53544C43  # "STLC": sessions-meta.db, the listings' cache file
"""The application_id of `CACHE_DB_NAME` (every family in it opens it with this one)."""

_COLUMNS = (
    "path, size, mtime_ns, ino, ctime_ns, scan_offset, head_len, head, tail, state, final, "
    "created_ms"
)
LISTING_FAMILY: Final = Family(
    name="listing",
    version=2,  # 2: the fold of both backends (format.MetaFold), created_ms
    schema=(
        """CREATE TABLE files (
            path TEXT PRIMARY KEY,
            size INTEGER NOT NULL,
            mtime_ns INTEGER NOT NULL,
            ino INTEGER NOT NULL,
            ctime_ns INTEGER NOT NULL,
            scan_offset INTEGER NOT NULL,
            head_len INTEGER NOT NULL,
            head BLOB NOT NULL,
            tail BLOB NOT NULL,
            state BLOB,
            final BLOB NOT NULL,
            created_ms INTEGER
        ) WITHOUT ROWID""",
    ),
    tables=("files",),
)
assert _COLUMNS.count(",") == 11
DIR_ROWS_FAMILY: Final = Family(
    name="listing-dirs",
    # 2: the identities as `_listing.dump_stats` encodes them, compared as bytes (not
    # decoded file by file); the rows name their files by index in them.
    version=2,
    schema=(
        "CREATE TABLE dirs (dir TEXT PRIMARY KEY, stats BLOB NOT NULL, rows BLOB NOT NULL)"
        " WITHOUT ROWID",
    ),
    tables=("dirs",),
)
"""A directory's last listing in one row: its files' identities (`stats`) and its
sessions' rows (`_listing.dump_rows`), so that a fresh process lists an unchanged
directory from one row, not from a row and a fold per file."""
_RANGE_QUERIES_UP_TO = 8
"""A fetch of more directories than this reads the whole table in one query."""

# ---------------------------------------------------------------------------- in process


class DirRecords(dict[str, "Record"]):  # Record: imported only to type it
    """The records of one directory (path -> record), and its last listing when every
    file of it had a record (`listed`, the stats it was built from, with the rows it
    gave, `ordered`): a listing that stats the same files again reuses those rows."""

    __slots__ = ("listed", "ordered")

    def __init__(self) -> None:
        super().__init__()
        self.listed: list[Stat] | None = None
        self.ordered: Any = []  # the rows (`_listing`'s), or as the disk kept them


DirCache = dict[str, DirRecords]  # directory -> its records

lock = threading.Lock()
"""Guards the in-process records (a forked child gets a new one: take it by `cache_lock`)."""
_file_cache: DirCache = {}
_other_caches: weakref.WeakKeyDictionary[object, DirCache] = weakref.WeakKeyDictionary()


def _forked() -> None:
    # Another thread may have held the lock at the fork: it stays held in the child,
    # where that thread does not exist, and the child's first listing would wait forever.
    global lock
    lock = threading.Lock()


os.register_at_fork(after_in_child=_forked)


def cache_lock() -> threading.Lock:
    """The lock that guards the in-process records now (a forked child's own)."""
    return lock


def memory_cache(storage: SessionStorage) -> DirCache | None:
    """The in-process records of `storage` (one for every host-filesystem storage);
    None when it cannot have one. Guarded by `lock`."""
    if isinstance(storage, HostFilesystem):
        return _file_cache  # every instance sees the same filesystem
    try:
        cache = _other_caches.get(storage)
        if cache is None:
            cache = _other_caches[storage] = {}
    except TypeError:  # not weak-referenceable: no cache
        return None
    return cache


def clear_listing_cache() -> None:
    """Forget the in-process scan cache (the on-disk cache stays)."""
    with lock:
        _file_cache.clear()
        _other_caches.clear()


# ---------------------------------------------------------------------------- on disk


class MetaDB:
    """The on-disk scan cache of one agent dir."""

    def __init__(self, agent_dir: str) -> None:
        self.path = os.path.join(agent_dir, CACHE_DB_NAME)

    def fetch(self, directories: Iterable[str]) -> dict[str, Record]:
        """The records of the files directly in `directories`."""
        # Imported here: a listing of unchanged directories reads no file's record, and
        # a fresh process then imports no scanner (its fold, its worker processes).
        from sessiontree.listing._scan import Record, load_fold

        wanted = [d.rstrip(os.sep) for d in directories if utf8_encodable(d)]

        def rows(conn: sqlite3.Connection) -> Iterator[tuple[Any, ...]]:
            if len(wanted) > _RANGE_QUERIES_UP_TO:
                # Most of the store (`list --all`): one pass over the table, not a query
                # per project dir; the rows of other dirs are dropped by their dir.
                dirs = set(wanted)
                for row in conn.execute(f"SELECT {_COLUMNS} FROM files"):
                    if row[0].rpartition(os.sep)[0] in dirs:
                        yield row
                return
            query = f"SELECT {_COLUMNS} FROM files WHERE path >= ? AND path < ?"
            for directory in wanted:
                low = directory + os.sep
                high = directory + chr(ord(os.sep) + 1)
                start = len(low)
                for row in conn.execute(query, (low, high)):
                    if row[0].find(os.sep, start) < 0:  # not in a subdirectory
                        yield row

        def run(conn: sqlite3.Connection) -> dict[str, Record]:
            found: dict[str, Record] = {}
            for row in rows(conn):
                found[row[0]] = Record(
                    size=row[1],
                    mtime_ns=row[2],
                    ino=row[3],
                    ctime_ns=row[4],
                    offset=row[5],
                    head_len=row[6],
                    head=row[7],
                    tail=row[8],
                    state_blob=row[9],
                    final=load_fold(row[10]),
                    created_ms=row[11],
                )
            return found

        return self._run(run) or {}

    def store(self, records: list[tuple[str, Record]], stale: list[str]) -> None:
        """Keep `records` and forget the `stale` paths."""
        from sessiontree.listing._scan import dump_fold

        rows = [
            (
                path,
                r.size,
                r.mtime_ns,
                r.ino,
                r.ctime_ns,
                r.offset,
                r.head_len,
                r.head,
                r.tail,
                r.state_blob,
                dump_fold(r.final),
                r.created_ms,
            )
            for path, r in records
            # A file whose identity no INTEGER holds (dated after 2262) is read each time.
            if utf8_encodable(path) and fits_integer(r.size, r.mtime_ns, r.ino, r.ctime_ns)
        ]
        gone = [(p,) for p in stale if utf8_encodable(p)]

        def run(conn: sqlite3.Connection) -> None:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany(
                    f"INSERT OR REPLACE INTO files ({_COLUMNS}) VALUES ({'?,' * 11}?)", rows
                )
                conn.executemany("DELETE FROM files WHERE path = ?", gone)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

        if rows or gone:
            self._run(run)

    def fetch_dir_rows(self, directories: Iterable[str]) -> dict[str, tuple[bytes, bytes]]:
        """The kept listings (`DIR_ROWS_FAMILY`) of `directories`: dir -> (stats, rows)."""
        wanted = {d for d in directories if utf8_encodable(d)}

        def run(conn: sqlite3.Connection) -> dict[str, tuple[bytes, bytes]]:
            if len(wanted) > _RANGE_QUERIES_UP_TO:  # one pass: a row per project dir
                rows = conn.execute("SELECT dir, stats, rows FROM dirs")
                return {d: (stats, blob) for d, stats, blob in rows if d in wanted}
            found: dict[str, tuple[bytes, bytes]] = {}
            query = "SELECT stats, rows FROM dirs WHERE dir = ?"
            for d in wanted:
                for stats, blob in conn.execute(query, (d,)):
                    found[d] = (stats, blob)
            return found

        if not wanted:
            return {}
        return self._run(run, DIR_ROWS_FAMILY) or {}

    def store_dir_rows(self, listings: list[tuple[str, bytes, bytes]]) -> None:
        """Keep these directories' listings (dir, stats, rows), each in place of its last."""
        rows = [row for row in listings if utf8_encodable(row[0])]

        def run(conn: sqlite3.Connection) -> None:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany(
                    "INSERT OR REPLACE INTO dirs (dir, stats, rows) VALUES (?, ?, ?)", rows
                )
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

        if rows:
            self._run(run, DIR_ROWS_FAMILY)

    def forget_dir_rows(self) -> bool:
        """Drop every kept listing: the next listing reads the files. Whether they were
        dropped (a locked or unwritable cache file is passed over, as ever)."""

        def run(conn: sqlite3.Connection) -> bool:
            conn.execute("DELETE FROM dirs")
            return True

        return self._run(run, DIR_ROWS_FAMILY) is True

    def _run(
        self, fn: Callable[[sqlite3.Connection], T], family: Family = LISTING_FAMILY
    ) -> T | None:
        return run_cached(self.path, family, fn, application_id=META_DB_APP_ID)
