"""Token usage of a session's entries: per-entry records and summed totals.

What counts is what pi 1.6 counts (`counted_usage`): assistant replies, tool results'
`usage`, `usage` entries, compactions' and branch summaries' `usage`.
`usage_record(entry)` reads one counted entry's `usage` into a `UsageRecord`
(the content index stores these; `sessiontree.reports._usage` de-duplicates and
sums them); `UsageTotals` sums `usage` objects as `SessionManager` does.
`import_marker(entry)` reads the `foreign_session_import` entry an importer
writes (source, sourceId, which entries came from the source). `ExtraUsage` is what
a reader of another agent's format knows of a session's usage beyond its entries.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple

from sessiontree.format._entries import Entry, parse_iso_ms

__all__ = [
    "CACHE_WRITE_1H",
    "IMPORT_CUSTOM_TYPE",
    "USAGE_KINDS",
    "ExtraUsage",
    "ImportMarker",
    "UsageRecord",
    "UsageTotals",
    "counted_usage",
    "import_marker",
    "message_time_ms",
    "number",
    "usage_record",
    "utc_day",
]

CACHE_WRITE_1H = "cacheWrite1h"
"""`usage` key pi 1.6 records for an Anthropic reply: how many of its `cacheWrite` tokens
were written to the 1-hour cache (priced above the 5-minute one). Read, never written
here: our files keep the usage object pi's readers know."""

IMPORT_CUSTOM_TYPE = "foreign_session_import"
"""`customType` of the `custom` entry an import writes (oh-my-pi's, and `sessiontree import`)."""


def number(value: object) -> float | None:
    """`value` when it is an int or float (not a bool), else None."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    return None


def _count(usage: dict[str, Any], key: str) -> int:
    """A token count of `usage`: 0 for what is no count (missing, NaN, infinite, and a
    negative number, which no reply spends: the cost already takes it as none), at most
    `_BIG` (SQLite holds 64-bit integers, and a sum of them must fit)."""
    value = usage.get(key)
    if type(value) is int:  # the usual case, without the float checks below
        return max(0, min(_BIG, value))
    value = number(value)
    if value is None or value != value or value in (float("inf"), float("-inf")):
        return 0
    return max(0, min(_BIG, int(value)))


_BIG = 1 << 60


class UsageRecord(NamedTuple):
    """One counted entry's usage, as its file records it (a tuple: reports build
    millions of these)."""

    entry_id: str | None
    """None in v1 files (ids are assigned on load); `line` tells the messages apart then."""
    line: int
    """Line number in the file (position in the entry list for other sources)."""
    timestamp: int | None
    """Epoch ms: the message's `timestamp`, else the entry's."""
    provider: str
    model: str
    response_id: str | None
    """The provider's id of the reply (`responseId`): lines that repeat it are one reply."""
    input: int
    output: int
    cache_read: int
    cache_write: int
    cost: float | None
    """`usage.cost.total` as recorded; None when the file records none."""
    cache_write_1h: int = 0
    """Of `cache_write`, the tokens written to a 1-hour cache (`CACHE_WRITE_1H`, or what
    the session's reader knows: `ExtraUsage.hour_writes`)."""

    @property
    def tokens(self) -> int:
        return self.input + self.output + self.cache_read + self.cache_write


def message_time_ms(entry: Entry, message: dict[str, Any]) -> int | None:
    """The message's epoch-ms `timestamp`, else the entry's ISO `timestamp`."""
    ms = number(message.get("timestamp"))
    if ms is not None and ms == ms and abs(ms) < 1e15:
        return int(ms)
    return parse_iso_ms(entry.get("timestamp"))


USAGE_KINDS = frozenset({"usage", "compaction", "branch_summary"})
"""Entry kinds whose own `usage` counts in a session's totals (pi 0.87+)."""


def counted_usage(entry: Entry) -> tuple[bool, object]:
    """Whether pi 1.6's session totals (`AgentSession.getSessionStats`) count `entry`,
    and the `usage` it counts: an assistant message's (counted even when it has
    none), a tool result's, a `usage` entry's, a compaction's or a branch summary's."""
    kind = entry.get("type")
    if kind == "message":
        message = entry.get("message")
        if not isinstance(message, dict):
            return False, None
        role = message.get("role")
        if role == "assistant":
            return True, message.get("usage")
        usage = message.get("usage")
        return role == "toolResult" and isinstance(usage, dict), usage
    if kind in USAGE_KINDS:
        usage = entry.get("usage")
        # pi reads a `usage` entry's usage unconditionally; one without any adds nothing
        return isinstance(usage, dict), usage
    return False, None


SUMMARIES_PROVIDER = "Tools"
SUMMARIES_MODEL = "summaries"
"""Where the usage of tool results, compactions and branch summaries is filed: they name no
model, and pi's own breakdown (`getUsageCostBreakdown`) files them as `Tools/summaries`."""


def usage_record(entry: Entry, line: int) -> UsageRecord | None:
    """The usage pi 1.6 counts for an entry (`counted_usage`): an assistant message's,
    a `usage` entry's (its `provider`/`model`), a tool result's, a compaction's or a
    branch summary's (`Tools/summaries`); None for any other entry."""
    counted, usage = counted_usage(entry)
    if not counted:
        return None
    kind = entry.get("type")
    message = entry.get("message") if kind == "message" else None
    if isinstance(message, dict) and message.get("role") == "assistant":
        provider, model = message.get("provider"), message.get("model")
        response = message.get("responseId")
    elif kind == "usage":
        provider, model, response = entry.get("provider"), entry.get("model"), None
    else:
        provider, model, response = SUMMARIES_PROVIDER, SUMMARIES_MODEL, None
    if not isinstance(usage, dict):
        usage = {}
    cost: float | None = None
    cost_obj = usage.get("cost")
    if isinstance(cost_obj, dict):
        total = number(cost_obj.get("total"))
        if total is not None and total == total and abs(total) != float("inf"):
            cost = float(total)
    entry_id = entry.get("id")
    return UsageRecord(
        entry_id=entry_id if isinstance(entry_id, str) else None,
        line=line,
        timestamp=message_time_ms(entry, message if isinstance(message, dict) else {}),
        provider=provider if isinstance(provider, str) else "?",
        model=model if isinstance(model, str) else "?",
        response_id=response if isinstance(response, str) and response else None,
        input=_count(usage, "input"),
        output=_count(usage, "output"),
        cache_read=_count(usage, "cacheRead"),
        cache_write=_count(usage, "cacheWrite"),
        cost=cost,
        cache_write_1h=max(0, min(_count(usage, CACHE_WRITE_1H), _count(usage, "cacheWrite"))),
    )


@dataclass(frozen=True, slots=True)
class ExtraUsage:
    """What a reader of another agent's session knows of its usage that the session's
    entries (pi's format) do not hold: the usage report counts it, the session's views
    never see it, and no file we write carries it."""

    replies: tuple[UsageRecord, ...] = ()
    """Replies spent for the session that are not its entries (Claude Code 1.x inline
    sidechains: subagents' conversations, separate sessions when imported); their
    `line` is a reader's own numbering, which the reader of the rows replaces."""
    hour_writes: Mapping[str, int] = field(default_factory=dict)
    """Reply id (`responseId`) -> its tokens written to the 1-hour cache."""

    def __bool__(self) -> bool:
        return bool(self.replies or self.hour_writes)

    def of(self, record: UsageRecord) -> UsageRecord:
        """`record` with its 1-hour cache writes, when this knows them (never more than
        its cache writes: a replay of a reply, counted once elsewhere, has none)."""
        hour = self.hour_writes.get(record.response_id or "") if self.hour_writes else None
        if not hour or record.cache_write_1h:
            return record
        return record._replace(cache_write_1h=max(0, min(hour, record.cache_write)))


@dataclass(frozen=True, slots=True)
class ImportMarker:
    """A `foreign_session_import` entry: this session holds a copy of another agent's."""

    line: int
    source: str
    source_id: str
    version: int
    extra_ids: tuple[str, ...]
    """Version 2+: ids of the entries copied from the source (besides `codex-` ones)."""


def import_marker(entry: Entry, line: int) -> ImportMarker | None:
    """The import marker in `entry` (a `custom` entry of type `foreign_session_import`
    whose data names a `sourceId`), else None."""
    if entry.get("type") != "custom" or entry.get("customType") != IMPORT_CUSTOM_TYPE:
        return None
    data = entry.get("data")
    if not isinstance(data, dict):
        return None
    source_id = data.get("sourceId")
    if not isinstance(source_id, str) or not source_id:
        return None
    source = data.get("source")
    version = number(data.get("version"))
    extra = data.get("sourceExtraEntryIds")
    return ImportMarker(
        line=line,
        source=source if isinstance(source, str) else "",
        source_id=source_id,
        version=int(version) if version is not None and version == version else 1,
        extra_ids=tuple(x for x in extra if isinstance(x, str)) if isinstance(extra, list) else (),
    )


@dataclass(slots=True)
class UsageTotals:
    """Summed usage of some assistant messages."""

    messages: int = 0
    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    cost: float = 0.0

    def add_usage(self, usage: object) -> None:
        """Add one assistant message's `usage` object (anything else counts the message only)."""
        self.messages += 1
        if not isinstance(usage, dict):
            return
        for attr, key in (
            ("input", "input"),
            ("output", "output"),
            ("cache_read", "cacheRead"),
            ("cache_write", "cacheWrite"),
        ):
            # Counted as the usage report counts it (`_count`): a negative or infinite
            # count adds nothing (an infinite one made `int` raise).
            setattr(self, attr, getattr(self, attr) + _count(usage, key))
        cost = usage.get("cost")
        if isinstance(cost, dict):
            total = number(cost.get("total"))
            if total is not None and total > 0:  # as a count: a negative cost spends nothing
                self.cost += total

    def merge(self, other: UsageTotals) -> None:
        self.messages += other.messages
        self.input += other.input
        self.output += other.output
        self.cache_read += other.cache_read
        self.cache_write += other.cache_write
        self.cost += other.cost

    def to_json(self) -> dict[str, Any]:
        """The on-disk key names: input, output, cacheRead, cacheWrite, cost."""
        return {
            "messages": self.messages,
            "input": self.input,
            "output": self.output,
            "cacheRead": self.cache_read,
            "cacheWrite": self.cache_write,
            "cost": round(self.cost, 10),
        }


def utc_day(ms: int | None) -> str:
    """The UTC calendar day (`YYYY-MM-DD`) of an epoch-milliseconds time, else "unknown"."""
    if ms is None:
        return "unknown"
    try:
        return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d")
    except (OverflowError, OSError, ValueError):
        return "unknown"
