"""The on-disk listing cache answers for the directories asked, and only those: by a
range query per directory for a few, by one pass over the table for many."""

from __future__ import annotations

from pathlib import Path

import pytest

from sessiontree.format import serialize_entry
from sessiontree.layout import store_parts
from sessiontree.listing import clear_listing_cache, list_all_sessions
from sessiontree.listing._cache import MetaDB


def _session(path: Path, session_id: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    header = {
        "type": "session",
        "version": 3,
        "id": session_id,
        "timestamp": "2026-01-01T00:00:00.000Z",
        "cwd": "/w",
    }
    path.write_text(serialize_entry(header) + "\n")


@pytest.mark.parametrize("asked", [2, 12])
def test_a_fetch_returns_the_files_directly_in_the_directories_asked(
    tmp_path: Path, asked: int
) -> None:
    sessions = tmp_path / "sessions"
    dirs = [sessions / f"--p{i:02d}--" for i in range(14)]
    for i, d in enumerate(dirs):
        _session(d / f"s{i}.jsonl", f"id-{i}")
    _session(sessions / "--p00--x" / "other.jsonl", "id-prefix")  # a dir sharing a prefix
    list_all_sessions(store_parts(None, str(tmp_path)))  # fills the cache
    clear_listing_cache()
    wanted = [str(d) for d in dirs[:asked]]
    found = MetaDB(str(tmp_path)).fetch(wanted)
    assert sorted(found) == sorted(str(d / f"s{i}.jsonl") for i, d in enumerate(dirs[:asked]))
