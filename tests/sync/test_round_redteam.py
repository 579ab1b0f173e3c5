"""Attempts to break a round: a crash between a file made and its state recorded, a
clock that jumps back, a sessions dir that is not there."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.sync.test_round_killed import _kill_at
from tests.sync_support import Machine, append, entry_lines, message, new_session


def test_a_session_a_killed_round_made_and_the_user_deleted_comes_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The round died before its state recorded the file: the next one cannot tell a
    deletion from a file a power cut took, and makes it again (nothing lost)."""
    from tests.sync.test_round_killed import Killed

    a, b, hub = Machine(tmp_path, "a"), Machine(tmp_path, "b"), tmp_path / "hub"
    new_session(a.session_path("s1"), "s1", message("e1", None, "hi"))
    a.sync(hub, monkeypatch)
    with monkeypatch.context() as patch:
        _kill_at(patch, "sessiontree.sync._durable", "Barrier.flush", False, 1)
        with pytest.raises(Killed):
            b.sync(hub, monkeypatch)
    made = b.session_path("s1").read_bytes()
    b.session_path("s1").unlink()
    b.sync(hub, monkeypatch)
    assert b.session_path("s1").read_bytes() == made
    b.session_path("s1").unlink()  # deleted after a whole round: for good
    b.sync(hub, monkeypatch)
    assert not b.session_path("s1").exists()


def test_a_file_changed_under_a_clock_set_back_is_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, hub = Machine(tmp_path, "a"), Machine(tmp_path, "b"), tmp_path / "hub"
    path = a.session_path("s1")
    new_session(path, "s1", message("e1", None, "hi"), message("e2", "e1", "one"))
    a.sync(hub, monkeypatch)
    st = path.stat()
    # rewritten to the same size (pi's migration rewrite), its mtime set back by a clock
    data = path.read_bytes().replace(b'"one"', b'"two"')
    path.write_bytes(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    append(path, message("e3", "e2", "three"))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - 86_400 * 10**9))
    a.sync(hub, monkeypatch)
    b.sync(hub, monkeypatch)
    assert "e3" in entry_lines(b.session_path("s1").read_bytes())


def test_a_sessions_dir_that_is_not_there_deletes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, hub = Machine(tmp_path, "a"), Machine(tmp_path, "b"), tmp_path / "hub"
    new_session(a.session_path("s1"), "s1", message("e1", None, "hi"))
    a.sync(hub, monkeypatch)
    b.sync(hub, monkeypatch)
    sessions = b.agent_dir() / "sessions"
    away = b.agent_dir() / "sessions-unmounted"
    sessions.rename(away)  # the disk is not mounted
    b.sync(hub, monkeypatch)
    away.rename(sessions)
    append(a.session_path("s1"), message("a1", "e1", "more"))
    a.sync(hub, monkeypatch)
    b.sync(hub, monkeypatch)
    assert "a1" in entry_lines(b.session_path("s1").read_bytes())
