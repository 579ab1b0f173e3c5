"""`SessionManager.persist_copy`: a new persistent session holding a copy of this one
(in memory or not), as API.md describes it; `parent_session=` names a parent."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from sessiontree import UNSET, SessionManager, get_default_session_dir
from sessiontree.storage import MemorySessionStorage
from tests.helpers import assistant, user


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


def test_a_copy_is_a_new_session_with_the_same_entries_name_and_title_source(
    agent_dir: Path,
) -> None:
    sm = SessionManager.create("/work/project")
    sm.append_message(user("q"))
    sm.append_message(assistant("a"))
    assert sm.set_session_name("Named", "user")
    source_path = sm.get_session_file()
    assert source_path is not None
    before = Path(source_path).read_bytes()
    copy = sm.persist_copy()
    path = copy.get_session_file()
    assert path is not None
    # Written at once, in the cwd's dir of the agent dir (the default), with a new id.
    assert Path(path).is_file() and Path(path).read_bytes().count(b"\n") == 3
    assert Path(path).parent == Path(get_default_session_dir("/work/project"))
    assert copy.get_session_id() != sm.get_session_id()
    assert copy.get_entries() == sm.get_entries()
    assert copy.get_session_name() == "Named"
    header = _header(path)
    assert (header["title"], header["titleSource"]) == ("Named", "user")
    assert "parentSession" not in header
    # Independent: the copy's appends do not reach the source, whose file is unchanged.
    copy.append_message(user("only in the copy"))
    assert len(sm.get_entries()) == 2
    copy.close()
    assert Path(source_path).read_bytes() == before
    sm.append_message(user("the source still writes"))
    sm.close()


def test_a_copy_goes_to_the_storage_given(agent_dir: Path) -> None:
    sm = SessionManager.in_memory("/p")
    sm.append_message(user("q"))
    storage = MemorySessionStorage()
    copy = sm.persist_copy("/store/--p--", storage)
    path = copy.get_session_file()
    copy.close()
    assert path is not None and path.startswith("/store/--p--/")
    assert storage.exists(path) and not Path(path).exists()
    with SessionManager.open(path, storage=storage, read_only=True) as again:
        assert again.get_entries() == sm.get_entries()


@pytest.mark.parametrize("breadcrumb", [True, False])
def test_a_copy_leaves_a_breadcrumb_unless_told_not_to(
    tmp_path: Path, agent_dir: Path, monkeypatch: pytest.MonkeyPatch, breadcrumb: bool
) -> None:
    monkeypatch.setenv("TMUX_PANE", "%9")  # a terminal: breadcrumbs are written
    sm = SessionManager.in_memory(str(tmp_path))
    sm.append_message(user("q"))
    copy = sm.persist_copy(str(tmp_path / "sessions"), breadcrumb=breadcrumb)
    path = copy.get_session_file()
    copy.close()
    crumb = agent_dir / "terminal-sessions" / "tmux-%9"
    if breadcrumb:
        assert crumb.read_text().splitlines() == [str(tmp_path), path]
    else:
        assert not crumb.exists()


def test_a_copy_of_one_branch_names_its_source_file(tmp_path: Path) -> None:
    sm = SessionManager.create(str(tmp_path), str(tmp_path / "s"))
    first = sm.append_message(user("q"))
    kept = sm.append_message(assistant("kept"))
    sm.append_label_change(kept, "mark")
    sm.branch(first)
    sm.append_message(assistant("another branch"))
    copy = sm.persist_copy(str(tmp_path / "s"), leaf_id=kept)
    path = copy.get_session_file()
    assert path is not None
    assert [e["id"] for e in copy.get_entries()][:2] == [first, kept]
    assert copy.get_label(kept) == "mark"
    assert "another branch" not in Path(path).read_text()
    assert _header(path)["parentSession"] == sm.get_session_file()
    copy.close()
    sm.close()


def test_an_in_memory_put_blob_resolves_in_a_copy_to_another_agent_dir(
    tmp_path: Path, agent_dir: Path
) -> None:
    # The copy's images live where its file is: another agent dir's blobs/. The ref
    # put_blob returned names a blob in this agent dir, so the copy carries the image.
    data = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 40
    other = tmp_path / "other"
    (other / "blobs").mkdir(parents=True)
    sm = SessionManager.in_memory(str(tmp_path))
    put = sm.put_blob(data)
    image = {"type": "image", "data": put.ref, "mimeType": "image/png"}
    sm.append_message({"role": "user", "content": [image], "timestamp": 1})
    copy = sm.persist_copy(str(other / "sessions" / "--p--"))
    path = copy.get_session_file()
    copy.close()
    assert path is not None and put.ref in Path(path).read_text()
    assert (other / "blobs" / put.hash).read_bytes() == data
    with SessionManager.open(path, read_only=True) as reopened:
        block = reopened.get_entries()[0]["message"]["content"][0]
    assert base64.b64decode(block["data"]) == data
    assert sm.get_entries()[0]["message"]["content"][0]["data"] == put.ref  # source untouched
