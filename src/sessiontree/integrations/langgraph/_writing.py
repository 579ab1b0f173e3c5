"""`SaverWriting`: checkpoints and pending writes put.

A checkpoint is one entry under its parent's last entry, after the pi messages its
`messages` channel added; pending writes go under their checkpoint (held until it is
written when they come first), and writes saved late under an older checkpoint are
followed by a leaf entry back to the newest one.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    get_checkpoint_metadata,
)

from sessiontree.errors import SessionPersistenceError
from sessiontree.integrations.langgraph._messages import message_key, millis, pi_message
from sessiontree.integrations.langgraph._thread_state import (
    CHECKPOINT_TYPE,
    ThreadState,
    add_checkpoint,
    add_writes,
    version_key,
)
from sessiontree.integrations.langgraph._values import MISSING, SaverValues

__all__ = ["SaverWriting"]


class SaverWriting(SaverValues):
    """Putting checkpoints and writes (see the module doc)."""

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
                    values.get(channel, MISSING),
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
                        converted = pi_message(message, millis(checkpoint.get("ts")))
                        if converted is not None:
                            manager.append_message(converted)
                entry_id = manager.append_custom_entry(CHECKPOINT_TYPE, data)
                old = thread.checkpoints.get((ns, checkpoint["id"]))
                add_checkpoint(thread, entry_id, data)
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
        thread: ThreadState,
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
        before = self._load_value(thread, (ns, "messages", version_key(version)))
        seen = {message_key(m) for m in before} if isinstance(before, list) else set()
        return [m for m in messages if message_key(m) not in seen]

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
                add_writes(thread, None, data_)
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
            add_writes(thread, None, data_)
