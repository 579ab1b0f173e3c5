"""What a scan finds of a foreign session from the start and the end of its file.

A scan reads the first and the last 64 KiB (`WINDOW`), as Claude Code's own SDK does
for its session list. From those windows come the id, cwd, start time, first prompt,
title and last activity. The message count is exact when the windows cover the file;
for a larger file it is an estimate (the count in the windows scaled by the file's
size), marked as such (`ForeignMeta.exact_count`). When the head window holds no first
prompt (nor, in Claude Code, a command: a Codex rollout's injected instructions or a
Claude Code file's attachments can fill it), the scan reads on from there, up to
`PROMPT_REACH`, for the first prompt alone.

The store's listing (`store.ForeignStore.list`) then reads the session whole for the
title, first prompt and exact count every view gives, and keeps the result in the
persistent listing cache per file identity.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from dataclasses import astuple, dataclass
from typing import Any

from sessiontree.foreign._content import str_field, text_of
from sessiontree.foreign._files import HOST_FILES, Files
from sessiontree.foreign._records import Record, timestamp_ms
from sessiontree.foreign.claude import claude_fork_parent, claude_session_id, claude_title
from sessiontree.foreign.codex import (
    environment_cwd,
    is_injected_text,
    is_legacy_rollout,
    rollout_id,
)
from sessiontree.format import loads_object

__all__ = ["PROMPT_REACH", "WINDOW", "ForeignMeta", "scan_claude", "scan_codex"]

WINDOW = 64 * 1024
PROMPT_REACH = 1 << 20
"""How far past the head window a listing reads for a first prompt it has not found."""
_SCAN_VERSION = 3  # 3: title, first prompt and count from the session read whole
"""Kept with each cached listing record: a record of an older scan is scanned again."""
_FIRST_LINE_MAX = 8 << 20  # a Codex session_meta line carries the base instructions
_COMMAND = re.compile(r"<command-name>(.*?)</command-name>", re.S)
_NOT_A_PROMPT = ("<command-", "<local-command", "Caveat:", "[Request interrupted")


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


def _parse(line: bytes) -> dict[str, Any] | None:
    return loads_object(line) if line.strip() else None


@dataclass(slots=True)
class _Windows:
    head: list[dict[str, Any]]
    tail: list[dict[str, Any]]
    whole: bool
    scanned: int
    """Bytes of the complete lines parsed (what an estimate scales from)."""
    head_end: int = 0
    """Where the head's complete lines end (the file's size when `whole`)."""

    def all(self) -> list[dict[str, Any]]:
        return self.head + self.tail


def _read_windows(
    path: str, size: int, first_line_whole: bool = False, files: Files = HOST_FILES
) -> _Windows:
    with files.open(path) as f:
        head = f.read(WINDOW)
        if first_line_whole:
            # A Codex rollout's first line is its metadata: whole, and a window after it.
            while b"\n" not in head and len(head) < _FIRST_LINE_MAX:
                more = f.read(WINDOW)
                if not more:
                    break
                head += more
            need = head.find(b"\n") + 1 + WINDOW - len(head)
            if need > 0:
                head += f.read(need)
        if len(head) + WINDOW >= size:
            data = head + f.read()
            records = [r for r in (_parse(x) for x in data.split(b"\n")) if r is not None]
            return _Windows(records, [], True, len(data), len(data))
        cut = head.rfind(b"\n")
        head_lines = head[: cut + 1].split(b"\n") if cut >= 0 else []
        f.seek(size - WINDOW)
        tail = f.read(WINDOW)
        start = tail.find(b"\n")
        tail_lines = tail[start + 1 :].split(b"\n") if start >= 0 else []
        scanned = (cut + 1 if cut >= 0 else 0) + (len(tail) - start - 1 if start >= 0 else 0)
    head_records = [r for r in (_parse(x) for x in head_lines) if r is not None]
    tail_records = [r for r in (_parse(x) for x in tail_lines) if r is not None]
    return _Windows(head_records, tail_records, False, scanned, cut + 1 if cut >= 0 else 0)


def _records_from(path: str, start: int, stop: int, files: Files) -> Iterator[list[dict[str, Any]]]:
    """The complete lines between byte offsets `start` (a line start) and `stop`,
    parsed, a window at a time."""
    with files.open(path) as f:
        f.seek(start)
        pos, rest = start, b""
        while pos < stop:
            chunk = f.read(min(WINDOW, stop - pos))
            if not chunk:
                return
            pos += len(chunk)
            data = rest + chunk
            cut = data.rfind(b"\n")
            if cut < 0:
                rest = data
                continue
            rest = data[cut + 1 :]
            yield [r for r in (_parse(x) for x in data[:cut].split(b"\n")) if r is not None]


def _prompt_further(
    path: str,
    windows: _Windows,
    size: int,
    find: Callable[[list[dict[str, Any]]], str | None],
    files: Files = HOST_FILES,
) -> str | None:
    """The first prompt after the head window, within `PROMPT_REACH` of it."""
    if windows.whole:
        return None
    for records in _records_from(
        path, windows.head_end, min(size, windows.head_end + PROMPT_REACH), files
    ):
        found = find(records)
        if found:
            return found
    return None


def _estimate(count: int, windows: _Windows, size: int) -> int:
    if windows.whole or windows.scanned <= 0:
        return count
    return max(count, round(count * size / windows.scanned))


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


def _claude_prompt(value: dict[str, Any]) -> tuple[str | None, str | None]:
    """(prompt text, command name) of a user line that the user typed."""
    if (
        value.get("type") != "user"
        or value.get("isMeta") is True
        or value.get("isSidechain") is True
        or value.get("isCompactSummary") is True
    ):
        return None, None
    message = value.get("message")
    if not isinstance(message, dict):
        return None, None
    content = message.get("content")
    if isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content
    ):
        return None, None
    text = " ".join(text_of(content).split())
    if not text:
        return None, None
    command = _COMMAND.search(text)
    if text.startswith(_NOT_A_PROMPT):
        return None, command.group(1) if command else None
    return text, None


def _claude_first_prompt(records: list[dict[str, Any]]) -> tuple[str | None, str | None]:
    """(the first typed prompt, the first command name before it) in `records`."""
    command = None
    for value in records:
        text, name = _claude_prompt(value)
        command = command or name
        if text:
            return text, command
    return None, command


def _claude_messages(records: list[dict[str, Any]]) -> int:
    """Messages these lines become (results one each, a response's lines one)."""
    count = 0
    responses: set[str] = set()
    for value in records:
        if value.get("isSidechain") is True:
            continue
        kind = value.get("type")
        message = value.get("message")
        if not isinstance(message, dict):
            continue
        if kind == "assistant":
            message_id = message.get("id")
            if isinstance(message_id, str):
                if message_id in responses:
                    continue
                responses.add(message_id)
            count += 1
        elif kind == "user" and not value.get("isMeta") and not value.get("isCompactSummary"):
            content = message.get("content")
            if isinstance(content, list):
                results = sum(
                    1 for b in content if isinstance(b, dict) and b.get("type") == "tool_result"
                )
                others = len(content) - results
                count += results + (1 if others else 0)
            elif content:
                count += 1
    return count


def scan_claude(path: str, size: int, files: Files = HOST_FILES) -> ForeignMeta:
    """Listing metadata of a Claude Code transcript from its first and last 64 KiB
    (`files`: where it is, default this host's files)."""
    windows = _read_windows(path, size, files=files)
    head = windows.head
    records = windows.all()
    first = head[0] if head else {}
    listed = not (
        first.get("isSidechain") is True
        or os.path.basename(path).startswith("agent-")
        or not any(isinstance(v.get("sessionId"), str) or v.get("type") == "summary" for v in head)
    )
    session_id = claude_session_id(path, [Record(0, v) for v in head])
    cwd = next((c for v in head if (c := str_field(v, "cwd"))), "")
    prompt, command = _claude_first_prompt(head)
    if prompt is None and command is None:
        prompt = _prompt_further(path, windows, size, lambda rs: _claude_first_prompt(rs)[0], files)
    title, source = claude_title(records)
    count = _claude_messages(records)
    return ForeignMeta(
        id=session_id,
        cwd=cwd,
        title=title,
        title_source=source if title else None,
        created_ms=_first_ms(head),
        first_message=prompt or command,
        message_count=_estimate(count, windows, size),
        exact_count=windows.whole,
        last_activity_ms=_last_ms(records),
        parent=claude_fork_parent(head),
        listed=listed,
    )


# ---------------------------------------------------------------------------- Codex


def _codex_counts(records: list[dict[str, Any]], legacy: bool) -> tuple[int, str | None]:
    """(messages these lines become, the first prompt)."""
    count = 0
    in_response = False
    prompt: str | None = None
    has_events = any(
        v.get("type") == "event_msg"
        and isinstance(v.get("payload"), dict)
        and v["payload"].get("type") == "user_message"
        for v in records
    )
    for value in records:
        payload = value if legacy else value.get("payload")
        if not isinstance(payload, dict):
            continue
        kind = payload.get("type")
        if not legacy and value.get("type") == "event_msg":
            if kind == "user_message" and isinstance(payload.get("message"), str):
                prompt = prompt or " ".join(payload["message"].split()) or None
            continue
        if not legacy and value.get("type") != "response_item":
            continue
        if (kind == "message" and payload.get("role") == "assistant") or kind in (
            "reasoning",
            "function_call",
            "custom_tool_call",
            "local_shell_call",
            "web_search_call",
        ):
            if not in_response:
                count += 1
                in_response = True
            continue
        in_response = False
        if kind in ("function_call_output", "custom_tool_call_output"):
            count += 1
        elif kind == "message" and payload.get("role") == "user":
            text = "".join(
                str(b.get("text"))
                for b in payload.get("content") or ()
                if isinstance(b, dict) and isinstance(b.get("text"), str)
            )
            if not is_injected_text(text):
                count += 1
                if not has_events:
                    prompt = prompt or " ".join(text.split()) or None
    return count, prompt


def scan_codex(path: str, size: int, titles: dict[str, str] | None = None) -> ForeignMeta:
    """Listing metadata of a Codex rollout from its first and last 64 KiB (the first
    line whole: it is the session's metadata)."""
    windows = _read_windows(path, size, first_line_whole=True)
    head = windows.head
    first = head[0] if head else {}
    legacy = is_legacy_rollout(first)
    meta = first if legacy else first.get("payload") if first.get("type") == "session_meta" else {}
    meta = meta if isinstance(meta, dict) else {}
    session_id = str_field(meta, "id") or rollout_id(path) or os.path.basename(path)
    records = windows.all()
    name = None
    for value in records:
        payload = value.get("payload")
        if isinstance(payload, dict) and payload.get("type") == "thread_name_updated":
            name = str_field(payload, "thread_name") or name
    title = name or (titles or {}).get(session_id)
    body = records[1:] if legacy else records
    count, prompt = _codex_counts(body, legacy)
    if prompt is None:
        prompt = _prompt_further(path, windows, size, lambda rs: _codex_counts(rs, legacy)[1])
    created = timestamp_ms(meta.get("timestamp"))
    cwd = str_field(meta, "cwd")
    if cwd is None:
        cwd = next((c for v in body for c in _cwd_of(v, legacy)), "")
    return ForeignMeta(
        id=session_id,
        cwd=cwd,
        title=title,
        title_source="auto" if title else None,
        created_ms=created if created is not None else _first_ms(head),
        first_message=prompt,
        message_count=_estimate(count, windows, size),
        exact_count=windows.whole,
        last_activity_ms=_last_ms(records),
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
