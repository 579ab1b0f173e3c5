"""A session file whose mtime is after 2262 (`touch -d 2300-01-01`: ext4 keeps times up
to 2446) has an `st_mtime_ns` beyond 64 bits, which no SQLite INTEGER holds: the caches
pass such a file over (it is read each time) and every command still answers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sessiontree import SessionManager, Store
from sessiontree.layout import store_parts
from sessiontree.listing import clear_listing_cache, list_all_sessions
from tests.conftest import unavailable
from tests.helpers import assistant, user

FAR_NS = 10_413_792_000 * 10**9  # 2300-01-01, as ext4 keeps it: 1.04e19 > 2**63


@pytest.fixture
def far(agent_dir: Path) -> tuple[str, str]:
    """Two sessions, the first dated 2300 (skipped where the file system keeps no such time)."""
    paths = []
    for text in ("far needle", "near needle"):
        with SessionManager.create("/proj") as sm:
            sm.append_message(user(text))
            sm.append_message(assistant("ok"))
            paths.append(sm.get_session_file() or "")
    try:
        os.utime(paths[0], ns=(FAR_NS, FAR_NS))
    except (OSError, OverflowError):  # pragma: no cover - a file system of 32-bit times
        unavailable("this file system keeps no time after 2262")
    if os.stat(paths[0]).st_mtime_ns < 1 << 63:  # pragma: no cover - clamped
        unavailable("this file system keeps no time after 2262")
    clear_listing_cache()
    return paths[0], paths[1]


def test_a_listing_of_a_file_dated_after_2262_lists_it(
    agent_dir: Path, far: tuple[str, str]
) -> None:
    for _ in range(2):  # the second from what the first kept
        clear_listing_cache()
        infos = list_all_sessions(store_parts(agent_dir=str(agent_dir)))
        assert [i.path for i in infos] == list(far)


def test_search_usage_and_stats_of_a_file_dated_after_2262_answer(
    agent_dir: Path, far: tuple[str, str]
) -> None:
    with Store(agent_dir) as store:
        found = store.search("needle")
        assert sorted(h.path for h in found.hits) == sorted(far)
        (row,) = store.usage("monthly", tz="UTC").rows
        assert row.totals.messages == 2
        assert store.stats().sessions == 2
