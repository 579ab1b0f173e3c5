"""What a listing row says of a foreign session, and the windows of a file a Gemini CLI or
Copilot CLI scan reads.

A Claude Code transcript or Codex rollout is read whole once (`store.ForeignStore.list`):
from its records come the id, cwd, start time, last activity, the fork parent and whether
it is a session of its own (`claude_meta`, `codex_meta`); from the session the reader
makes of the same records, the title, first prompt and message count every view gives
(`session.title_parts`, `session.message_count`). The result is kept in the persistent
listing cache per file identity.

A Gemini CLI or Copilot CLI scan reads the first and the last 64 KiB (`WINDOW`) of its
file for what a listing row says before its session is read whole.
"""

from __future__ import annotations

import os
from dataclasses import astuple, dataclass
from typing import Any

from sessiontree.foreign._content import str_field
from sessiontree.foreign._files import HOST_FILES, Files
from sessiontree.foreign._records import Record, timestamp_ms
from sessiontree.foreign.claude import claude_fork_parent, claude_session_id
from sessiontree.foreign.codex import (
    environment_cwd,
    is_legacy_rollout,
    rollout_id,
)
from sessiontree.format import loads_object

__all__ = ["WINDOW", "ForeignMeta", "Windows", "claude_meta", "codex_meta", "read_windows"]

WINDOW = 64 * 1024
_SCAN_VERSION = 3  # 3: title, first prompt and count from the session read whole
"""Kept with each cached listing record: a record of an older scan is scanned again."""


@dataclass(slots=True)
class ForeignMeta:
    """A foreign session as a listing shows it."""

    id: str
    cwd: str
    title: str | None
    title_source: str | None
    created_ms: int | None
    first_message: str | None
    message_count: int
    exact_count: bool
    last_activity_ms: int | None
    parent: str | None
    listed: bool = True
    """False for a file that is not a session of its own (a subagent's transcript)."""

    def dump(self) -> list[Any]:
        return [*astuple(self), _SCAN_VERSION]

    @classmethod
    def load(cls, value: object) -> ForeignMeta:
        if not isinstance(value, list) or len(value) != 12 or value[-1] != _SCAN_VERSION:
            raise ValueError("bad cached listing record")
        return cls(*value[:-1])


@dataclass(slots=True)
class Windows:
    """The records of a file's first and last `WINDOW` (all of them in `head` when the
    two windows cover the file)."""

    head: list[dict[str, Any]]
    tail: list[dict[str, Any]]

    def all(self) -> list[dict[str, Any]]:
        return self.head + self.tail


def read_windows(path: str, size: int, files: Files = HOST_FILES) -> Windows:
    """The records of the complete lines in the first and the last `WINDOW` of `path`."""
    with files.open(path) as f:
        head = f.read(WINDOW)
        if len(head) + WINDOW >= size:
            data = head + f.read()
            return Windows(_records(data.split(b"\n")), [])
        cut = head.rfind(b"\n")
        head_lines = head[: cut + 1].split(b"\n") if cut >= 0 else []
        f.seek(size - WINDOW)
        tail = f.read(WINDOW)
        start = tail.find(b"\n")
        tail_lines = tail[start + 1 :].split(b"\n") if start >= 0 else []
    return Windows(_records(head_lines), _records(tail_lines))


def _records(lines: list[bytes]) -> list[dict[str, Any]]:
    return [r for r in (loads_object(x) for x in lines if x.strip()) if r is not None]


def _first_ms(records: list[dict[str, Any]]) -> int | None:
    for value in records:
        found = timestamp_ms(value.get("timestamp"))
        if found is not None:
            return found
    return None


def _last_ms(records: list[dict[str, Any]]) -> int | None:
    for value in reversed(records):
        found = timestamp_ms(value.get("timestamp"))
        if found is not None:
            return found
    return None


# ---------------------------------------------------------------------------- Claude Code


def claude_meta(path: str, records: list[Record]) -> ForeignMeta:
    """What a Claude Code transcript's records say of it; its title, first prompt and
    count are the session's (`store.ForeignStore`)."""
    values = [r.value for r in records]
    first = values[0] if values else {}
    listed = not (
        first.get("isSidechain") is True
        or os.path.basename(path).startswith("agent-")
        or not any(
            isinstance(v.get("sessionId"), str) or v.get("type") == "summary" for v in values
        )
    )
    return ForeignMeta(
        id=claude_session_id(path, records),
        cwd=next((c for v in values if (c := str_field(v, "cwd"))), ""),
        title=None,
        title_source=None,
        created_ms=_first_ms(values),
        first_message=None,
        message_count=0,
        exact_count=True,
        last_activity_ms=_last_ms(values),
        parent=claude_fork_parent(values),
        listed=listed,
    )


# ---------------------------------------------------------------------------- Codex


def codex_meta(path: str, records: list[Record]) -> ForeignMeta:
    """What a Codex rollout's records say of it (the first is its metadata); its title,
    first prompt and count are the session's (`store.ForeignStore`)."""
    values = [r.value for r in records]
    first = values[0] if values else {}
    legacy = is_legacy_rollout(first)
    meta = first if legacy else first.get("payload") if first.get("type") == "session_meta" else {}
    meta = meta if isinstance(meta, dict) else {}
    body = values[1:] if legacy else values
    created = timestamp_ms(meta.get("timestamp"))
    cwd = str_field(meta, "cwd")
    if cwd is None:
        cwd = next((c for v in body for c in _cwd_of(v, legacy)), "")
    return ForeignMeta(
        id=str_field(meta, "id") or rollout_id(path) or os.path.basename(path),
        cwd=cwd,
        title=None,
        title_source=None,
        created_ms=created if created is not None else _first_ms(values),
        first_message=None,
        message_count=0,
        exact_count=True,
        last_activity_ms=_last_ms(values),
        parent=str_field(meta, "forked_from_id"),
        listed=bool(meta) and not _is_subagent(meta),
    )


def _cwd_of(value: dict[str, Any], legacy: bool) -> list[str]:
    payload = value if legacy else value.get("payload")
    if not isinstance(payload, dict) or payload.get("type") != "message":
        return []
    text = "".join(
        str(b.get("text"))
        for b in payload.get("content") or ()
        if isinstance(b, dict) and isinstance(b.get("text"), str)
    )
    found = environment_cwd(text)
    return [found] if found else []


def _is_subagent(meta: dict[str, Any]) -> bool:
    """A thread Codex started for a sub-agent (listed under its parent, not on its own)."""
    source = meta.get("source")
    return isinstance(source, dict) and "subagent" in source
