"""The import records in a store's sessions: each `foreign_session_import` entry's data
and line number, kept in one place for everything that asks.

`sessiontree.foreign.find_imports` asks what was imported before (source, id, path,
size); the usage report (`sessiontree.reports._usage`) asks which replies an import
copied (the marker's line, version and copied ids). Both read `import_records`, cached
per file identity in the listing cache's file (`_values`, family ``foreign_imports``):
the files are planned with `plan_changes`: an unchanged one is not read, one that only
grew (`grown_from`) is read from the end of its last complete line, any other again
from the start (a marker is rare and found by a byte search, so a read costs little
more than the bytes).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from sessiontree.format import ImportMarker, import_marker, loads_line
from sessiontree.format._usage import IMPORT_CUSTOM_TYPE
from sessiontree.layout import StoreParts
from sessiontree.listing._changes import Identity, grown_from, plan_changes
from sessiontree.listing._marks import (
    HEAD_CHECK,
    TAIL_CHECK,
    FileMark,
    Stat,
    digest,
    stat_identity,
)
from sessiontree.listing._values import IdentityCache, identity_family
from sessiontree.storage import SessionStorage, read_chunks, read_range, read_range_chunks

__all__ = ["IMPORT_RECORDS", "ImportRecord", "import_markers", "import_records"]

IMPORT_RECORDS: Final = identity_family("foreign_imports", 2)  # 2: lines, where reading stopped
"""The import records of each session file: [[line, data], ...], with the file's
`FileMark` and the lines before its offset (`_Read.dump`)."""

ImportRecord = tuple[int, dict[str, Any]]
"""A `foreign_session_import` entry: its line number (1-based, every line counted) and
its `data` object."""

_MARKER = b'"' + IMPORT_CUSTOM_TYPE.encode() + b'"'
_CHUNK = 1 << 20


@dataclass(slots=True)
class _Read:
    """A file's import records as read, and where a read of what it gains resumes."""

    records: list[ImportRecord]
    mark: FileMark
    """`offset`: the end of the last complete line."""
    lines: int
    """Complete lines before `mark.offset` (the next line's number is one more)."""

    def dump(self) -> object:
        m = self.mark
        return {
            "records": [list(record) for record in self.records],
            "mark": [m.offset, m.head_len, m.head.hex(), m.tail.hex()],
            "lines": self.lines,
        }

    @classmethod
    def load(cls, value: object, identity: Identity) -> _Read | None:
        """What `dump` kept of a file read at `identity` (None: not what this version
        keeps)."""
        try:
            if not isinstance(value, dict):
                raise TypeError("not a dump")
            offset, head_len, head, tail = value["mark"]
            records = [(int(line), data) for line, data in value["records"]]
            if not all(isinstance(data, dict) for _, data in records):
                raise TypeError("a record's data is not an object")
            size, mtime_ns, ino, _ = identity
            mark = FileMark(
                size,
                mtime_ns,
                ino,
                int(offset),
                int(head_len),
                bytes.fromhex(head),
                bytes.fromhex(tail),
            )
            return cls(records, mark, int(value["lines"]))
        except (KeyError, TypeError, ValueError):
            return None


def _read(storage: SessionStorage, s: Stat, old: _Read | None) -> _Read:
    """The import records of the file listed as `s`: from `old`'s end when it only grew
    (its records of complete lines kept), else from the start."""
    path, size = s[0], s[1]
    if old is not None:
        start, number = old.mark.offset, old.lines
        found = [r for r in old.records if r[0] <= number]
        chunks = read_range_chunks(storage, path, start, size, _CHUNK)
    else:
        start, number, found = 0, 0, []
        chunks = read_chunks(storage, path, _CHUNK)
    remaining = size - start
    committed = start  # the end of the last complete line
    pending = b""
    head = b""
    tail = b""
    try:
        for chunk in chunks:
            if remaining <= 0:
                break
            chunk = chunk[:remaining]
            remaining -= len(chunk)
            if start == 0 and len(head) < HEAD_CHECK:
                head += chunk[: HEAD_CHECK - len(head)]
            tail = (tail + chunk[-TAIL_CHECK:])[-TAIL_CHECK:]
            data = pending + chunk if pending else chunk
            lines = data.split(b"\n")
            pending = lines.pop()
            for line in lines:
                number += 1
                if _MARKER in line:
                    _collect(line, number, found)
            committed += len(data) - len(pending)
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
    complete = number
    if pending and _MARKER in pending:  # an unterminated last line: read again next time
        _collect(pending, number + 1, found)
    want = min(TAIL_CHECK, size)
    if len(tail) < want:  # a read of a few appended bytes: the window reaches before it
        tail = read_range(storage, path, size - want, want)
    if old is not None:
        head_len, head_digest = old.mark.head_len, old.mark.head
    else:
        head_len = min(HEAD_CHECK, len(head))
        head_digest = digest(head[:head_len])
    mark = FileMark(size, s[2], s[3], committed, head_len, head_digest, digest(tail[-want:]))
    return _Read(found, mark, complete)


def _collect(line: bytes, number: int, found: list[ImportRecord]) -> None:
    try:
        entry = loads_line(line)
    except (ValueError, UnicodeError):
        return
    if (
        isinstance(entry, dict)
        and entry.get("type") == "custom"
        and entry.get("customType") == IMPORT_CUSTOM_TYPE
        and isinstance(entry.get("data"), dict)
    ):
        found.append((number, entry["data"]))


def import_records(
    paths: Sequence[str], parts: StoreParts, *, cache: bool
) -> dict[str, list[ImportRecord]]:
    """The import records of each of `paths` (sessions of the store `parts` names) that
    could be read, in file order.

    `cache`: the paths are this host's files, whose records are kept in the agent dir's
    listing cache (rows of files deleted since are forgotten there).
    """
    storage, agent_dir = parts.storage, parts.agent_dir
    listed: list[Stat] = []
    for path in paths:
        try:
            if cache:  # a host file's identity, with its ctime
                identity: Identity = stat_identity(os.stat(path))
            else:
                st = storage.stat(path)
                identity = (st.size, st.mtime_ns or int(st.mtime_ms * 1e6), st.ino, 0)
        except (OSError, ValueError):
            continue
        listed.append((path, *identity))
    table = IdentityCache(agent_dir if cache else None, IMPORT_RECORDS)
    plan = plan_changes(listed, table.fetch(), set(paths))
    found: dict[str, list[ImportRecord]] = {}
    to_read: list[tuple[Stat, _Read | None]] = []
    for s, row in plan.unchanged:
        kept = _Read.load(row.value, row.identity)
        if kept is None:
            to_read.append((s, None))
        else:
            found[s[0]] = kept.records
    for s, changed in plan.to_read:
        old = _Read.load(changed.value, changed.identity) if changed is not None else None
        to_read.append((s, old if old is not None and grown_from(storage, s, old.mark) else None))
    fresh: list[tuple[str, Identity, Any]] = []
    for s, old in to_read:
        try:
            read = _read(storage, s, old)
        except OSError:
            continue
        found[s[0]] = read.records
        fresh.append((s[0], s[1:], read.dump()))
    # Rows of other stores' files share the table: only those of deleted files go.
    gone = [p for p in plan.gone if not os.path.lexists(p)]
    if cache and (fresh or gone):
        table.store(fresh, gone)
    return found


def import_markers(records: Iterable[ImportRecord]) -> list[ImportMarker]:
    """The usage report's view of import records (`format.import_marker`: those that
    name a source id)."""
    out = []
    for line, data in records:
        entry = {"type": "custom", "customType": IMPORT_CUSTOM_TYPE, "data": data}
        marker = import_marker(entry, line)
        if marker is not None:
            out.append(marker)
    return out
