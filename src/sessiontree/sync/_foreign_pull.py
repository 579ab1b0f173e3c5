"""Bringing the other machines' files of other agents from the hub into the view
(`pull_foreign`): each journal from where this machine stopped, each name checked, a
file's new bytes appended or the file written whole (the rules: `_foreign`'s module
doc)."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

import orjson

from sessiontree.archive import export_as_storage
from sessiontree.storage import FileSessionStorage, SessionStorage, read_range_chunks
from sessiontree.sync._foreign import ForeignCounts, journal_path
from sessiontree.sync._foreign_paths import foreign_log, parse_foreign_log
from sessiontree.sync._foreign_state import ForeignState, Shown
from sessiontree.sync._foreign_view import ViewRefused, ViewTree
from sessiontree.sync._names import HubNameError, check_machine_name

__all__ = ["pull_foreign"]


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
        if not self._plain_hub_file(log):
            self.counts.notes.append(f"{log}: not a regular file in the hub; not read")
            return
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

    def _plain_hub_file(self, log: str) -> bool:
        """Whether `log` is, in a dir hub, a regular file reached through real dirs
        only: another machine may plant a symlink (to a file of this machine's, which
        the view would then show) or a FIFO (a read that never ends) under its dir. A
        missing file passes (the caller says so); a database hub has no such things."""
        if not isinstance(self.hub, FileSessionStorage):
            return True
        path = self.hub_root
        names = log.split("/")
        for at, name in enumerate(names):
            path = os.path.join(path, name)
            try:
                mode = os.lstat(path).st_mode
            except FileNotFoundError:
                return True
            last = at == len(names) - 1
            if not (stat.S_ISREG(mode) if last else stat.S_ISDIR(mode)):
                return False
        return True

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
