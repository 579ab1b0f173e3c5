"""One writer per session (real processes) and conflict detection."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sessiontree import (
    SessionLockError,
    SessionManager,
    SessionWriteConflictError,
    load_entries_from_file,
)
from sessiontree.session import LOCK_CHECK_SECONDS
from sessiontree.storage import is_locked, lock_path_for
from tests.helpers import assistant, user

HOLDER = textwrap.dedent(
    """
    import sys, time
    from sessiontree import SessionManager
    sm = SessionManager.open(sys.argv[1])
    sm.append_message({"role": "user", "content": "from child", "timestamp": 1})
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
    sm.close()
    """
)


def start_holder(path: str, seconds: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, path, str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "locked"
    return proc


def make_session(directory: Path) -> str:
    with SessionManager.create("/proj", str(directory)) as sm:
        sm.append_message(user("a"))
        sm.append_message(assistant("b"))
        return sm.get_session_file() or ""


def test_second_writer_in_another_process_gets_lock_error_naming_the_pid(tmp_path: Path) -> None:
    path = make_session(tmp_path)
    proc = start_holder(path, 30)
    try:
        with pytest.raises(SessionLockError) as info:
            SessionManager.open(path)
        assert info.value.pid == proc.pid and str(proc.pid) in str(info.value)
        # Readers need no lock.
        ro = SessionManager.open(path, read_only=True)
        assert len(ro.get_entries()) == 3
        assert is_locked(SessionManager.open(path, read_only=True)._storage, path)
    finally:
        proc.kill()
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
    # The kernel released the lock when the holder died.
    with SessionManager.open(path) as sm:
        sm.append_message(user("after the holder died"))
    assert len(load_entries_from_file(path)) == 5


def test_same_process_second_writer_and_lock_file_cleanup(tmp_path: Path) -> None:
    path = make_session(tmp_path)
    sm = SessionManager.open(path)
    with pytest.raises(SessionLockError):
        SessionManager.open(path)
    assert os.path.exists(lock_path_for(path))
    sm.close()
    assert not os.path.exists(lock_path_for(path))  # no pile-up of lock files
    SessionManager.open(path).close()


def test_create_writes_nothing_until_the_first_write_then_locks(tmp_path: Path) -> None:
    directory = tmp_path / "sessions" / "--proj--"
    sm = SessionManager.create("/proj", str(directory))
    path = sm.get_session_file() or ""
    sm.append_message(user("hello"))
    # No directory, no lock file: an abandoned session leaves nothing behind.
    assert not directory.exists()
    sm.append_message(assistant("hi"))
    assert os.path.exists(path) and os.path.exists(lock_path_for(path))
    with pytest.raises(SessionLockError):
        SessionManager.open(path)
    sm.close()
    assert not os.path.exists(lock_path_for(path))
    abandoned = SessionManager.create("/proj", str(tmp_path / "other"))
    abandoned.append_message(user("never answered"))
    abandoned.close()
    assert not (tmp_path / "other").exists()


def test_lock_follows_fork_new_session_and_branched_session(tmp_path: Path) -> None:
    sm = SessionManager.create("/proj", str(tmp_path))
    a = sm.append_message(assistant("a"))
    first = sm.get_session_file() or ""
    result = sm.fork()
    assert result is not None
    second = result[1]
    assert not os.path.exists(lock_path_for(first)) and os.path.exists(lock_path_for(second))
    SessionManager.open(first).close()  # free again
    third = sm.create_branched_session(a) or ""
    assert os.path.exists(lock_path_for(third)) and not os.path.exists(lock_path_for(second))
    fourth = sm.new_session() or ""
    # A new session takes its lock with its first write; the old one is released now.
    assert not os.path.exists(lock_path_for(fourth)) and not os.path.exists(lock_path_for(third))
    sm.append_message(assistant("b"))
    assert os.path.exists(lock_path_for(fourth))
    sm.close()
    assert list(tmp_path.glob(".*lock")) == []


def test_rewrite_after_external_same_length_edit_raises_and_saves_a_copy(tmp_path: Path) -> None:
    path = make_session(tmp_path)
    sm = SessionManager.open(path)
    data = Path(path).read_bytes()
    Path(path).write_bytes(data.replace(b'"a"', b'"A"'))  # same length, different bytes
    with pytest.raises(SessionWriteConflictError) as info:
        sm.set_session_name("renamed")
    saved = info.value.saved_to
    assert saved is not None and ".jsonl.conflict-" in saved and not saved.endswith(".jsonl")
    copy = load_entries_from_file(saved)
    assert copy[0]["parentSession"] == path
    assert [e["id"] for e in copy[1:]] == [e["id"] for e in sm.get_entries()]
    assert Path(path).read_bytes() == data.replace(b'"a"', b'"A"')  # not overwritten
    with pytest.raises(SessionWriteConflictError):
        sm.append_message(user("still refused"))
    with pytest.raises(SessionWriteConflictError):
        sm.close()


def test_the_next_append_notices_a_replaced_file(tmp_path: Path) -> None:
    path = make_session(tmp_path)
    sm = SessionManager.open(path)
    sm.append_message(user("one"))
    replacement = Path(path).read_bytes()
    os.unlink(path)
    Path(path).write_bytes(replacement)  # same bytes, new inode: someone rewrote it
    with pytest.raises(SessionWriteConflictError):
        sm.append_message(user("two"))
    with pytest.raises(SessionWriteConflictError):
        sm.close()


def test_appends_without_a_gap_and_own_rewrites_are_not_conflicts(tmp_path: Path) -> None:
    path = make_session(tmp_path)
    with SessionManager.open(path) as sm:
        for i in range(20):
            sm.append_message(user(str(i)))
        sm.set_session_name("fine")
        time.sleep(LOCK_CHECK_SECONDS + 0.1)
        sm.append_message(user("after gap"))
        sm.rewrite_entries()
    assert len(load_entries_from_file(path)) == 24


def test_continue_recent_passes_over_a_session_another_process_writes(
    tmp_path: Path, agent_dir: Path
) -> None:
    older = make_session(tmp_path)
    time.sleep(0.01)
    newer = make_session(tmp_path)
    os.utime(older, (1_700_000_000, 1_700_000_000))
    proc = start_holder(newer, 30)
    try:
        with SessionManager.continue_recent("/proj", str(tmp_path)) as sm:
            assert sm.get_session_file() == older
    finally:
        proc.kill()
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
    with SessionManager.continue_recent("/proj", str(tmp_path)) as sm:
        assert sm.get_session_file() == newer  # free again once its writer died


def test_continue_recent_prefers_this_terminals_breadcrumb(
    tmp_path: Path, agent_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", None)
    monkeypatch.setenv("TMUX_PANE", "%7")
    sessions = agent_dir / "sessions" / "--proj--"
    first = make_session(sessions)  # writes this terminal's breadcrumb
    crumb = agent_dir / "terminal-sessions" / "tmux-%7"
    assert crumb.read_text().splitlines() == ["/proj", os.path.abspath(first)]
    time.sleep(0.01)
    monkeypatch.delenv("TMUX_PANE")
    make_session(sessions)  # newer, from another terminal
    monkeypatch.setenv("TMUX_PANE", "%7")
    with SessionManager.continue_recent("/proj") as sm:
        assert sm.get_session_file() == first
    # A breadcrumb pointing outside the store is ignored.
    crumb.write_text("/proj\n/etc/passwd.jsonl\n")
    with SessionManager.continue_recent("/proj") as sm:
        assert sm.get_session_file() != "/etc/passwd.jsonl"


def test_a_lost_lock_stops_the_writer_and_saves_the_session(tmp_path: Path) -> None:
    path = make_session(tmp_path)
    sm = SessionManager.open(path)
    sm.append_message(user("before"))
    # Someone removes our lock file; a second writer then locks a new one.
    os.unlink(lock_path_for(path))
    intruder = SessionManager.open(path)
    time.sleep(LOCK_CHECK_SECONDS + 0.1)
    with pytest.raises(SessionLockError) as info:
        sm.append_message(user("after"))
    assert "writer lock lost" in str(info.value) and "saved to" in str(info.value)
    saved = [p for p in os.listdir(tmp_path) if ".jsonl.conflict-" in p]
    assert len(saved) == 1
    # The refused append is not part of the session; everything before it is saved.
    assert load_entries_from_file(str(tmp_path / saved[0]))[-1]["message"]["content"] == "before"
    assert "after" not in [e["message"].get("content") for e in sm.get_entries()]
    with pytest.raises(SessionLockError):
        sm.close()
    assert os.path.exists(lock_path_for(path))  # the intruder's lock file is not ours to remove
    intruder.close()
    assert not os.path.exists(lock_path_for(path))


def test_every_backend_s_lock_error_gives_the_same_hint() -> None:
    from sessiontree.errors import SessionLockError

    by_pid = str(SessionLockError("/s.jsonl", 42))
    assert by_pid == (
        "/s.jsonl: session is being written by process 42; to read it meanwhile, "
        "open it with read_only=True"
    )
    named = str(SessionLockError("/s.jsonl", 42, holder="sessiontree pid 42 on h1"))
    assert named == by_pid.replace("process 42", "sessiontree pid 42 on h1")


def test_the_lock_error_says_how_to_read_the_session_meanwhile(tmp_path: Path) -> None:
    path = make_session(tmp_path)
    with SessionManager.open(path), pytest.raises(SessionLockError) as info:
        SessionManager.open(path)
    assert "read_only=True" in str(info.value)
    with SessionManager.open(path, read_only=True) as reader:  # works while it is held
        assert reader.get_session_id()
