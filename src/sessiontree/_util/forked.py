"""Work spread over forked processes: what the listings of many files use where the work
holds the GIL (orjson, the readers' converting), so threads would gain nothing."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import BinaryIO, NoReturn, TypeVar, cast

__all__ = ["ForkedError", "can_fork", "map_forked", "stream_forked"]

T = TypeVar("T")
U = TypeVar("U")
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


def stream_forked(work: Callable[[U], R], batches: Sequence[U], workers: int) -> Iterator[R]:
    """`work(batch)` for each of `batches` in `workers` forked processes, yielded in the
    order of `batches` as they come (worker k does batches k, k + workers, ...).

    Memory stays bounded: a worker writes each result into a pipe of its own and waits
    while the pipe is full, so no more than a batch or two per worker are ever held, here
    or there. A worker's exception is raised here (as `ForkedError`, by its repr), and
    so is a worker that died; leaving the iterator early (close, an exception) kills the
    workers. A worker exits on a broken pipe: one whose parent was killed does not
    linger. Call only when `can_fork()`."""
    import pickle

    pids: list[int] = []
    readers: list[BinaryIO] = []
    try:
        for k in range(workers):
            read_fd, write_fd = os.pipe()
            _widen(write_fd)
            pid = os.fork()
            if pid == 0:  # the worker: never returns
                os.close(read_fd)
                for reader in readers:  # the pipes of the workers forked before it
                    os.close(reader.fileno())
                _serve(work, batches[k::workers], write_fd, pickle.dumps)
            os.close(write_fd)
            pids.append(pid)
            readers.append(os.fdopen(read_fd, "rb", buffering=_PIPE_BYTES))
        for i in range(len(batches)):
            try:
                ok, value = pickle.load(readers[i % workers])
            except EOFError:
                raise ForkedError(f"worker {i % workers} exited before its results") from None
            if not ok:
                raise ForkedError(value)
            yield value
    finally:
        for reader in readers:
            reader.close()  # a worker still writing gets EPIPE and exits
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass


_PIPE_BYTES = 1 << 20


def _widen(fd: int) -> None:
    """Let a pipe hold `_PIPE_BYTES` (Linux's default holds 64 KiB): a worker then runs a
    few batches ahead, and a batch crosses in one or two reads, not a dozen wake-ups of
    each side in turn (each a wait for the scheduler on a busy machine)."""
    import fcntl

    setsize = getattr(fcntl, "F_SETPIPE_SZ", None)
    if setsize is None:
        return
    try:
        fcntl.fcntl(fd, setsize, _PIPE_BYTES)
    except OSError:  # above /proc/sys/fs/pipe-max-size: the default it is
        pass


class ForkedError(RuntimeError):
    """A forked worker failed (its exception's repr) or died."""


def _serve(
    work: Callable[[U], R],
    batches: Sequence[U],
    write_fd: int,
    dumps: Callable[..., bytes],
) -> NoReturn:
    code = 0
    try:
        with os.fdopen(write_fd, "wb", buffering=_PIPE_BYTES) as out:
            for batch in batches:
                try:
                    frame = dumps((True, work(batch)), protocol=5)
                except Exception as exc:  # sent to the parent, which raises it
                    frame = dumps((False, repr(exc)), protocol=5)
                    code = 1
                out.write(frame)
                out.flush()  # all of it now: the parent may be waiting for its end
                if code:
                    break
    except BaseException:  # the parent went away (EPIPE), or anything else: just go
        code = 1
    finally:
        os._exit(code)  # no atexit handlers, no closing of the parent's connections
