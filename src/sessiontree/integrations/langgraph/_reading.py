"""`SaverReading`: checkpoints read back: one (`get_tuple`), those of a thread or
of every thread (`list`, filtered by metadata), and what a DeltaChannel rebuilds from
the ancestors' writes (`get_delta_channel_history`).
"""

from __future__ import annotations

import builtins
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    CheckpointTuple,
    DeltaChannelHistory,
    get_checkpoint_id,
    writes_sort_key,
)

from sessiontree.integrations.langgraph._thread_state import (
    CheckpointRecord,
    ThreadState,
    version_key,
)
from sessiontree.integrations.langgraph._values import MISSING, SaverValues

__all__ = ["SaverReading"]


class SaverReading(SaverValues):
    """Reading checkpoints (see the module doc)."""

    def _tuple(self, thread: ThreadState, record: CheckpointRecord) -> CheckpointTuple:
        checkpoint = dict(self._decode(record.data["checkpoint"]))
        versions = checkpoint.get("channel_versions") or {}
        record.versions = dict(versions)
        values: dict[str, Any] = {}
        for channel, version in versions.items():
            value = self._load_value(thread, (record.ns, channel, version_key(version)))
            if value is not MISSING:
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

    # ------------------------------------------------------------------ DeltaChannel

    def _absent(self, thread: ThreadState, record: CheckpointRecord) -> builtins.list[str]:
        """The channels a checkpoint has a version of but no value for (a DeltaChannel
        between its snapshots, among others)."""
        absent = []
        for channel, version in self._versions(record).items():
            stored = thread.values.get((record.ns, channel, version_key(version)))
            if stored is None or stored.get("empty"):
                absent.append(channel)
        return absent

    def _history_forms(
        self, thread: ThreadState, record: CheckpointRecord, channels: Sequence[str]
    ) -> dict[str, dict[str, Any]]:
        """`get_delta_channel_history` in stored forms: for each channel, the writes of
        the ancestors (oldest first) back to the nearest one with a value (the seed);
        a history kept in a checkpoint (its ancestors pruned) ends the walk there."""
        remaining = list(channels)
        writes: dict[str, list[dict[str, Any]]] = {c: [] for c in remaining}
        seeds: dict[str, dict[str, Any]] = {}

        def kept_history(at: CheckpointRecord) -> None:
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
                key = (cursor.ns, channel, version_key(version))
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
