"""Reading another agent's JSONL transcript: every object line, and what was skipped.

Both foreign formats are one JSON object per line. A line that does not parse (a
torn last line while the agent writes, a damaged byte) is skipped and reported
with its number, never fatal: the rest of the transcript is still worth reading.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from sessiontree.foreign._files import HOST_FILES, Files
from sessiontree.format import format_iso, loads_line, parse_iso_ms

__all__ = ["Damaged", "Record", "Transcript", "iso", "read_transcript", "timestamp_ms"]

_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class Damaged:
    """A line that was skipped: its number (1-based) and why."""

    line: int
    reason: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.reason}"


@dataclass(frozen=True, slots=True)
class Record:
    """One object line of a transcript."""

    line: int
    value: dict[str, Any]


@dataclass(slots=True)
class Transcript:
    path: str
    records: list[Record] = field(default_factory=list)
    damaged: list[Damaged] = field(default_factory=list)
    size: int = 0
    mtime: float = 0.0
    """Its modification time (seconds) when it was opened."""


def _lines(path: str, files: Files) -> Iterator[tuple[int, bytes]]:
    """Each line with its number. A line longer than a chunk is kept as its pieces and
    joined once it ends: its bytes are copied once, not once per chunk (a 1 GB line
    read in 1 MiB chunks would otherwise copy 500 GB)."""
    with files.open(path) as f:
        pending: list[bytes] = []
        number = 0
        while True:
            chunk = f.read(_CHUNK)
            if not chunk:
                break
            parts = chunk.split(b"\n")
            if len(parts) == 1:
                pending.append(chunk)
                continue
            pending.append(parts[0])
            parts[0] = b"".join(pending)
            pending = [parts.pop()]
            for part in parts:
                number += 1
                yield number, part
        rest = b"".join(pending)
        if rest:
            yield number + 1, rest


def _why(line: bytes) -> str:
    try:
        line.decode("utf-8")
    except UnicodeDecodeError:
        return "not valid UTF-8"
    return "not valid JSON"


def read_transcript(path: str, files: Files = HOST_FILES) -> Transcript:
    """Every JSON object line of `path` (one of `files`); blank lines are ignored,
    others reported.

    Raises OSError when the file cannot be read at all.
    """
    found = files.stat(path)
    if found is None:
        if files.is_dir(path):
            raise IsADirectoryError(21, "Is a directory", path)
        raise FileNotFoundError(2, "No such file", path)
    transcript = Transcript(path, size=found.size, mtime=found.mtime)
    for number, raw in _lines(path, files):
        line = raw.rstrip(b"\r")
        if not line.strip():
            continue
        if number == 1 and line.startswith(b"\xef\xbb\xbf"):
            line = line[3:]
        try:
            value = loads_line(line)
        except (ValueError, UnicodeError):
            transcript.damaged.append(Damaged(number, _why(line)))
            continue
        if not isinstance(value, dict):
            transcript.damaged.append(Damaged(number, "not a JSON object"))
            continue
        transcript.records.append(Record(number, value))
    return transcript


def timestamp_ms(value: object) -> int | None:
    """Epoch milliseconds of an ISO string or an epoch number (seconds or ms)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        try:
            number = float(value)  # an integer beyond a double (JSON allows it) raises
        except OverflowError:
            return None
        if not math.isfinite(number):
            return None
        return int(number * 1000) if abs(number) < 10_000_000_000 else int(number)
    return parse_iso_ms(value)


def iso(ms: int) -> str:
    """Epoch milliseconds as the ISO string entries carry."""
    try:
        return format_iso(ms)
    except (OverflowError, OSError, ValueError):
        return format_iso(0)
