"""Pull: other machines' new lines into this machine's session files.

Other machines' journals say which of their logs grew; each log is read from where
this machine stopped (complete lines only) and its lines grouped by session. A session
missing here is made from every log of it (header first, byte for byte as its maker
wrote it); one deleted here is not made again; one that exists gets the lines whose
keys it lacks, parents before children, in one append of whole lines (never a rewrite),
then, if the two had diverged, a leaf marker (the leaf rule, docs/sync.md).

Sessions are written in batches: the files of a batch are made durable together, then
the state records what was read (a crash before: read again, nothing written twice).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from sessiontree._util.fs import create_new
from sessiontree.errors import SessionLockError
from sessiontree.format import (
    file_session_id,
    generate_entry_id,
    iso_now,
    serialize_entry_bytes,
)
from sessiontree.layout import StoreParts
from sessiontree.storage import (
    HostFilesystem,
    acquire_session_lock,
    read_chunks,
    read_range,
    write_new,
)
from sessiontree.sync._blobs import fetch_blobs
from sessiontree.sync._durable import Barrier
from sessiontree.sync._hub import Hub, LogPath
from sessiontree.sync._journal import read_journal
from sessiontree.sync._lines import (
    HEADER_KEY,
    LEAF_MARKER,
    TITLE_KEY,
    Line,
    parse_lines,
    topological,
)
from sessiontree.sync._local import Identity, identity_now
from sessiontree.sync._model import SyncReport
from sessiontree.sync._push import file_row
from sessiontree.sync._state import SessionKey, SyncState

__all__ = ["pull"]

_BATCH: Final = 256
"""Sessions written between two durability barriers (and state commits)."""
_HEAD_KEYS: Final = (HEADER_KEY, TITLE_KEY)


@dataclass(slots=True)
class _Read:
    """What the logs of one session said this round."""

    lines: list[Line] = field(default_factory=list)
    ends: dict[str, int] = field(default_factory=dict)
    """log -> where the next read of it starts."""


@dataclass(slots=True)
class _Batch:
    """Local files written and not yet durable, and what the state records of them
    once they are."""

    state: SyncState
    barrier: Barrier = field(default_factory=Barrier)
    records: list[Callable[[], None]] = field(default_factory=list)

    def wrote(self, parts: StoreParts, path: str, record: Callable[[], None]) -> None:
        self.barrier.add(parts.storage, path)
        self.records.append(record)

    def commit(self) -> None:
        records, self.records = self.records, []
        if records:
            self.barrier.flush()
            with self.state.batch():
                for record in records:
                    record()


def _read_logs(hub: Hub, logs: Iterable[tuple[str, int, int]], at_start: bool) -> _Read:
    read = _Read()
    for rel, offset, target in logs:
        if at_start:
            offset, target = 0, max(target, hub.size(rel))
        data = hub.read(rel, offset, target)
        end = data.rfind(b"\n") + 1
        read.ends[rel] = offset + end
        read.lines.extend(line for _, line in parse_lines(data[:end], offset == 0) if line)
    return read


def _grow_pending(hub: Hub, state: SyncState, machine: str, report: SyncReport) -> None:
    """Read the journals of the other machines: every log they say grew is pending."""
    ends: dict[str, int] = {}
    wanted: list[tuple[str, int]] = []
    for other in hub.machines():
        if other == machine:
            continue
        journal = read_journal(hub, other, state.journal_offset(other))
        for line in journal.refused:
            report.note(f"hub journal of {other}", f"line refused: {line}")
        wanted.extend((log.rel, size) for log, size in journal.grown.items())
        ends[other] = journal.end
    with state.batch():
        for rel, size in wanted:
            state.want_log(rel, size)
        for other, end in ends.items():
            state.set_journal_offset(other, end)


def pull(
    hub: Hub,
    state: SyncState,
    machine: str,
    stores: Mapping[str, StoreParts],
    report: SyncReport,
    progress: Callable[[str], None] | None = None,
) -> None:
    """Bring every other machine's new lines into this machine's files."""
    _grow_pending(hub, state, machine, report)
    sessions: dict[SessionKey, list[tuple[str, int, int]]] = {}
    for rel, offset, target in state.pending_logs():
        log = LogPath.parse(rel)
        if log is None or log.machine == machine:
            state.set_log_offset(rel, target)
            continue
        sessions.setdefault(log.session, []).append((rel, offset, target))
    batch = _Batch(state)
    waiting: dict[str, int] = {}
    for key, logs in sorted(sessions.items()):
        parts = stores.get(key[0])
        if parts is None:  # left pending: pulled once that agent's store is here
            waiting[key[0]] = waiting.get(key[0], 0) + 1
            continue
        _pull_session(hub, batch, machine, parts, key, logs, report)
        if len(batch.records) >= _BATCH:
            batch.commit()
            if progress is not None:
                done = len(report.created) + len(report.merged)
                progress(f"{done}/{len(sessions)} sessions received")
    batch.commit()
    for agent, count in sorted(waiting.items()):
        why = f"no {agent} store here (its agent dir with a sessions/ dir); kept in the hub"
        report.note(f"{count} {agent} sessions", why)


def _consume(
    state: SyncState,
    ends: Mapping[str, int],
    key: SessionKey | None = None,
    keys: Iterable[str] = (),
) -> None:
    """Record the logs as read to `ends` (and, of session `key`, the keys they hold)."""
    with state.batch():
        _record_read(state, ends, key, keys)


def _record_read(
    state: SyncState, ends: Mapping[str, int], key: SessionKey | None, keys: Iterable[str]
) -> None:
    for rel, end in ends.items():
        state.set_log_offset(rel, end)
    if key is not None:
        state.add_hub_keys(key, keys)


def _pull_session(
    hub: Hub,
    batch: _Batch,
    machine: str,
    parts: StoreParts,
    key: SessionKey,
    logs: list[tuple[str, int, int]],
    report: SyncReport,
) -> None:
    agent, project, name = key
    path = os.path.join(parts.sessions_dir, project, name)
    state = batch.state
    odd = _not_a_plain_file(parts, path)
    if odd is not None:  # kept in the hub: merged once it is a plain file again
        report.note(path, f"{odd}; left alone, merged once it is a plain file")
        return
    exists = parts.storage.exists(path)
    if exists and parts.storage.stat(path).size > 0:
        _merge(hub, batch, machine, parts, key, path, _read_logs(hub, logs, False), report)
        return
    if not exists and state.file(key) is not None:
        report.note(path, "deleted here; not made again (deletion does not sync)")
        _consume(state, {rel: target for rel, _, target in logs})
        return
    session_dir = LogPath(agent, project, name[: -len(".jsonl")], machine).session_dir
    every = []
    for leaf in hub.list_files(session_dir, "*.jsonl"):
        log = LogPath.parse(f"{session_dir}/{leaf}")
        if log is not None:
            every.append((log.rel, 0, 0))
    # an empty file is one a round made and a crash left empty: filled as it was made
    _create(hub, batch, parts, key, path, _read_logs(hub, every, True), report, into=exists)


def _not_a_plain_file(parts: StoreParts, path: str) -> str | None:
    """Why a local session path is not one a merge may write (a symlink, a FIFO, a
    project dir that is a symlink: a write would land elsewhere or block), else None.
    Only a store of this host's files can have them."""
    storage = parts.storage
    if not isinstance(storage, HostFilesystem):
        return None
    host = storage.host_path(path)
    for where, what in ((os.path.dirname(host), "its project dir"), (host, "the file")):
        try:
            mode = os.lstat(where).st_mode
        except FileNotFoundError:
            return None
        except OSError as exc:
            return f"{what} cannot be looked at ({exc.strerror})"
        if stat.S_ISLNK(mode):
            return f"{what} is a symlink"
        if where == host and not stat.S_ISREG(mode):
            return f"{what} is not a regular file"
    return None


def _head(read: _Read, name: str) -> tuple[Line | None, str | None]:
    """The session's header line from the logs (the first), or why there is none."""
    header = next((line for line in read.lines if line.key == HEADER_KEY), None)
    if header is None:
        return None, "no session header"
    if header.header_id != file_session_id(name[: -len(".jsonl")]):
        return None, "its header's id is not its file name's"
    return header, None


def _create(
    hub: Hub,
    batch: _Batch,
    parts: StoreParts,
    key: SessionKey,
    path: str,
    read: _Read,
    report: SyncReport,
    *,
    into: bool = False,
) -> None:
    """Make the session file from its logs: title slot and header as its maker wrote
    them, then every entry once, parents first (`into`: into the empty file there)."""
    # the log that holds the header first: the maker's, whose order the file keeps
    read.lines.sort(key=lambda line: line.key != HEADER_KEY)
    header, why = _head(read, key[2])
    if header is None:
        report.note(f"{'/'.join(key)} (hub)", f"{why}; not made here")
        _consume(batch.state, read.ends)
        return
    title = next((line for line in read.lines if line.key == TITLE_KEY), None)
    ordered = topological(_unique(x for x in read.lines if x.key not in _HEAD_KEYS), set())
    head = [title, header] if title is not None else [header]
    body = b"".join(line.raw for line in head + ordered)
    hub.check_writable(report.machine)
    fetch_blobs(hub, parts, path, body, report)
    storage = parts.storage
    try:
        if into:
            if not _append(parts, path, 0, body, report):
                return
        else:
            storage.ensure_dir(os.path.dirname(path))
            if isinstance(storage, HostFilesystem):  # made durable with the batch
                create_new([storage.host_path(path)], [body], durable=False)
            else:
                write_new(storage, [path], [body])
    except FileExistsError:
        return  # an agent made it meanwhile: merged next round
    identity = identity_now(parts, path)
    keys = [line.key for line in read.lines]

    def record() -> None:
        _record_read(batch.state, read.ends, key, keys)
        if identity[0] == len(body):
            batch.state.set_file(key, file_row(parts, path, identity, len(body)))

    batch.wrote(parts, path, record)
    report.created.append(path)
    report.received_sessions += 1
    report.received_lines += len(head) + len(ordered)
    report.received_bytes += len(body)


def _unique(lines: Iterable[Line]) -> list[Line]:
    seen: set[str] = set()
    out = []
    for line in lines:
        if line.key not in seen:
            seen.add(line.key)
            out.append(line)
    return out


def _ancestors(start: str, parents: Mapping[str, str | None]) -> set[str]:
    out: set[str] = set()
    current: str | None = start
    while current is not None and current not in out:
        out.add(current)
        current = parents.get(current)
    return out


@dataclass(slots=True)
class _Local:
    """A local file's lines as the merge needs them."""

    present: dict[str, bytes] = field(default_factory=dict)
    parents: dict[str, str | None] = field(default_factory=dict)
    leaf: str | None = None
    """The entry its agent would resume at: the last entry, or, when that is a leaf
    marker, the entry the marker keeps."""


def _local_lines(local: bytes) -> _Local:
    out = _Local()
    for raw, line in parse_lines(local, True):
        if line is None:
            continue
        out.present.setdefault(line.key, raw)
        if line.key not in _HEAD_KEYS:
            out.parents[line.key] = line.parent
            out.leaf = line.parent if line.kind == LEAF_MARKER else line.key
    return out


def _leaf_marker(machine: str, leaf: str, taken: Iterable[str]) -> tuple[str, bytes]:
    marker_id = generate_entry_id(set(taken))
    entry = {
        "type": "custom",
        "customType": LEAF_MARKER,
        "data": {"machine": machine},
        "id": marker_id,
        "parentId": leaf,
        "timestamp": iso_now(),
    }
    return marker_id, serialize_entry_bytes(entry) + b"\n"


def _append(
    parts: StoreParts, path: str, size: int, body: bytes, report: SyncReport
) -> tuple[Identity, Identity] | None:
    """Append `body` to the file in one write, under the session's writer lock, if the
    file is still `size` bytes long; its identities before and after (None: not now)."""
    storage = parts.storage
    try:
        lock = acquire_session_lock(storage, path)
    except SessionLockError:
        report.note(path, "a sessiontree writer holds it; merged next round")
        return None
    try:
        before = identity_now(parts, path)
        if before[0] != size:
            report.note(path, "changed while it was read; merged next round")
            return None
        writer = storage.open_writer(path, "a")
        try:
            writer.write_line(body.decode("utf-8"))
            writer.flush()
        finally:
            writer.close()
        return before, identity_now(parts, path)
    finally:
        if lock is not None:
            lock.release()


def _written_meanwhile(
    parts: StoreParts, path: str, start: int, end: int, body: bytes
) -> str | None:
    """The last entry another writer (an agent, which takes no lock) appended between
    the merge's look at the file (`start` bytes) and its write of `body`, which then
    ends the file at `end`; None when nothing came in between."""
    if end <= start + len(body):
        return None
    try:
        region = read_range(parts.storage, path, start, end - start)
    except OSError:
        return None
    if not region.endswith(body):
        return None  # written after ours as well: the file's last entry is theirs
    last = None
    for _, line in parse_lines(region[: -len(body)], False):
        if line is not None and line.key not in _HEAD_KEYS:
            last = line.key
    return last


def _merge(
    hub: Hub,
    batch: _Batch,
    machine: str,
    parts: StoreParts,
    key: SessionKey,
    path: str,
    read: _Read,
    report: SyncReport,
) -> None:
    """Append to the local file the lines it lacks, and the leaf marker if they
    diverged; the file is never rewritten."""
    state = batch.state
    keys_read = [line.key for line in read.lines]
    storage = parts.storage
    if not any(line.key not in _HEAD_KEYS for line in read.lines):
        _consume(state, read.ends, key, keys_read)
        return
    local_bytes = b"".join(read_chunks(storage, path))
    report.bytes_read += len(local_bytes)
    if not local_bytes.endswith(b"\n"):
        why = "is empty" if not local_bytes else "does not end a line (an agent writing it?)"
        report.note(path, f"{why}; merged next round")
        return
    local = _local_lines(local_bytes)
    new = []
    for line in _unique(read.lines):
        if line.key in _HEAD_KEYS:
            continue
        if line.key in local.present:
            if local.present[line.key] != line.raw:
                why = "another machine's line differs; ours kept"
                report.note(f"{path}: entry {line.key}", why)
            continue
        new.append(line)
    if not new:
        _consume(state, read.ends, key, keys_read)
        return
    ordered = topological(new, set(local.present))
    parents = local.parents | {line.key: line.parent for line in ordered}
    marker: tuple[str, bytes] | None = None
    if local.leaf is not None and local.leaf not in _ancestors(ordered[-1].key, parents):
        marker = _leaf_marker(machine, local.leaf, parents.keys() | local.present.keys())
    body = b"".join(line.raw for line in ordered) + (marker[1] if marker else b"")
    hub.check_writable(report.machine)
    fetch_blobs(hub, parts, path, body, report)
    written = _append(parts, path, len(local_bytes), body, report)
    if written is None:
        return
    before, after = written
    row = state.file(key)
    markers = [(marker[0], local.leaf, marker[1])] if marker is not None else []
    late = _written_meanwhile(parts, path, before[0], after[0], body)
    if late is not None:  # the agent's line went in first: it resumes there, not at ours
        taken = parents.keys() | local.present.keys() | {m[0] for m in markers}
        extra = _leaf_marker(machine, late, taken)
        again = _append(parts, path, after[0], extra[1], report)
        if again is not None:
            after = again[1]
            markers.append((extra[0], late, extra[1]))

    def record() -> None:
        _record_read(state, read.ends, key, keys_read)
        for marker_id, parent, raw in markers:
            state.hold(key, marker_id, parent, raw)
        # pushed up to its end before: the lines written now need no push either
        if (
            row is not None
            and not row.deleted
            and row.offset == before[0]
            and row.ino == before[2]
            and after[0] == before[0] + len(body)
        ):
            state.set_file(key, file_row(parts, path, after, after[0]))

    batch.wrote(parts, path, record)
    report.merged.append(path)
    if markers:
        report.leaf_markers.append(path)
    report.received_sessions += 1
    report.received_lines += len(ordered)
    report.received_bytes += len(body) - len(marker[1] if marker else b"")
