"""SessionManager's behaviour on every storage backend, through the public API only.

Persistence, reopening, never overwriting an invalid file, migration on load,
blobs, one writer per session and conflict detection: the same tests run on
files, in memory and on PostgreSQL (`storage=`).
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import pytest

from sessiontree import (
    FileSessionStorage,
    InvalidSessionFileError,
    MemorySessionStorage,
    SessionLockError,
    SessionManager,
    SessionStorage,
    SessionTreeError,
    SessionWriteConflictError,
    load_entries_from_file,
    serialize_entry,
)
from tests.helpers import assistant, user
from tests.pg_support import pg_storage

BACKENDS: dict[str, Callable[[], AbstractContextManager[Any]]] = {
    "file": lambda: nullcontext(FileSessionStorage()),
    "memory": lambda: nullcontext(MemorySessionStorage()),
    # root defaults to the agent dir (the per-test PI_CODING_AGENT_DIR)
    "postgres": lambda: pg_storage(),
}


@pytest.fixture(params=list(BACKENDS))
def storage(request: pytest.FixtureRequest, agent_dir: Path) -> Iterator[SessionStorage]:
    with BACKENDS[request.param]() as opened:
        yield opened


@pytest.fixture
def session_dir(storage: SessionStorage, agent_dir: Path) -> str:
    directory = str(agent_dir / "sessions" / "--proj--")
    storage.ensure_dir(directory)
    return directory


def raw_lines(storage: SessionStorage, path: str) -> list[str]:
    return storage.read_text(path).splitlines()


def write_raw(storage: SessionStorage, path: str, data: bytes) -> None:
    storage.write_atomic(path, [data])


def make_session(storage: SessionStorage, session_dir: str) -> SessionManager:
    sm = SessionManager.create("/proj", session_dir, storage=storage)
    first = sm.append_message(user("a"))
    sm.append_message(assistant("b"))
    sm.append_label_change(first, "start")
    sm.branch(first)
    sm.append_message(user("c"))
    sm.append_compaction("sum", "s", first, 10)
    sm.append_thinking_level_change("high")
    return sm


def test_persists_one_line_per_append_after_first_assistant(
    storage: SessionStorage, session_dir: str
) -> None:
    sm = SessionManager.create("/proj", session_dir, storage=storage)
    path = sm.get_session_file() or ""
    sm.append_message(user("hello"))
    assert not storage.exists(path)  # nothing before the first assistant message
    sm.append_message(assistant("hi"))
    assert len(raw_lines(storage, path)) == 3
    for i in range(5):
        sm.append_message(user(str(i)))
        assert len(raw_lines(storage, path)) == 4 + i
    sm.close()
    lines = raw_lines(storage, path)
    assert lines[0] == serialize_entry(sm.get_header())  # type: ignore[arg-type]
    assert lines[1:] == [serialize_entry(e) for e in sm.get_entries()]
    assert storage.list_files(session_dir, "*.jsonl") == [path]


def test_reopen_equals_in_memory_state_and_appends_continue(
    storage: SessionStorage, session_dir: str
) -> None:
    sm = make_session(storage, session_dir)
    sm.close()
    path = sm.get_session_file() or ""
    with SessionManager.open(path, storage=storage) as reopened:
        assert reopened.get_entries() == sm.get_entries()
        assert reopened.get_header() == sm.get_header()
        assert reopened.get_leaf_id() == sm.get_leaf_id()
        assert reopened.build_session_context() == sm.build_session_context()
        assert reopened.get_cwd() == "/proj"
        new_id = reopened.append_message(user("more"))
    loaded = load_entries_from_file(path, storage=storage)
    assert loaded[-1]["id"] == new_id and loaded[-1]["parentId"] == sm.get_leaf_id()
    assert len(loaded) == len(sm.get_entries()) + 2


def test_invalid_file_is_never_overwritten(storage: SessionStorage, session_dir: str) -> None:
    path = os.path.join(session_dir, "damaged.jsonl")
    original = b'{"type":"message","id":"a"}\n{"type":"session","id":"x"}\n'
    write_raw(storage, path, original)
    before = storage.stat(path)
    with pytest.raises(InvalidSessionFileError) as info:
        SessionManager.open(path, storage=storage)
    assert info.value.path == path
    assert storage.read_text(path).encode() == original
    assert storage.stat(path).ino == before.ino
    assert load_entries_from_file(path, storage=storage) == []


def test_blank_file_starts_a_session_there(storage: SessionStorage, session_dir: str) -> None:
    path = os.path.join(session_dir, "blank.jsonl")
    write_raw(storage, path, b"  \n\n")
    with SessionManager.open(path, storage=storage) as sm:
        sm.append_message(user("x"))
        session_id = sm.get_session_id()
    loaded = load_entries_from_file(path, storage=storage)
    assert loaded[0]["id"] == session_id and len(loaded) == 2


def test_v1_file_is_migrated_and_rewritten_on_load(
    storage: SessionStorage, session_dir: str
) -> None:
    path = os.path.join(session_dir, "old.jsonl")
    v1 = [
        {
            "type": "session",
            "id": "v1session",
            "timestamp": "2025-01-01T00:00:00.000Z",
            "cwd": "/p",
        },
        {"type": "message", "timestamp": "2025-01-01T00:00:01.000Z", "message": user("q")},
        {"type": "message", "timestamp": "2025-01-01T00:00:02.000Z", "message": assistant("a")},
        {
            "type": "compaction",
            "timestamp": "2025-01-01T00:00:03.000Z",
            "summary": "s",
            "firstKeptEntryIndex": 2,
            "tokensBefore": 5,
        },
    ]
    write_raw(storage, path, "".join(serialize_entry(e) + "\n" for e in v1).encode())
    before = storage.stat(path)
    with SessionManager.open(path, storage=storage) as sm:
        entries = sm.get_entries()
    assert storage.stat(path).ino != before.ino  # rewritten atomically: a new inode
    stored = load_entries_from_file(path, storage=storage)
    assert stored[0]["version"] == 3
    assert [e["id"] for e in stored[1:]] == [e["id"] for e in entries]
    assert stored[2]["parentId"] == stored[1]["id"]
    assert stored[3]["firstKeptEntryId"] == stored[2]["id"]


def test_read_only_open_writes_nothing(storage: SessionStorage, session_dir: str) -> None:
    with pytest.raises(FileNotFoundError):
        SessionManager.open(
            os.path.join(session_dir, "missing.jsonl"), storage=storage, read_only=True
        )
    assert not storage.exists(os.path.join(session_dir, "missing.jsonl"))
    sm = make_session(storage, session_dir)
    sm.close()
    path = sm.get_session_file() or ""
    before = storage.read_text(path)
    with SessionManager.open(path, storage=storage, read_only=True) as ro:
        with pytest.raises(SessionTreeError):
            ro.append_message(user())
    assert storage.read_text(path) == before


def test_one_writer_per_session(storage: SessionStorage, session_dir: str) -> None:
    sm = make_session(storage, session_dir)
    path = sm.get_session_file() or ""
    with pytest.raises(SessionLockError):
        SessionManager.open(path, storage=storage)
    with SessionManager.open(path, storage=storage, read_only=True) as ro:  # readers never lock
        assert ro.get_leaf_id() == sm.get_leaf_id()
    sm.close()
    with SessionManager.open(path, storage=storage) as again:
        again.append_message(user("next writer"))


def test_rewrite_after_an_edit_behind_our_back_raises_conflict(
    storage: SessionStorage, session_dir: str
) -> None:
    sm = make_session(storage, session_dir)
    path = sm.get_session_file() or ""
    text = storage.read_text(path)
    storage.write_text(path, text.replace('"sum"', '"SUM"'))  # same length, new content
    with pytest.raises(SessionWriteConflictError) as info:
        sm.set_session_name("renamed", "user")
    assert info.value.saved_to and storage.exists(info.value.saved_to)
    assert '"SUM"' in storage.read_text(path)  # the other writer's work survives
    with pytest.raises(SessionWriteConflictError):
        sm.close()


def test_name_fork_and_move(storage: SessionStorage, session_dir: str, agent_dir: Path) -> None:
    sm = make_session(storage, session_dir)
    assert sm.set_session_name("chosen", "user")
    old_file, new_file = sm.fork() or ("", "")
    assert storage.exists(old_file) and storage.exists(new_file)
    assert load_entries_from_file(new_file, storage=storage)[0]["title"] == "chosen"
    sm.move_to("/elsewhere")
    moved = sm.get_session_file() or ""
    assert moved.startswith(str(agent_dir / "sessions" / "--elsewhere--"))
    assert not storage.exists(new_file) and storage.exists(moved)
    sm.append_message(user("after move"))
    sm.close()
    assert load_entries_from_file(moved, storage=storage)[-1]["message"]["content"] == "after move"


def test_torn_last_line_is_repaired_by_the_next_append(
    storage: SessionStorage, session_dir: str
) -> None:
    sm = make_session(storage, session_dir)
    sm.close()
    path = sm.get_session_file() or ""
    writer = storage.open_writer(path)
    writer.write_line('{"type":"message","id":"tor')  # torn by a crash
    writer.close()
    with SessionManager.open(path, storage=storage) as again:
        new_id = again.append_message(user("after torn"))
    loaded = load_entries_from_file(path, storage=storage)
    assert loaded[-1]["id"] == new_id
    assert len(loaded) == len(sm.get_entries()) + 2


def test_images_go_to_the_blob_store_and_come_back(
    storage: SessionStorage, session_dir: str
) -> None:
    image = base64.b64encode(os.urandom(3000)).decode()
    block = {"type": "image", "data": image, "mimeType": "image/png"}
    sm = SessionManager.create("/proj", session_dir, storage=storage)
    sm.append_message({"role": "user", "content": [block], "timestamp": 1})
    sm.append_message(assistant())
    sm.close()
    path = sm.get_session_file() or ""
    assert image not in storage.read_text(path)  # externalized as a blob ref
    assert "blob:sha256:" in storage.read_text(path)
    with SessionManager.open(path, storage=storage, read_only=True) as again:
        assert again.get_entries()[0]["message"]["content"][0]["data"] == image


def test_list_finds_every_session_newest_first(storage: SessionStorage, session_dir: str) -> None:
    made = []
    for n in range(3):
        sm = SessionManager.create("/proj", session_dir, storage=storage)
        sm.append_message(user(f"question {n}"))
        sm.append_message(assistant(f"answer {n}"))
        if n == 1:
            sm.set_session_name("named", "user")
        sm.close()
        made.append(sm)
    write_raw(storage, os.path.join(session_dir, "junk.jsonl"), b"not json\n")
    listed = SessionManager.list("/proj", session_dir, storage=storage)
    assert [i.id for i in listed] == [sm.get_session_id() for sm in reversed(made)]
    assert [i.title for i in listed] == [None, "named", None]
    assert [i.first_message for i in listed] == ["question 2", "question 1", "question 0"]
    assert [i.message_count for i in listed] == [2, 2, 2]
    assert listed[0].all_messages_text == "question 2 answer 2"
