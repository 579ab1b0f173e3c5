"""The entry model: TypedDicts for the header and entry types, ids and timestamps.

Entries stay plain dicts with the on-disk camelCase keys, so unknown keys and
unknown entry types written by newer agents survive a load -> rewrite untouched.
The TypedDicts document the known shapes; the key order of each entry type is
the one the TypeScript writers use (e.g. `custom` puts its payload before `id`).
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Container
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal, NotRequired, TypedDict

CURRENT_SESSION_VERSION = 3

SETTING_KINDS: Final = frozenset(
    {"thinking_level_change", "model_change", "compaction", "ttsr_injection", "mode_change"}
)
"""Entry kinds that change the context's settings wherever they are on the path (the
thinking level, the models, the last compaction, the TTSR rules, the mode)."""

Entry = dict[str, Any]
"""A session entry or header as stored: a plain dict with on-disk keys."""


class SessionHeader(TypedDict):
    """First line of a session file."""

    type: Literal["session"]
    version: NotRequired[int]
    """Format version; absent in v1 files."""
    id: str
    timestamp: str
    cwd: str
    title: NotRequired[str]
    titleSource: NotRequired[Literal["auto", "user"]]
    parentSession: NotRequired[str]
    """Opaque lineage marker: a session id or a session file path."""


class _EntryBase(TypedDict):
    id: str
    """8 lowercase hex chars for entries we create; any string from other writers."""
    parentId: str | None
    """Previous entry on the branch; None for a root."""
    timestamp: str
    """ISO-8601 UTC with milliseconds, as `Date.prototype.toISOString()`."""


class MessageEntry(_EntryBase):
    type: Literal["message"]
    message: dict[str, Any]
    """An AgentMessage (role user/assistant/toolResult/custom/bashExecution/...)."""


class ModelChangeEntry(_EntryBase):
    type: Literal["model_change"]
    model: str
    """"provider/id"; pi files carry `provider` + `modelId` instead."""
    role: NotRequired[str]


class ThinkingLevelChangeEntry(_EntryBase):
    type: Literal["thinking_level_change"]
    thinkingLevel: str | None


class CompactionEntry(_EntryBase):
    type: Literal["compaction"]
    summary: str
    shortSummary: NotRequired[str]
    firstKeptEntryId: str
    tokensBefore: int
    details: NotRequired[Any]
    fromExtension: NotRequired[bool]
    preserveData: NotRequired[Any]


class BranchSummaryEntry(_EntryBase):
    type: Literal["branch_summary"]
    fromId: str
    """The entry branched from, or the literal "root"."""
    summary: str
    details: NotRequired[Any]
    fromExtension: NotRequired[bool]


class CustomEntry(_EntryBase):
    type: Literal["custom"]
    customType: str
    data: NotRequired[Any]


class CustomMessageEntry(_EntryBase):
    type: Literal["custom_message"]
    customType: str
    content: str | list[dict[str, Any]]
    display: bool
    details: NotRequired[Any]
    attribution: NotRequired[Literal["agent", "user"]]


class LabelEntry(_EntryBase):
    type: Literal["label"]
    targetId: str
    label: NotRequired[str]
    """Absent (or "") clears the label of `targetId`."""


class TtsrInjectionEntry(_EntryBase):
    type: Literal["ttsr_injection"]
    injectedRules: list[str]


class SessionInitEntry(_EntryBase):
    type: Literal["session_init"]
    systemPrompt: str
    task: str
    tools: list[Any]
    outputSchema: NotRequired[Any]


class ModeChangeEntry(_EntryBase):
    type: Literal["mode_change"]
    mode: str
    data: NotRequired[Any]


ENTRY_TYPES = frozenset(
    {
        "message",
        "model_change",
        "thinking_level_change",
        "compaction",
        "branch_summary",
        "custom",
        "custom_message",
        "label",
        "ttsr_injection",
        "session_init",
        "mode_change",
    }
)


def is_valid_header(value: object) -> bool:
    """A session header: an object with `type == "session"` and a string `id`."""
    return (
        isinstance(value, dict)
        and value.get("type") == "session"
        and isinstance(value.get("id"), str)
    )


def iso_now() -> str:
    """The current time as JavaScript's `new Date().toISOString()` writes it."""
    global _now_cache
    epoch_ms = time.time_ns() // 1_000_000
    cached = _now_cache  # one tuple: safe to share between threads
    if cached[0] == epoch_ms:
        return cached[1]  # appends in a burst: many per millisecond
    text = format_iso(epoch_ms)
    _now_cache = (epoch_ms, text)
    return text


_now_cache: tuple[int, str] = (-1, "")
_second_cache: tuple[int, str] = (-1, "")


def format_iso(epoch_ms: int) -> str:
    """Epoch milliseconds as `YYYY-MM-DDTHH:MM:SS.mmmZ`."""
    global _second_cache
    second = epoch_ms // 1000
    cached_second, prefix = _second_cache  # one tuple: safe to share between threads
    if second != cached_second:
        # Appends come in bursts within one second: format the date part once.
        prefix = f"{datetime.fromtimestamp(second, UTC):%Y-%m-%dT%H:%M:%S}."
        _second_cache = (second, prefix)
    return f"{prefix}{epoch_ms % 1000:03d}Z"


def parse_iso_ms(value: object) -> int | None:
    """Epoch milliseconds of an ISO timestamp (as `Date.parse`), None if unparseable."""
    if not isinstance(value, str) or not value:
        return None
    text = value
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        return None
    if dt.tzinfo is None:
        # Date.parse reads a date-time without offset as local time; a date alone as UTC.
        if len(value) <= 10:
            dt = dt.replace(tzinfo=UTC)
        else:
            dt = dt.astimezone()
    return (dt - _EPOCH) // _ONE_MS


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MS = timedelta(milliseconds=1)


def _random_bits(k: int) -> int:
    """`secrets.randbits(k)` (the same bits of `os.urandom`) without importing `secrets`,
    which loads hashlib, hmac and base64 for what every command's start-up does not use."""
    size = (k + 7) // 8
    return int.from_bytes(os.urandom(size), "big") >> (size * 8 - k)


_id_random = random.Random(_random_bits(128))  # ids need uniqueness, not secrecy


_ID_BATCH = 256
_id_pool: list[str] = []
"""Ids drawn ahead, in one batch of random bytes: an append then costs a list pop."""


def _draw_ids() -> None:
    digits = _id_random.randbytes(4 * _ID_BATCH).hex()
    _id_pool.extend([digits[i : i + 8] for i in range(0, 8 * _ID_BATCH, 8)])


def generate_entry_id(existing: Container[str]) -> str:
    """A fresh 8-hex-char entry id not in `existing`."""
    pool = _id_pool
    for _ in range(100):
        try:
            candidate = pool.pop()
        except IndexError:  # drawn empty (pop is atomic: threads may share the pool)
            _draw_ids()
            continue
        if candidate not in existing:
            return candidate
    # Only reachable with an absurd number of entries: widen instead of looping.
    while True:
        candidate = os.urandom(8).hex()  # secrets.token_hex(8)
        if candidate not in existing:
            return candidate


_snowflake_lock = threading.Lock()
_snowflake_last = 0
_snowflake_seq = 0
_snowflake_seq_start = 0


def generate_session_id() -> str:
    """A 16-hex-char, time-ordered session id (snowflake style).

    Layout: 42 bits of milliseconds since 2020-01-01, 10 bits of node (the low
    bits of the pid, so processes forked from one parent differ), 12 bits of
    sequence within the millisecond, counting up from a random point per process.
    """
    global _snowflake_last, _snowflake_seq
    with _snowflake_lock:
        now = time.time_ns() // 1_000_000 - 1_577_836_800_000
        if now <= _snowflake_last:
            _snowflake_seq += 1
            if _snowflake_seq > 0xFFF:  # the millisecond is used up: borrow the next one
                _snowflake_last += 1
                _snowflake_seq = _snowflake_seq_start
            now = _snowflake_last
        else:
            _snowflake_last = now
            _snowflake_seq = _snowflake_seq_start
        value = (now & ((1 << 42) - 1)) << 22 | _node_bits << 12 | _snowflake_seq
    return f"{value:016x}"


_node_bits = 0


def _seed_ids() -> None:
    """Fresh id state for this process; runs at import and again in every forked child,
    which would otherwise mint exactly the ids its parent and siblings mint."""
    global _node_bits, _snowflake_seq_start, _snowflake_lock, _snowflake_last, _snowflake_seq
    _id_random.seed(_random_bits(128))
    _id_pool.clear()  # ids drawn before the fork are the parent's
    _node_bits = os.getpid() & 0x3FF
    _snowflake_seq_start = _random_bits(11)
    _snowflake_lock = threading.Lock()  # a lock held by another thread at fork stays held
    _snowflake_last = 0
    _snowflake_seq = 0


_seed_ids()
os.register_at_fork(after_in_child=_seed_ids)


def content_text(content: object) -> str:
    """A message's text: string content, or its text blocks joined by a space."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            block["text"]
            for block in content
            if isinstance(block, dict)
            and block.get("type") == "text"
            and isinstance(block.get("text"), str)
        )
    return ""
