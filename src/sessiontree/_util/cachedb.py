"""Cache databases: the SQLite files of derived data in `<agent dir>/cache/`, one rule set.

Every cache here (the listing cache and the foreign listings in `sessions-meta.db`, the
content index in `content-index.db`) holds what the session files say: losing one costs
a re-read, never data. So every failure degrades to "no cache" (`open_cache` returns
None, `run_cached` returns None), and the rules below say what may be deleted.

**Families.** A cache file holds families of tables, each declared by the code that
uses it (`Family`: a name, a version, the statements that make its tables). The table
`cache_families` records each family's version and the objects its statements made,
with their SQL. Opening brings each family it is given to its version: one that is
missing, older, or whose tables are not as it made them (dropped, altered by an older
program) is rebuilt, its own tables dropped and made afresh, in one write transaction
that first looks again (two processes opening at once rebuild it once). A family of a
newer version (a newer sessiontree wrote it) is not downgraded: this process goes
without it (`CacheDB.has` is False) and leaves it to the newer program, so the two do
not destroy each other's cache in turn.

**Who may delete what.**

1. A family drops only its own tables: those it declares and those the registry says
   its statements made (an older version's); never a table the registry gives to
   another family, never one nobody made. Other families' rows survive its upgrades
   and rebuilds.
2. A whole file goes only when SQLite cannot read it (not a database, malformed; no
   other failure, never a locked or read-only one), and it is ours: a regular file of
   this user at the path we opened, still the file we opened (not one another process
   has just made in its place), whose header names no other application. Its families
   are caches of files still on disk: it is deleted with its side files and made once
   more. When tables no family made can still be listed in it, it is moved aside to
   `<name>.damaged` (with its -wal; a later one to `<name>.damaged.1` and so on, never
   over an earlier copy) instead: it is not ours alone to delete. A second failure in
   the same call goes without the cache.
3. A database another application wrote (an application_id neither ours nor 0) is
   never written, rebuilt or deleted: its users go without the cache.
4. A link, FIFO or socket planted under the file's or a side file's name is unlinked,
   never followed (`private_database`); a directory there means no cache. The cache
   directory is made (0700) when missing, its parent (the agent dir) never.

**Connections.** The file is 0600 in a 0700 directory, in WAL mode (readers never wait
for the writer), synchronous=NORMAL (a commit lost in a crash is re-read from the
session files), with a busy timeout (a locked cache is waited for that long, then gone
without). `CacheDB.close` (or its `with` block) closes it; in a forked child it leaves
the parent's connection alone (closing it would roll back what the parent is doing).
"""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import stat
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Final, TypeVar

from sessiontree._util.closing import ClosesOnExit, keep_forever, process_id
from sessiontree._util.fs import DIR_MODE, open_regular, private_database

__all__ = [
    "REGISTRY",
    "CacheDB",
    "Family",
    "fits_integer",
    "is_damage",
    "is_locked",
    "open_cache",
    "run_cached",
]

T = TypeVar("T")

REGISTRY: Final = "cache_families"
"""The table that records each family's version and the objects it made."""
_REGISTRY_SQL = (
    f"CREATE TABLE IF NOT EXISTS {REGISTRY} "
    "(family TEXT PRIMARY KEY, version INTEGER NOT NULL, objects TEXT NOT NULL) WITHOUT ROWID"
)
_SIDE_FILES = ("-wal", "-shm", "-journal")
_MAGIC = b"SQLite format 3\x00"
_APP_ID_AT = 68  # where the header keeps `PRAGMA application_id` (big-endian)

# SQLite's primary result codes (`sqlite_errorcode & 0xFF`).
_SQLITE_ERROR = 1  # a generic error: "no such table", "no such column"
_SQLITE_BUSY = 5
_SQLITE_LOCKED = 6
_SQLITE_READONLY = 8
_SQLITE_CORRUPT = 11
_SQLITE_NOTADB = 26


def _code(exc: BaseException) -> int:
    return getattr(exc, "sqlite_errorcode", 0) & 0xFF


_INT64 = 1 << 63


def fits_integer(*values: int) -> bool:
    """Whether each of `values` fits a SQLite INTEGER (64-bit signed): the `st_mtime_ns` of
    a file dated after 2262 (`touch -d 2300-01-01`; ext4 keeps times up to 2446) does
    not, and binding it raises OverflowError, which is no cache failure `run_cached` passes."""
    return all(-_INT64 <= v < _INT64 for v in values)


def is_damage(exc: BaseException) -> bool:
    """Whether a SQLite error says the file is damaged (not a database, or malformed)."""
    return isinstance(exc, sqlite3.DatabaseError) and _code(exc) in (
        _SQLITE_CORRUPT,
        _SQLITE_NOTADB,
    )


def is_locked(exc: BaseException) -> bool:
    """Whether a SQLite error says another connection holds the database (or it is read
    only): nothing is wrong with it, it just cannot be used now."""
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    return _code(exc) in (_SQLITE_BUSY, _SQLITE_LOCKED, _SQLITE_READONLY) or (
        "locked" in str(exc) or "readonly" in str(exc)
    )


def _is_schema_error(exc: BaseException) -> bool:
    """ "no such table/column" and the like: tables not as the code expects."""
    return isinstance(exc, sqlite3.OperationalError) and _code(exc) == _SQLITE_ERROR


@dataclass(frozen=True, slots=True)
class Family:
    """A family of tables in a cache file: what its user declares."""

    name: str
    version: int
    """Raise it whenever the tables, or what the rows mean, change."""
    schema: tuple[str, ...]
    """The statements that make its tables and indexes (plain CREATE: they run after
    its old tables are dropped)."""
    tables: tuple[str, ...]
    """The names of the tables (virtual ones too) its statements make: a file from
    before the registry may hold them, and they are the family's to drop."""


# ---------------------------------------------------------------------------- the registry


def _objects(conn: sqlite3.Connection) -> dict[str, tuple[str, str]]:
    """Every table and index in the file: name -> (type, SQL)."""
    return {
        row[0]: (row[1], row[2] or "")
        for row in conn.execute(
            "SELECT name, type, sql FROM sqlite_master WHERE type IN ('table', 'index')"
        )
    }


def _registry(
    conn: sqlite3.Connection, objects: dict[str, tuple[str, str]]
) -> dict[str, tuple[int, dict[str, str]]]:
    """family -> (version, {object: SQL it had when made}); {} in a file without one."""
    if REGISTRY not in objects:
        return {}
    found: dict[str, tuple[int, dict[str, str]]] = {}
    for name, version, made in conn.execute(f"SELECT family, version, objects FROM {REGISTRY}"):
        try:
            value = json.loads(made)
        except ValueError:
            value = None
        if not isinstance(value, dict) or not isinstance(version, int):
            found[name] = (-1, {})  # a row we cannot read: the family is rebuilt
            continue
        found[name] = (version, {str(k): str(v) for k, v in value.items()})
    return found


def _state(
    family: Family,
    registry: dict[str, tuple[int, dict[str, str]]],
    objects: dict[str, tuple[str, str]],
) -> str:
    """ "ready", "newer" (leave it alone) or "build"."""
    entry = registry.get(family.name)
    if entry is None:
        return "build"
    version, made = entry
    if version > family.version:
        return "newer"
    if version < family.version or not made:
        return "build"
    for name, sql in made.items():
        current = objects.get(name)
        if current is None or current[1] != sql:
            return "build"  # dropped, or altered (an older program added a column)
    return "ready"


def _build(conn: sqlite3.Connection, family: Family) -> None:
    """Drop the family's own tables and make them afresh (inside a write transaction)."""
    objects = _objects(conn)
    registry = _registry(conn, objects)
    others: set[str] = set()
    for name, (_, made) in registry.items():
        if name != family.name:
            others.update(made)
    own = set(family.tables) | set(registry.get(family.name, (0, {}))[1])
    drop = [n for n in own - others if n in objects and objects[n][0] == "table"]
    # Virtual tables first: their shadow tables go with them.
    drop.sort(key=lambda n: not objects[n][1].upper().startswith("CREATE VIRTUAL"))
    for name in drop:
        conn.execute(f'DROP TABLE IF EXISTS "{name}"')
    before = set(_objects(conn))
    for statement in family.schema:
        conn.execute(statement)
    made = {n: sql for n, (_, sql) in _objects(conn).items() if n not in before}
    conn.execute(_REGISTRY_SQL)
    conn.execute(
        f"INSERT OR REPLACE INTO {REGISTRY} (family, version, objects) VALUES (?, ?, ?)",
        (family.name, family.version, json.dumps(made, sort_keys=True)),
    )


def _other_tables(conn: sqlite3.Connection) -> bool:
    """Whether the file holds a table no family made (best effort on a damaged file)."""
    try:
        objects = _objects(conn)
        registry = _registry(conn, objects)
    except sqlite3.Error:
        return False  # nothing can be listed: nothing of anyone's can be saved from it
    made = {REGISTRY}
    for _, objs in registry.values():
        made.update(objs)
    virtual = [n for n in made if objects.get(n, ("", ""))[1].upper().startswith("CREATE VIRTUAL")]
    for name, (kind, _) in objects.items():
        if kind != "table" or name in made or name.startswith("sqlite_"):
            continue
        if any(name.startswith(v + "_") for v in virtual):
            continue  # a shadow table of one of ours (fts5's _data, _idx, ...)
        return True
    return False


# ---------------------------------------------------------------------------- the file


def _header_app_id(path: str) -> int | None:
    """The application_id in the file's SQLite header; None when it has none."""
    try:
        fd = open_regular(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        head = os.pread(fd, 100, 0)
    finally:
        os.close(fd)
    if len(head) < _APP_ID_AT + 4 or not head.startswith(_MAGIC):
        return None
    return int.from_bytes(head[_APP_ID_AT : _APP_ID_AT + 4], "big")


def _discard(path: str, identity: tuple[int, int], application_id: int, keep: bool) -> bool:
    """Remove a damaged cache file by rule 2 (`keep`: tables nobody made live in it, move
    it aside instead). Whether the path is free for a new file."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return True
    if (st.st_dev, st.st_ino) != identity:
        return True  # another process already put a new file there: use it
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
        return False
    if _header_app_id(path) not in (None, 0, application_id):
        return False  # another application's database: not ours to delete (rule 3)
    if keep:
        if not _move_aside(path):
            return False
    else:
        os.unlink(path)
    for suffix in _SIDE_FILES:
        try:
            if not os.path.isdir(path + suffix):
                os.unlink(path + suffix)
        except FileNotFoundError:
            pass
    return True


def _move_aside(path: str) -> bool:
    """Move a damaged file holding tables nobody made (and its -wal/-journal) to the first
    `<name>.damaged[.N]` free under all three names: linked there, never replacing an
    earlier copy, then unlinked. False (everything left in place) when a name is taken
    meanwhile: a side file is never dropped, for it may hold the newest pages."""
    sides = [s for s in ("-wal", "-journal") if os.path.isfile(path + s)]
    sides = [s for s in sides if not os.path.islink(path + s)]
    for n in range(1000):
        aside = path + ".damaged" + (f".{n}" if n else "")
        if any(os.path.lexists(aside + s) for s in ("", "-wal", "-journal")):
            continue
        made: list[str] = []
        try:
            for suffix in ("", *sides):
                os.link(path + suffix, aside + suffix, follow_symlinks=False)
                made.append(aside + suffix)
        except FileExistsError:  # taken since the look: undo ours, leave the file be
            for name in made:
                os.unlink(name)
            return False
        os.unlink(path)
        return True
    raise FileExistsError(errno.EEXIST, "no free name to move a damaged cache aside", path)


class _NotOurs(Exception):
    """The file is another application's database (rule 3)."""


def _prepare(conn: sqlite3.Connection, families: Sequence[Family], application_id: int) -> set[str]:
    """Bring `families` to their versions; the names of those usable here."""
    app = conn.execute("PRAGMA application_id").fetchone()[0]  # the first read: damage shows
    if app not in (0, application_id):
        raise _NotOurs
    if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
        conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    objects = _objects(conn)
    registry = _registry(conn, objects)
    states = {f.name: _state(f, registry, objects) for f in families}
    if app == 0 or "build" in states.values():
        conn.execute("BEGIN IMMEDIATE")
        try:
            if conn.execute("PRAGMA application_id").fetchone()[0] not in (0, application_id):
                raise _NotOurs
            conn.execute(f"PRAGMA application_id = {application_id}")
            conn.execute(_REGISTRY_SQL)
            for family in families:
                objects = _objects(conn)
                state = _state(family, _registry(conn, objects), objects)  # look again
                states[family.name] = state
                if state == "build":
                    _build(conn, family)
                    states[family.name] = "ready"
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    return {name for name, state in states.items() if state == "ready"}


class CacheDB(ClosesOnExit):
    """An open cache file (see the module docstring)."""

    __slots__ = ("_app", "_conn", "_identity", "_owner", "_ready", "path")

    def __init__(
        self,
        path: str,
        conn: sqlite3.Connection,
        ready: set[str],
        identity: tuple[int, int],
        application_id: int,
    ) -> None:
        self.path = path
        self._conn = conn
        self._ready = ready
        self._identity = identity
        self._app = application_id
        self._owner = process_id()

    @property
    def conn(self) -> sqlite3.Connection:
        return self._conn

    def has(self, family: Family) -> bool:
        """Whether `family`'s tables are ready here (False: a newer program's version)."""
        return family.name in self._ready

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction that takes the write lock at its start."""
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            raise
        conn.execute("COMMIT")

    def rebuild(self, family: Family) -> None:
        """Drop `family`'s tables and make them empty (its rows were found unreadable, or
        are to be thrown away); other families are left as they are. The space is given
        back when most of the file is then free."""
        if family.name not in self._ready:
            raise ValueError(f"{family.name}: a newer version's tables are not ours to rebuild")
        with self.write() as conn:
            _build(conn, family)
        try:
            pages = self._conn.execute("PRAGMA page_count").fetchone()[0]
            free = self._conn.execute("PRAGMA freelist_count").fetchone()[0]
            if free > 256 and free * 2 > pages:
                self._conn.execute("VACUUM")
        except sqlite3.OperationalError:
            pass  # another connection is busy: the free pages are reused anyway

    def discard(self) -> bool:
        """Close and remove the file after SQLite found it damaged (rule 2). Whether a
        new file can now be made at the path."""
        keep = _other_tables(self._conn)
        self.close()
        try:
            return _discard(self.path, self._identity, self._app, keep)
        except OSError:
            return False

    def close(self) -> None:
        """Close the connection; in a forked child, keep the parent's (never closed here:
        a close rolls back what the parent may be in the middle of)."""
        if self._owner != process_id():
            keep_forever(self._conn)
            return
        self._conn.close()


def open_cache(
    path: str,
    families: Sequence[Family],
    *,
    application_id: int,
    timeout: float = 2.0,
    create: bool = True,
) -> CacheDB | None:
    """The cache file at `path` with `families` ready, or None when there is no cache to
    use: no agent dir (the cache directory's parent), a directory or another
    application's database at the path, a file that is locked beyond `timeout`,
    read-only, or damaged beyond one rebuild. `create=False`: None when there is no file
    yet. `application_id` tells our files from others' (0, a file from before, is taken)."""
    names = [t for f in families for t in f.tables]
    if len(set(names)) != len(names) or len({f.name for f in families}) != len(families):
        raise ValueError("two families claim one table or one name")
    directory = os.path.dirname(os.path.abspath(path))
    for attempt in range(2):
        try:
            if not create and not os.path.lexists(path):
                return None
            if not os.path.isdir(directory):
                if not os.path.isdir(os.path.dirname(directory)):
                    return None  # never make an agent dir just to hold a cache
                try:
                    os.mkdir(directory, DIR_MODE)
                except FileExistsError:
                    pass
            st = private_database(path)
            if st.st_uid != os.getuid():
                return None
            identity = (st.st_dev, st.st_ino)
            conn = sqlite3.connect(path, timeout=timeout, isolation_level=None)
        except (OSError, sqlite3.Error):
            return None
        db = CacheDB(path, conn, set(), identity, application_id)
        try:
            db._ready = _prepare(conn, families, application_id)
        except _NotOurs:
            db.close()
            return None
        except sqlite3.Error as exc:
            if not is_damage(exc) or attempt or not db.discard():
                db.close()
                return None
            continue
        except BaseException:
            db.close()
            raise
        return db
    return None  # pragma: no cover - the loop returns


def run_cached(
    path: str,
    family: Family,
    fn: Callable[[sqlite3.Connection], T],
    *,
    application_id: int,
    timeout: float = 2.0,
    create: bool = True,
) -> T | None:
    """`fn(conn)` on a cache file where `family` is ready; None when there is no cache to
    use or it failed. Repairs once: the family, when its tables are not as `fn` expects
    ("no such column") or hold rows `fn` cannot read (it raised ValueError or TypeError);
    the file, when damaged. Locked, read-only, full: goes without."""
    for attempt in range(2):
        db = open_cache(
            path, (family,), application_id=application_id, timeout=timeout, create=create
        )
        if db is None:
            return None
        try:
            if not db.has(family):
                return None
            try:
                return fn(db.conn)
            except sqlite3.Error as exc:
                if attempt:
                    return None
                if is_damage(exc):
                    if not db.discard():
                        return None
                    continue
                if not _is_schema_error(exc):
                    return None
                db.rebuild(family)
            except (ValueError, TypeError):
                if attempt:
                    return None
                db.rebuild(family)
        except sqlite3.Error:
            return None
        finally:
            db.close()
    return None
