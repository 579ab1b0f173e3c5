"""Reading a session into the content index's rows.

A session is our JSONL file (`read_jsonl`: from the start, or from the end of its last
complete line when it only grew) or, with a `SessionSource.load`, a session of another
format turned into entries (`read_loaded`: read whole). Each entry with text gives an
``entries`` row and its casefolded text (`index_text`); replies give usage rows and
import entries import markers (`_usage_rows`). What the reader of another format knows
of the usage besides the entries (`SessionSource.extra`, `format.ExtraUsage`) goes into
the usage rows only: replies after the entries' lines, 1-hour cache writes on theirs.
`read_source` reads one session the same way without keeping anything (for stores the
index does not cover).
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Final

from sessiontree._util.foreground import pause_point
from sessiontree.format import (
    USAGE_KINDS,
    Entry,
    ExtraUsage,
    ImportMarker,
    UsageRecord,
    allow_deep_nesting,
    entry_role,
    entry_text,
    head_kind,
    import_marker,
    loads_object,
    parse_iso_ms,
    usage_record,
)
from sessiontree.listing import (
    MARK_HEAD_BYTES,
    MARK_TAIL_BYTES,
    FileMark,
    mark_file,
    marked_as_read,
    only_appended,
)
from sessiontree.storage import (
    SessionStorage,
    default_storage,
    read_chunks,
    read_range,
    read_range_chunks,
)

__all__ = [
    "MIN_QUERY_CHARS",
    "PHASE_INVALID",
    "PHASE_OK",
    "PHASE_START",
    "FileState",
    "IndexedFile",
    "Loader",
    "Read",
    "Rows",
    "SessionSource",
    "UsageReader",
    "add_extra_usage",
    "head_len_of",
    "index_text",
    "query_trigrams",
    "read_as_marked",
    "read_file",
    "read_jsonl",
    "read_loaded",
    "read_source",
]

MIN_QUERY_CHARS: Final = 3
"""A literal shorter than this has no trigram: the index cannot answer it."""

_CHUNK = 1 << 20
_HEAD_LEN_MAX = 4096
_HELD_BYTES = 16 << 20  # rows of one file held before they are written (a big file's)
PHASE_START, PHASE_OK, PHASE_INVALID = 0, 1, 2
"""Where reading a file stands: before its header, in a session, not a session."""
_BOM = b"\xef\xbb\xbf"
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_COUNTED_ROLES = ("assistant", "toolResult")  # messages whose usage pi counts

Loader = Callable[[str], tuple[Entry | None, Sequence[Entry]]]
"""Reads a session of another format: (header or None when it is not one, entries)."""
UsageReader = Callable[[str], ExtraUsage]
"""What a session's reader knows of its usage besides its entries (asked after reading
it: the reader keeps what it read)."""


@dataclass(frozen=True, slots=True)
class SessionSource:
    """A session the index covers: our JSONL file at `path`, or, with `load`, a
    file of another format whose entries `load(path)` returns. `identity`, with
    `load`, gives (size, mtime_ns, ino, ctime_ns) of a session that is not one file's stat
    (a session of an OpenCode database, named by a path under the database file).
    `extra`: the usage of the session beyond its entries, for the usage rows (a view
    of another agent's session: the session's entries are what `show` shows)."""

    path: str
    load: Loader | None = field(default=None, compare=False)
    kind: str = "jsonl"
    identity: Callable[[str], tuple[int, int, int, int]] | None = field(default=None, compare=False)
    extra: UsageReader | None = field(default=None, compare=False)


def index_text(text: str) -> str:
    """What the index holds for `text` (and what a query is cut from): casefolded,
    with NUL and lone surrogates (which SQLite cannot take) as U+FFFD. Character by
    character, so a substring of `text` maps to a substring of the result."""
    folded = text.casefold()
    if folded.isascii():  # the usual case, tested at a fraction of the search's cost
        return folded.replace("\x00", "\ufffd") if "\x00" in folded else folded
    if _UNSTORABLE.search(folded) is None:
        return folded
    return _UNSTORABLE.sub("\ufffd", folded)


def query_trigrams(literal: str) -> list[str]:
    """The distinct trigrams of `index_text(literal)` ([] when it is too short)."""
    text = index_text(literal)
    return list(dict.fromkeys(text[i : i + 3] for i in range(len(text) - 2)))


@dataclass(frozen=True, slots=True)
class IndexedFile:
    """What the index knows of one session file."""

    id: int
    path: str
    kind: str
    size: int
    valid: bool
    """False: not a session (no valid header)."""
    session_id: str | None
    cwd: str | None
    parent: str | None
    created: int | None
    entries: int


@dataclass(slots=True)
class FileState:
    """Where reading a file stands (saved at the last complete line)."""

    line: int = 0
    phase: int = PHASE_START
    session_id: str | None = None
    cwd: str | None = None
    parent: str | None = None
    created: int | None = None
    entries: int = 0
    text_bytes: int = 0


@dataclass(slots=True)
class Rows:
    """Rows read from one file, waiting to be written."""

    entries: list[tuple[int, int, int, str | None, str, int | None, int]] = field(
        default_factory=list
    )  # (line, offset, length, entry id, role, ts, text bytes) + text in `texts`
    texts: list[str] = field(default_factory=list)
    order: list[int] = field(default_factory=list)  # the time each key is allocated from
    usage: list[tuple[int, int, UsageRecord]] = field(default_factory=list)  # (line, offset, rec)
    imports: list[tuple[int, int, ImportMarker]] = field(default_factory=list)
    want_text: bool = True
    held: int = 0
    """About how many bytes the rows hold (text, and a little per row)."""
    head_seen: bytes | None = None
    """The file's first bytes as this read saw them (None: it began further on)."""
    tail_seen: bytes = b""
    """The last bytes this read saw."""


def _text_of(entry: Entry) -> str:
    try:
        return entry_text(entry)
    except RecursionError:  # tool arguments nested deeper than json.dumps goes by default
        return allow_deep_nesting(partial(entry_text, entry))


def _add_entry(
    rows: Rows, st: FileState, entry: Entry, line: int, offset: int, length: int, order: int
) -> None:
    st.entries += 1
    text = _text_of(entry) if rows.want_text else ""
    if text:
        ts = parse_iso_ms(entry.get("timestamp"))
        stored = index_text(text)
        size = len(stored) if stored.isascii() else len(stored.encode("utf-8"))
        entry_id = entry.get("id")
        rows.entries.append(
            (
                line,
                offset,
                length,
                entry_id if isinstance(entry_id, str) else None,
                entry_role(entry),
                ts,
                size,
            )
        )
        rows.texts.append(stored)
        rows.order.append(ts if ts is not None else 0)  # no time: after every timed entry
        rows.held += size + 200
        st.text_bytes += size
    kind = entry.get("type")
    if kind == "message":
        # Only replies and tool results count (`counted_usage`): a user's message, a third
        # of the entries, skips the record's checks.
        message = entry.get("message")
        counts = isinstance(message, dict) and message.get("role") in _COUNTED_ROLES
    else:
        counts = kind in USAGE_KINDS
    if counts:
        record = usage_record(entry, line)
        if record is not None:
            rows.usage.append((line, offset, record))
            rows.held += 300
    elif kind == "custom":
        marker = import_marker(entry, line)
        if marker is not None:
            rows.imports.append((line, offset, marker))


def _feed(rows: Rows, st: FileState, raw: bytes, number: int, offset: int, order: int) -> None:
    """One non-blank line: before the header, the title slot / header / junk; after, an entry."""
    if st.phase == PHASE_START:
        value = loads_object(raw)
        if value is None:
            return  # malformed or not an object: skipped, as the loader does
        kind = head_kind(value, number == 1)
        if kind == "slot":
            return
        if kind == "invalid":
            st.phase = PHASE_INVALID
            return
        st.phase = PHASE_OK
        st.session_id = str(value["id"])
        cwd = value.get("cwd")
        st.cwd = cwd if isinstance(cwd, str) else None
        parent = value.get("parentSession")
        st.parent = parent if isinstance(parent, str) and parent else None
        st.created = parse_iso_ms(value.get("timestamp"))
        return
    value = loads_object(raw)
    if value is not None:
        _add_entry(rows, st, value, number, offset, len(raw), order)


def read_jsonl(
    storage: SessionStorage,
    path: str,
    start: int,
    end: int,
    st: FileState,
    order: int,
    want_text: bool = True,
    sink: Callable[[Rows], None] | None = None,
) -> tuple[Rows, int, FileState, FileState]:
    """Read `path`'s bytes [start, end) from state `st` (`want_text`: for the FTS table).

    Returns the rows, the committed offset (end of the last complete line; 0 while
    no header was found), the state there, and the state after an unterminated
    last line (rows of that line have offsets at or past the committed offset).
    `sink` takes the rows read so far whenever they hold `_HELD_BYTES` (the rows
    returned are the rest): a big file is indexed in bounded memory.
    """
    rows = Rows(want_text=want_text)
    base = start  # file offset where the current (unfinished) line starts
    parts: list[bytes] = []  # its bytes so far (no quadratic joining of a huge line)
    number = st.line
    if start == 0:
        chunks: Iterable[bytes] = read_chunks(storage, path, _CHUNK)
    else:
        chunks = read_range_chunks(storage, path, start, end, _CHUNK)
    remaining = end - start
    at_start = start == 0  # a BOM may still have to be dropped
    head_seen: bytes | None = b"" if start == 0 else None
    tail_seen = b""
    try:
        for chunk in chunks:
            if remaining <= 0 or st.phase == PHASE_INVALID:
                break
            pause_point()  # a web page a person waits for goes first
            if len(chunk) > remaining:
                chunk = chunk[:remaining]
            remaining -= len(chunk)
            # What the file held as it was read, for the mark taken after (a file
            # rewritten meanwhile is not then taken for one only appended to).
            if head_seen is not None and len(head_seen) < MARK_HEAD_BYTES:
                head_seen += chunk[: MARK_HEAD_BYTES - len(head_seen)]
            tail_seen = (tail_seen + chunk[-MARK_TAIL_BYTES:])[-MARK_TAIL_BYTES:]
            if at_start:
                chunk = b"".join(parts) + chunk
                parts = []
                if len(chunk) < 3 and _BOM.startswith(chunk) and remaining > 0:
                    parts.append(chunk)
                    continue
                at_start = False
                if chunk.startswith(_BOM):
                    chunk = chunk[3:]
                    base = 3
            find = chunk.find
            nl = find(b"\n")
            if nl < 0:
                parts.append(chunk)
                continue
            raw = b"".join(parts) + chunk[:nl] if parts else chunk[:nl]
            parts = []
            pos = 0
            while True:
                number += 1
                if raw and not raw.isspace() and st.phase != PHASE_INVALID:
                    _feed(rows, st, raw, number, base, order)
                    if sink is not None and rows.held >= _HELD_BYTES:
                        sink(rows)
                        rows = Rows(want_text=want_text)
                st.line = number
                base += len(raw) + 1
                pos = nl + 1
                nl = find(b"\n", pos)
                if nl < 0:
                    break
                raw = chunk[pos:nl]
            if pos < len(chunk):
                parts.append(chunk[pos:])
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
    rows.head_seen, rows.tail_seen = head_seen, tail_seen
    if st.phase == PHASE_INVALID:
        if remaining > 0:  # not a session: the read stopped, its last bytes are not the file's
            rows.tail_seen = b""
        return rows, end, st, st
    committed = base
    final = st
    tail = b"".join(parts)
    if tail and not tail.isspace():
        final = dataclasses.replace(st)
        _feed(rows, final, tail, number + 1, base, order)
    if st.phase == PHASE_START:
        return rows, 0, FileState(), final  # nothing decided: start over next time
    return rows, committed, st, final


def read_source(
    source: SessionSource, storage: SessionStorage | None = None
) -> tuple[IndexedFile, list[UsageRecord], list[ImportMarker]]:
    """What the index would hold of one source, read now (no text): for stores the
    index does not cover. Raises OSError when it cannot be read."""
    storage = default_storage(storage)
    if source.load is not None:
        rows, final = read_loaded(source.load, source.path, want_text=False, extra=source.extra)
        size = 0
        try:
            size = storage.stat(source.path).size
        except (OSError, ValueError):
            pass
    else:
        size = storage.stat(source.path).size
        rows, _, _, final = read_jsonl(storage, source.path, 0, size, FileState(), 0, False)
        if source.extra is not None and final.phase == PHASE_OK:
            add_extra_usage(rows, source.extra(source.path), final.line)
    info = IndexedFile(
        -1,
        source.path,
        source.kind,
        size,
        final.phase == PHASE_OK,
        final.session_id,
        final.cwd,
        final.parent,
        final.created,
        final.entries,
    )
    return info, [r for _, _, r in rows.usage], [m for _, _, m in rows.imports]


def add_extra_usage(rows: Rows, extra: ExtraUsage, last_line: int) -> None:
    """`extra` in the usage rows: 1-hour cache writes on the replies' rows, and the
    replies that are no entry numbered after the session's last line."""
    if not extra:
        return
    if extra.hour_writes:
        rows.usage = [(line, offset, extra.of(r)) for line, offset, r in rows.usage]
    last_line = max(last_line, rows.usage[-1][0] if rows.usage else 0)  # an unended line's
    for line, record in enumerate(extra.replies, start=last_line + 1):
        rows.usage.append((line, -1, extra.of(record._replace(line=line))))
        rows.held += 300


def read_loaded(
    load: Loader, path: str, want_text: bool = True, extra: UsageReader | None = None
) -> tuple[Rows, FileState]:
    header, entries = load(path)
    st = FileState()
    rows = Rows(want_text=want_text)
    if header is None:
        st.phase = PHASE_INVALID
        return rows, st
    st.phase = PHASE_OK
    session_id = header.get("id")
    st.session_id = str(session_id) if session_id is not None else os.path.basename(path)
    cwd = header.get("cwd")
    st.cwd = cwd if isinstance(cwd, str) else None
    parent = header.get("parentSession")
    st.parent = parent if isinstance(parent, str) and parent else None
    st.created = parse_iso_ms(header.get("timestamp"))
    for position, entry in enumerate(entries, start=1):
        if isinstance(entry, dict):
            _add_entry(rows, st, entry, position, -1, 0, st.created or 0)
    st.line = len(entries)
    if extra is not None:
        add_extra_usage(rows, extra(path), st.line)
    return rows, st


def head_len_of(
    storage: SessionStorage, path: str, seen: bytes | None = None, size: int = -1
) -> int:
    """Bytes up to the end of the header line (title slot included), at most 4 KB;
    from `seen`, the first bytes of the file of `size` bytes as a read saw them, when
    they are enough (4 KB, or the whole file)."""
    if seen is not None and (len(seen) >= _HEAD_LEN_MAX or len(seen) == size):
        data = seen[:_HEAD_LEN_MAX]
    else:
        data = read_range(storage, path, 0, _HEAD_LEN_MAX)
    end = 0
    for number, line in enumerate(data.split(b"\n")[:-1], start=1):
        end += len(line) + 1
        text = line[3:] if number == 1 and line.startswith(_BOM) else line
        if not text.strip():
            continue
        value = loads_object(text)
        if value is not None and head_kind(value, number == 1) == "slot":
            continue
        if value is not None:
            return end
    return min(end, _HEAD_LEN_MAX) or min(len(data), _HEAD_LEN_MAX)


def read_as_marked(
    storage: SessionStorage,
    path: str,
    mark: FileMark,
    rows: Rows,
    before: FileMark | None,
    start: int,
    size: int,
    ino: int,
) -> bool:
    """Whether `mark`, taken after `rows` were read from `start` to `size`, holds the
    bytes the read saw (`listing.marked_as_read`). A read of lines appended (`before`:
    the mark it followed) sees no head and often less than the tail window: the old
    part must still be as `before` marked it, and the bytes before `start` in the
    tail window (read now) complete what the read saw."""
    tail = rows.tail_seen
    if before is not None:
        if not only_appended(storage, path, before, size, ino):
            return False
        low = max(0, size - MARK_TAIL_BYTES)
        if low < start:
            try:
                tail = read_range(storage, path, low, start - low) + tail
            except OSError:
                return False
    return marked_as_read(mark, rows.head_seen, tail)


Read = tuple[FileMark, Rows, int, FileState, FileState]
"""What `read_file` read of a file: its mark, the rows (those not given to the sink),
the committed offset and the states there and at the end."""


def read_file(
    source: SessionSource,
    storage: SessionStorage,
    listed_as: tuple[str, int, int, int, int],
    st: FileState,
    start: int,
    before: FileMark | None,
    order: int,
    sink: Callable[[Rows], None] | None,
) -> Read:
    """Read one file (listed with its `listing.stat_identity`) from `start` (state
    `st`; `before`: the mark of a file that only grew). Raises OSError when the file
    was rewritten while it was read (none of it is kept: the next refresh reads it again),
    or what reading it raised."""
    path, size, mtime_ns, ino, _ = listed_as
    if source.load is not None:
        rows, final = read_loaded(source.load, path, extra=source.extra)
        committed, saved, head_len = 0, final, 0
    else:
        rows, committed, saved, final = read_jsonl(storage, path, start, size, st, order, sink=sink)
        head_len = head_len_of(storage, path, rows.head_seen, size) if committed else 0
    if source.load is not None and source.identity is not None:
        return FileMark(size, mtime_ns, ino, 0, 0, b"", b""), rows, committed, saved, final
    mark = mark_file(storage, path, size, mtime_ns, ino, committed, head_len)
    if source.load is None and not read_as_marked(
        storage, path, mark, rows, before, start, size, ino
    ):
        raise OSError(f"{path}: changed while it was read")
    return mark, rows, committed, saved, final
