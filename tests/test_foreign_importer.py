"""Earlier imports: found in the store's sessions, cached per file identity."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from helpers import assistant, user
from sessiontree import SessionManager
from sessiontree.foreign import find_imports, importer
from sessiontree.foreign._cache import IdentityCache
from sessiontree.foreign.importer import IMPORT_TYPE


def _imported(source_id: str) -> str:
    with SessionManager.create("/proj") as sm:
        sm.append_message(user("q"))
        sm.append_custom_entry(
            IMPORT_TYPE, {"source": "claude", "sourceId": source_id, "sourcePath": "/x.jsonl"}
        )
        sm.append_message(assistant("a"))
        return sm.get_session_file() or ""


def test_the_import_records_of_a_deleted_session_leave_the_cache(agent_dir: Path) -> None:
    kept, deleted = _imported("one"), _imported("two")
    assert {e.source_id for e in find_imports(str(agent_dir))} == {"one", "two"}
    cache = IdentityCache(str(agent_dir), "foreign_imports")
    assert set(cache.fetch()) == {kept, deleted}
    os.unlink(deleted)
    assert [e.source_id for e in find_imports(str(agent_dir))] == ["one"]
    assert set(cache.fetch()) == {kept}


def test_an_unchanged_session_is_not_read_again(
    agent_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _imported("one")
    os.utime(path, ns=(1_600_000_000_000_000_000,) * 2)  # long past its timestamp tick
    assert [e.source_id for e in find_imports(str(agent_dir))] == ["one"]

    def no_read(*args: object) -> None:
        raise AssertionError("an unchanged session was read again")

    monkeypatch.setattr(importer, "read_chunks", no_read)
    assert [e.source_id for e in find_imports(str(agent_dir))] == ["one"]
