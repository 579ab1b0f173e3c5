"""Work in forked processes: results in order, a worker's failure raised here, no worker
left behind."""

from __future__ import annotations

import os
import time
from contextlib import closing

import pytest

from sessiontree._util.forked import ForkedError, can_fork, stream_forked

pytestmark = pytest.mark.skipif(not can_fork(), reason="forking workers needs Linux and one thread")


def _pid_and_sum(batch: list[int]) -> tuple[int, int]:
    return os.getpid(), sum(batch)


def _fails_on_three(batch: list[int]) -> int:
    if 3 in batch:
        raise ValueError("three")
    return sum(batch)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_results_come_in_the_order_of_the_batches_from_other_processes() -> None:
    batches = [[i, i + 1] for i in range(0, 40, 2)]
    got = list(stream_forked(_pid_and_sum, batches, 3))
    assert [s for _, s in got] == [sum(b) for b in batches]
    pids = {pid for pid, _ in got}
    assert os.getpid() not in pids
    assert len(pids) == 3
    assert not any(_alive(pid) for pid in pids)


def test_a_worker_exception_is_raised_here_and_the_results_before_it_are_kept() -> None:
    got: list[int] = []
    with pytest.raises(ForkedError, match="three"):
        for result in stream_forked(_fails_on_three, [[1], [2], [3], [4]], 2):
            got.append(result)
    assert got == [1, 2]


def test_leaving_early_stops_the_workers() -> None:
    batches = [[i] * 20_000 for i in range(200)]  # more than the pipes hold
    with closing(stream_forked(_pid_and_sum, batches, 2)) as results:
        pid, _ = next(results)
    time.sleep(0.05)
    assert not _alive(pid)  # killed and reaped


def test_no_batches_forks_nothing() -> None:
    assert list(stream_forked(_pid_and_sum, [], 2)) == []
