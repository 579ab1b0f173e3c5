"""The scan's one rule for files it cannot read: skipped and named, never fatal."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from sessiontree import SessionManager
from sessiontree.format import Entry
from sessiontree.search import SessionSource, search, search_sessions
from tests.helpers import assistant, user


def _session(directory: Path, text: str) -> str:
    with SessionManager.create("/p", str(directory)) as sm:
        sm.append_message(user(text))
        sm.append_message(assistant("ok"))
        return sm.get_session_file() or ""


def _broken_loader(path: str) -> tuple[Entry | None, Sequence[Entry]]:
    raise ValueError("not a session this loader knows")


def test_a_scan_names_the_files_it_could_not_read_and_goes_on(tmp_path: Path) -> None:
    readable = _session(tmp_path, "a needle here")
    missing = str(tmp_path / "gone.jsonl")
    skipped: list[tuple[str, str]] = []
    hits = list(search_sessions([missing, readable], "needle", skipped=skipped))
    assert [hit.path for hit in hits] == [readable]
    assert [path for path, _ in skipped] == [missing]
    assert "No such file" in skipped[0][1]


@pytest.mark.parametrize("use_index", [False, True])
def test_search_names_in_its_notes_a_file_it_could_not_read(
    tmp_path: Path, agent_dir: Path, use_index: bool
) -> None:
    readable = _session(tmp_path, "a needle here")
    foreign = str(tmp_path / "other.json")
    Path(foreign).write_text("{}")
    sources = [SessionSource(readable), SessionSource(foreign, load=_broken_loader, kind="x")]
    result = search(sources, "needle", agent_dir=str(agent_dir), use_index=use_index)
    assert [hit.path for hit in result.hits] == [readable]
    named = [note for note in result.notes if foreign in note]
    assert named and "could not be read" in named[0] and "loader knows" in named[0]
