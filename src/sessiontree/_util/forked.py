"""Work spread over forked processes: what the listings of many files use where the work
holds the GIL (orjson, the readers' converting), so threads would gain nothing."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar, cast

__all__ = ["can_fork", "map_forked"]

T = TypeVar("T")
R = TypeVar("R")


def can_fork() -> bool:
    """Whether forking workers is safe here: Linux (fork, not spawn), and this process
    runs no other thread (a fork copies a lock another thread holds, held forever)."""
    return sys.platform == "linux" and threading.active_count() == 1


def map_forked(
    work: Callable[[list[T]], list[R]],
    items: Sequence[T],
    weight: Callable[[T], int],
    workers: int,
) -> list[R]:
    """`work` over `items` in `workers` forked processes, a result for each item in the
    order of `items`. Heaviest first, dealt round-robin, so the batches (four a worker)
    weigh about the same. Raises what the pool raises (a broken pool, no /dev/shm): the
    caller does the work in its own process then."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    order = sorted(range(len(items)), key=lambda i: weight(items[i]), reverse=True)
    batches = [order[k :: workers * 4] for k in range(workers * 4)]
    results: list[R | None] = [None] * len(items)
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(workers, mp_context=context) as pool:
        done = pool.map(work, [[items[i] for i in batch] for batch in batches])
        for batch, found in zip(batches, done, strict=True):
            for i, result in zip(batch, found, strict=True):
                results[i] = result
    return cast(list[R], results)
