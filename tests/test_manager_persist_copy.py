"""`SessionManager.persist_copy(parent_session=...)`: the copy's header names a parent."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from helpers import assistant, user
from sessiontree import UNSET, SessionManager


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


def test_an_in_memory_put_blob_goes_to_the_agent_blobs_and_resolves_once_persisted(
    tmp_path: Path, agent_dir: Path
) -> None:
    # As omp's in-memory manager: images go to <agent dir>/blobs, so a ref taken
    # before the session has a file still resolves after it is copied to one.
    data = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 40
    sm = SessionManager.in_memory(str(tmp_path))
    put = sm.put_blob(data)
    assert (agent_dir / "blobs" / put.hash).read_bytes() == data
    image = {"type": "image", "data": put.ref, "mimeType": "image/png"}
    sm.append_message({"role": "user", "content": [image], "timestamp": 1})
    sm.append_message(assistant("seen"))
    copy = sm.persist_copy(str(tmp_path / "sessions"))
    path = copy.get_session_file()
    copy.close()
    assert path is not None
    assert put.ref in Path(path).read_text()
    with SessionManager.open(path, read_only=True) as reopened:
        block = reopened.get_entries()[0]["message"]["content"][0]
    assert base64.b64decode(block["data"]) == data


def test_a_cleared_label_in_memory_equals_the_line_written(tmp_path: Path) -> None:
    sm = SessionManager.create(str(tmp_path), str(tmp_path / "s"))
    first = sm.append_message(user("q"))
    sm.append_message(assistant("a"))
    sm.append_label_change(first, "keep")
    cleared = sm.append_label_change(first, UNSET)
    in_memory = sm.get_entry(cleared)
    path = sm.get_session_file()
    sm.close()
    assert in_memory is not None and UNSET not in in_memory.values() and "label" not in in_memory
    assert path is not None
    on_disk = json.loads(Path(path).read_text().splitlines()[-1])
    assert on_disk == in_memory
