"""This machine's memory of a hub: a SQLite file per hub in the user's state dir
(`$XDG_STATE_HOME/sessiontree/sync/`), and the lock that makes two syncs with one hub
on one machine take turns.

It holds the machine's id, and what makes a round cheap: per local session file, its
identity when last pushed and how far it was pushed; the keys of each session's lines
known to be in the hub (so a line is sent once); how far each other machine's journal
and each of its logs were read; the leaf markers held back. Losing it costs a full
re-read and some bytes sent twice, never an entry: readers merge by key.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final

from sessiontree._util.cachedb import fits_integer
from sessiontree._util.env import state_home
from sessiontree._util.fs import create_new, ensure_private_dir, open_read, private_database
from sessiontree.errors import SessionLockError
from sessiontree.storage import FileLock
from sessiontree.sync._model import SyncBusyError, SyncStateError

__all__ = [
    "FileRow",
    "SessionKey",
    "SyncState",
    "foreign_dir",
    "locked_state",
    "state_path",
]

SessionKey = tuple[str, str, str]
"""(agent, project dir, session file name): a session, the same on every machine."""

_LOCK_WAIT: Final = 30.0
"""Seconds a sync waits for another one with the same hub on this machine."""

_SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS files (agent TEXT, project TEXT, name TEXT,"
    " size INTEGER, mtime_ns INTEGER, ino INTEGER, ctime_ns INTEGER, offset INTEGER,"
    " head_len INTEGER, head BLOB, tail BLOB, deleted INTEGER NOT NULL DEFAULT 0,"
    " PRIMARY KEY (agent, project, name)) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS hub_keys (agent TEXT, project TEXT, name TEXT, key TEXT,"
    " PRIMARY KEY (agent, project, name, key)) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS held (agent TEXT, project TEXT, name TEXT, key TEXT,"
    " parent TEXT, raw BLOB, PRIMARY KEY (agent, project, name, key)) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS journals (machine TEXT PRIMARY KEY, offset INTEGER)",
    "CREATE TABLE IF NOT EXISTS logs (rel TEXT PRIMARY KEY, offset INTEGER NOT NULL,"
    " target INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS hub_blobs (digest TEXT PRIMARY KEY) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS sent_logs (rel TEXT PRIMARY KEY, size INTEGER NOT NULL)",
)


@dataclass(frozen=True, slots=True)
class FileRow:
    """A local session file as the last push left it (a `FileMark`'s fields)."""

    size: int
    mtime_ns: int
    ino: int
    ctime_ns: int
    offset: int
    """End of the last complete line pushed (or found in the hub)."""
    head_len: int
    head: bytes
    tail: bytes
    deleted: bool = False

    @property
    def identity(self) -> tuple[int, int, int, int]:
        return self.size, self.mtime_ns, self.ino, self.ctime_ns


def _row(r: tuple[Any, ...]) -> FileRow:
    """A `files` row from its columns after the key."""
    return FileRow(r[0], r[1], r[2], r[3], r[4], r[5], bytes(r[6]), bytes(r[7]), bool(r[8]))


def _digest(hub_label: str) -> str:
    return hashlib.sha256(hub_label.encode("utf-8", "surrogatepass")).hexdigest()[:24]


def state_path(hub_label: str) -> str:
    """The state file of the hub named `hub_label` (a dir's path, a URL without its
    password): a hash of it, so that any name fits."""
    return os.path.join(state_home(), "sync", f"{_digest(hub_label)}.db")


def foreign_dir(hub_label: str) -> str:
    """Beside the state file: the other agents' part's own state (`foreign.db`) and the
    views of other machines' sessions (`machines/<machine>/<agent>/`, where
    `find_stores` finds them)."""
    return os.path.join(state_home(), "sync", _digest(hub_label))


class SyncState:
    """The state file of one hub, open."""

    def __init__(self, path: str, hub_label: str) -> None:
        ensure_private_dir(os.path.dirname(path))
        private_database(path)
        self.path = path
        self.conn = sqlite3.connect(path, timeout=30.0, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")
        for statement in _SCHEMA:
            self.conn.execute(statement)
        self.conn.execute("INSERT OR IGNORE INTO meta VALUES ('hub', ?)", (hub_label,))

    @contextmanager
    def batch(self) -> Iterator[None]:
        """One transaction: committed on exit, rolled back on an error."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def close(self) -> None:
        self.conn.close()

    @property
    def machine_id(self) -> str:
        """This machine's id: one for every hub, kept beside the hubs' states (a hub's
        state lost keeps it; all of them lost makes a new machine)."""
        path = os.path.join(os.path.dirname(self.path), "machine-id")
        for _ in range(3):
            try:
                with open_read(path) as f:  # a FIFO there is refused, never waited on
                    kept = f.read().decode("ascii").strip()
                if kept:
                    return kept
            except FileNotFoundError:
                pass
            except (OSError, UnicodeError):
                break
            try:
                create_new([path], [str(uuid.uuid4()).encode()])  # two at once: one wins
            except FileExistsError:
                continue
        raise SyncStateError(f"{path}: cannot read or make this machine's id")

    # -- local files ----------------------------------------------------------------------

    def files(self, agent: str) -> dict[tuple[str, str], FileRow]:
        """(project dir, file name) -> row, of one agent's store."""
        rows = self.conn.execute(
            "SELECT project, name, size, mtime_ns, ino, ctime_ns, offset, head_len, head,"
            " tail, deleted FROM files WHERE agent=?",
            (agent,),
        )
        return {(r[0], r[1]): _row(r[2:]) for r in rows}

    def file(self, key: SessionKey) -> FileRow | None:
        r = self.conn.execute(
            "SELECT size, mtime_ns, ino, ctime_ns, offset, head_len, head, tail, deleted"
            " FROM files WHERE agent=? AND project=? AND name=?",
            key,
        ).fetchone()
        return None if r is None else _row(r)

    def set_file(self, key: SessionKey, row: FileRow) -> None:
        identity = row.identity
        if not fits_integer(*identity):
            # A file dated after 2262 (its mtime_ns beyond 64 bits): kept as an identity
            # no stat gives, so the next round compares its marks (pushing what grew).
            identity = (identity[0], -1, identity[2], identity[3])
        self.conn.execute(
            "INSERT OR REPLACE INTO files VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (*key, *identity, row.offset, row.head_len, row.head, row.tail, int(row.deleted)),
        )

    def mark_deleted(self, key: SessionKey) -> None:
        """The file was here and is gone: deleted here, never made again by a pull."""
        self.conn.execute("UPDATE files SET deleted=1 WHERE agent=? AND project=? AND name=?", key)

    # -- what the hub holds ---------------------------------------------------------------

    def hub_keys(self, key: SessionKey) -> set[str]:
        rows = self.conn.execute(
            "SELECT key FROM hub_keys WHERE agent=? AND project=? AND name=?", key
        )
        return {r[0] for r in rows}

    def add_hub_keys(self, key: SessionKey, keys: Iterable[str]) -> None:
        self.conn.executemany(
            "INSERT OR IGNORE INTO hub_keys VALUES (?,?,?,?)", ((*key, k) for k in keys)
        )

    def held(self, key: SessionKey) -> dict[str, tuple[str | None, bytes]]:
        """The leaf markers held back in a session: id -> (parent, line)."""
        rows = self.conn.execute(
            "SELECT key, parent, raw FROM held WHERE agent=? AND project=? AND name=?", key
        )
        return {r[0]: (r[1], bytes(r[2])) for r in rows}

    def hold(self, key: SessionKey, marker: str, parent: str | None, raw: bytes) -> None:
        self.conn.execute(
            "INSERT OR REPLACE INTO held VALUES (?,?,?,?,?,?)", (*key, marker, parent, raw)
        )

    def release(self, key: SessionKey, marker: str) -> None:
        self.conn.execute(
            "DELETE FROM held WHERE agent=? AND project=? AND name=? AND key=?", (*key, marker)
        )

    def journal_offset(self, machine: str) -> int:
        row = self.conn.execute(
            "SELECT offset FROM journals WHERE machine=?", (machine,)
        ).fetchone()
        return int(row[0]) if row else 0

    def set_journal_offset(self, machine: str, offset: int) -> None:
        self.conn.execute("INSERT OR REPLACE INTO journals VALUES (?,?)", (machine, offset))

    def want_log(self, rel: str, size: int) -> None:
        """Another machine's log at `rel` has grown to `size` (its journal says): read
        it that far (now, or in a later round if this one leaves it)."""
        self.conn.execute(
            "INSERT INTO logs VALUES (?, 0, ?) ON CONFLICT (rel) DO UPDATE"
            " SET target = max(target, excluded.target)",
            (rel, size),
        )

    def pending_logs(self) -> list[tuple[str, int, int]]:
        """(log, read up to, grown to) of every other machine's log not read to its end."""
        rows = self.conn.execute("SELECT rel, offset, target FROM logs WHERE offset < target")
        return [(r[0], int(r[1]), int(r[2])) for r in rows]

    def set_log_offset(self, rel: str, offset: int) -> None:
        self.conn.execute("UPDATE logs SET offset = ? WHERE rel = ?", (offset, rel))

    def sent_size(self, rel: str) -> int | None:
        """The size this machine left its log at `rel` (None: not known here)."""
        row = self.conn.execute("SELECT size FROM sent_logs WHERE rel=?", (rel,)).fetchone()
        return int(row[0]) if row else None

    def set_sent_size(self, rel: str, size: int) -> None:
        self.conn.execute("INSERT OR REPLACE INTO sent_logs VALUES (?,?)", (rel, size))

    def forget_sent_size(self, rel: str) -> None:
        self.conn.execute("DELETE FROM sent_logs WHERE rel=?", (rel,))

    def hub_has_blob(self, digest: str) -> bool:
        row = self.conn.execute("SELECT 1 FROM hub_blobs WHERE digest=?", (digest,)).fetchone()
        return row is not None

    def add_hub_blob(self, digest: str) -> None:
        self.conn.execute("INSERT OR IGNORE INTO hub_blobs VALUES (?)", (digest,))


@contextmanager
def locked_state(hub_label: str, wait: float = _LOCK_WAIT) -> Iterator[SyncState]:
    """The hub's state, held against another sync with it on this machine (waited for
    up to `wait` seconds, then SyncBusyError)."""
    path = state_path(hub_label)
    ensure_private_dir(os.path.dirname(path))
    deadline = time.monotonic() + wait
    while True:
        try:
            lock = FileLock(path)
            break
        except SessionLockError:
            if time.monotonic() >= deadline:
                raise SyncBusyError(
                    f"another sync with {hub_label} is running on this machine; try again"
                    " when it is done"
                ) from None
            time.sleep(0.2)
    try:
        state = SyncState(path, hub_label)
        try:
            yield state
        finally:
            state.close()
    finally:
        lock.release()
