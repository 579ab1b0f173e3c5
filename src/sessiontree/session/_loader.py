"""Reading session files: streaming, lenient, one pass.

A session file is `[title slot]`, header, then one entry per line. Lines that do
not parse (or are not objects) are skipped and remembered by line number, so
tools can report them; nothing valid is ever dropped.

`read_session` parses every line. `load_session` reads a big session (at least
`LAZY_LOAD_BYTES`) on a storage with pinned reads index first instead
(`line_index`): the entries by position, parsed only where the index keeps them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from sessiontree._util.gcpause import gc_paused
from sessiontree.format import Entry, head_kind, iter_jsonl_bytes, loads_line, loads_object
from sessiontree.session._line_index import IndexedLines, scan_pinned
from sessiontree.storage import PinnedFile, PinnedReads, SessionStorage, read_chunks

__all__ = [
    "LAZY_LOAD_BYTES",
    "LoadedSession",
    "Observer",
    "load_entries_from_file",
    "load_session",
    "read_head",
    "read_session",
]

LAZY_LOAD_BYTES: Final = 8 << 20
"""Sessions at least this big are loaded index first (where the storage can): below
it a whole load costs a few milliseconds and holds every line in memory."""


class Observer(Protocol):
    """What sees the bytes of a load (a running hash): `update` each chunk, in order;
    `reset` when the load starts over."""

    def update(self, data: Any, /) -> object: ...

    def reset(self) -> object: ...


_BLOB_MARK = b"blob:sha256:"


@dataclass(slots=True)
class LoadedSession:
    """What a session file holds, as read."""

    exists: bool = False
    blank: bool = True
    """Missing, zero bytes or whitespace only: a session may be initialised there."""
    header: Entry | None = None
    entries: list[Entry] = field(default_factory=list)
    title_slot: Entry | None = None
    title_slot_raw: bytes | None = None
    malformed_lines: list[int] = field(default_factory=list)
    """1-based physical line numbers that did not parse as a JSON object."""
    header_line: int | None = None
    ends_with_newline: bool = True
    size: int = 0
    blob_ref_entries: list[int] = field(default_factory=list)
    """Indices into `entries` of the entries whose line mentions a blob ref."""
    lines: IndexedLines | None = None
    """Loaded index first: the entries by position (`entries` is then empty)."""
    pinned: PinnedFile | None = None
    """With `lines`: the handle the lines are read back from (the caller owns it)."""

    @property
    def valid(self) -> bool:
        return self.header is not None


def read_session(
    path: str, storage: SessionStorage, observe: Callable[[bytes], object] | None = None
) -> LoadedSession:
    """Stream a session file into a `LoadedSession` (FileNotFoundError propagates).

    `observe` sees every chunk of raw bytes read (e.g. to hash the file in the same pass).
    """
    with gc_paused():
        return _read_session(path, storage, observe)


def _read_session(
    path: str, storage: SessionStorage, observe: Callable[[bytes], object] | None
) -> LoadedSession:
    result = LoadedSession(exists=True)
    entries = result.entries
    append = entries.append
    header_seen = False
    last_has_newline = True
    chunks = _sized(read_chunks(storage, path), result, observe)
    for number, raw, has_newline in iter_jsonl_bytes(chunks):
        last_has_newline = has_newline
        if not raw or raw.isspace():
            continue
        result.blank = False
        value = loads_object(raw)
        if value is None:
            result.malformed_lines.append(number)
            continue
        if header_seen:
            if _BLOB_MARK in raw:
                result.blob_ref_entries.append(len(entries))
            append(value)
            continue
        kind = head_kind(value, number == 1)
        if kind == "slot":
            result.title_slot = value
            result.title_slot_raw = raw + b"\n" if has_newline else raw
            continue
        # The first parsed object decides: a header, or not a session file.
        if kind == "invalid":
            result.header_line = number
            return result
        header_seen = True
        result.header = value
        result.header_line = number
    result.ends_with_newline = last_has_newline
    return result


_BOM: Final = b"\xef\xbb\xbf"
_JSON_SPACE: Final = b" \t\r"


def read_head(path: str, storage: SessionStorage) -> Entry | None:
    """The session header of a file as `read_session` finds it (the first object after
    an optional title slot; blank and malformed lines skipped), or None when the file
    is not a session. Reads up to the line that decides and no further, however long
    that line is (a title of megabytes); a line that cannot be an object (its first
    byte is not `{`) is skipped as it streams by, never held.

    Raises OSError from reading (FileNotFoundError when there is no file).
    """
    number = 0
    line: list[bytes] = []  # the current line, when it may be an object
    skipping = False  # the current line cannot be one: its bytes are dropped
    at_start = True  # nothing of the current line seen yet but JSON whitespace
    head: bytes | None = b""  # the stream's first bytes, until a BOM there is ruled out
    for chunk in read_chunks(storage, path):
        if head is not None:
            chunk = head + chunk
            if len(chunk) < len(_BOM) and _BOM.startswith(chunk):
                head = chunk  # too short to tell (a BOM may be cut between chunks)
                continue
            head = None
            if chunk.startswith(_BOM):
                chunk = chunk[len(_BOM) :]
        start = 0
        while start < len(chunk):
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start:end]
            if at_start and not skipping:
                body = piece.lstrip(_JSON_SPACE)
                if body:
                    at_start = False
                    skipping = not body.startswith(b"{")
            if not skipping and not at_start:
                line.append(piece)
            if end < 0:
                break
            number += 1
            decided, header = _head_line(b"".join(line), number)
            if decided:
                return header
            line, skipping, at_start = [], False, True
            start = end + 1
    if head:  # a file of one or two bytes, the start of a BOM: not an object
        return None
    if line:
        return _head_line(b"".join(line), number + 1)[1]
    return None


def _head_line(raw: bytes, number: int) -> tuple[bool, Entry | None]:
    """What line `number` says of the file: (decided, header)."""
    if not raw:
        return False, None  # blank, or not an object: skipped as `read_session` skips it
    try:
        value: Any = loads_line(raw)
    except (ValueError, UnicodeError):
        return False, None
    if not isinstance(value, dict):
        return False, None
    kind = head_kind(value, number == 1)
    if kind == "slot":
        return False, None
    return True, value if kind == "header" else None


def load_session(
    path: str,
    storage: SessionStorage,
    observe: Observer | None = None,
    *,
    lazy: bool | None = None,
    index_first_if: Callable[[Entry], bool] = lambda header: True,
    find_refs: bool = True,
) -> LoadedSession:
    """The session at `path`, index first when `lazy` (None: when it is at least
    `LAZY_LOAD_BYTES`), the storage has pinned reads and `index_first_if(header)`
    (say, no migration is due); else `read_session`. FileNotFoundError propagates.
    `find_refs=False`: an index-first pass leaves the blob refs for later
    (`line_index.refs_in`)."""
    if lazy is not False and isinstance(storage, PinnedReads):
        pinned = storage.open_pinned(path)
        try:
            if lazy or pinned.size() >= LAZY_LOAD_BYTES:
                scanned = scan_pinned(
                    pinned,
                    index_first_if,
                    observe.update if observe is not None else None,
                    find_refs=find_refs,
                )
                if not scanned.stopped:
                    result = LoadedSession(
                        exists=True,
                        blank=scanned.blank,
                        header=scanned.header,
                        title_slot=scanned.title_slot,
                        title_slot_raw=scanned.title_slot_raw,
                        malformed_lines=scanned.malformed_lines,
                        header_line=scanned.header_line,
                        ends_with_newline=scanned.ends_with_newline,
                        size=scanned.size,
                    )
                    if scanned.header is not None:
                        result.lines, result.pinned = scanned.lines, pinned
                    else:
                        pinned.close()
                    return result
                if observe is not None:
                    observe.reset()
        except BaseException:
            pinned.close()
            raise
        pinned.close()
    return read_session(path, storage, observe.update if observe is not None else None)


def _sized(
    chunks: Iterable[bytes], result: LoadedSession, observe: Callable[[bytes], object] | None
) -> Iterator[bytes]:
    for chunk in chunks:
        result.size += len(chunk)
        if observe is not None:
            observe(chunk)
        yield chunk


def load_entries_from_file(path: str, storage: SessionStorage | None = None) -> list[Entry]:
    """Header + entries of a session file; `[]` when missing or without a valid header."""
    if storage is None:
        from sessiontree.storage import FileSessionStorage

        storage = FileSessionStorage()
    try:
        loaded = read_session(path, storage)
    except (FileNotFoundError, NotADirectoryError):
        return []
    if loaded.header is None:
        return []
    return [loaded.header, *loaded.entries]
