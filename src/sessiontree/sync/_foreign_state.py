"""What the sync of other agents' files remembers between rounds, in one SQLite file
beside the sync's own state: per local file sent, what it was when sent (so a file
unchanged since is not read); per other machine, how far its journal was read; per
file shown, what the hub copy and the view's copy were (so only new bytes are fetched).

Losing the file costs a full re-read and re-send, never a file: every row is checked
against the files themselves before it is trusted. When the file cannot be opened
(a locked or read-only dir), a round works from an empty state in memory.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Final, NamedTuple

from sessiontree._util.cachedb import CacheDB, Family, open_cache
from sessiontree._util.closing import ClosesOnExit
from sessiontree._util.fs import ensure_private_dir

__all__ = ["ForeignState", "Sent", "Shown", "stored_mtime"]

_APPLICATION_ID: Final = 0x53545346  # "STSF": sessiontree sync, foreign
_FAMILY: Final = Family(
    "sync-foreign",
    1,
    (
        """CREATE TABLE sent (
            agent TEXT NOT NULL, rel TEXT NOT NULL,
            dev INTEGER NOT NULL, ino INTEGER NOT NULL, size INTEGER NOT NULL,
            mtime_ns INTEGER NOT NULL, signal TEXT, tail TEXT NOT NULL,
            hub_size INTEGER NOT NULL, hub_ino INTEGER NOT NULL,
            PRIMARY KEY (agent, rel)) WITHOUT ROWID""",
        """CREATE TABLE journals (
            machine TEXT PRIMARY KEY, offset INTEGER NOT NULL) WITHOUT ROWID""",
        """CREATE TABLE shown (
            machine TEXT NOT NULL, agent TEXT NOT NULL, rel TEXT NOT NULL,
            hub_size INTEGER NOT NULL, hub_ino INTEGER NOT NULL,
            view_ino INTEGER NOT NULL, view_size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL,
            PRIMARY KEY (machine, agent, rel)) WITHOUT ROWID""",
    ),
    ("sent", "journals", "shown"),
)
_BATCH: Final = 500
"""Rows written per transaction: a crash loses at most these (re-sent, never lost)."""


_INT64_MAX: Final = (1 << 63) - 1


def stored_mtime(mtime_ns: int) -> int:
    """`mtime_ns` as the state keeps it: a file dated after 2262 (`touch -d 2300-01-01`;
    ext4 keeps times up to 2446) has one beyond 64 bits, which no INTEGER holds. Kept as
    the largest one (compared so too: its size and inode still tell that it changed)."""
    return min(mtime_ns, _INT64_MAX)


class Sent(NamedTuple):
    """A local file as it was when its bytes were last put in the hub."""

    dev: int
    ino: int
    size: int
    mtime_ns: int
    signal: str | None
    """An OpenCode database session's change signal (it is no file of its own)."""
    tail: str
    """xxh3 of its last bytes up to `size`: a log that grew is checked against it."""
    hub_size: int
    hub_ino: int


class Shown(NamedTuple):
    """A file of another machine as it was last written into the view."""

    hub_size: int
    hub_ino: int
    view_ino: int
    view_size: int
    mtime_ns: int
    """Its modification time on its machine (the view's copy has it too)."""


class ForeignState(ClosesOnExit):
    """The state file, open for one round (a context manager)."""

    def __init__(self, path: str, before_commit: Callable[[], None] = lambda: None) -> None:
        """`before_commit`: makes durable what the rows about to be committed describe
        (a row must never outlive the write it records)."""
        self.before_commit = before_commit
        db: CacheDB | None = None
        try:
            ensure_private_dir(os.path.dirname(os.path.abspath(path)))
            db = open_cache(path, (_FAMILY,), application_id=_APPLICATION_ID)
        except OSError:
            db = None
        if db is not None and not db.has(_FAMILY):
            db.close()
            db = None
        self._db = db
        if db is not None:
            self._conn = db.conn
        else:
            self._conn = sqlite3.connect(":memory:", isolation_level=None)
            for statement in _FAMILY.schema:
                self._conn.execute(statement)
        self._pending = 0

    @property
    def persistent(self) -> bool:
        """Whether what is remembered outlives this round."""
        return self._db is not None

    @contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        if not self._conn.in_transaction:
            self._conn.execute("BEGIN IMMEDIATE")
        yield self._conn
        self._pending += 1
        if self._pending >= _BATCH:
            self.commit()

    def commit(self) -> None:
        if self._conn.in_transaction:
            self.before_commit()
            self._conn.execute("COMMIT")
        self._pending = 0

    def close(self) -> None:
        """Commit what is recorded, then close; when the commit fails (what the rows
        describe could not be made durable) they are rolled back, and the file is
        closed all the same: a transaction left open would lock the state for every
        later round of this process (`sync --watch`)."""
        try:
            self.commit()
        finally:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            if self._db is not None:
                self._db.close()
            else:
                self._conn.close()

    # ------------------------------------------------------------------ sent

    def sent(self, agent: str, rel: str) -> Sent | None:
        row = self._conn.execute(
            "SELECT dev, ino, size, mtime_ns, signal, tail, hub_size, hub_ino FROM sent "
            "WHERE agent = ? AND rel = ?",
            (agent, rel),
        ).fetchone()
        return Sent(*row) if row is not None else None

    def put_sent(self, agent: str, rel: str, sent: Sent) -> None:
        with self._writing() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO sent VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (agent, rel, *sent._replace(mtime_ns=stored_mtime(sent.mtime_ns))),
            )

    # ------------------------------------------------------------------ received

    def journal_offset(self, machine: str) -> int:
        row = self._conn.execute(
            "SELECT offset FROM journals WHERE machine = ?", (machine,)
        ).fetchone()
        return int(row[0]) if row is not None else 0

    def put_journal_offset(self, machine: str, offset: int) -> None:
        with self._writing() as conn:
            conn.execute("INSERT OR REPLACE INTO journals VALUES (?, ?)", (machine, offset))

    def shown(self, machine: str, agent: str, rel: str) -> Shown | None:
        row = self._conn.execute(
            "SELECT hub_size, hub_ino, view_ino, view_size, mtime_ns FROM shown "
            "WHERE machine = ? AND agent = ? AND rel = ?",
            (machine, agent, rel),
        ).fetchone()
        return Shown(*row) if row is not None else None

    def shown_of(self, machine: str) -> list[tuple[str, str, Shown]]:
        """(agent, rel, what was written) of every file of `machine`'s in the view."""
        return [
            (row[0], row[1], Shown(*row[2:]))
            for row in self._conn.execute(
                "SELECT agent, rel, hub_size, hub_ino, view_ino, view_size, mtime_ns FROM shown "
                "WHERE machine = ?",
                (machine,),
            )
        ]

    def put_shown(self, machine: str, agent: str, rel: str, shown: Shown) -> None:
        with self._writing() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO shown VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (machine, agent, rel, *shown._replace(mtime_ns=stored_mtime(shown.mtime_ns))),
            )
