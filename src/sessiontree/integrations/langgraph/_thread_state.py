"""A thread's state as its session's entries hold it: the entry kinds the saver
writes, each checkpoint's record, the values by version, the pending writes, and
the entry the file's leaf belongs at. Read from the entries (`fold_entries`) and kept
up to date as the saver writes.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from sessiontree.session import SessionManager

__all__ = [
    "CHECKPOINT_TYPE",
    "LEAF_TYPE",
    "PROJECT",
    "THREAD_TYPE",
    "WRITES_TYPE",
    "CheckpointRecord",
    "ThreadState",
    "add_checkpoint",
    "add_writes",
    "fold_entries",
    "is_leaf_marker",
    "now_iso",
    "thread_file_key",
    "tip_of",
    "version_key",
    "writes_written",
]

PROJECT: Final = "/langgraph"
"""The cwd of the threads' sessions: they live in the store's `--langgraph--` project."""
THREAD_TYPE: Final = "langgraph.thread"
CHECKPOINT_TYPE: Final = "langgraph.checkpoint"
WRITES_TYPE: Final = "langgraph.writes"
LEAF_TYPE: Final = "langgraph.leaf"
"""A custom entry (no data) whose parent is the newest checkpoint's last entry: written
after writes saved late under an older checkpoint, so the file's last entry (the leaf
the agents and the web app open at) is on the newest checkpoint's path again."""

_FILE_NAMESPACE: Final = uuid.UUID("6d1c5f57-3c77-4f1e-9a55-3b0f0e0c4a21")


def thread_file_key(thread_id: str) -> str:
    """The UUID a thread's session file name ends in (`<time>_<key>.jsonl`)."""
    return str(uuid.uuid5(_FILE_NAMESPACE, thread_id))


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def version_key(version: Any) -> str:
    return f"{type(version).__name__}:{version}"


@dataclass(slots=True)
class CheckpointRecord:
    ns: str
    id: str
    parent: str | None
    entry: str
    """Its entry's id."""
    data: dict[str, Any]
    """Its entry's data (the stored form)."""
    tail: str
    """The entry its next entries hang from: its last writes entry, else itself."""
    versions: dict[str, Any] | None = None
    """channel -> version, once decoded."""


@dataclass(slots=True)
class ThreadState:
    thread_id: str
    path: str
    manager: SessionManager
    writable: bool
    stamp: tuple[int, int] = (0, 0)
    root: str = ""
    checkpoints: dict[tuple[str, str], CheckpointRecord] = field(default_factory=dict)
    latest: dict[str, str] = field(default_factory=dict)
    values: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    """(ns, channel, version key) -> the stored form of that version."""
    homes: dict[tuple[str, str, str], str] = field(default_factory=dict)
    """(ns, channel, version key) -> the checkpoint entry that holds it."""
    writes: dict[tuple[str, str], dict[tuple[str, int], tuple[str, str, dict[str, Any], str]]] = (
        field(default_factory=dict)
    )
    """(ns, checkpoint id) -> (task id, idx) -> (task id, channel, stored value, task path)."""
    write_entries: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    items: dict[tuple[str, str, str], list[tuple[str, bytes]]] = field(default_factory=dict)
    """Serialized list items of versions read or written lately (for list deltas)."""
    early: dict[tuple[str, str], list[dict[str, Any]]] = field(default_factory=dict)
    """Writes of a checkpoint not written yet (LangGraph saves a step's checkpoint in
    the background, so its writes may come first): written right after it."""
    tip: str = ""
    """The entry the session's leaf belongs at: the last entry of the newest checkpoint
    put (its writes included), where a `LEAF_TYPE` entry points after late writes."""


def is_leaf_marker(entry: Mapping[str, Any]) -> bool:
    return entry.get("type") == "custom" and entry.get("customType") == LEAF_TYPE


def tip_of(entries: Sequence[Mapping[str, Any]]) -> str:
    """The entry a thread's file leads to: its last entry, or the one a leaf entry at
    the end points at (never a leaf entry: one points at the tip)."""
    if not entries:
        return ""
    last = entries[-1]
    if is_leaf_marker(last):
        parent = last.get("parentId")
        return parent if isinstance(parent, str) else ""
    return str(last.get("id"))


def fold_entries(thread: ThreadState, entries: Iterable[dict[str, Any]]) -> None:
    """Read a thread's entries into `thread` (its checkpoints, values and writes)."""
    for entry in entries:
        if entry.get("type") != "custom":
            continue
        kind, data = entry.get("customType"), entry.get("data")
        if not isinstance(data, dict):
            continue
        if kind == THREAD_TYPE and not thread.root:
            thread.root = str(entry["id"])
        elif kind == CHECKPOINT_TYPE:
            add_checkpoint(thread, str(entry["id"]), data)
        elif kind == WRITES_TYPE:
            add_writes(thread, str(entry["id"]), data)


def add_checkpoint(thread: ThreadState, entry_id: str, data: dict[str, Any]) -> None:
    ns, cid = str(data.get("ns", "")), str(data["id"])
    parent = data.get("parent")
    record = CheckpointRecord(
        ns, cid, parent if isinstance(parent, str) else None, entry_id, data, entry_id
    )
    thread.checkpoints[(ns, cid)] = record
    if cid > thread.latest.get(ns, ""):
        thread.latest[ns] = cid
    values = data.get("values")
    for channel, stored in values.items() if isinstance(values, dict) else ():
        key = (ns, channel, version_key(stored.get("v")))
        thread.values[key] = stored
        thread.homes.setdefault(key, entry_id)


def add_writes(thread: ThreadState, entry_id: str | None, data: dict[str, Any]) -> None:
    """Fold a writes entry in; `entry_id` None: held until its checkpoint is written."""
    ns, cid = str(data.get("ns", "")), str(data.get("checkpoint"))
    task, path = str(data.get("task", "")), str(data.get("path", ""))
    bucket = thread.writes.setdefault((ns, cid), {})
    for item in data.get("writes") or ():
        idx = int(item["idx"])
        key = (task, idx)
        if idx >= 0 and key in bucket:
            continue
        bucket[key] = (task, str(item["channel"]), item, path)
    if entry_id is not None:
        writes_written(thread, entry_id, data)


def writes_written(thread: ThreadState, entry_id: str, data: dict[str, Any]) -> None:
    ns, cid = str(data.get("ns", "")), str(data.get("checkpoint"))
    thread.write_entries.setdefault((ns, cid), []).append(entry_id)
    record = thread.checkpoints.get((ns, cid))
    if record is not None:
        record.tail = entry_id
