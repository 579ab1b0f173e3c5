"""Pull: other machines' new lines into this machine's session files.

Other machines' journals say which of their logs grew; each log is read from where
this machine stopped (complete lines only) and its lines grouped by session. A session
missing here is made from every log of it (header first, byte for byte as its maker
wrote it); one deleted here is not made again; one that exists gets the lines whose
keys it lacks, parents before children, in one append of whole lines (never a rewrite),
then, if the two had diverged, a leaf marker (the leaf rule, docs/sync.md).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from sessiontree.errors import SessionLockError
from sessiontree.format import (
    file_session_id,
    generate_entry_id,
    iso_now,
    serialize_entry_bytes,
)
from sessiontree.layout import StoreParts
from sessiontree.storage import acquire_session_lock, read_chunks, write_new
from sessiontree.sync._blobs import fetch_blobs
from sessiontree.sync._hub import Hub, LogPath
from sessiontree.sync._journal import read_journal
from sessiontree.sync._lines import HEADER_KEY, TITLE_KEY, Line, parse_lines, topological
from sessiontree.sync._local import identity_now
from sessiontree.sync._model import SyncReport
from sessiontree.sync._push import file_row
from sessiontree.sync._state import SessionKey, SyncState

__all__ = ["LEAF_MARKER", "pull"]

LEAF_MARKER: Final = "sessiontree.sync-leaf"
"""The `customType` of the entry that keeps a diverged session's leaf where this
machine's agent left it."""


@dataclass(slots=True)
class _Read:
    """What the logs of one session said this round."""

    lines: list[Line] = field(default_factory=list)
    ends: dict[str, int] = field(default_factory=dict)
    """log -> where the next read of it starts."""


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
    for key, logs in sorted(sessions.items()):
        parts = stores.get(key[0])
        if parts is None:
            report.note(f"{'/'.join(key)} (hub)", f"no {key[0]} store here; kept in the hub")
            _consume(state, {rel: target for rel, _, target in logs})
            continue
        _pull_session(hub, state, machine, parts, key, logs, report)


def _consume(
    state: SyncState,
    ends: Mapping[str, int],
    key: SessionKey | None = None,
    keys: Iterable[str] = (),
) -> None:
    with state.batch():
        for rel, end in ends.items():
            state.set_log_offset(rel, end)
        if key is not None:
            state.add_hub_keys(key, keys)


def _pull_session(
    hub: Hub,
    state: SyncState,
    machine: str,
    parts: StoreParts,
    key: SessionKey,
    logs: list[tuple[str, int, int]],
    report: SyncReport,
) -> None:
    agent, project, name = key
    path = os.path.join(parts.sessions_dir, project, name)
    storage = parts.storage
    if storage.exists(path):
        _merge(hub, state, machine, parts, key, path, _read_logs(hub, logs, False), report)
        return
    row = state.file(key)
    if row is not None:
        report.note(path, "deleted here; not made again (deletion does not sync)")
        _consume(state, {rel: target for rel, _, target in logs})
        return
    session_dir = LogPath(agent, project, name[: -len(".jsonl")], machine).session_dir
    every = []
    for leaf in hub.list_files(session_dir, "*.jsonl"):
        log = LogPath.parse(f"{session_dir}/{leaf}")
        if log is not None:
            every.append((log.rel, 0, 0))
    _create(hub, state, parts, key, path, _read_logs(hub, every, True), report)


def _create(
    hub: Hub,
    state: SyncState,
    parts: StoreParts,
    key: SessionKey,
    path: str,
    read: _Read,
    report: SyncReport,
) -> None:
    """Make the session file from its logs: title slot and header as its maker wrote
    them, then every entry once, parents first."""
    name = key[2]
    # the log that holds the header first: the maker's, whose order the file keeps
    lines = sorted(read.lines, key=lambda line: line.key != HEADER_KEY)
    header = next((line for line in lines if line.key == HEADER_KEY), None)
    if header is None or header.header_id != file_session_id(name[: -len(".jsonl")]):
        why = "no session header" if header is None else "its header's id is not its file name's"
        report.note(f"{'/'.join(key)} (hub)", f"{why}; not made here")
        _consume(state, read.ends)
        return
    title = next((line for line in read.lines if line.key == TITLE_KEY), None)
    entries = _unique(line for line in read.lines if line.key not in (HEADER_KEY, TITLE_KEY))
    ordered = topological(entries, set())
    body = b"".join(line.raw for line in ([title] if title else []) + [header, *ordered])
    hub.check_writable(report.machine)
    fetch_blobs(hub, parts, path, body, report)
    storage = parts.storage
    try:
        storage.ensure_dir(os.path.dirname(path))
        write_new(storage, [path], [body])
    except FileExistsError:
        return  # an agent made it meanwhile: merged next round
    identity = identity_now(parts, path)
    with state.batch():
        state.add_hub_keys(key, [line.key for line in read.lines])
        for rel, end in read.ends.items():
            state.set_log_offset(rel, end)
        if identity[0] == len(body):
            state.set_file(key, file_row(parts, path, identity, len(body)))
    report.created.append(path)
    report.received_sessions += 1
    report.received_lines += 2 + len(ordered) if title else 1 + len(ordered)
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


def _merge(
    hub: Hub,
    state: SyncState,
    machine: str,
    parts: StoreParts,
    key: SessionKey,
    path: str,
    read: _Read,
    report: SyncReport,
) -> None:
    """Append to the local file the lines it lacks, and the leaf marker if they
    diverged; the file is never rewritten."""
    keys_read = [line.key for line in read.lines]
    storage = parts.storage
    if not any(line.key not in (HEADER_KEY, TITLE_KEY) for line in read.lines):
        _consume(state, read.ends, key, keys_read)
        return
    local = b"".join(read_chunks(storage, path))
    report.bytes_read += len(local)
    if local and not local.endswith(b"\n"):
        report.note(path, "does not end a line (an agent writing it?); merged next round")
        return
    present: dict[str, bytes] = {}
    parents: dict[str, str | None] = {}
    last: str | None = None
    for raw, line in parse_lines(local, True):
        if line is None:
            continue
        present.setdefault(line.key, raw)
        if line.key not in (HEADER_KEY, TITLE_KEY):
            parents[line.key] = line.parent
            last = line.key
    new = []
    for line in _unique(read.lines):
        if line.key in (HEADER_KEY, TITLE_KEY):
            continue
        if line.key in present:
            if present[line.key] != line.raw:
                report.note(
                    f"{path}: entry {line.key}", "another machine's line differs; ours kept"
                )
            continue
        new.append(line)
    if not new:
        _consume(state, read.ends, key, keys_read)
        return
    ordered = topological(new, set(present))
    for line in ordered:
        parents[line.key] = line.parent
    held = state.held(key)
    leaf = held[last][0] if last is not None and last in held else last
    marker: bytes | None = None
    marker_id = ""
    if leaf is not None and leaf not in _ancestors(ordered[-1].key, parents):
        marker_id = generate_entry_id(parents.keys() | present.keys())
        marker = (
            serialize_entry_bytes(
                {
                    "type": "custom",
                    "customType": LEAF_MARKER,
                    "data": {"machine": machine},
                    "id": marker_id,
                    "parentId": leaf,
                    "timestamp": iso_now(),
                }
            )
            + b"\n"
        )
    body = b"".join(line.raw for line in ordered) + (marker or b"")
    hub.check_writable(report.machine)
    fetch_blobs(hub, parts, path, body, report)
    try:
        lock = acquire_session_lock(storage, path)
    except SessionLockError:
        report.note(path, "a sessiontree writer holds it; merged next round")
        return
    try:
        before = identity_now(parts, path)
        if before[0] != len(local):
            report.note(path, "changed while it was read; merged next round")
            return
        writer = storage.open_writer(path, "a")
        try:
            writer.write_line(body.decode("utf-8"))
            writer.flush()
        finally:
            writer.close()
        after = identity_now(parts, path)
    finally:
        if lock is not None:
            lock.release()
    row = state.file(key)
    with state.batch():
        state.add_hub_keys(key, keys_read)
        for rel, end in read.ends.items():
            state.set_log_offset(rel, end)
        if marker is not None:
            state.hold(key, marker_id, leaf, marker)
        # pushed up to its end before: the lines written now need no push either
        if (
            row is not None
            and not row.deleted
            and row.offset == before[0]
            and row.ino == before[2]
            and after[0] == before[0] + len(body)
        ):
            state.set_file(key, file_row(parts, path, after, after[0]))
    report.merged.append(path)
    if marker is not None:
        report.leaf_markers.append(path)
    report.received_sessions += 1
    report.received_lines += len(ordered)
    report.received_bytes += len(body) - len(marker or b"")
