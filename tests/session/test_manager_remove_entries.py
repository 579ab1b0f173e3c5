"""`SessionManager.remove_entries`: a rewrite that keeps the rest (children re-parented,
labels of removed entries gone, the leaf moved up), atomic, on every backend the
manager writes through; a failure changes nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sessiontree import SessionManager
from sessiontree.errors import SessionPersistenceError, SessionWriteConflictError
from sessiontree.maintenance import check_session
from sessiontree.storage import FileSessionStorage
from tests.helpers import assistant, user


def lines(path: str) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def session(tmp_path: Path) -> tuple[SessionManager, list[str]]:
    sm = SessionManager.create("/work/p", session_dir=str(tmp_path))
    ids = [
        sm.append_message(user("one")),
        sm.append_message(assistant("two")),
        sm.append_message(user("three")),
        sm.append_message(assistant("four")),
    ]
    return sm, ids


def test_removed_entries_go_children_follow_their_nearest_kept_ancestor(tmp_path: Path) -> None:
    sm, ids = session(tmp_path)
    label = sm.append_label_change(ids[1], "doomed")
    other = sm.append_label_change(ids[0], "kept")
    path = sm.get_session_file()
    assert path is not None
    removed = sm.remove_entries([ids[1], ids[2], "not-there"])
    assert removed == [ids[1], ids[2], label]
    on_disk = [e for e in lines(path) if e["type"] != "session"]
    assert [e["id"] for e in on_disk] == [ids[0], ids[3], other]
    assert on_disk[1]["parentId"] == ids[0]
    assert sm.get_leaf_id() == other
    assert sm.get_labels() == {ids[0]: "kept"}
    sm.close()
    with SessionManager.open(path, read_only=True) as again:
        assert [m["role"] for m in again.build_session_context().messages] == ["user", "assistant"]


def test_replace_keeps_id_and_parent_and_the_leaf_moves_up(tmp_path: Path) -> None:
    sm, ids = session(tmp_path)
    path = sm.get_session_file()
    assert path is not None
    replacement = {"type": "message", "id": "x", "parentId": "y", "timestamp": "t"}
    replacement["message"] = user("ONE")
    sm.remove_entries([ids[3]], replace={ids[0]: replacement})
    on_disk = [e for e in lines(path) if e["type"] != "session"]
    assert on_disk[0]["id"] == ids[0] and on_disk[0]["parentId"] is None
    assert on_disk[0]["message"]["content"] == "ONE"
    assert sm.get_leaf_id() == ids[2]
    assert sm.remove_entries([]) == []
    sm.close()


def test_a_failed_rewrite_changes_nothing_on_disk_or_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sm, ids = session(tmp_path)
    path = sm.get_session_file()
    assert path is not None
    before = Path(path).read_bytes()

    def broken(self: FileSessionStorage, target: str, chunks: Any) -> Any:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(FileSessionStorage, "write_atomic", broken)
    with pytest.raises((OSError, SessionPersistenceError)):
        sm.remove_entries([ids[1]])
    monkeypatch.undo()
    assert Path(path).read_bytes() == before
    assert [e["id"] for e in sm.get_entries()] == ids
    try:
        sm.close()
    except SessionPersistenceError:
        pass


def test_refused_when_the_file_changed_behind_the_manager(tmp_path: Path) -> None:
    sm, ids = session(tmp_path)
    path = sm.get_session_file()
    assert path is not None
    with open(path, "a", encoding="utf-8") as f:
        f.write(
            json.dumps({"type": "label", "id": "zz", "parentId": None, "timestamp": "t"}) + "\n"
        )
    before = Path(path).read_bytes()
    with pytest.raises(SessionWriteConflictError):
        sm.remove_entries([ids[1]])
    assert Path(path).read_bytes() == before
    try:
        sm.close()
    except SessionWriteConflictError:
        pass


def test_a_compaction_whose_first_kept_entry_goes_keeps_what_came_after_it(
    tmp_path: Path,
) -> None:
    """Removing the entry a compaction's `firstKeptEntryId` names moves that to the
    next kept entry of its path: the context keeps the entries that were not removed
    (and `verify` finds nothing), instead of losing every one before the compaction."""
    sm, ids = session(tmp_path)
    compaction = sm.append_compaction("summary", None, ids[1], 100)
    sm.append_message(user("five"))
    sm.remove_entries([ids[1]])
    entry = sm.get_entry(compaction)
    assert entry is not None and entry["firstKeptEntryId"] == ids[2]
    kept = [m.get("content") for m in sm.build_session_context().messages[1:]]
    assert kept == [user("three")["content"], assistant("four")["content"], "five"]
    path = sm.get_session_file()
    sm.close()
    assert path is not None
    assert check_session(path) == []
