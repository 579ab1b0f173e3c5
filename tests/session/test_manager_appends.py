"""What `append_compaction` accepts: a first kept entry on the path to the leaf, or none
("retain none", the compaction's own id as pi 1.6 writes it); an id off the path is
refused when appended, while a file that holds one (pi 1.6 writes them) still reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sessiontree import SessionManager
from sessiontree.maintenance import check_session


def _user(text: str, ts: int) -> dict[str, object]:
    return {"role": "user", "content": text, "timestamp": ts}


def _assistant(text: str, ts: int) -> dict[str, object]:
    return {
        "role": "assistant",
        "content": [{"type": "text", "text": text}],
        "provider": "p",
        "model": "m",
        "timestamp": ts,
    }


def _branched(sm: SessionManager) -> tuple[str, str, str]:
    """question -> answer, and a second branch from the question; the leaf on it."""
    question = sm.append_message(_user("question", 1))
    answer = sm.append_message(_assistant("answer", 2))
    sm.branch(question)
    other = sm.append_message(_assistant("another answer", 3))
    return question, answer, other


def test_a_first_kept_entry_off_the_path_is_refused_and_nothing_appended() -> None:
    sm = SessionManager.in_memory("/work/project")
    _question, answer, other = _branched(sm)
    count = len(sm.get_entries())
    with pytest.raises(ValueError, match=f"first kept entry '{answer}' is not on the path"):
        sm.append_compaction("summary", None, answer, 100)
    with pytest.raises(ValueError, match="'nowhere'"):
        sm.append_compaction("summary", None, "nowhere", 100)
    assert len(sm.get_entries()) == count and sm.get_leaf_id() == other
    assert [m["role"] for m in sm.build_session_context().messages] == ["user", "assistant"]


def test_a_first_kept_entry_on_the_path_and_retain_none_are_appended() -> None:
    sm = SessionManager.in_memory("/work/project")
    question, _answer, other = _branched(sm)
    kept = sm.append_compaction("summary", None, question, 100)
    assert sm.get_entry(kept)["firstKeptEntryId"] == question  # type: ignore[index]
    roles = [m["role"] for m in sm.build_session_context().messages]
    assert roles == ["compactionSummary", "user", "assistant"]
    none = sm.append_compaction("again", None, None, 100)
    assert sm.get_entry(none)["firstKeptEntryId"] == none  # type: ignore[index]
    assert [m["role"] for m in sm.build_session_context().messages] == ["compactionSummary"]
    # The leaf itself is on its path: kept from the last entry.
    sm.branch(other)
    last = sm.append_compaction("from the leaf", None, other, 100)
    assert sm.get_entry(last)["firstKeptEntryId"] == other  # type: ignore[index]


def test_a_root_compaction_keeps_nothing_or_is_refused() -> None:
    sm = SessionManager.in_memory("/work/project")
    with pytest.raises(ValueError, match="'x'"):
        sm.append_compaction("summary", None, "x", 0)
    assert sm.get_entries() == []
    sm.append_compaction("summary", None, None, 0)
    assert len(sm.get_entries()) == 1


def test_a_file_pi_wrote_with_a_first_kept_entry_off_the_path_still_loads(
    tmp_path: Path,
) -> None:
    """pi 1.6 appends such a compaction; it is read as pi reads it (nothing kept before
    it), `verify` names it, and appending goes on after it."""
    sm = SessionManager.create("/work/project", str(tmp_path))
    _question, answer, _other = _branched(sm)
    compaction = sm.append_compaction("summary", None, None, 100)
    sm.get_entries()[-1]["firstKeptEntryId"] = answer  # as pi 1.6 would have written it
    sm.rewrite_entries()
    path = sm.get_session_file()
    sm.close()
    assert path is not None
    line = json.loads(Path(path).read_text(encoding="utf-8").splitlines()[-1])
    assert (line["id"], line["firstKeptEntryId"]) == (compaction, answer)
    assert [f.kind for f in check_session(path)] == ["compaction_off_path"]
    with SessionManager.open(path) as again:
        assert [m["role"] for m in again.build_session_context().messages] == ["compactionSummary"]
        again.append_message(_user("go on", 4))
        roles = [m["role"] for m in again.build_session_context().messages]
        assert roles == ["compactionSummary", "user"]
