"""`SessionManager.persist_copy(parent_session=...)`: the copy's header names a parent."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import assistant, user
from sessiontree import SessionManager


def _header(path: str) -> dict[str, object]:
    with open(path, encoding="utf-8") as f:
        header = json.loads(f.readline())
    assert isinstance(header, dict)
    return header


def test_parent_session_is_written_into_the_copy(tmp_path: Path) -> None:
    sm = SessionManager.in_memory("/work/project")
    sm.append_message(user("hello"))
    sm.append_message(assistant("hi"))
    copy = sm.persist_copy(str(tmp_path / "sessions"), parent_session="/elsewhere/parent.jsonl")
    try:
        path = copy.get_session_file()
        assert path is not None
        header = _header(path)
        assert header["parentSession"] == "/elsewhere/parent.jsonl"
        assert list(header) == ["type", "version", "id", "timestamp", "cwd", "parentSession"]
        assert [e["id"] for e in copy.get_entries()] == [e["id"] for e in sm.get_entries()]
    finally:
        copy.close()


def test_without_it_a_whole_copy_has_no_parent(tmp_path: Path) -> None:
    sm = SessionManager.in_memory("/work/project")
    sm.append_message(user("hello"))
    copy = sm.persist_copy(str(tmp_path / "sessions"))
    try:
        path = copy.get_session_file()
        assert path is not None
        assert "parentSession" not in _header(path)
    finally:
        copy.close()
