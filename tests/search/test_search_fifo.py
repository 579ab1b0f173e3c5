"""A search meets a session swapped for a FIFO after the listing it searches: it never
blocks, answers nothing from what the index held of the old file, names the FIFO in its
notes, and finds the hits of the other sessions (with the content index, its refresh
and its read-ahead, and without)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import sessiontree.search._content_index as content_index_module
from sessiontree import SessionManager, Store
from sessiontree.search import ContentIndex
from tests.helpers import HANG_S, assistant, user, without_hang
from tests.search.test_read_ahead import forking  # noqa: F401 (a fixture)


def _store(agent_dir: Path, sessions: int = 3) -> tuple[Store, list[str]]:
    paths = []
    for i in range(sessions):
        with SessionManager.create("/proj") as sm:
            sm.append_message(user(f"hello needle {i}"))
            sm.append_message(assistant(f"hi {i}"))
            path = sm.get_session_file()
            assert path is not None
            paths.append(path)
    return Store(str(agent_dir)), paths


@pytest.mark.parametrize("use_index", [True, False], ids=["index", "no index"])
def test_a_session_swapped_for_a_fifo_after_the_listing_is_named_not_read(
    agent_dir: Path, use_index: bool
) -> None:
    store, paths = _store(agent_dir)
    listed = [info.path for info in store.list()]
    assert sorted(listed) == sorted(paths)
    store.search("needle")  # the index holds every file as it was
    fifo = paths[1]
    os.unlink(fifo)
    os.mkfifo(fifo)
    result = without_hang(
        lambda: store.search("needle", sessions=listed, use_index=use_index), fifo
    )
    assert not isinstance(result, BaseException), result
    assert sorted(h.path for h in result.hits) == sorted(p for p in paths if p != fifo)
    assert any(fifo in note and "a FIFO, not a regular file" in note for note in result.notes)
    if use_index:
        index = ContentIndex.open(str(agent_dir))
        assert index is not None
        try:
            assert fifo not in index.file_ids([fifo])  # the old file's rows are gone
        finally:
            index.close()


class _Hung(Exception):
    pass


@contextmanager
def _alarm(seconds: float) -> Iterator[None]:
    """Fail the test when the body runs longer than `seconds` (SIGALRM interrupts a
    blocked open or read): for a body that must run in the main thread, which alone may
    fork its workers."""

    def ring(*_: object) -> None:
        raise _Hung

    old = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    except _Hung:
        pytest.fail("blocked on the FIFO")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.fresh_process
@pytest.mark.usefixtures("forking")
def test_a_fifo_put_before_the_read_ahead_workers_read_is_named_not_read(
    agent_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first build reads the new files in forked workers: the FIFO put after the
    refresh planned them blocks no worker (nor the refresh, which reads it again), and
    is named as any file not read."""
    store, paths = _store(agent_dir, sessions=6)
    listed = [info.path for info in store.list()]
    fifo = paths[2]
    planned = content_index_module.read_ahead
    forked: list[bool] = []

    def swapped_then_read_ahead(*args: Any, **kwargs: Any) -> Any:
        os.unlink(fifo)
        os.mkfifo(fifo)
        ahead = planned(*args, **kwargs)
        forked.append(ahead._stream is not None)
        return ahead

    monkeypatch.setattr(content_index_module, "read_ahead", swapped_then_read_ahead)
    with _alarm(HANG_S):
        result = store.search("needle", sessions=listed)
    assert forked == [True]
    assert sorted(h.path for h in result.hits) == sorted(p for p in paths if p != fifo)
    assert any(fifo in note and "a FIFO, not a regular file" in note for note in result.notes)
