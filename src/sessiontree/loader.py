"""Reading session files: streaming, lenient, one pass.

A session file is `[title slot]`, header, then one entry per line. Lines that do
not parse (or are not objects) are skipped and remembered by line number, so
tools can report them; nothing valid is ever dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from ._gc import gc_paused
from .entries import Entry
from .jsonl import iter_jsonl_bytes, loads_line
from .naming import head_kind
from .storage.base import SessionStorage, read_chunks

__all__ = [
    "LoadedSession",
    "load_entries_from_file",
    "read_session",
]

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
    loads = orjson.loads
    header_seen = False
    last_has_newline = True
    chunks = _sized(read_chunks(storage, path), result, observe)
    for number, raw, has_newline in iter_jsonl_bytes(chunks):
        last_has_newline = has_newline
        if not raw or raw.isspace():
            continue
        result.blank = False
        try:
            value: Any = loads(raw)
        except orjson.JSONDecodeError:
            try:
                value = loads_line(raw)
            except (ValueError, UnicodeError):
                result.malformed_lines.append(number)
                continue
        if not isinstance(value, dict):
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
        from .storage.file import FileSessionStorage

        storage = FileSessionStorage()
    try:
        loaded = read_session(path, storage)
    except (FileNotFoundError, NotADirectoryError):
        return []
    if loaded.header is None:
        return []
    return [loaded.header, *loaded.entries]
