"""Earlier imports: found in the store's sessions, cached per file identity."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import sessiontree.listing._imports as import_records_module
from sessiontree import SessionManager
from sessiontree.foreign import find_imports
from sessiontree.foreign.importer import IMPORT_TYPE
from sessiontree.layout import store_parts
from sessiontree.listing import IMPORT_RECORDS, IdentityCache
from tests.helpers import assistant, user


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
    assert {e.source_id for e in find_imports(store_parts(agent_dir=str(agent_dir)))} == {
        "one",
        "two",
    }
    cache = IdentityCache(str(agent_dir), IMPORT_RECORDS)
    assert set(cache.fetch()) == {kept, deleted}
    os.unlink(deleted)
    assert [e.source_id for e in find_imports(store_parts(agent_dir=str(agent_dir)))] == ["one"]
    assert set(cache.fetch()) == {kept}


def test_an_unchanged_session_is_not_read_again(
    agent_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _imported("one")
    os.utime(path, ns=(1_600_000_000_000_000_000,) * 2)  # long past its timestamp tick
    assert [e.source_id for e in find_imports(store_parts(agent_dir=str(agent_dir)))] == ["one"]

    def no_read(*args: object) -> None:
        raise AssertionError("an unchanged session was read again")

    monkeypatch.setattr(import_records_module, "read_chunks", no_read)
    assert [e.source_id for e in find_imports(store_parts(agent_dir=str(agent_dir)))] == ["one"]


def test_the_usage_report_and_find_imports_keep_one_record_of_the_imports(
    agent_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sqlite3

    from sessiontree.reports import load_usage
    from sessiontree.search import INDEX_DB_NAME

    path = _imported("one")
    os.utime(path, ns=(1_600_000_000_000_000_000,) * 2)  # long past its timestamp tick
    usage = load_usage([path], store_parts(agent_dir=str(agent_dir)))
    (session,) = usage.sessions
    assert usage.indexed and [(m.line, m.source_id) for m in session.imports] == [(3, "one")]
    with sqlite3.connect(agent_dir / INDEX_DB_NAME) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    conn.close()
    assert "imports" not in tables  # the content index keeps no copy of them

    def no_read(*args: object) -> None:
        raise AssertionError("a session was read again")

    monkeypatch.setattr(import_records_module, "read_chunks", no_read)
    assert [e.source_id for e in find_imports(store_parts(agent_dir=str(agent_dir)))] == ["one"]
