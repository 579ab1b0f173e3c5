"""A cold listing of many files is read in forked worker processes where cores are idle:
it gives the records a listing read in this process gives, a file that cannot be read
skipped alike."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from sessiontree.foreign import store as store_module
from sessiontree.foreign._files import HOST_FILES
from sessiontree.foreign.store import ForeignListing, ForeignStore
from tests import foreign_support as fs
from tests.conftest import REAL_FILES, unavailable

FOREIGN = REAL_FILES / "foreign"


def _rows(found: list[ForeignListing]) -> list[tuple[str, int, object]]:
    return [(f.path, f.size, f.meta) for f in found]


@pytest.mark.parametrize("agent", ["claude", "codex"])
def test_a_listing_read_in_workers_is_the_one_read_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, agent: str
) -> None:
    if not FOREIGN.is_dir():
        unavailable("the real files are missing")
    claude, codex, _ = fs.layout(FOREIGN, tmp_path)
    home = claude if agent == "claude" else codex
    directory = next(p.parent for p in home.rglob("*.jsonl"))
    os.mkfifo(directory / "fifo.jsonl")  # named like a session: skipped, never blocked on
    here = ForeignStore.at(agent, str(home)).list()

    forked: list[int] = []
    real = store_module.map_forked

    def spy(work: Any, items: Any, weight: Any, workers: int) -> Any:
        found = real(work, items, weight, workers)  # an error here: read in this process
        forked.append(workers)
        return found

    monkeypatch.setattr(store_module, "map_forked", spy)
    # Whatever this process runs and has: here, what pays on a large cold store.
    monkeypatch.setattr(store_module, "_workers_for", lambda jobs, files: 2)
    there = ForeignStore.at(agent, str(home)).list()
    assert forked == [2]
    assert len(here) > 1 and _rows(there) == _rows(here)


@pytest.mark.parametrize(("load", "workers"), [(0.2, 2), (1.5, 1), (7.0, 1)])
def test_a_cold_listing_forks_only_onto_idle_cores(
    monkeypatch: pytest.MonkeyPatch, load: float, workers: int
) -> None:
    monkeypatch.setattr(store_module.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(store_module.os, "getloadavg", lambda: (load, load, load))
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    monkeypatch.setattr(sys, "platform", "linux")
    jobs = [(f"/s/{n}.jsonl", 1 << 20) for n in range(300)]
    assert store_module._workers_for(jobs, HOST_FILES) == workers
    assert store_module._workers_for(jobs[:2], HOST_FILES) == 1  # too few to pay
