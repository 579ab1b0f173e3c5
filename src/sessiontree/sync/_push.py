"""Push: this machine's new lines into the hub.

Per session file of a local pi-format store: a file whose identity is as the last push
left it is not read; one that only grew is read from where the push stopped; any other
(new, rewritten) is read whole. Of what is read, the complete lines whose keys the hub
does not hold (as far as this machine knows) are appended to this machine's log of
the session, their blobs first, then the journal says the log grew. A leaf marker
(`_pull`) is held back until an entry is written after it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from sessiontree._util.fs import not_regular
from sessiontree.format import CURRENT_SESSION_VERSION, file_session_id, loads_line
from sessiontree.layout import StoreParts
from sessiontree.listing import (
    MARK_TAIL_BYTES,
    FileMark,
    mark_file,
    marked_as_read,
    only_appended,
    same_identity,
)
from sessiontree.storage import read_range, read_range_chunks
from sessiontree.sync._blobs import send_blobs
from sessiontree.sync._durable import Barrier
from sessiontree.sync._hub import Hub, LogPath
from sessiontree.sync._journal import append_journal, journal_rel
from sessiontree.sync._lines import (
    HEADER_KEY,
    LEAF_MARKER,
    TITLE_KEY,
    complete_part,
    parse_lines,
)
from sessiontree.sync._local import LocalFile, local_files
from sessiontree.sync._model import HubError, SyncReport
from sessiontree.sync._state import FileRow, SessionKey, SyncState

__all__ = ["file_row", "push_store"]


def file_row(
    parts: StoreParts, path: str, identity: tuple[int, int, int, int], offset: int
) -> FileRow:
    """The state's row for a file of this identity pushed up to `offset` (reads the
    head and the bytes before its end: what tells later that it only grew)."""
    size, mtime_ns, ino, ctime_ns = identity
    mark = mark_file(parts.storage, path, size, mtime_ns, ino, offset, 1)
    return FileRow(size, mtime_ns, ino, ctime_ns, offset, mark.head_len, mark.head, mark.tail)


def _resume_at(parts: StoreParts, file: LocalFile, row: FileRow | None) -> int:
    """Where to read `file` from: the row's offset when the file only grew since (or
    kept its bytes), else 0."""
    if row is None or row.deleted or row.offset <= 0 or file.ino != row.ino or file.size < row.size:
        return 0
    mark = FileMark(row.size, row.mtime_ns, row.ino, row.offset, row.head_len, row.head, row.tail)
    storage = parts.storage
    try:
        if file.size > row.size:
            kept = only_appended(storage, file.path, mark, file.size, file.ino)
        else:  # same size, new mtime or ctime: the same bytes, or rewritten in place
            head = read_range(storage, file.path, 0, row.head_len) if row.head_len else None
            want = min(MARK_TAIL_BYTES, row.size)
            tail = read_range(storage, file.path, row.size - want, want)
            kept = marked_as_read(mark, head, tail)
    except OSError:
        return 0
    return row.offset if kept else 0


def _header_problem(raw: bytes, name: str) -> str | None:
    """Why a file whose header line is `raw` is not pushed (None: it is)."""
    header = loads_line(raw)
    if header.get("id") != file_session_id(name[: -len(".jsonl")]):
        return "its header's id is not the one in its file name"
    if header.get("version") != CURRENT_SESSION_VERSION:
        return (
            f"format version {header.get('version', 1)!r}, not {CURRENT_SESSION_VERSION}:"
            " open it in its agent or run `sessiontree migrate`"
        )
    return None


@dataclass(slots=True)
class _Outgoing:
    """What one file sends, and what the state says of it once that is durable."""

    key: SessionKey
    path: str
    """The local file."""
    row: FileRow
    log: LogPath
    body: bytes = b""
    lines: int = 0
    keys: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    hold: list[tuple[str, str | None, bytes]] = field(default_factory=list)
    """Leaf markers found in the file, not in the state, and still without a child."""


def _outgoing(
    state: SyncState,
    machine: str,
    agent: str,
    parts: StoreParts,
    file: LocalFile,
    row: FileRow | None,
    report: SyncReport,
) -> _Outgoing | None:
    """What is new in one local session file (None: nothing to say of it now)."""
    key: SessionKey = (agent, file.project, file.name)
    log = LogPath(agent, file.project, file.name[: -len(".jsonl")], machine)
    start = _resume_at(parts, file, row)
    if row is not None and start == row.offset == row.size == file.size:
        # the same bytes under a new identity (a stat in the write's tick): kept as is
        size, mtime_ns, ino, ctime_ns = file.identity
        same = replace(row, size=size, mtime_ns=mtime_ns, ino=ino, ctime_ns=ctime_ns)
        return _Outgoing(key, file.path, same, log)
    try:
        data = complete_part(
            b"".join(read_range_chunks(parts.storage, file.path, start, file.size))
        )
        row_now = file_row(parts, file.path, file.identity, start + len(data))
    except FileNotFoundError:
        return None  # deleted since it was listed: the next round sees it gone
    except OSError as exc:
        # A FIFO (device) put where the file was since it was listed: never waited on,
        # said, and sent once a plain file is there again.
        what = not_regular(exc)
        if what is None:
            raise
        report.note(file.path, f"{what}; not synced")
        return None
    report.bytes_read += file.size - start
    known = state.hub_keys(key)
    held = state.held(key)
    out = _Outgoing(key, file.path, row_now, log)
    send: list[bytes] = []
    seen_header = start > 0
    for raw, line in parse_lines(data, start == 0):
        if line is None:
            if raw.strip():
                report.note(f"{file.path}: a line", "not an entry with an id; not sent")
            continue
        if line.key == HEADER_KEY:
            if seen_header:
                continue
            seen_header = True
            problem = _header_problem(raw, file.name)
            if problem is not None:
                report.note(file.path, f"{problem}; not synced")
                out.row = file_row(parts, file.path, file.identity, 0)
                return out
        elif not seen_header and line.key != TITLE_KEY:
            report.note(file.path, "no session header before its entries; not synced")
            return None
        if line.key in known or line.key in out.keys:
            continue
        if line.key in held:
            continue  # a leaf marker with no child yet: it would answer another's
        if line.kind == LEAF_MARKER:  # one the state lost: held back all the same
            held[line.key] = (line.parent, raw)
            out.hold.append((line.key, line.parent, raw))
            continue
        parent = line.parent
        if parent is not None and parent in held and parent not in out.released:
            send.append(held[parent][1])  # an agent wrote after the marker: it goes first
            out.keys.append(parent)
            out.released.append(parent)
        send.append(raw)
        out.keys.append(line.key)
    out.body = b"".join(send)
    out.lines = len(send)
    return out


def _send(
    hub: Hub,
    state: SyncState,
    machine: str,
    parts: StoreParts,
    batch: list[_Outgoing],
    report: SyncReport,
) -> None:
    """Append a batch's lines to their logs and say so in the journal, make it all
    durable at once, then record it in the state (a crash before: sent again, once
    more in the hub, never twice in a file)."""
    barrier = Barrier()
    grown: list[tuple[LogPath, int]] = []
    # a size is trusted only while no write of this round may have moved it unrecorded:
    # forgotten before the writes, recorded again after them
    known = {out.log.rel: state.sent_size(out.log.rel) for out in batch if out.body}
    with state.batch():
        for rel in known:
            state.forget_sent_size(rel)
    refused: set[int] = set()
    for at, out in enumerate(batch):
        if not out.body:
            continue
        send_blobs(hub, state, parts, out.path, out.body, report)
        try:
            size = hub.append(out.log.rel, out.body, durable=False, known=known[out.log.rel])
        except HubError as exc:
            # A FIFO (device) in the hub where this machine's log of the file is: never
            # written through nor waited on; the file is sent again next round (its
            # state is left as it was), the others now.
            what = not_regular(exc.__cause__) if exc.__cause__ is not None else None
            if what is None:
                raise
            report.note(hub.path(out.log.rel), f"{what}; not sent")
            refused.add(at)
            continue
        grown.append((out.log, size))
        barrier.add(hub.storage, hub.path(out.log.rel))
        report.sent_sessions += 1
        report.sent_lines += out.lines
        report.sent_bytes += len(out.body)
    if grown:
        append_journal(hub, machine, grown, durable=False)
        barrier.add(hub.storage, hub.path(journal_rel(machine)))
        with hub.io("make the lines sent durable"):
            barrier.flush()
    with state.batch():
        for log, size in grown:
            state.set_sent_size(log.rel, size)
        for at, out in enumerate(batch):
            if at in refused:
                continue
            state.add_hub_keys(out.key, out.keys)
            for marker_id, parent, raw in out.hold:
                state.hold(out.key, marker_id, parent, raw)
            for marker_id in out.released:
                state.release(out.key, marker_id)
            state.set_file(out.key, out.row)


_BATCH = 256
"""Files sent between two durability barriers (and state commits)."""


def push_store(
    hub: Hub,
    state: SyncState,
    machine: str,
    agent: str,
    parts: StoreParts,
    now_ns: int,
    report: SyncReport,
    progress: Callable[[str], None] | None = None,
) -> None:
    """Push every local session file of one store that changed since the last push;
    mark those that are gone as deleted here (a pull never makes them again)."""
    rows = state.files(agent)
    listed = local_files(parts, now_ns)
    changed = [
        f
        for f in listed
        if (row := rows.get((f.project, f.name))) is None
        or row.deleted
        or not same_identity(row.identity, f.identity)
    ]
    batch: list[_Outgoing] = []
    for done, file in enumerate(changed, start=1):
        out = _outgoing(
            state, machine, agent, parts, file, rows.get((file.project, file.name)), report
        )
        if out is not None:
            batch.append(out)
        if len(batch) >= _BATCH or done == len(changed):
            _send(hub, state, machine, parts, batch, report)
            batch = []
            if progress is not None and len(changed) > _BATCH:
                progress(f"{agent}: {done}/{len(changed)} changed files sent")
    present = {(f.project, f.name) for f in listed}
    gone = [k for k, row in rows.items() if not row.deleted and k not in present]
    # a sessions dir that is not there (an unmounted disk) deleted nothing
    if gone and parts.storage.exists(parts.sessions_dir):
        with state.batch():
            for project, name in gone:
                state.mark_deleted((agent, project, name))
