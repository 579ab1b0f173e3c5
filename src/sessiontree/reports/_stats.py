"""Figures about one session (`summarize_session`) and a whole store (`store_stats`).

Token usage and cost come from the `usage` (`input`, `output`, `cacheRead`,
`cacheWrite`, `cost.total`) of what pi 1.6 counts: assistant replies, tool results,
`usage` entries, compactions and branch summaries. For one session, over every entry of
every branch, as `SessionManager.get_usage_statistics` sums them; for a store,
through `sessiontree.reports._usage` (each reply counted once, unrecorded costs
estimated), broken down per model (`provider/model`) and per UTC day.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from sessiontree.format import (
    Entry,
    ExtraUsage,
    UsageRecord,
    UsageTotals,
    session_version,
    usage_record,
    utc_day,
)
from sessiontree.layout import StoreParts
from sessiontree.reports._pricing import price_table
from sessiontree.reports._usage import (
    Duplicates,
    Totals,
    count_once,
    load_usage,
    price,
    price_record,
    within_session,
)
from sessiontree.search import SessionSource
from sessiontree.session import SessionManager, file_size, message_count, session_shown_title
from sessiontree.storage import (
    CollectableBlobStore,
)

__all__ = [
    "SessionSummary",
    "StoreStats",
    "UsageTotals",
    "assistant_model",
    "store_stats",
    "summarize_session",
]


def assistant_model(message: dict[str, Any]) -> str:
    """`provider/model` of an assistant message (`?` for a missing part)."""
    provider = message.get("provider")
    model = message.get("model")
    left = provider if isinstance(provider, str) else "?"
    return f"{left}/{model if isinstance(model, str) else '?'}"


def _assistant(entry: Entry) -> dict[str, Any] | None:
    if entry.get("type") != "message":
        return None
    message = entry.get("message")
    if isinstance(message, dict) and message.get("role") == "assistant":
        return message
    return None


@dataclass(slots=True)
class SessionSummary:
    """What `sessiontree show` prints about one session."""

    path: str | None
    id: str
    header: dict[str, Any]
    title: str | None
    """The session's name (None when it has none)."""
    shown_title: str
    """The title every view shows it by (`session.session_shown_title`, whole)."""
    message_count: int
    """Its messages, every branch (`session.message_count`): what `list` says."""
    size: int | None
    """The bytes of its file(s) (`session.file_size`); None for one in memory."""
    version: int
    entries: int
    types: dict[str, int] = field(default_factory=dict)
    roles: dict[str, int] = field(default_factory=dict)
    """Message entries by message role."""
    leaf_id: str | None = None
    active_path_length: int = 0
    tips: list[str] = field(default_factory=list)
    """Entries without children: the ends of the branches."""
    branch_points: int = 0
    roots: int = 0
    models: dict[str, Totals] = field(default_factory=dict)
    """Every model seen (assistant messages and model changes) with its usage, each reply
    once and priced as `usage` prices it (estimates in `estimated_cost`)."""
    usage: Totals = field(default_factory=Totals)
    labels: dict[str, str] = field(default_factory=dict)


def summarize_session(sm: SessionManager, extra: ExtraUsage | None = None) -> SessionSummary:
    """Counts, branches, models, usage and labels of an open session; `extra`: what its
    reader knows it spent beyond its entries (another agent's session: its store's
    `extra_usage`), priced as the usage report prices it, never counted as entries."""
    header = sm.get_header() or {}
    entries = sm.get_entries()
    summary = SessionSummary(
        path=sm.get_session_file(),
        id=sm.get_session_id(),
        header=dict(header),
        title=sm.get_session_name(),
        shown_title=session_shown_title(sm, None),
        message_count=message_count(sm),
        size=file_size(sm),
        version=session_version([header]) if header else 0,
        entries=len(entries),
        leaf_id=sm.get_leaf_id(),
        labels=sm.get_labels(),
    )
    child_count: dict[str, int] = {}
    records: list[UsageRecord] = []
    model_of: dict[int, str] = {}
    for entry in entries:
        kind = str(entry.get("type"))
        summary.types[kind] = summary.types.get(kind, 0) + 1
        parent = entry.get("parentId")
        if isinstance(parent, str) and sm.get_entry(parent) is not None:
            child_count[parent] = child_count.get(parent, 0) + 1
        else:
            summary.roots += 1
        if kind == "message":
            message = entry.get("message")
            role = str(message.get("role")) if isinstance(message, dict) else "?"
            summary.roles[role] = summary.roles.get(role, 0) + 1
        elif kind == "model_change":
            model = entry.get("model")
            if not isinstance(model, str) or not model:
                model = f"{entry.get('provider')}/{entry.get('modelId')}"
            summary.models.setdefault(model, Totals())
        record = usage_record(entry, len(records))
        if record is not None:
            records.append(record)
            assistant = _assistant(entry)
            model_of[id(record)] = (
                assistant_model(assistant)
                if assistant is not None
                else f"{record.provider}/{record.model}"
            )
            summary.models.setdefault(model_of[id(record)], Totals())
    if extra:
        # As the usage report has them: 1-hour cache writes on the replies, and the
        # replies spent beside the session's entries (Claude Code 1.x inline sidechains).
        shown = [(extra.of(r), model_of[id(r)]) for r in records]
        shown += [
            (r._replace(line=len(records) + n), f"{r.provider}/{r.model}")
            for n, r in enumerate(extra.replies)
        ]
        records = [r for r, _ in shown]
        model_of = {id(r): model for r, model in shown}
        for model in model_of.values():
            summary.models.setdefault(model, Totals())
    # Priced as `usage` prices (one reply once, an unrecorded cost estimated and marked).
    table = price_table()
    total = Totals()
    for record in within_session(records):
        priced = price_record(record, table)
        summary.models.setdefault(model_of[id(record)], Totals()).add_priced(record, *priced)
        total.add_priced(record, *priced)
    summary.usage = total
    summary.tips = [
        str(e.get("id"))
        for e in entries
        if isinstance(e.get("id"), str) and e.get("id") not in child_count
    ]
    summary.branch_points = sum(1 for n in child_count.values() if n > 1)
    summary.active_path_length = len(sm.get_branch()) if summary.leaf_id else 0
    return summary


@dataclass(slots=True)
class StoreStats:
    """Store-wide figures (usage counted once and priced as `sessiontree usage` does)."""

    sessions: int = 0
    invalid: int = 0
    """Files that are not readable sessions (no valid header, unreadable)."""
    bytes: int = 0
    entries: int = 0
    projects: int = 0
    blobs: int = 0
    blob_bytes: int = 0
    usage: Totals = field(default_factory=Totals)
    by_model: dict[str, Totals] = field(default_factory=dict)
    by_day: dict[str, Totals] = field(default_factory=dict)
    duplicates: Duplicates = field(default_factory=Duplicates)
    prices: dict[str, str | None] = field(default_factory=dict)
    passed_over: list[tuple[str, str]] = field(default_factory=list)
    """(path, what it is) of FIFOs, sockets and devices named like sessions: never read."""


def _path_of(source: str | SessionSource) -> str:
    return source.path if isinstance(source, SessionSource) else source


def store_stats(
    paths: Iterable[str | SessionSource],
    parts: StoreParts,
    blob_dir: str | None = None,
    *,
    index_progress: Callable[[int, int], None] | None = None,
    blob_store: CollectableBlobStore | None = None,
    context: Iterable[str | SessionSource] | None = None,
) -> StoreStats:
    """Sessions, bytes, blobs, and usage per model and per UTC day over `paths` (never
    writes but the content index in the agent dir's cache).

    A view over `sessiontree.reports._usage`: each reply is counted once across
    `context` (the files whose copies `paths` may hold: the whole store; default
    `paths`), then those of `paths` are summed. Blobs are counted in `blob_store`
    when given (a storage's own, e.g. PostgreSQL's), else in the files of `blob_dir`.
    Sources of other formats (`SessionSource` with a loader) are read as `load_usage`
    reads them.
    """
    given = list(paths)
    sources = {_path_of(s): s for s in [*(context or ()), *given]}
    wanted = list(dict.fromkeys(_path_of(s) for s in given))
    everything = list(dict.fromkeys([*wanted, *sources]))
    data = load_usage([sources[p] for p in everything], parts, progress=index_progress)
    stats = StoreStats()
    scope = set(wanted)
    read = {s.path: s for s in data.sessions}
    projects: set[str] = set()
    for path in wanted:
        session = read.get(path)
        if session is None:
            stats.invalid += 1  # unreadable
            continue
        stats.bytes += session.file.size
        if not session.file.valid:
            stats.invalid += 1
            continue
        stats.sessions += 1
        projects.add(os.path.dirname(path))
        stats.entries += session.file.entries
    stats.projects = len(projects)
    counted, stats.duplicates = count_once(data.sessions)
    table = price_table()
    stats.prices = table.described()
    for reply in price(counted, table):
        if reply.session.path not in scope:
            continue
        stats.usage.add(reply)
        stats.by_model.setdefault(reply.model, Totals()).add(reply)
        stats.by_day.setdefault(utc_day(reply.record.timestamp), Totals()).add(reply)
    if blob_store is not None or blob_dir is not None:
        # Here: gc's module is the store's statistics', not a session's summary (`show`).
        from sessiontree.maintenance import list_blobs, list_store_blobs

        blobs = (
            list_store_blobs(blob_store) if blob_store is not None else list_blobs(blob_dir or "")
        )
        stats.blobs = len(blobs)
        stats.blob_bytes = sum(b.size for b in blobs)
    return stats
