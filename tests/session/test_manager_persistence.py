"""SessionManager on real files: deferred persistence, appends, rewrites, reopen."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from sessiontree import (
    FileSessionStorage,
    InvalidSessionFileError,
    SessionManager,
    SessionPersistenceError,
    SessionTreeError,
    load_entries_from_file,
    serialize_entry,
)
from tests.helpers import assistant, user


def lines(path: str) -> list[str]:
    return Path(path).read_text().splitlines()


def test_nothing_written_before_first_assistant_then_one_line_per_append(tmp_path: Path) -> None:
    sm = SessionManager.create("/proj", str(tmp_path))
    path = sm.get_session_file()
    assert path is not None and path.startswith(str(tmp_path))
    assert Path(path).name.endswith(f"_{sm.get_session_id()}.jsonl")
    sm.append_model_change("a/b")
    sm.append_message(user("hello"))
    assert not os.path.exists(path)
    sm.append_message(assistant("hi"))
    assert len(lines(path)) == 4  # header + 3 entries, written at once
    for i in range(5):
        sm.append_message(user(str(i)))
        assert len(lines(path)) == 5 + i
    sm.close()
    raw = lines(path)
    assert raw[0] == serialize_entry(sm.get_header())  # type: ignore[arg-type]
    assert raw[1:] == [serialize_entry(e) for e in sm.get_entries()]


def test_file_and_dir_are_private(tmp_path: Path) -> None:
    with SessionManager.create("/proj", str(tmp_path / "s")) as sm:
        sm.append_message(assistant())
        path = sm.get_session_file()
    assert path is not None
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "s").st_mode) == 0o700


def test_reopen_equals_in_memory_state(tmp_path: Path) -> None:
    sm = SessionManager.create("/proj", str(tmp_path))
    a = sm.append_message(user("a"))
    b = sm.append_message(assistant("b"))
    sm.append_label_change(a, "start")
    sm.branch(a)
    sm.append_message(user("c"))
    sm.append_compaction("sum", "s", a, 10)
    sm.branch(b)
    sm.append_thinking_level_change("high")
    sm.close()
    reopened = SessionManager.open(sm.get_session_file() or "")
    assert reopened.get_entries() == sm.get_entries()
    assert reopened.get_header() == sm.get_header()
    assert reopened.get_leaf_id() == sm.get_leaf_id()
    assert reopened.get_label(a) == "start"
    assert reopened.build_session_context() == sm.build_session_context()
    assert reopened.get_cwd() == "/proj"
    reopened.close()


def test_ensure_on_disk_writes_early_and_every_entry_after(tmp_path: Path) -> None:
    sm = SessionManager.create("/proj", str(tmp_path))
    sm.append_message(user("a"))
    sm.ensure_on_disk()
    path = sm.get_session_file() or ""
    assert len(lines(path)) == 2
    sm.append_message(user("b"))
    assert len(lines(path)) == 3
    sm.close()


def test_open_missing_or_blank_file_initialises_a_session_there(tmp_path: Path) -> None:
    for content in (None, b"", b"  \n\n"):
        path = tmp_path / "s.jsonl"
        if content is not None:
            path.write_bytes(content)
        elif path.exists():
            path.unlink()
        sm = SessionManager.open(str(path))
        assert sm.get_session_file() == str(path)
        header = load_entries_from_file(str(path))
        assert len(header) == 1 and header[0]["id"] == sm.get_session_id()
        sm.append_message(user("x"))  # persisted at once, as the reference does
        assert len(lines(str(path))) == 2
        sm.close()


def test_invalid_header_raises_and_leaves_the_file_untouched(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    original = b'{"type":"message","id":"a"}\n{"type":"session","id":"x"}\n'
    path.write_bytes(original)
    with pytest.raises(InvalidSessionFileError) as info:
        SessionManager.open(str(path))
    assert info.value.path == str(path) and str(path) in str(info.value)
    assert path.read_bytes() == original
    assert load_entries_from_file(str(path)) == []


def test_read_only_open_writes_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "missing.jsonl"
    with pytest.raises(FileNotFoundError):
        SessionManager.open(str(missing), read_only=True)
    assert not missing.exists()
    sm = SessionManager.create("/proj", str(tmp_path))
    sm.append_message(assistant())
    sm.close()
    path = sm.get_session_file() or ""
    before = Path(path).read_bytes()
    ro = SessionManager.open(path, read_only=True)
    assert ro.is_read_only()
    with pytest.raises(SessionTreeError):
        ro.append_message(user())
    with pytest.raises(SessionTreeError):
        ro.set_session_name("x")
    ro.close()
    assert Path(path).read_bytes() == before


def test_unterminated_last_line_is_kept_and_next_append_starts_fresh(tmp_path: Path) -> None:
    sm = SessionManager.create("/proj", str(tmp_path))
    sm.append_message(assistant())
    sm.close()
    path = sm.get_session_file() or ""
    complete = serialize_entry(
        {
            "type": "message",
            "id": "zz",
            "parentId": sm.get_leaf_id(),
            "timestamp": "2026-01-01T00:00:00.000Z",
            "message": user("tail"),
        }
    )
    with open(path, "a") as f:
        f.write(complete)  # valid, but no "\n"
    sm2 = SessionManager.open(path)
    assert sm2.get_leaf_id() == "zz"
    sm2.append_message(user("next"))
    sm2.close()
    assert [e["id"] for e in load_entries_from_file(path)][-2] == "zz"
    with open(path, "a") as f:
        f.write('{"type":"message","id":"tor')  # torn by a crash
    sm3 = SessionManager.open(path)
    new_id = sm3.append_message(user("after torn"))
    sm3.close()
    loaded = load_entries_from_file(path)
    assert loaded[-1]["id"] == new_id and len(loaded) == 5


def test_set_session_name_rules_and_atomic_rewrite(tmp_path: Path) -> None:
    sm = SessionManager.create("/proj", str(tmp_path))
    assert sm.set_session_name("  first\x00 name\n\tx  ") is True
    assert sm.get_session_name() == "first name x"
    sm.append_message(assistant())
    path = sm.get_session_file() or ""
    assert sm.set_session_name("chosen", "user") is True
    assert sm.set_session_name("auto later", "auto") is False
    assert sm.set_session_name("   ") is False
    assert sm.get_session_name() == "chosen"
    header = load_entries_from_file(path)[0]
    assert (header["title"], header["titleSource"]) == ("chosen", "user")
    assert list(header) == ["type", "version", "id", "timestamp", "cwd", "title", "titleSource"]
    assert len(lines(path)) == 2  # no entry appended for a rename
    sm.close()


def test_rewrite_entries_after_in_place_edit(tmp_path: Path) -> None:
    sm = SessionManager.create("/proj", str(tmp_path))
    a = sm.append_message(assistant("old"))
    entry = sm.get_entry(a)
    assert entry is not None
    entry["message"]["content"][0]["text"] = "new"
    sm.rewrite_entries()
    sm.append_message(user("after"))
    sm.close()
    loaded = load_entries_from_file(sm.get_session_file() or "")
    assert loaded[1]["message"]["content"][0]["text"] == "new"
    assert len(loaded) == 3


def test_fork_and_fork_from(tmp_path: Path) -> None:
    sm = SessionManager.create("/proj", str(tmp_path))
    sm.append_message(user("a"))
    sm.append_message(assistant("b"))
    sm.set_session_name("named", "user")
    old_id = sm.get_session_id()
    result = sm.fork()
    assert result is not None
    old_file, new_file = result
    assert old_file != new_file and os.path.exists(old_file) and os.path.exists(new_file)
    assert sm.get_session_id() != old_id
    assert sm.get_header()["parentSession"] == old_id  # type: ignore[index]
    assert [e["id"] for e in load_entries_from_file(new_file)[1:]] == [
        e["id"] for e in load_entries_from_file(old_file)[1:]
    ]
    sm.close()
    other = SessionManager.fork_from(old_file, "/elsewhere", str(tmp_path / "b"))
    header = other.get_header()
    assert header is not None and header["parentSession"] == old_id
    assert header["title"] == "named" and header["cwd"] == "/elsewhere"
    assert len(other.get_entries()) == 2 and os.path.exists(other.get_session_file() or "")
    other.close()
    assert SessionManager.in_memory().fork() is None


def test_new_session_and_create_branched_session(tmp_path: Path) -> None:
    sm = SessionManager.create("/proj", str(tmp_path))
    a = sm.append_message(user("a"))
    b = sm.append_message(assistant("b"))
    sm.append_label_change(a, "keep")
    sm.branch(a)
    sm.append_message(user("c"))
    first_file = sm.get_session_file() or ""
    new_path = sm.create_branched_session(b)
    assert new_path is not None and new_path != first_file
    loaded = load_entries_from_file(new_path)
    assert loaded[0]["parentSession"] == first_file
    assert [e["type"] for e in loaded[1:]] == ["message", "message", "label"]
    assert loaded[3]["targetId"] == a and loaded[3]["label"] == "keep"
    assert len(load_entries_from_file(first_file)) == 5  # untouched
    path3 = sm.new_session(parent_session="lineage")
    assert path3 is not None and not os.path.exists(path3)
    assert sm.get_entries() == [] and sm.get_header()["parentSession"] == "lineage"  # type: ignore[index]
    sm.close()


def test_move_to_moves_file_and_artifacts(tmp_path: Path, agent_dir: Path) -> None:
    sm = SessionManager.create("/old/project")
    sm.append_message(assistant())
    old = sm.get_session_file() or ""
    artifacts = old[: -len(".jsonl")]
    os.makedirs(artifacts)
    Path(artifacts, "out.txt").write_text("x")
    sm.move_to("/new/project")
    new = sm.get_session_file() or ""
    assert "--new-project--" in new and os.path.exists(new) and not os.path.exists(old)
    assert Path(new[: -len(".jsonl")], "out.txt").read_text() == "x"
    assert load_entries_from_file(new)[0]["cwd"] == "/new/project"
    sm.append_message(user("after move"))
    sm.close()
    assert len(load_entries_from_file(new)) == 3


class FailingStorage(FileSessionStorage):
    """A real file storage whose chosen operations fail like a full disk."""

    def __init__(self) -> None:
        super().__init__()
        self.fail: set[str] = set()

    def write_atomic(self, path: str, chunks: Iterable[bytes]) -> None:
        if "write_atomic" in self.fail:
            raise OSError(errno.ENOSPC, "No space left on device")
        super().write_atomic(path, chunks)

    def open_writer(self, path: str, flags: str = "a") -> Any:
        writer = super().open_writer(path, flags)
        return BrokenWriter(writer) if "write" in self.fail else writer


class BrokenWriter:
    """A writer whose writes fail; everything else is the real writer."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def write_bytes(self, data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    def write_line(self, line: str) -> None:
        self.write_bytes(line.encode())

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_failed_first_write_surfaces_and_is_stored(tmp_path: Path) -> None:
    storage = FailingStorage()
    storage.fail.add("write_atomic")
    sm = SessionManager.create("/proj", str(tmp_path), storage=storage)
    sm.append_message(user("a"))
    with pytest.raises(SessionPersistenceError) as info:
        sm.append_message(assistant())
    assert isinstance(info.value.__cause__, OSError)
    assert str(sm.get_session_file()) in str(info.value)
    storage.fail.clear()  # even when the disk recovers, the state is unknown: keep raising
    with pytest.raises(SessionPersistenceError):
        sm.append_message(user("b"))
    with pytest.raises(SessionPersistenceError):
        sm.flush()
    with pytest.raises(SessionPersistenceError):
        sm.close()
    assert not os.path.exists(sm.get_session_file() or "")


def test_failed_append_and_failed_rewrite_leave_the_file_intact(tmp_path: Path) -> None:
    storage = FailingStorage()
    sm = SessionManager.create("/proj", str(tmp_path), storage=storage)
    sm.append_message(assistant())
    sm.flush()
    path = sm.get_session_file() or ""
    before = Path(path).read_bytes()
    storage.fail.add("write_atomic")
    with pytest.raises(SessionPersistenceError):
        sm.set_session_name("new name")
    assert Path(path).read_bytes() == before
    with pytest.raises(SessionPersistenceError):
        sm.close()  # raises the stored error, but releases the file and its lock
    storage.fail.clear()
    sm2 = SessionManager.open(path, storage=storage)
    storage.fail = {"write"}
    with pytest.raises(SessionPersistenceError) as info:
        sm2.append_message(user("x"))
    assert Path(path).read_bytes() == before
    # Nothing is silently dropped: the whole in-memory session was saved beside the file.
    rescue = [p for p in os.listdir(tmp_path) if ".jsonl.conflict-" in p]
    assert len(rescue) == 1 and rescue[0] in str(info.value)
    saved = load_entries_from_file(str(tmp_path / rescue[0]))
    assert saved[0]["parentSession"] == path
    # The failed append is not part of the session (the caller got the error);
    # everything before it is in the rescue copy and in memory alike.
    assert [e["id"] for e in saved[1:]] == [e["id"] for e in sm2.get_entries()]
    with pytest.raises(SessionPersistenceError):
        sm2.append_message(user("y"))
    with pytest.raises(SessionPersistenceError):
        sm2.close()


def test_context_manager_and_usage_statistics(tmp_path: Path) -> None:
    with SessionManager.create("/proj", str(tmp_path)) as sm:
        sm.append_message(assistant())
        sm.append_message(assistant())
    stats = SessionManager.open(sm.get_session_file() or "", read_only=True).get_usage_statistics()
    assert stats.input == 200 and stats.cost == pytest.approx(0.6)


def slot_line(title: str, source: str | None = "auto") -> bytes:
    slot: dict[str, object] = {"type": "title", "v": 1, "title": title}
    if source:
        slot["source"] = source
    slot["updatedAt"] = "2026-01-01T00:00:00.000Z"
    slot["pad"] = ""
    unpadded = serialize_entry(slot).encode() + b"\n"
    slot["pad"] = " " * (256 - len(unpadded))
    line = serialize_entry(slot).encode() + b"\n"
    assert len(line) == 256
    return line


def test_title_slot_is_read_kept_and_updated_in_place(tmp_path: Path) -> None:
    path = tmp_path / "omp.jsonl"
    header = {
        "type": "session",
        "version": 3,
        "id": "s1",
        "timestamp": "2026-01-01T00:00:00.000Z",
        "cwd": "/p",
    }
    entry = {
        "type": "message",
        "id": "a",
        "parentId": None,
        "timestamp": "2026-01-01T00:00:01.000Z",
        "message": user("x"),
    }
    body = (serialize_entry(header) + "\n" + serialize_entry(entry) + "\n").encode()
    path.write_bytes(slot_line("Slot title") + body)
    sm = SessionManager.open(str(path))
    assert sm.get_session_name() == "Slot title"
    sm.rewrite_entries()
    assert path.read_bytes() == slot_line("Slot title") + body  # byte for byte
    assert sm.set_session_name("A much newer name ✓", "user")
    data = path.read_bytes()
    first, rest = data[:256], data[256:]
    assert first.endswith(b"\n") and b'"title":"A much newer name \xe2\x9c\x93"' in first
    assert b'"source":"user"' in first
    assert load_entries_from_file(str(path))[0]["title"] == "A much newer name ✓"
    assert rest.splitlines()[1] == serialize_entry(entry).encode()
    sm.close()
    long_name = "é" * 400
    with SessionManager.open(str(path)) as sm2:
        sm2.set_session_name(long_name, "user")
    data = path.read_bytes()
    assert data[255:256] == b"\n" and len(data.split(b"\n", 1)[0]) == 255  # still fixed width
    # The slot's title (cut to fit its 256 bytes) replaces the header's, as omp reads it.
    shown = SessionManager.open(str(path), read_only=True).get_session_name()
    assert shown is not None and 50 < len(shown) < len(long_name)
    assert long_name.startswith(shown)
    assert load_entries_from_file(str(path))[0]["title"] == long_name  # the header keeps it all


def test_names_from_other_writers_entries(tmp_path: Path) -> None:
    path = tmp_path / "pi.jsonl"
    header = {
        "type": "session",
        "version": 3,
        "id": "s1",
        "timestamp": "2026-01-01T00:00:00.000Z",
        "cwd": "/p",
    }
    lines = [
        header,
        {
            "type": "session_info",
            "id": "a",
            "parentId": None,
            "timestamp": "2026-01-01T00:00:01.000Z",
            "name": "first",
        },
        {
            "type": "title_change",
            "id": "b",
            "parentId": "a",
            "timestamp": "2026-01-01T00:00:02.000Z",
            "title": "second",
            "source": "auto",
        },
    ]
    path.write_text("".join(serialize_entry(x) + "\n" for x in lines))
    assert SessionManager.open(str(path), read_only=True).get_session_name() == "second"
