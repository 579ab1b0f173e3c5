"""What a line of a session file is to a sync: its key (an entry's id; the header and
oh-my-pi's title slot each have one key of their own), its parent, and where the
complete lines of a read end.

Two machines' copies of a session are merged by key: a line is carried to a machine
whose copy has no line with its key, and never a second time.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Final

from sessiontree.format import head_kind, loads_line

__all__ = [
    "HEADER_KEY",
    "LEAF_MARKER",
    "TITLE_KEY",
    "Line",
    "complete_part",
    "parse_line",
    "parse_lines",
    "topological",
]

HEADER_KEY: Final = "\x00header"
"""The key of the session header (one per session, whatever its id)."""
TITLE_KEY: Final = "\x00title"
"""The key of oh-my-pi's title slot (the file's first line, when it has one)."""
LEAF_MARKER: Final = "sessiontree.sync-leaf"
"""The `customType` of the entry a sync appends to keep a diverged session's leaf where
this machine's agent left it (docs/sync.md, "the leaf rule")."""


@dataclass(frozen=True, slots=True)
class Line:
    """One complete line (`raw` ends in `\\n`) with its key and parent."""

    raw: bytes
    key: str
    parent: str | None
    header_id: str | None = None
    """The session id, for the header."""
    kind: str | None = None
    """The entry's `type`, or `customType` for a custom entry."""


def complete_part(data: bytes) -> bytes:
    """`data` up to and with its last `\\n` (a line still being written waits)."""
    end = data.rfind(b"\n")
    return data[: end + 1] if end >= 0 else b""


def parse_line(raw: bytes, first: bool) -> Line | None:
    """The line as a sync sees it; None for a blank one, one that does not parse, or an
    entry without a string `id` (never carried). `first`: the file's physical line 1
    (where a title slot may be)."""
    if not raw.strip():
        return None
    try:
        value = loads_line(raw)
    except (ValueError, UnicodeError):
        return None
    if not isinstance(value, dict):
        return None
    kind = head_kind(value, first)
    if kind == "slot":
        return Line(raw, TITLE_KEY, None)
    if kind == "header":
        return Line(raw, HEADER_KEY, None, header_id=value["id"], kind="session")
    entry_id = value.get("id")
    if not isinstance(entry_id, str) or not entry_id:
        return None
    parent = value.get("parentId")
    entry_type = value.get("type")
    if entry_type == "custom" and isinstance(value.get("customType"), str):
        entry_type = value["customType"]
    return Line(
        raw,
        entry_id,
        parent if isinstance(parent, str) else None,
        kind=entry_type if isinstance(entry_type, str) else None,
    )


def parse_lines(data: bytes, at_start: bool) -> Iterator[tuple[bytes, Line | None]]:
    """Each complete line of `data` (raw) and what it is (None: not carried).
    `at_start`: `data` begins at the file's first byte."""
    first = at_start
    # split at "\n" alone, as the agents read a file: `splitlines` would also split at
    # a bare "\r", and carry one line of a hostile log as two that the agents read as one
    for body in complete_part(data).split(b"\n")[:-1]:
        raw = body + b"\n"
        yield raw, parse_line(raw, first)
        first = False


def topological(lines: Iterable[Line], present: set[str]) -> list[Line]:
    """`lines` in their order, except that a line whose parent is among them but not yet
    placed waits until that parent is placed (`present`: the keys already in the file).
    Lines already in a valid order (one machine's log) keep it exactly."""
    pending = list(lines)
    keys = {line.key for line in pending}
    placed: set[str] = set()
    waiting: dict[str, list[Line]] = {}
    out: list[Line] = []
    for line in pending:
        parent = line.parent
        if parent is not None and parent in keys and parent not in present:
            if parent not in placed and parent != line.key:
                waiting.setdefault(parent, []).append(line)
                continue
        stack = [line]
        while stack:  # the line, then whatever waited for it (depth first)
            current = stack.pop()
            out.append(current)
            placed.add(current.key)
            stack.extend(reversed(waiting.pop(current.key, [])))
    for rest in waiting.values():  # a cycle (a hostile hub): kept, in log order
        out.extend(w for w in rest if w.key not in placed)
    return out
