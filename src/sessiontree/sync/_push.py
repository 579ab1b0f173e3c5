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
from sessiontree.sync._hub import Hub, LogPath
from sessiontree.sync._journal import append_journal
from sessiontree.sync._lines import HEADER_KEY, TITLE_KEY, complete_part, parse_lines
from sessiontree.sync._local import LocalFile, local_files
from sessiontree.sync._model import SyncReport
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


def push_file(
    hub: Hub,
    state: SyncState,
    machine: str,
    agent: str,
    parts: StoreParts,
    file: LocalFile,
    row: FileRow | None,
    report: SyncReport,
) -> None:
    """Push what is new in one local session file."""
    key: SessionKey = (agent, file.project, file.name)
    start = _resume_at(parts, file, row)
    try:
        data = complete_part(
            b"".join(read_range_chunks(parts.storage, file.path, start, file.size))
        )
    except FileNotFoundError:
        return  # deleted since it was listed: the next round sees it gone
    report.bytes_read += file.size - start
    known = state.hub_keys(key)
    held = state.held(key)
    released: list[str] = []
    send: list[bytes] = []
    keys: list[str] = []
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
                state.set_file(key, file_row(parts, file.path, file.identity, 0))
                return
        elif not seen_header and line.key != TITLE_KEY:
            report.note(file.path, "no session header before its entries; not synced")
            return
        if line.key in known or line.key in keys:
            continue
        if line.key in held:
            continue  # a leaf marker with no child yet: it would answer another's
        marker = held.get(line.parent or "")
        if marker is not None and line.parent not in released and line.parent is not None:
            send.append(marker[1])  # an agent wrote after the marker: it goes first
            keys.append(line.parent)
            released.append(line.parent)
        send.append(raw)
        keys.append(line.key)
    offset = start + len(data)
    log = LogPath(agent, file.project, file.name[: -len(".jsonl")], machine)
    if send:
        body = b"".join(send)
        send_blobs(hub, state, parts, file.path, body, report)
        size = hub.append(log.rel, body)
        append_journal(hub, machine, [(log, size)])
        report.sent_sessions += 1
        report.sent_lines += len(send)
        report.sent_bytes += len(body)
    with state.batch():
        state.add_hub_keys(key, keys)
        for marker_id in released:
            state.release(key, marker_id)
        state.set_file(key, file_row(parts, file.path, file.identity, offset))


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
    for done, file in enumerate(changed):
        if progress is not None and done % 500 == 0 and len(changed) > 500:
            progress(f"{agent}: sending {done}/{len(changed)} changed files")
        push_file(
            hub, state, machine, agent, parts, file, rows.get((file.project, file.name)), report
        )
    present = {(f.project, f.name) for f in listed}
    gone = [k for k, row in rows.items() if not row.deleted and k not in present]
    # a sessions dir that is not there (an unmounted disk) deleted nothing
    if gone and parts.storage.exists(parts.sessions_dir):
        with state.batch():
            for project, name in gone:
                state.mark_deleted((agent, project, name))
