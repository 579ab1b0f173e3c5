"""`SessionTreeSaver`: the checkpointer, its parts joined, and its async side (the
sync methods run in a worker thread).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)

from sessiontree.integrations.langgraph._rewriting import SaverRewriting
from sessiontree.integrations.langgraph._writing import SaverWriting

__all__ = ["SessionTreeSaver"]


class SessionTreeSaver(SaverRewriting, SaverWriting):
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

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> SessionTreeSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> SessionTreeSaver:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.close)

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

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return await asyncio.to_thread(
            self.get_delta_channel_history, config=config, channels=channels
        )
