"""Sending this machine's other agents' files to the hub (`push_foreign`): what changed
only, a log that grew by its new bytes (the rules: `_foreign`'s module doc)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import xxhash

from sessiontree._util.env import state_home
from sessiontree.archive import ArchiveReport, opencode_sessions, read_span, walk_files
from sessiontree.storage import (
    SessionStorage,
    SessionStorageWriter,
    StorageStat,
    write_whole,
)
from sessiontree.sync._foreign import ForeignCounts, ForeignSource
from sessiontree.sync._foreign_paths import FOREIGN_SYNCED, check_foreign_rel, foreign_log
from sessiontree.sync._foreign_state import ForeignState, Sent, stored_mtime
from sessiontree.sync._hub import Hub
from sessiontree.sync._journal import journal_rel
from sessiontree.sync._names import check_machine_name

__all__ = ["push_foreign"]

_TAIL = 1024
"""Bytes before a log's old end read again to tell it grew, not rewritten."""


def _tail(data: bytes) -> str:
    return xxhash.xxh3_64_hexdigest(data[-_TAIL:])


class _Journal:
    """This machine's journal lines of a round, written (and made durable) together
    when the state is about to record what they name (`Hub.append`: a torn last line
    is ended first)."""

    def __init__(self, hub: SessionStorage, hub_root: str, machine: str) -> None:
        self._hub = Hub(hub, hub_root, hub_root)
        self._rel = journal_rel(machine)
        self._lines: list[bytes] = []

    def add(self, log: str, size: int, mtime_ns: int) -> None:
        line = {"log": log, "size": size, "mtimeNs": mtime_ns}
        self._lines.append(json.dumps(line, separators=(",", ":")).encode() + b"\n")

    def sync(self) -> None:
        """Write the lines added so far, durably (before the state records them)."""
        if self._lines:
            self._hub.append(self._rel, b"".join(self._lines))
            self._lines.clear()


def _bytes_writer(writer: SessionStorageWriter) -> Callable[[bytes], None]:
    """The writer's `write_bytes` (every backend here has one: bytes as they are)."""
    write_bytes: Callable[[bytes], None] | None = getattr(writer, "write_bytes", None)
    if write_bytes is not None:
        return write_bytes
    return lambda data: writer.write_line(data.decode("utf-8"))


@dataclass(slots=True)
class _Push:
    hub: SessionStorage
    hub_root: str
    machine: str
    state: ForeignState
    journal: _Journal
    counts: ForeignCounts
    dirs: set[str] = field(default_factory=set)

    def hub_path(self, log: str) -> str:
        return os.path.join(self.hub_root, *log.split("/"))

    def write_whole(self, path: str, data: bytes) -> StorageStat:
        directory = os.path.dirname(path)
        if directory not in self.dirs:
            self.hub.ensure_dir(directory)
            self.dirs.add(directory)
        written = write_whole(self.hub, path, [data])
        return written if isinstance(written, StorageStat) else self.hub.stat(path)

    def file(self, agent: str, home: str, rel: str, st: os.stat_result) -> None:
        """Send one file of `agent`'s store, if it changed (see the module doc)."""
        parts = rel.split(os.sep)
        why = check_foreign_rel(agent, parts)
        if why is not None:
            self.counts.notes.append(f"{os.path.join(home, rel)}: not sent: {why}")
            return
        key = "/".join(parts)
        prev = self.state.sent(agent, key)
        if prev is not None and (prev.dev, prev.ino, prev.size, prev.mtime_ns) == _identity(st):
            return
        log = foreign_log(self.machine, agent, parts)
        path, local = self.hub_path(log), os.path.join(home, rel)
        if prev is not None and self._append(agent, key, log, path, local, prev, st):
            return
        read = read_span(local, 0, st.st_size)
        if read is None or read[1].st_ino != st.st_ino:
            self.counts.notes.append(f"{local}: changed while read; sent next round")
            return
        data = read[0]
        self.counts.files_read += 1
        self.counts.bytes_read += len(data)
        written = self.write_whole(path, data)
        self.counts.bytes_sent += len(data)
        self._sent(agent, key, log, _identity(st), None, _tail(data), len(data), written.ino)

    def _append(
        self,
        agent: str,
        key: str,
        log: str,
        path: str,
        local: str,
        prev: Sent,
        st: os.stat_result,
    ) -> bool:
        """Send only what a log appended since; False when it is no such log."""
        if not (
            key.endswith(".jsonl")
            and (prev.dev, prev.ino) == (st.st_dev, st.st_ino)
            and st.st_size > prev.size
            and prev.hub_size == prev.size
        ):
            return False
        try:
            hub_now = self.hub.stat(path)
        except FileNotFoundError:
            return False
        if (hub_now.size, hub_now.ino) != (prev.hub_size, prev.hub_ino):
            return False  # the hub copy is not the one sent: it is sent whole
        start = max(0, prev.size - _TAIL)
        read = read_span(local, start, st.st_size - start)
        if read is None or read[1].st_ino != st.st_ino:
            return False
        data = read[0]
        self.counts.files_read += 1
        self.counts.bytes_read += len(data)
        if _tail(data[: prev.size - start]) != prev.tail:
            return False  # rewritten in place, not appended to
        new = data[prev.size - start :]
        writer = self.hub.open_writer(path, "a")
        try:
            _bytes_writer(writer)(new)
            writer.fsync()  # before its journal line and the state say it is there
        finally:
            writer.close()
        self.counts.bytes_sent += len(new)
        hub_size = prev.hub_size + len(new)
        self._sent(agent, key, log, _identity(st), None, _tail(data), hub_size, prev.hub_ino)
        return True

    def _sent(
        self,
        agent: str,
        key: str,
        log: str,
        identity: tuple[int, int, int, int],
        signal: str | None,
        tail: str,
        hub_size: int,
        hub_ino: int,
    ) -> None:
        """Name the hub copy's growth in the journal, then remember the file as sent."""
        self.journal.add(log, hub_size, identity[3])
        self.counts.files_sent += 1
        self.state.put_sent(agent, key, Sent(*identity, signal, tail, hub_size, hub_ino))

    def opencode(self, home: str) -> None:
        """Send each OpenCode database session whose change signal moved."""
        report = ArchiveReport()
        for rel, read, signal in opencode_sessions(home, report, set()):
            parts = rel.split("/")
            if check_foreign_rel("opencode", parts) is not None:
                continue  # a database the archive reads but no view shows
            said = json.dumps(signal)
            prev = self.state.sent("opencode", rel)
            if prev is not None and prev.signal == said:
                continue
            document = read()
            if document is None:
                continue
            self.counts.files_read += 1
            self.counts.bytes_read += len(document.data)
            log = foreign_log(self.machine, "opencode", parts)
            written = self.write_whole(self.hub_path(log), document.data)
            size = len(document.data)
            self.counts.bytes_sent += size
            identity = (0, 0, size, document.st_mtime_ns)  # a row, not a file
            self._sent("opencode", rel, log, identity, said, "", size, written.ino)
        self.counts.notes += report.skipped


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    return st.st_dev, st.st_ino, st.st_size, stored_mtime(st.st_mtime_ns)  # as kept


def push_foreign(
    hub: SessionStorage,
    hub_root: str,
    machine: str,
    stores: Sequence[ForeignSource],
    state_path: str,
) -> ForeignCounts:
    """Mirror the other agents' stores among `stores` (pi-format ones and other
    machines' views are passed over) into the hub at `hub_root`, under
    `foreign/<machine>/`; only what changed since the last push is read and sent (see
    the module doc). `state_path`: this part's state file (made when missing).
    The hub's errors (unreachable, full, read-only) are raised as they come: what was
    sent before is kept and remembered, the rest is sent next round."""
    check_machine_name(machine)
    counts = ForeignCounts()
    claimed: set[tuple[str, str]] = set()
    # the views (and this part's state) live under the state home: where that is
    # inside an agent's session dir, they are the other machines', never sent as ours
    own_dir = os.path.join(os.path.realpath(state_home()), "")
    journal = _Journal(hub, hub_root, machine)
    # each commit of the state writes the journal lines of what it records first
    with ForeignState(state_path, before_commit=journal.sync) as state:
        push = _Push(hub, hub_root, machine, state, journal, counts)
        for store in stores:
            if store.agent not in FOREIGN_SYNCED or store.machine is not None:
                continue
            report = ArchiveReport()
            for root in store.archive_roots:
                # no symlink is followed below the root: a file's real path is the
                # root's real path and its path below it
                real_root = os.path.realpath(os.path.join(store.home, root))
                inside_own = 0
                for rel, st in walk_files(store.home, root, report):
                    real = os.path.join(real_root, os.path.relpath(rel, root))
                    if real.startswith(own_dir):
                        inside_own += 1
                        continue
                    if (store.agent, rel) in claimed:
                        counts.notes.append(
                            f"{os.path.join(store.home, rel)}: not sent: another "
                            f"{store.agent} store here has a file at that path"
                        )
                        continue
                    claimed.add((store.agent, rel))
                    push.file(store.agent, store.home, rel, st)
                if inside_own:
                    counts.notes.append(
                        f"{os.path.join(store.home, root)}: {inside_own} file(s) in the "
                        f"sync's own dir {own_dir} (other machines' views); not sent"
                    )
            counts.notes += report.skipped
            if store.agent == "opencode":
                push.opencode(store.home)
    return counts
