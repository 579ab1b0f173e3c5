"""Other agents' sessions through a hub, read-only: this machine's Claude Code, Codex,
Gemini CLI, Copilot CLI and OpenCode files mirrored byte for byte into the hub
(`push_foreign`), and the other machines' written where this one reads them as stores
(`pull_foreign`), never into an agent's own dir (the agent would take them as its own).

**Sent.** Each file under a store's session dirs goes to `foreign/<machine>/<agent>/
<path under the store's home>`. A file whose identity (device, inode, size, mtime) is
the one remembered is not read. A `.jsonl` log that only grew (same inode, larger, its
last bytes before the old end unchanged) sends its new bytes, appended to the hub copy
once that copy is checked to be the size remembered; anything else (a JSON document
rewritten in place, a new file) is read whole and replaces the hub copy atomically. An
OpenCode database's session goes as the document the archive makes of it (one read
transaction: one committed state), sent when the database says it changed. Each hub
file written is named in this machine's journal (`{"log", "size", "mtimeNs"}`), so the
other machines find what changed without listing the hub.

**Received.** For every other machine, its journal is read from where this machine
stopped; each file it names is checked (`parse_foreign_log`) and brought into the view:
its new bytes appended when the view's copy and the hub's are still the ones
remembered, else written whole. An OpenCode document is also written as OpenCode's JSON
files, which its reader reads. The view keeps each file's modification time as on its
machine (the listings sort by it).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import orjson
import xxhash

from sessiontree.archive import (
    ArchiveReport,
    export_as_storage,
    opencode_sessions,
    read_span,
    walk_files,
)
from sessiontree.storage import (
    SessionStorage,
    SessionStorageWriter,
    StorageStat,
    read_range,
    read_range_chunks,
    write_whole,
)
from sessiontree.sync._foreign_paths import (
    FOREIGN_SYNCED,
    check_foreign_rel,
    foreign_log,
    parse_foreign_log,
)
from sessiontree.sync._foreign_state import ForeignState, Sent, Shown
from sessiontree.sync._foreign_view import ViewRefused, ViewTree
from sessiontree.sync._names import HubNameError, check_machine_name

__all__ = ["ForeignCounts", "ForeignSource", "journal_path", "pull_foreign", "push_foreign"]

_TAIL = 1024
"""Bytes before a log's old end read again to tell it grew, not rewritten."""


class ForeignSource(Protocol):
    """A store of another agent on this machine, as `find_stores` gives it."""

    @property
    def agent(self) -> str: ...
    @property
    def home(self) -> str: ...
    @property
    def archive_roots(self) -> tuple[str, ...]: ...
    @property
    def machine(self) -> str | None: ...


@dataclass(slots=True)
class ForeignCounts:
    """What one push or pull of other agents' files did."""

    files_sent: int = 0
    bytes_sent: int = 0
    files_received: int = 0
    bytes_received: int = 0
    files_read: int = 0
    """Files read (local ones by a push, hub ones by a pull), wholly or in part."""
    bytes_read: int = 0
    notes: list[str] = field(default_factory=list)
    """What was passed over, and why (a name refused, a symlink, a file that changed)."""


def journal_path(hub_root: str, machine: str) -> str:
    return os.path.join(hub_root, "machines", machine, "journal.jsonl")


def _tail(data: bytes) -> str:
    return xxhash.xxh3_64_hexdigest(data[-_TAIL:])


# ---------------------------------------------------------------------------- push


class _Journal:
    """This machine's journal in the hub, opened on its first line of a round."""

    def __init__(self, hub: SessionStorage, hub_root: str, machine: str) -> None:
        self._hub = hub
        self._path = journal_path(hub_root, machine)
        self._writer: Callable[[bytes], None] | None = None
        self._sync: Callable[[], None] = lambda: None
        self._close: Callable[[], None] = lambda: None

    def add(self, log: str, size: int, mtime_ns: int) -> None:
        if self._writer is None:
            self._hub.ensure_dir(os.path.dirname(self._path))
            torn = False
            try:
                size_now = self._hub.stat(self._path).size
                torn = size_now > 0 and read_range(self._hub, self._path, size_now - 1, 1) != b"\n"
            except FileNotFoundError:
                pass
            writer = self._hub.open_writer(self._path, "a")
            self._sync, self._close = writer.fsync, writer.close
            self._writer = _bytes_writer(writer)
            if torn:  # a line cut short by a crash: the next one starts on its own
                self._writer(b"\n")
        line = {"log": log, "size": size, "mtimeNs": mtime_ns}
        self._writer(json.dumps(line, separators=(",", ":")).encode() + b"\n")

    def sync(self) -> None:
        """Make the lines written so far durable (before the state records them)."""
        self._sync()

    def close(self) -> None:
        self._close()


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
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


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
    journal = _Journal(hub, hub_root, machine)
    try:
        # the state commits (after the journal is made durable) before the journal closes
        with ForeignState(state_path, before_commit=journal.sync) as state:
            push = _Push(hub, hub_root, machine, state, journal, counts)
            for store in stores:
                if store.agent not in FOREIGN_SYNCED or store.machine is not None:
                    continue
                report = ArchiveReport()
                for root in store.archive_roots:
                    for rel, st in walk_files(store.home, root, report):
                        if (store.agent, rel) in claimed:
                            counts.notes.append(
                                f"{os.path.join(store.home, rel)}: not sent: another "
                                f"{store.agent} store here has a file at that path"
                            )
                            continue
                        claimed.add((store.agent, rel))
                        push.file(store.agent, store.home, rel, st)
                counts.notes += report.skipped
                if store.agent == "opencode":
                    push.opencode(store.home)
    finally:
        journal.close()
    return counts


# ---------------------------------------------------------------------------- pull


def _journal_lines(data: bytes, machine: str, notes: list[str]) -> dict[str, tuple[int, int]]:
    """The last (size, mtime) each foreign log line of `data` gives, by log."""
    latest: dict[str, tuple[int, int]] = {}
    bad = 0
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError:
            bad += 1
            continue
        if not isinstance(value, dict):
            bad += 1
            continue
        log, size, mtime = value.get("log"), value.get("size"), value.get("mtimeNs", 0)
        if isinstance(log, str) and log.startswith("sessions/"):
            continue  # a pi-format session's log: the sync's other part reads it
        if not isinstance(log, str) or not log.startswith("foreign/"):
            bad += 1
            continue
        if type(size) is not int or size < 0 or type(mtime) is not int or mtime < 0:
            bad += 1
            continue
        latest[log] = (size, mtime if mtime < 2**63 else 0)
    if bad:
        notes.append(f"{machine}'s journal: {bad} line(s) that are no file's growth; skipped")
    return latest


@dataclass(slots=True)
class _Pull:
    hub: SessionStorage
    hub_root: str
    state: ForeignState
    view: ViewTree
    counts: ForeignCounts
    wrote: bool = False
    """Whether the view was written since the state last committed."""

    def durable(self) -> None:
        """Make the view's new bytes durable before the state records them (one flush
        of the file systems, only when the view was written)."""
        if self.wrote:
            os.sync()
            self.wrote = False

    def machine(self, other: str) -> None:
        """Bring what `other` sent since the last round into the view; a file of its
        the view lost (deleted, cut, replaced) is fetched again whole."""
        blocked = self._lost(other)
        path = journal_path(self.hub_root, other)
        try:
            size = self.hub.stat(path).size
        except FileNotFoundError:
            return
        offset = self.state.journal_offset(other)
        if size < offset:  # the journal was started over: read it all again
            offset = 0
        if size == offset:
            return
        data = b"".join(read_range_chunks(self.hub, path, offset, size))
        complete = data[: data.rfind(b"\n") + 1]
        for log, (_, mtime) in _journal_lines(complete, other, self.counts.notes).items():
            try:
                agent, parts = parse_foreign_log(log, other)
            except HubNameError as exc:
                self.counts.notes.append(f"{other}'s journal: refused: {exc}")
                continue
            blocked = not self._file(other, agent, parts, mtime) or blocked
        if not blocked:  # else read again next round, once what is in the way is gone
            self.state.put_journal_offset(other, offset + len(complete))

    def _lost(self, other: str) -> bool:
        """Fetch again each file of `other`'s whose copy in the view is not the one
        written (a stat each); whether one could not be written."""
        blocked = False
        for agent, key, shown in self.state.shown_of(other):
            st = self.view.lstat([other, agent, *key.split("/")])
            if st is None or (st.st_ino, st.st_size) != (shown.view_ino, shown.view_size):
                blocked = not self._file(other, agent, key.split("/"), shown.mtime_ns) or blocked
        return blocked

    def _file(self, other: str, agent: str, parts: list[str], mtime: int) -> bool:
        """`file`, with what is in the view's way named in the notes (then False)."""
        try:
            self.file(other, agent, parts, mtime)
        except ViewRefused as exc:
            self.counts.notes.append(f"{exc.filename}: not written: {exc.strerror}")
            return False
        return True

    def file(self, other: str, agent: str, parts: list[str], mtime: int) -> None:
        """Bring one hub file into the view (its new bytes, else whole)."""
        log = foreign_log(other, agent, parts)
        path = os.path.join(self.hub_root, *log.split("/"))
        try:
            hub_st = self.hub.stat(path)
        except FileNotFoundError:
            self.counts.notes.append(f"{log}: named by {other}'s journal, not in the hub")
            return
        key = "/".join(parts)
        target = [other, agent, *parts]
        prev = self.state.shown(other, agent, key)
        view_st = self.view.lstat(target)
        same_view = (
            prev is not None
            and view_st is not None
            and (view_st.st_ino, view_st.st_size) == (prev.view_ino, prev.view_size)
        )
        if (
            prev is not None
            and same_view
            and (hub_st.size, hub_st.ino)
            == (
                prev.hub_size,
                prev.hub_ino,
            )
        ):
            return  # nothing new (a journal line this machine has seen through)
        written: os.stat_result | None = None
        if prev is not None and same_view and hub_st.ino == prev.hub_ino:
            if hub_st.size > prev.hub_size:
                new = self._read(path, prev.hub_size, hub_st.size)
                if new is None:
                    return
                self.wrote = True
                written = self.view.append(target, new, (prev.view_ino, prev.view_size), mtime)
                if written is not None:
                    self.counts.bytes_received += len(new)
        if written is None:
            data = self._read(path, 0, hub_st.size)
            if data is None:
                return
            self.wrote = True
            written = self.view.replace(target, data, mtime)
            self.counts.bytes_received += len(data)
            if agent == "opencode" and parts[0] == "export":
                self._opencode_files(other, log, data, mtime)
        self.counts.files_received += 1
        shown = Shown(hub_st.size, hub_st.ino, written.st_ino, written.st_size, mtime)
        self.state.put_shown(other, agent, key, shown)

    def _read(self, path: str, start: int, end: int) -> bytes | None:
        data = b"".join(read_range_chunks(self.hub, path, start, end))
        self.counts.files_read += 1
        self.counts.bytes_read += len(data)
        if len(data) != end - start:
            self.counts.notes.append(f"{path}: changed while read; fetched next round")
            return None
        return data

    def _opencode_files(self, other: str, log: str, data: bytes, mtime: int) -> None:
        """An OpenCode database session's document as the JSON files its reader reads."""
        files = export_as_storage(data)
        if files is None:
            self.counts.notes.append(f"{log}: not an OpenCode export; not shown")
            return
        for rel, content in files:
            self.view.replace([other, "opencode", *rel.split("/")], content, mtime)


def pull_foreign(
    hub: SessionStorage, hub_root: str, machine: str, view_root: str, state_path: str
) -> ForeignCounts:
    """Bring every other machine's mirrored files of other agents from the hub at
    `hub_root` into `view_root/<machine>/<agent>/` (see the module doc), where a store
    of that agent reads them; `machine` is this one (its own files are not pulled).
    Names another machine wrote are checked before they touch a path; one refused is
    named in the notes. The hub's errors are raised as they come: a machine's journal
    position is saved only once its files are in the view."""
    check_machine_name(machine)
    counts = ForeignCounts()
    machines_dir = os.path.join(hub_root, "machines")
    list_dirs = getattr(hub, "list_dirs", None)
    others = [os.path.basename(d) for d in list_dirs(machines_dir)] if list_dirs else []
    with ViewTree(view_root) as view, ForeignState(state_path) as state:
        pull = _Pull(hub, hub_root, state, view, counts)
        state.before_commit = pull.durable
        for other in sorted(others):
            if other == machine:
                continue
            try:
                check_machine_name(other)
            except HubNameError as exc:
                counts.notes.append(f"machines/: refused: {exc}")
                continue
            pull.machine(other)
            state.commit()
    return counts
