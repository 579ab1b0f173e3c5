"""Full-text search over session files: the raw-bytes prefilter never hides a match."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import assistant, user
from sessiontree import SessionManager, serialize_entry
from sessiontree.search import search_sessions


@pytest.fixture
def session(tmp_path: Path) -> str:
    with SessionManager.create("/p", str(tmp_path)) as sm:
        sm.append_message(user('say "hi" to C:\\temp/dir'))
        sm.append_message(assistant("Straße and 5 \u212a of memory"))  # Kelvin sign
        return sm.get_session_file() or ""


@pytest.mark.parametrize(
    ("query", "case_sensitive", "count"),
    [
        ('"hi"', True, 1),
        ('"HI"', False, 1),
        ("C:\\temp/dir", True, 1),
        ("strasse", False, 1),  # casefold: ß -> ss
        ("5 k of", False, 1),  # Kelvin sign folds to k
        ("Straße", True, 1),
        ("straße", True, 0),
        ("nowhere", False, 0),
    ],
)
def test_queries_that_json_escapes_or_casefold_changes(
    session: str, query: str, case_sensitive: bool, count: int
) -> None:
    hits = list(search_sessions([session], query, case_sensitive=case_sensitive))
    assert len(hits) == count


def test_other_writers_unicode_escapes_are_found(tmp_path: Path) -> None:
    path = tmp_path / "escaped.jsonl"
    header = serialize_entry(
        {"type": "session", "version": 3, "id": "s", "timestamp": "t", "cwd": "/"}
    )
    # A writer with ensure_ascii (not JavaScript) escapes non-ASCII text.
    line = '{"type":"message","id":"a","parentId":null,"timestamp":"t","message":{"role":"user","content":"caf\\u00e9 cr\\u00e8me"}}'
    path.write_text(header + "\n" + line + "\n")
    assert len(list(search_sessions([str(path)], "café"))) == 1
    assert len(list(search_sessions([str(path)], "crème", case_sensitive=True))) == 1
