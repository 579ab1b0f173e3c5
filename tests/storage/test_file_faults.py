"""Fault injection at the system-call level: write, short write, fsync, rename, ENOSPC.

Faults are injected into the `os` functions the file backend calls, so the real
code paths (loops on short writes, rollback, temp file + rename) are exercised.
After a fault: the error surfaces as SessionPersistenceError chaining the OSError,
the file on disk is what it was, and later operations keep raising.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from sessiontree import SessionManager, SessionPersistenceError, SessionTreeError
from sessiontree.storage import _file as file_backend
from tests.helpers import assistant, user

ENOSPC = OSError(errno.ENOSPC, "No space left on device")


@contextmanager
def fault(monkeypatch: pytest.MonkeyPatch, name: str) -> Iterator[None]:
    """Make `os.<name>` as seen by the file backend fail (or write short, then fail)."""
    if name == "short_write":
        real_write = os.write
        calls = {"n": 0}

        def short(fd: int, data: Any) -> int:
            calls["n"] += 1
            if calls["n"] == 1 and len(data) > 1:
                return real_write(fd, bytes(data[: len(data) // 2]))
            raise ENOSPC

        monkeypatch.setattr(file_backend.os, "write", short)
    else:

        def failing(*args: Any, **kwargs: Any) -> Any:
            raise ENOSPC

        monkeypatch.setattr(file_backend.os, name, failing)
    try:
        yield
    finally:
        monkeypatch.undo()


def persisted_session(directory: Path) -> SessionManager:
    sm = SessionManager.create("/proj", str(directory))
    sm.append_message(user("a"))
    sm.append_message(assistant("b"))
    sm.flush()
    return sm


@pytest.mark.parametrize("name", ["write", "short_write"])
def test_append_faults_leave_the_file_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    sm = persisted_session(tmp_path)
    path = sm.get_session_file() or ""
    before = Path(path).read_bytes()
    with fault(monkeypatch, name), pytest.raises(SessionPersistenceError) as info:
        sm.append_message(user("lost?"))
    assert isinstance(info.value.__cause__, OSError)
    assert info.value.__cause__.errno == errno.ENOSPC
    assert Path(path).read_bytes() == before  # a half-written line is rolled back
    # The disk is full for the rescue copy too: it is attempted, and never left partial.
    assert not [p for p in os.listdir(tmp_path) if ".conflict-" in p or p.endswith(".tmp")]
    with pytest.raises(SessionPersistenceError):
        sm.append_message(user("next"))
    with pytest.raises(SessionPersistenceError):
        sm.close()
    assert Path(path).read_bytes() == before


def test_fsync_fault_surfaces_at_flush(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sm = persisted_session(tmp_path)
    sm.append_message(user("c"))
    with fault(monkeypatch, "fsync"), pytest.raises(SessionPersistenceError):
        sm.flush()
    with pytest.raises(SessionPersistenceError):
        sm.append_message(user("d"))
    with pytest.raises(SessionPersistenceError):
        sm.close()


@pytest.mark.parametrize("name", ["replace", "fsync", "write"])
def test_rewrite_faults_leave_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    sm = persisted_session(tmp_path)
    path = sm.get_session_file() or ""
    before = Path(path).read_bytes()
    with fault(monkeypatch, name), pytest.raises(SessionPersistenceError):
        sm.set_session_name("renamed")
    assert Path(path).read_bytes() == before
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]  # temp file removed
    with pytest.raises(SessionPersistenceError):
        sm.rewrite_entries()
    with pytest.raises(SessionPersistenceError):
        sm.close()


def test_first_write_fault_creates_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sm = SessionManager.create("/proj", str(tmp_path))
    sm.append_message(user("a"))
    with fault(monkeypatch, "replace"), pytest.raises(SessionPersistenceError):
        sm.append_message(assistant("b"))
    assert not os.path.exists(sm.get_session_file() or "")
    # The refused append is not part of the session; what was there is intact.
    assert [e["message"]["content"] for e in sm.get_entries()] == ["a"]
    with pytest.raises(SessionPersistenceError):
        sm.close()


def test_failed_move_rolls_back_file_and_artifacts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sm = SessionManager.create("/old/project")
    sm.append_message(assistant())
    old = sm.get_session_file() or ""
    artifacts = Path(old[: -len(".jsonl")])
    artifacts.mkdir()
    (artifacts / "out.txt").write_text("x")
    before = Path(old).read_bytes()
    real_unlink = os.unlink

    def failing_unlink(path: Any, *args: Any, **kwargs: Any) -> None:
        if str(path) == old:
            raise OSError(errno.EACCES, "Permission denied")
        real_unlink(path, *args, **kwargs)

    monkeypatch.setattr(file_backend.os, "unlink", failing_unlink)
    with pytest.raises(SessionTreeError):
        sm.move_to("/new/project")
    monkeypatch.undo()
    # Everything is where it was: the file, its artifacts, and the manager's idea of both.
    assert Path(old).read_bytes() == before
    assert (artifacts / "out.txt").read_text() == "x"
    assert sm.get_session_file() == old and sm.get_cwd() == "/old/project"
    new_dir = Path(sm.get_session_dir()).parent / "--new-project--"
    assert not list(new_dir.glob("*.jsonl")) if new_dir.exists() else True
    sm.append_message(user("still writable"))
    sm.close()
