"""LangGraph checkpoints as session trees: `SessionTreeSaver`.

A LangGraph checkpointer (`langgraph.checkpoint.base.BaseCheckpointSaver`) on a store
of sessions, files or PostgreSQL (`pip install 'sessiontree[langgraph]'`):

- a thread (`thread_id`, all its `checkpoint_ns`) is one session, under the project
  `/langgraph` of the store (`<agent dir>/sessions/--langgraph--/`), named by the thread
  id; its file name ends in a UUID made from the thread id, so a thread is found by
  one directory listing, and the threads are the store's listing of that project;
- each checkpoint is one custom entry (`customType` `langgraph.checkpoint`, which
  every reader keeps as it is) whose tree parent is its parent checkpoint's (through
  the writes and messages between them): a fork (`update_state` on an old checkpoint)
  is a branch of the tree;
- channel values are stored by version: a version is written once, in the entry of
  the first checkpoint that has it, so a value unchanged since the parent is not
  written again; a list that extends its parent's version (a growing `messages`
  list) is written as the items it adds; a serialized value or item over
  `INLINE_BYTES` goes to the store's blob store (content-addressed) and the entry
  holds its `blob:sha256:` ref;
- pending writes (`put_writes`) are `langgraph.writes` entries under their
  checkpoint; metadata is plain JSON in the entry (when it is JSON), filtered by
  `list(filter=)`; writes saved late, under an older checkpoint, are followed by a
  `langgraph.leaf` entry under the newest checkpoint's last entry, so the file's last
  entry (the leaf every reader opens at) stays on the newest path;
- the `messages` channel (LangChain messages, or dicts of that shape) is also written
  as pi messages (user, assistant with tool calls and usage, tool results) on the same
  branch, just before the checkpoint that added them, so `sessiontree show`, `tree`,
  `search`, `usage` and the web app read a graph's conversation. The checkpoint
  entries stay the source of truth for LangGraph.

Concurrency: a saver takes a thread's writer lock at its first write to the thread
and keeps it until `close()` (or `release(thread_id)`): another saver (another
process) writing the same thread gets `SessionLockError`; it does not wait. Threads
are files of their own, so writers of different threads never block each other.
Reading a thread takes no lock; a saver that does not write a thread reads it again
when its file changed.

`delete_thread` removes the thread's file (`sessiontree rm`); `delete_for_runs` and
`prune` rewrite a thread's file atomically without what they remove (a value a kept
checkpoint still needs is moved into it first, and what its DeltaChannels need of the
removed ancestors' writes); `copy_thread` writes the copy as a new session whose
header names its source (a fork). docs/langgraph.md says it all at length.
"""

from __future__ import annotations

import asyncio
import base64
import builtins
import math
import os
import secrets
import threading
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

import orjson
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from sessiontree.errors import InvalidStoreError, SessionPersistenceError, SessionTreeError
from sessiontree.format import session_file_name
from sessiontree.layout import get_default_session_dir
from sessiontree.session import SessionManager
from sessiontree.storage import acquire_session_lock, parse_blob_ref
from sessiontree.store import Store

__all__ = [
    "CHECKPOINT_TYPE",
    "INLINE_BYTES",
    "LEAF_TYPE",
    "PROJECT",
    "THREAD_TYPE",
    "WRITES_TYPE",
    "SessionTreeSaver",
    "pi_message",
    "thread_file_key",
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
INLINE_BYTES: Final = 4096
"""A serialized value (or list item) larger than this goes to the blob store."""

_FILE_NAMESPACE: Final = uuid.UUID("6d1c5f57-3c77-4f1e-9a55-3b0f0e0c4a21")
_MISSING: Final = object()
_READERS: Final = 64
"""Threads a saver keeps open that it only reads (those it writes stay open)."""
_ITEM_CACHE: Final = 256
"""List versions whose serialized items a thread keeps (for deltas and histories)."""
_COPYING: Final = ".copying"
"""The end of a `copy_thread` copy's name until it takes the target's (`<a thread's
file name>.<random>.copying`): no `*.jsonl`, so no listing shows it, nor any thread."""
_STALE_COPY_NS: Final = 10 * 60 * 10**9
"""A copy in progress this long unchanged, its writer's lock free, was left by a
process killed mid-copy: a saver opening the store (or `list_threads`) removes it."""


_SAVERS: Final[weakref.WeakSet[SessionTreeSaver]] = weakref.WeakSet()


def _forked() -> None:
    """In a forked child, a saver's lock may be held by a thread the child does not
    have: each saver gets a new one (its threads' files are the storage's to refuse)."""
    for saver in list(_SAVERS):
        saver._lock = threading.RLock()


os.register_at_fork(after_in_child=_forked)


def thread_file_key(thread_id: str) -> str:
    """The UUID a thread's session file name ends in (`<time>_<key>.jsonl`)."""
    return str(uuid.uuid5(_FILE_NAMESPACE, thread_id))


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _version_key(version: Any) -> str:
    return f"{type(version).__name__}:{version}"


def _plain(value: Any, depth: int = 0) -> bool:
    """Whether JSON holds `value` exactly (dicts with str keys, lists, str, int, finite
    float, bool, None): then it is written as JSON, readable and filterable."""
    if depth > 64:
        return False
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return True
    if kind is int:
        return bool(-(2**63) <= value < 2**63)
    if kind is float:
        return math.isfinite(value)
    if kind is list:
        return all(_plain(item, depth + 1) for item in value)
    if kind is dict:
        return all(type(k) is str and _plain(v, depth + 1) for k, v in value.items())
    return False


# ----------------------------------------------------------------------------- messages


def _text_of(content: Any) -> list[dict[str, Any]]:
    """LangChain content (a string or a list of blocks) as pi text blocks."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks: list[dict[str, Any]] = []
    if isinstance(content, list):
        for block in content:
            if isinstance(block, str):
                blocks.append({"type": "text", "text": block})
            elif isinstance(block, dict):
                text = block.get("text")
                if block.get("type") in ("text", None) and isinstance(text, str):
                    blocks.append({"type": "text", "text": text})
                elif block.get("type") in ("thinking", "reasoning"):
                    thought = block.get("thinking", block.get("reasoning"))
                    if isinstance(thought, str):
                        blocks.append({"type": "thinking", "thinking": thought})
                else:
                    blocks.append({"type": "text", "text": f"[{block.get('type', 'block')}]"})
    return blocks


def _field(message: Any, name: str) -> Any:
    if isinstance(message, dict):
        return message.get(name)
    return getattr(message, name, None)


def _int(value: Any) -> int:
    return value if type(value) is int and value >= 0 else 0


def _tool_calls(message: Any) -> list[dict[str, Any]]:
    calls = []
    raw = _field(message, "tool_calls")
    for call in raw if isinstance(raw, list) else []:
        if not isinstance(call, dict):
            continue
        function = call.get("function")
        if isinstance(function, dict):  # the OpenAI shape of a dict message
            name, args = function.get("name"), function.get("arguments")
            if isinstance(args, str):
                import json

                try:
                    args = json.loads(args)
                except ValueError:
                    args = {"arguments": args}
        else:
            name, args = call.get("name"), call.get("args")
        calls.append(
            {
                "type": "toolCall",
                "id": str(call.get("id") or ""),
                "name": str(name or "unknown"),
                "arguments": args if isinstance(args, dict) else {},
            }
        )
    return calls


def _usage(message: Any) -> dict[str, Any]:
    meta = _field(message, "usage_metadata")
    meta = meta if isinstance(meta, dict) else {}
    details = meta.get("input_token_details")
    details = details if isinstance(details, dict) else {}
    cache_read, cache_write = _int(details.get("cache_read")), _int(details.get("cache_creation"))
    input_ = max(0, _int(meta.get("input_tokens")) - cache_read - cache_write)
    output = _int(meta.get("output_tokens"))
    total = _int(meta.get("total_tokens")) or input_ + output + cache_read + cache_write
    zero = {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}
    return {
        "input": input_,
        "output": output,
        "cacheRead": cache_read,
        "cacheWrite": cache_write,
        "totalTokens": total,
        "cost": zero,
    }


def pi_message(message: Any, timestamp: int) -> dict[str, Any] | None:
    """A LangChain message (or a dict of that shape) as a pi message; None for what pi
    has no message for (system prompts, removals)."""
    kind = _field(message, "type")
    if isinstance(message, dict) and kind is None:
        kind = message.get("role")
    content = _field(message, "content")
    if kind in ("human", "user"):
        return {
            "role": "user",
            "content": content if isinstance(content, str) else _text_of(content),
            "timestamp": timestamp,
        }
    if kind in ("ai", "assistant"):
        calls = _tool_calls(message)
        meta = _field(message, "response_metadata")
        meta = meta if isinstance(meta, dict) else {}
        model = meta.get("model_name") or meta.get("model") or "unknown"
        provider = meta.get("model_provider") or "langgraph"
        return {
            "role": "assistant",
            "content": [*_text_of(content), *calls],
            "provider": str(provider),
            "model": str(model),
            "usage": _usage(message),
            "stopReason": "toolUse" if calls else "stop",
            "timestamp": timestamp,
        }
    if kind == "tool":
        call_id = _field(message, "tool_call_id")
        if call_id is None and isinstance(message, dict):
            call_id = message.get("toolCallId")
        return {
            "role": "toolResult",
            "toolCallId": str(call_id or ""),
            "toolName": str(_field(message, "name") or "unknown"),
            "content": _text_of(content),
            "isError": _field(message, "status") == "error",
            "timestamp": timestamp,
        }
    return None


def _message_key(message: Any) -> Any:
    key = _field(message, "id")
    return key if key is not None else id(message)


# ----------------------------------------------------------------------------- a thread


@dataclass(slots=True)
class _Checkpoint:
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
class _Thread:
    thread_id: str
    path: str
    manager: SessionManager
    writable: bool
    stamp: tuple[int, int] = (0, 0)
    root: str = ""
    checkpoints: dict[tuple[str, str], _Checkpoint] = field(default_factory=dict)
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


def _is_leaf_marker(entry: Mapping[str, Any]) -> bool:
    return entry.get("type") == "custom" and entry.get("customType") == LEAF_TYPE


def _tip_of(entries: Sequence[Mapping[str, Any]]) -> str:
    """The entry a thread's file leads to: its last entry, or the one a leaf entry at
    the end points at (never a leaf entry: one points at the tip)."""
    if not entries:
        return ""
    last = entries[-1]
    if _is_leaf_marker(last):
        parent = last.get("parentId")
        return parent if isinstance(parent, str) else ""
    return str(last.get("id"))


def _fold(thread: _Thread, entries: Iterable[dict[str, Any]]) -> None:
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
            _add_checkpoint(thread, str(entry["id"]), data)
        elif kind == WRITES_TYPE:
            _add_writes(thread, str(entry["id"]), data)


def _add_checkpoint(thread: _Thread, entry_id: str, data: dict[str, Any]) -> None:
    ns, cid = str(data.get("ns", "")), str(data["id"])
    parent = data.get("parent")
    record = _Checkpoint(
        ns, cid, parent if isinstance(parent, str) else None, entry_id, data, entry_id
    )
    thread.checkpoints[(ns, cid)] = record
    if cid > thread.latest.get(ns, ""):
        thread.latest[ns] = cid
    values = data.get("values")
    for channel, stored in values.items() if isinstance(values, dict) else ():
        key = (ns, channel, _version_key(stored.get("v")))
        thread.values[key] = stored
        thread.homes.setdefault(key, entry_id)


def _add_writes(thread: _Thread, entry_id: str | None, data: dict[str, Any]) -> None:
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
        _writes_written(thread, entry_id, data)


def _writes_written(thread: _Thread, entry_id: str, data: dict[str, Any]) -> None:
    ns, cid = str(data.get("ns", "")), str(data.get("checkpoint"))
    thread.write_entries.setdefault((ns, cid), []).append(entry_id)
    record = thread.checkpoints.get((ns, cid))
    if record is not None:
        record.tail = entry_id


# ----------------------------------------------------------------------------- the saver


class SessionTreeSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer writing each thread as a session tree of a store.

    `location`: the store, as the CLI's `--store` takes it: an agent dir (a path or a
    `file:` URL), a `postgresql://` URL, or None for the default store
    (`$SESSIONTREE_STORE`, else the agent dir); or pass `store=` a `Store` of your own
    (not closed by the saver). `serde`: LangGraph's serializer (default
    `JsonPlusSerializer`). `fsync`: make each checkpoint durable (fsync, a synchronous
    commit on PostgreSQL) before `put` returns, as a database saver's commit does;
    without it a checkpoint is written (it survives the process) and made durable by
    `flush()` and `close()`, as the agents write their sessions. Use it as a context
    manager, or call `close()`: it flushes and lets go of the threads' writer locks (and
    closes the store it opened).

    The async methods run the sync ones in a worker thread (`asyncio.to_thread`); one
    saver may be used from several threads at once.
    """

    def __init__(
        self,
        location: str | os.PathLike[str] | None = None,
        *,
        serde: SerializerProtocol | None = None,
        store: Store | None = None,
        fsync: bool = False,
    ) -> None:
        super().__init__(serde=serde)
        self.fsync = fsync
        if store is not None and location is not None:
            raise InvalidStoreError("give a location or a store, not both")
        self.store = store if store is not None else Store(location)
        self._owns_store = store is None
        if self.store.read_only:
            raise InvalidStoreError(
                f"{self.store.location} is a {self.store.agent} store, which sessiontree only "
                "reads: checkpoints need an agent dir or a database"
            )
        self._dir = get_default_session_dir(PROJECT, self.store.agent_dir)
        self._lock = threading.RLock()
        self._threads: dict[str, _Thread] = {}
        self._closed = False
        _SAVERS.add(self)
        self._remove_stale_copies()

    def get_next_version(self, current: str | None, channel: None = None) -> str:
        """`<count, 12 digits>.<8 random hex digits>`: versions sort as strings, and a
        fork's versions never equal the original branch's (values are stored by version)."""
        if current is None:
            count = 0
        elif isinstance(current, int | float):
            count = int(current)
        else:
            count = int(str(current).split(".", 1)[0])
        return f"{count + 1:012d}.{secrets.token_hex(4)}"

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> SessionTreeSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> SessionTreeSaver:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.close)

    def close(self) -> None:
        """Flush every thread written, let go of their locks; close the store if it is
        the saver's own. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            threads, self._threads = list(self._threads.values()), {}
            errors: list[BaseException] = []
            for thread in threads:
                try:
                    if thread.early:
                        self._write_early(thread)
                    thread.manager.close()
                except BaseException as exc:  # close them all, raise the first
                    errors.append(exc)
            if self._owns_store:
                self.store.close()
            if errors:
                raise errors[0]

    def release(self, thread_id: str) -> None:
        """Flush a thread and let go of its writer lock (another saver may write it now)."""
        with self._lock:
            thread = self._threads.pop(thread_id, None)
            if thread is not None:
                try:
                    self._write_early(thread)
                finally:
                    thread.manager.close()

    def flush(self) -> None:
        """Make every write so far durable (fsync)."""
        with self._lock:
            for thread in self._threads.values():
                if thread.writable:
                    thread.manager.flush()

    # ------------------------------------------------------------------ finding threads

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("the saver is closed")

    def _paths(self, thread_id: str) -> list[str]:
        storage = self.store.storage
        if not storage.exists(self._dir):
            return []
        return sorted(storage.list_files(self._dir, f"*_{thread_file_key(thread_id)}.jsonl"))

    def _stamp(self, path: str) -> tuple[int, int]:
        stat = self.store.storage.stat(path)
        return stat.size, stat.mtime_ns

    def _thread(self, thread_id: str, *, write: bool, create: bool = False) -> _Thread | None:
        """The thread's state, read again when another writer changed its file; opened
        for writing (its lock taken) with `write`, created with `create`."""
        self._check_open()
        thread = self._threads.get(thread_id)
        if thread is not None:
            if thread.writable:
                return thread
            if not write:
                try:
                    if self._stamp(thread.path) == thread.stamp:
                        self._threads[thread_id] = self._threads.pop(thread_id)  # recent
                        return thread
                except FileNotFoundError:
                    pass
            thread.manager.close()
            del self._threads[thread_id]
        paths = self._paths(thread_id)
        if not paths:
            if not create:
                return None
            return self._create(thread_id)
        path = paths[0]  # (two savers that created it at once: the older file)
        if write:
            manager = self.store.session(path, breadcrumb=False)
        else:
            try:
                stamp = self._stamp(path)
                manager = self.store.session(path, read_only=True)
            except FileNotFoundError:
                return None
        thread = _Thread(thread_id, path, manager, write)
        if not write:
            thread.stamp = stamp
            readers = [t for t in self._threads.values() if not t.writable]
            for old in readers[: max(0, len(readers) - _READERS + 1)]:
                del self._threads[old.thread_id]  # the least recently read first
                old.manager.close()
        entries = manager.get_entries()
        _fold(thread, entries)
        thread.tip = _tip_of(entries)
        if write and not thread.root:
            manager.reset_leaf()
            thread.root = manager.append_custom_entry(THREAD_TYPE, {"thread_id": thread_id})
            thread.tip = thread.root
        self._threads[thread_id] = thread
        return thread

    def _create(self, thread_id: str) -> _Thread:
        path = os.path.join(self._dir, session_file_name(_now_iso(), thread_file_key(thread_id)))
        storage = self.store.storage
        storage.ensure_dir(self._dir)
        manager = self.store.session(path, breadcrumb=False)
        try:
            manager.move_to(PROJECT)  # the header's cwd (the file stays where it is)
            manager.set_session_name(thread_id, "langgraph")
            root = manager.append_custom_entry(THREAD_TYPE, {"thread_id": thread_id})
        except BaseException:
            manager.close()
            raise
        first = self._paths(thread_id)[0]
        if first != path:
            # Another saver created the thread at the same moment: the older file is the
            # thread's; ours (a header and the thread entry) goes, and theirs is opened
            # (its lock: SessionLockError while they write it).
            manager.close()
            self.store.delete(path, force=True)
            found = self._thread(thread_id, write=True)
            assert found is not None
            return found
        thread = _Thread(thread_id, path, manager, True)
        thread.root = thread.tip = root
        self._threads[thread_id] = thread
        return thread

    def _remove_stale_copies(self) -> None:
        """Remove the copies `copy_thread` left in progress (its process killed before
        the rename), and the temp files of their atomic writes: those unchanged for 10
        minutes whose copy's writer lock is free. Never a session (`*.jsonl`), never a
        copy being written (its writer holds the lock while it writes, and renames it
        at once after); a failure leaves them."""
        storage = self.store.storage
        try:
            if not storage.exists(self._dir):
                return
            leftovers = storage.list_files(self._dir, f"*.jsonl.*{_COPYING}")
            leftovers += storage.list_files(self._dir, f".*.jsonl.*{_COPYING}.*.tmp")
            # what a rewrite killed at its swap leaves beside the copy: oh-my-pi's publish
            # lock file and the copy's second name (kept so no appended line is lost)
            leftovers += storage.list_files(self._dir, f".*.jsonl.*{_COPYING}.lock")
            leftovers += storage.list_files(self._dir, f"*.jsonl.*{_COPYING}.conflict-*")
        except (OSError, SessionTreeError):
            return
        for path in leftovers:
            name = os.path.basename(path)
            if not name.endswith(_COPYING):  # the copy's temp, lock or second name
                name = name.lstrip(".").rsplit(_COPYING, 1)[0] + _COPYING
            try:
                if time.time_ns() - storage.stat(path).mtime_ns < _STALE_COPY_NS:
                    continue
                # SessionLockError: the copy's writer is alive.
                lock = acquire_session_lock(storage, os.path.join(self._dir, name))
            except (OSError, SessionTreeError):
                continue
            try:
                storage.unlink(path)
            except (OSError, SessionTreeError):
                pass
            finally:
                if lock is not None:
                    lock.release()

    def list_threads(self) -> list[str]:
        """Every thread of the store, newest first (from the store's listing of the
        `/langgraph` project: the sessions' names, checked against their file names);
        copies left in progress by a killed `copy_thread` are removed first."""
        self._check_open()
        self._remove_stale_copies()
        found: list[str] = []
        for info in self.store.list(PROJECT):
            name = info.title
            stem = os.path.basename(info.path)[: -len(".jsonl")]
            if name is not None and stem.endswith("_" + thread_file_key(name)):
                found.append(name)
                continue
            thread_id = self._thread_id_of(info.path)  # a name too long for the title
            if thread_id is not None:
                found.append(thread_id)
        return list(dict.fromkeys(found))

    def _thread_id_of(self, path: str) -> str | None:
        try:
            with self.store.session(path, read_only=True) as manager:
                for entry in manager.get_entries():
                    if entry.get("type") == "custom" and entry.get("customType") == THREAD_TYPE:
                        data = entry.get("data")
                        thread_id = data.get("thread_id") if isinstance(data, dict) else None
                        key = "_" + thread_file_key(str(thread_id)) + ".jsonl"
                        # Only the file the thread's name leads to is the thread's.
                        if isinstance(thread_id, str) and path.endswith(key):
                            return thread_id
                        return None
        except (OSError, ValueError):
            return None
        return None

    def session_path(self, thread_id: str) -> str | None:
        """The path of the thread's session (what `sessiontree show` takes), None when
        the thread has none."""
        with self._lock:
            paths = self._paths(thread_id)
            return paths[0] if paths else None

    # ------------------------------------------------------------------ values

    def _store_bytes(self, thread: _Thread, kind: str, data: bytes) -> dict[str, Any]:
        if len(data) > INLINE_BYTES:
            return {"t": kind, "ref": thread.manager.put_blob(data).ref}
        return {"t": kind, "b": base64.b64encode(data).decode("ascii")}

    def _bytes_of(self, stored: dict[str, Any]) -> tuple[str, bytes]:
        ref = stored.get("ref")
        if isinstance(ref, str):
            digest = parse_blob_ref(ref)
            blobs = self.store.blobs
            data = blobs.get(digest) if blobs is not None and digest is not None else None
            if data is None:
                raise LookupError(f"checkpoint value {ref} is missing from the blob store")
            return str(stored["t"]), data
        return str(stored["t"]), base64.b64decode(stored["b"])

    def _chain(self, thread: _Thread, key: tuple[str, str, str]) -> list[dict[str, Any]]:
        """The stored forms a list version is made of, its first (whole) one first."""
        chain = []
        seen = set()
        current: tuple[str, str, str] | None = key
        while current is not None and current not in seen:
            seen.add(current)
            stored = thread.values.get(current)
            if stored is None:
                raise LookupError(f"checkpoint value {current} is missing")
            chain.append(stored)
            current = (
                (current[0], current[1], _version_key(stored.get("base")))
                if stored.get("t") == "list+"
                else None
            )
        chain.reverse()
        return chain

    def _item_forms(self, thread: _Thread, key: tuple[str, str, str]) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        for stored in self._chain(thread, key):
            items.extend(stored.get("items") or ())
        return items

    def _item_bytes(self, thread: _Thread, key: tuple[str, str, str]) -> list[tuple[str, bytes]]:
        """A list version's serialized items: from the nearest version in the cache on,
        each version on the way cached too (a history reads them all)."""
        cache = thread.items
        cached = cache.get(key)
        if cached is not None:
            return cached
        pending: list[tuple[tuple[str, str, str], dict[str, Any]]] = []
        current: tuple[str, str, str] | None = key
        base: list[tuple[str, bytes]] = []
        while current is not None:
            hit = cache.get(current)
            if hit is not None:
                base = hit
                break
            stored = thread.values.get(current)
            if stored is None or any(current == k for k, _ in pending):
                raise LookupError(f"checkpoint value {current} is missing")
            pending.append((current, stored))
            current = (
                (current[0], current[1], _version_key(stored.get("base")))
                if stored.get("t") == "list+"
                else None
            )
        for version_key, stored in reversed(pending):
            base = base + [self._bytes_of(item) for item in stored.get("items") or ()]
            cache[version_key] = base
        while len(cache) > _ITEM_CACHE:
            del cache[next(iter(cache))]
        return base

    def _load_items(self, items: list[tuple[str, bytes]]) -> builtins.list[Any]:
        if type(self.serde) is JsonPlusSerializer and all(k == "msgpack" for k, _ in items):
            # A msgpack array is its header and its items' bytes: one call for the list.
            n = len(items)
            if n < 16:
                head = bytes((0x90 | n,))
            elif n < 1 << 16:
                head = b"\xdc" + n.to_bytes(2, "big")
            else:
                head = b"\xdd" + n.to_bytes(4, "big")
            value = self.serde.loads_typed(("msgpack", head + b"".join(d for _, d in items)))
            if type(value) is list and len(value) == n:
                return value
        return [self.serde.loads_typed(item) for item in items]

    def _load_value(self, thread: _Thread, key: tuple[str, str, str]) -> Any:
        stored = thread.values.get(key)
        if stored is None or stored.get("empty"):
            return _MISSING
        if stored.get("t") in ("list", "list+"):
            return self._load_items(self._item_bytes(thread, key))
        return self.serde.loads_typed(self._bytes_of(stored))

    def _dump_value(
        self, thread: _Thread, ns: str, channel: str, version: Any, value: Any, base: Any
    ) -> tuple[dict[str, Any], int | None]:
        """The stored form of a new version, and (for a list that extends `base`'s) how
        many items it kept of its base."""
        if value is _MISSING:
            return {"v": version, "empty": True}, None
        if type(value) is not list:
            kind, data = self.serde.dumps_typed(value)
            return {"v": version, **self._store_bytes(thread, kind, data)}, None
        key = (ns, channel, _version_key(version))
        dumped = [self.serde.dumps_typed(item) for item in value]
        if base is not None:
            base_key = (ns, channel, _version_key(base))
            stored = thread.values.get(base_key)
            if stored is not None and stored.get("t") in ("list", "list+"):
                before = self._item_bytes(thread, base_key)
                n = len(before)
                if 0 < n <= len(dumped) and dumped[:n] == before:
                    thread.items[key] = before + dumped[n:]
                    added = [self._store_bytes(thread, k, d) for k, d in dumped[n:]]
                    return {"v": version, "t": "list+", "base": base, "items": added}, n
        thread.items[key] = dumped
        items = [self._store_bytes(thread, k, d) for k, d in dumped]
        return {"v": version, "t": "list", "items": items}, None

    def _encode(self, thread: _Thread, value: Any) -> dict[str, Any]:
        if _plain(value):  # a copy: LangGraph goes on changing its dicts in place
            try:
                return {"json": orjson.loads(orjson.dumps(value))}
            except orjson.JSONEncodeError:  # a lone surrogate: UTF-8 has none
                pass
        kind, data = self.serde.dumps_typed(value)
        return self._store_bytes(thread, kind, data)

    def _decode(self, stored: dict[str, Any]) -> Any:
        if "json" in stored:  # a copy: the caller may change it in place
            return orjson.loads(orjson.dumps(stored["json"]))
        return self.serde.loads_typed(self._bytes_of(stored))

    def _versions(self, record: _Checkpoint) -> dict[str, Any]:
        if record.versions is None:
            checkpoint = self._decode(record.data["checkpoint"])
            record.versions = dict(checkpoint.get("channel_versions") or {})
        return record.versions

    # ------------------------------------------------------------------ reading

    def _tuple(self, thread: _Thread, record: _Checkpoint) -> CheckpointTuple:
        checkpoint = dict(self._decode(record.data["checkpoint"]))
        versions = checkpoint.get("channel_versions") or {}
        record.versions = dict(versions)
        values: dict[str, Any] = {}
        for channel, version in versions.items():
            value = self._load_value(thread, (record.ns, channel, _version_key(version)))
            if value is not _MISSING:
                values[channel] = value
        checkpoint["channel_values"] = values
        stored_writes = thread.writes.get((record.ns, record.id), {})
        ordered = sorted(
            stored_writes.items(), key=lambda kv: writes_sort_key(kv[1][3], kv[0][0], kv[0][1])
        )
        pending = [
            (task, channel, self.serde.loads_typed(self._bytes_of(stored)))
            for _, (task, channel, stored, _path) in ordered
        ]

        def config(cid: str) -> RunnableConfig:
            return {
                "configurable": {
                    "thread_id": thread.thread_id,
                    "checkpoint_ns": record.ns,
                    "checkpoint_id": cid,
                }
            }

        return CheckpointTuple(
            config=config(record.id),
            checkpoint=checkpoint,  # type: ignore[arg-type]
            metadata=self._decode(record.data["metadata"]),
            parent_config=config(record.parent) if record.parent else None,
            pending_writes=pending,
        )

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        configurable = config["configurable"]
        with self._lock:
            thread = self._thread(str(configurable["thread_id"]), write=False)
            if thread is None:
                return None
            ns = configurable.get("checkpoint_ns", "") or ""
            cid = get_checkpoint_id(config) or thread.latest.get(ns)
            record = thread.checkpoints.get((ns, cid)) if cid else None
            return self._tuple(thread, record) if record is not None else None

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first (by id): of one thread (`config`, its namespace when
        it names one, its checkpoint when it names one) or of every thread (None);
        `filter` keeps those whose metadata has every key with that value; `before`
        those older than its checkpoint."""
        with self._lock:
            self._check_open()
            if config is not None:
                thread_ids = [str(config["configurable"]["thread_id"])]
                ns_wanted = config["configurable"].get("checkpoint_ns")
                cid_wanted = get_checkpoint_id(config)
            else:
                thread_ids, ns_wanted, cid_wanted = self.list_threads(), None, None
        before_id = get_checkpoint_id(before) if before else None
        remaining = limit
        for thread_id in thread_ids:
            with self._lock:
                thread = self._thread(thread_id, write=False)
                if thread is None:
                    continue
                records = sorted(
                    (
                        r
                        for r in thread.checkpoints.values()
                        if (ns_wanted is None or r.ns == ns_wanted)
                        and (not cid_wanted or r.id == cid_wanted)
                        and (not before_id or r.id < before_id)
                    ),
                    key=lambda r: (r.id, r.ns),
                    reverse=True,
                )
                found = []
                for record in records:
                    if remaining is not None and remaining <= 0:
                        break
                    if filter:
                        metadata = self._decode(record.data["metadata"])
                        if not all(metadata.get(k) == v for k, v in filter.items()):
                            continue
                    found.append(self._tuple(thread, record))
                    if remaining is not None:
                        remaining -= 1
            yield from found
            if remaining is not None and remaining <= 0:
                return

    # ------------------------------------------------------------------ writing

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        ns = configurable.get("checkpoint_ns", "") or ""
        parent_id = configurable.get("checkpoint_id")
        with self._lock:
            thread = self._thread(thread_id, write=True, create=True)
            assert thread is not None
            stored_cp: dict[str, Any] = dict(checkpoint)
            values: dict[str, Any] = stored_cp.pop("channel_values", {})
            parent = thread.checkpoints.get((ns, parent_id)) if parent_id else None
            parent_versions = self._versions(parent) if parent is not None else {}
            dumped: dict[str, dict[str, Any]] = {}
            kept_of: dict[str, int | None] = {}
            for channel, version in new_versions.items():
                dumped[channel], kept_of[channel] = self._dump_value(
                    thread,
                    ns,
                    channel,
                    version,
                    values.get(channel, _MISSING),
                    parent_versions.get(channel),
                )
            data = {
                "ns": ns,
                "id": checkpoint["id"],
                "parent": parent_id,
                "checkpoint": self._encode(thread, stored_cp),
                "metadata": self._encode(thread, get_checkpoint_metadata(config, metadata)),
                "values": dumped,
            }
            manager = thread.manager
            early_writes: builtins.list[dict[str, Any]] = []
            try:
                manager.branch(parent.tail if parent is not None else thread.root)
                if "messages" in new_versions:
                    for message in self._new_messages(
                        thread, ns, values.get("messages"), parent_versions, kept_of["messages"]
                    ):
                        converted = pi_message(message, _millis(checkpoint.get("ts")))
                        if converted is not None:
                            manager.append_message(converted)
                entry_id = manager.append_custom_entry(CHECKPOINT_TYPE, data)
                old = thread.checkpoints.get((ns, checkpoint["id"]))
                _add_checkpoint(thread, entry_id, data)
                if old is not None:  # put again: the writes stay the checkpoint's
                    thread.checkpoints[(ns, checkpoint["id"])].tail = entry_id
                record = thread.checkpoints[(ns, checkpoint["id"])]
                record.versions = dict(checkpoint.get("channel_versions") or {})
                early_writes = thread.early.pop((ns, checkpoint["id"]), [])
                thread.tip = record.tail
                while early_writes:
                    self._append_writes(thread, record.tail, early_writes[0])
                    thread.tip = record.tail
                    early_writes.pop(0)
                if self.fsync:
                    manager.flush()
            except (OSError, SessionPersistenceError):
                if early_writes:
                    thread.early[(ns, checkpoint["id"])] = early_writes
                self._reopen(thread)
                raise
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    def _new_messages(
        self,
        thread: _Thread,
        ns: str,
        messages: Any,
        parent_versions: dict[str, Any],
        kept: int | None,
    ) -> builtins.list[Any]:
        if not isinstance(messages, list):
            return []
        if kept is not None:
            return messages[kept:]
        version = parent_versions.get("messages")
        if version is None:
            return messages
        before = self._load_value(thread, (ns, "messages", _version_key(version)))
        seen = {_message_key(m) for m in before} if isinstance(before, list) else set()
        return [m for m in messages if _message_key(m) not in seen]

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        ns = configurable.get("checkpoint_ns", "") or ""
        cid = str(configurable["checkpoint_id"])
        with self._lock:
            thread = self._thread(thread_id, write=True, create=True)
            assert thread is not None
            bucket = thread.writes.get((ns, cid), {})
            items = []
            for idx, (channel, value) in enumerate(writes):
                slot = WRITES_IDX_MAP.get(channel, idx)
                if slot >= 0 and (task_id, slot) in bucket:
                    continue
                kind, data = self.serde.dumps_typed(value)
                items.append(
                    {"idx": slot, "channel": channel, **self._store_bytes(thread, kind, data)}
                )
            if not items:
                return
            data_ = {
                "ns": ns,
                "checkpoint": cid,
                "task": task_id,
                "path": task_path,
                "writes": items,
            }
            if (ns, cid) not in thread.checkpoints:
                _add_writes(thread, None, data_)
                thread.early.setdefault((ns, cid), []).append(data_)
                return
            record = thread.checkpoints[(ns, cid)]
            # The writes of the newest checkpoint (of its namespace) take the leaf with
            # them; those saved late, under an older checkpoint (after its child: the
            # order of LangGraph's background writer), are followed by a leaf entry
            # that points back at the newest one.
            newest = record.tail == thread.tip or thread.latest.get(ns) == cid
            try:
                self._append_writes(thread, record.tail, data_)
                if newest:
                    thread.tip = record.tail
                else:
                    self._lead_back(thread)
            except (OSError, SessionPersistenceError):
                self._reopen(thread)
                raise
            _add_writes(thread, None, data_)

    def _append_writes(self, thread: _Thread, parent: str, data: dict[str, Any]) -> None:
        thread.manager.branch(parent)
        _writes_written(thread, thread.manager.append_custom_entry(WRITES_TYPE, data), data)

    def _write_early(self, thread: _Thread) -> None:
        """Writes whose checkpoint never came: under the thread's root, not lost (the
        leaf led back to the newest checkpoint after them)."""
        if not thread.early:
            return
        for key in list(thread.early):
            for data in thread.early.pop(key):
                self._append_writes(thread, thread.root, data)
        self._lead_back(thread)

    def _lead_back(self, thread: _Thread) -> None:
        """After writes off the newest checkpoint's path: one leaf entry under the
        thread's tip, so the file's last entry (the leaf every reader opens at) is on
        that path again. Not part of any context (a custom entry)."""
        manager = thread.manager
        if thread.tip and manager.get_leaf_id() != thread.tip:
            manager.branch(thread.tip)
            manager.append_custom_entry(LEAF_TYPE)

    # ------------------------------------------------------------------ removing

    def delete_thread(self, thread_id: str) -> None:
        """Delete the thread's session (every namespace, every write), as `sessiontree
        rm` does; another thread is not touched."""
        with self._lock:
            self._check_open()
            thread = self._threads.pop(thread_id, None)
            if thread is not None:
                thread.manager.close()
            for path in self._paths(thread_id):
                self.store.delete(path, force=True)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints whose metadata `run_id` is one of `run_ids` (and their
        writes), in every thread: each thread's file rewritten without them."""
        wanted = set(run_ids)
        if not wanted:
            return
        with self._lock:
            self._check_open()
            for thread_id in self.list_threads():
                thread = self._thread(thread_id, write=False)
                if thread is None:
                    continue
                doomed = [
                    r
                    for r in thread.checkpoints.values()
                    if self._decode(r.data["metadata"]).get("run_id") in wanted
                ]
                if doomed:
                    thread = self._thread(thread_id, write=True)
                    assert thread is not None
                    self._remove(thread, {(r.ns, r.id) for r in doomed})

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """`keep_latest`: keep each namespace's latest checkpoint of each thread (with its
        writes and every value it needs), rewriting the file without the rest;
        `delete`: delete the threads."""
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r}: keep_latest or delete")
        with self._lock:
            self._check_open()
            for thread_id in dict.fromkeys(thread_ids):
                if strategy == "delete":
                    self.delete_thread(thread_id)
                    continue
                if not self._paths(thread_id):
                    continue
                thread = self._thread(thread_id, write=True)
                assert thread is not None
                keep = {(ns, cid) for ns, cid in thread.latest.items()}
                self._remove(thread, {k for k in thread.checkpoints if k not in keep})

    def _remove(self, thread: _Thread, doomed: set[tuple[str, str]]) -> None:
        """Rewrite the thread's file without the checkpoints `doomed`, their writes and
        the messages no kept checkpoint comes after; a value a kept checkpoint needs
        that only a removed one held is moved into the kept one first."""
        if not doomed:
            return
        manager = thread.manager
        entries = manager.get_entries()
        removed_ids: set[str] = set()
        for doomed_key in doomed:
            removed_ids.add(thread.checkpoints[doomed_key].entry)
            removed_ids.update(thread.write_entries.get(doomed_key, ()))
        # Values: walk the kept checkpoints in file order, each given what it needs.
        by_entry = {r.entry: r for r in thread.checkpoints.values()}
        available: set[tuple[str, str, str]] = set()
        replacements: dict[str, dict[str, Any]] = {}
        for entry in entries:
            found = by_entry.get(str(entry.get("id")))
            if found is None or found.entry in removed_ids:
                continue
            record = found
            own = dict(record.data.get("values") or {})
            changed = False
            for channel, stored in list(own.items()):
                key = (record.ns, channel, _version_key(stored.get("v")))
                if (
                    stored.get("t") == "list+"
                    and (record.ns, channel, _version_key(stored.get("base"))) not in available
                ):
                    own[channel] = self._flat(thread, key)
                    changed = True
                available.add(key)
            for channel, version in self._versions(record).items():
                key = (record.ns, channel, _version_key(version))
                if key not in available and key in thread.values:
                    own[channel] = self._flat(thread, key)
                    available.add(key)
                    changed = True
            data = {**record.data, "values": own}
            if record.parent is not None and (record.ns, record.parent) in doomed:
                # Its parent goes: what a DeltaChannel rebuilds from the ancestors (their
                # writes back to a stored value) is kept in it.
                history = self._history_forms(thread, record, self._absent(thread, record))
                if history:
                    data["history"] = {**(record.data.get("history") or {}), **history}
                    changed = True
            if changed:
                replacements[record.entry] = {**entry, "data": data}
        # Messages: kept where a kept entry comes after them on their branch.
        parents = {str(e.get("id")): e.get("parentId") for e in entries}
        needed: set[str] = set()
        for entry in entries:
            entry_id = str(entry.get("id"))
            if entry.get("type") == "message" or entry_id in removed_ids:
                continue
            if _is_leaf_marker(entry):
                continue  # it keeps no message (it goes, or follows its parent up)
            current: Any = parents.get(entry_id)
            while isinstance(current, str) and current not in needed:
                needed.add(current)
                current = parents.get(current)
        for entry in entries:
            entry_id = str(entry.get("id"))
            if entry.get("type") == "message" and entry_id not in needed:
                removed_ids.add(entry_id)
        # Leaf entries: only one that ends the rewritten file stays (what it points at
        # gone, it points at the nearest kept ancestor: `remove_entries`' rule).
        kept = [e for e in entries if str(e.get("id")) not in removed_ids]
        for entry in kept[:-1] if kept and _is_leaf_marker(kept[-1]) else kept:
            if _is_leaf_marker(entry):
                removed_ids.add(str(entry.get("id")))
        try:
            manager.remove_entries(removed_ids, replace=replacements)
        except BaseException:
            self._drop(thread)  # read again from the file (unchanged) on the next use
            raise
        # Read the rewritten file's entries again: positions and homes changed.
        fresh = _Thread(thread.thread_id, thread.path, manager, thread.writable)
        rewritten = manager.get_entries()
        _fold(fresh, rewritten)
        fresh.tip = _tip_of(rewritten)
        fresh.early = {k: v for k, v in thread.early.items() if k not in doomed}
        for held in fresh.early.values():
            for data in held:
                _add_writes(fresh, None, data)
        self._threads[thread.thread_id] = fresh

    # ------------------------------------------------------------------ DeltaChannel

    def _absent(self, thread: _Thread, record: _Checkpoint) -> builtins.list[str]:
        """The channels a checkpoint has a version of but no value for (a DeltaChannel
        between its snapshots, among others)."""
        absent = []
        for channel, version in self._versions(record).items():
            stored = thread.values.get((record.ns, channel, _version_key(version)))
            if stored is None or stored.get("empty"):
                absent.append(channel)
        return absent

    def _history_forms(
        self, thread: _Thread, record: _Checkpoint, channels: Sequence[str]
    ) -> dict[str, dict[str, Any]]:
        """`get_delta_channel_history` in stored forms: for each channel, the writes of
        the ancestors (oldest first) back to the nearest one with a value (the seed);
        a history kept in a checkpoint (its ancestors pruned) ends the walk there."""
        remaining = list(channels)
        writes: dict[str, list[dict[str, Any]]] = {c: [] for c in remaining}
        seeds: dict[str, dict[str, Any]] = {}

        def kept_history(at: _Checkpoint) -> None:
            kept = at.data.get("history") or {}
            for channel in [c for c in remaining if c in kept]:
                writes[channel].extend(reversed(kept[channel].get("writes") or []))
                if "seed" in kept[channel]:
                    seeds[channel] = kept[channel]["seed"]
                remaining.remove(channel)

        kept_history(record)
        seen = {(record.ns, record.id)}
        cursor = thread.checkpoints.get((record.ns, record.parent)) if record.parent else None
        while cursor is not None and remaining and (cursor.ns, cursor.id) not in seen:
            seen.add((cursor.ns, cursor.id))
            stored_writes = thread.writes.get((cursor.ns, cursor.id), {})
            ordered = sorted(
                stored_writes.items(),
                key=lambda kv: writes_sort_key(kv[1][3], kv[0][0], kv[0][1]),
            )
            for _, (task, channel, form, _path) in reversed(ordered):
                if channel in remaining:
                    item = {k: form[k] for k in ("t", "b", "ref") if k in form}
                    writes[channel].append({"task": task, **item})
            versions = self._versions(cursor)
            for channel in list(remaining):
                version = versions.get(channel)
                key = (cursor.ns, channel, _version_key(version))
                stored = thread.values.get(key) if version is not None else None
                if stored is not None and not stored.get("empty"):
                    seeds[channel] = self._flat(thread, key)
                    remaining.remove(channel)
            kept_history(cursor)
            parent = cursor.parent
            cursor = thread.checkpoints.get((cursor.ns, parent)) if parent else None
        found = {}
        for channel in channels:
            if writes[channel] or channel in seeds:
                entry: dict[str, Any] = {"writes": list(reversed(writes[channel]))}
                if channel in seeds:
                    entry["seed"] = seeds[channel]
                found[channel] = entry
        return found

    def _load_form(self, form: dict[str, Any]) -> Any:
        """A value from a stored form that needs no other version (`_flat`'s)."""
        if form.get("t") == "list":
            return self._load_items([self._bytes_of(item) for item in form.get("items") or ()])
        return self.serde.loads_typed(self._bytes_of(form))

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """LangGraph's walk up the parent chain (each checkpoint's writes, back to a
        stored value), through the histories kept where `prune` or `delete_for_runs`
        removed a checkpoint's ancestors."""
        if not channels:
            return {}
        configurable = config["configurable"]
        with self._lock:
            thread = self._thread(str(configurable["thread_id"]), write=False)
            ns = configurable.get("checkpoint_ns", "") or ""
            cid = get_checkpoint_id(config) or (thread.latest.get(ns) if thread else None)
            record = thread.checkpoints.get((ns, cid)) if thread and cid else None
            if thread is None or record is None:
                return {c: {"writes": []} for c in channels}
            forms = self._history_forms(thread, record, channels)
            result: dict[str, DeltaChannelHistory] = {}
            for channel in channels:
                form = forms.get(channel, {"writes": []})
                history: DeltaChannelHistory = {
                    "writes": [
                        (w["task"], channel, self.serde.loads_typed(self._bytes_of(w)))
                        for w in form["writes"]
                    ]
                }
                if "seed" in form:
                    history["seed"] = self._load_form(form["seed"])
                result[channel] = history
            return result

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return await asyncio.to_thread(
            self.get_delta_channel_history, config=config, channels=channels
        )

    def _drop(self, thread: _Thread) -> None:
        """Forget a thread whose manager failed (its error was raised already)."""
        if self._threads.get(thread.thread_id) is thread:
            del self._threads[thread.thread_id]
        try:
            thread.manager.close()
        except Exception:  # the failure the caller is raising
            pass

    def _reopen(self, thread: _Thread) -> None:
        """A write to the thread failed (a full disk): its manager will not write
        again, so the thread is opened again from its file (which has every entry but
        the failed one), keeping the writes held for checkpoints not written yet; when
        that fails too, it is read again on its next use."""
        self._drop(thread)
        try:
            fresh = self._thread(thread.thread_id, write=True)
        except Exception:  # the failure the caller is raising
            return
        if fresh is not None:
            fresh.early = thread.early
            for held in fresh.early.values():
                for data in held:
                    _add_writes(fresh, None, data)

    def _flat(self, thread: _Thread, key: tuple[str, str, str]) -> dict[str, Any]:
        """A version's stored form that needs no other version."""
        stored = thread.values[key]
        if stored.get("t") != "list+":
            return dict(stored)
        return {"v": stored["v"], "t": "list", "items": self._item_forms(thread, key)}

    # ------------------------------------------------------------------ copying

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy a thread (every namespace, checkpoint, write and message) to another
        thread id: a new session whose header names the source's file (a fork). The
        copy is written whole first, under a name no listing shows (`….copying`), and
        takes a name of the target's (a failure on the way: the copy goes, the target
        stays; a process killed on the way leaves that file alone, which a saver opening
        the store removes once it is 10 minutes old and its lock free); then the
        target's old session, if it has one, is deleted (`SessionLockError` while
        another saver writes it: the copy goes, the target stays). A thread copied onto
        itself is left as it is."""
        if source_thread_id == target_thread_id:
            return
        with self._lock:
            self._check_open()
            source = self._thread(source_thread_id, write=False)
            if source is None:
                return
            key = thread_file_key(target_thread_id)
            # Written under a name no listing shows (a process killed before the rename
            # leaves no session: the next saver removes the copy, see _COPYING).
            in_progress = os.path.join(
                self._dir,
                f"{session_file_name(_now_iso(), key)}.{secrets.token_hex(4)}{_COPYING}",
            )
            copy = source.manager.persist_copy(
                self._dir,
                self.store.storage,
                breadcrumb=False,
                parent_session=source.path,
                agent_dir=self.store.agent_dir,
                path=in_progress,
            )
            written = copy.get_session_file()
            assert written is not None
            old = self._paths(target_thread_id)
            path = written
            try:
                # The copy names its thread before it takes the target's place (under
                # a name of the target's, newer than the old session's: until that
                # goes, the thread is the old one), so no step leaves a thread whose
                # file and name disagree, nor a copy no thread leads to.
                for entry in copy.get_entries():
                    if entry.get("type") == "custom" and entry.get("customType") == THREAD_TYPE:
                        renamed = {**entry, "data": {"thread_id": target_thread_id}}
                        copy.remove_entries((), replace={str(entry["id"]): renamed})
                        break
                copy.set_session_name(target_thread_id, "langgraph")
                copy.close()
                path = os.path.join(self._dir, session_file_name(_now_iso(), key))
                while old and path <= old[-1]:  # (the old one made this millisecond)
                    path = os.path.join(self._dir, session_file_name(_now_iso(), key))
                self.store.storage.rename(written, path)
            except BaseException:
                copy.close()
                try:
                    self.store.storage.unlink(written)
                except FileNotFoundError:
                    pass
                raise
            try:
                held = self._threads.pop(target_thread_id, None)
                if held is not None:
                    held.manager.close()
                for each in old:
                    self.store.delete(each, force=True)
            except BaseException:
                self.store.delete(path, force=True)
                raise

    # ------------------------------------------------------------------ async

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        found = await asyncio.to_thread(
            lambda: list(self.list(config, filter=filter, before=before, limit=limit))
        )
        for item in found:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)


def _millis(ts: Any) -> int:
    if isinstance(ts, str):
        try:
            return int(datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp() * 1000)
        except ValueError:
            pass
    return int(datetime.now(UTC).timestamp() * 1000)
