"""Attempts to break a round: a crash between a file made and its state recorded, a
clock that jumps back, a sessions dir that is not there."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.sync.test_round_killed import _kill_at
from tests.sync_support import Machine, append, entries, entry_lines, message, new_session


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


def test_an_agent_line_written_between_the_check_and_the_merge_keeps_its_leaf(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pi appends without sessiontree's lock: its line can land after the merge looked
    at the file and before the merge's own write. The agent resumes at its line all
    the same."""
    import sessiontree.sync._pull as pull_module

    a, b, hub = Machine(tmp_path, "a"), Machine(tmp_path, "b"), tmp_path / "hub"
    new_session(a.session_path("s1"), "s1", message("e1", None, "hi"))
    a.sync(hub, monkeypatch)
    b.sync(hub, monkeypatch)
    append(a.session_path("s1"), message("a1", "e1", "laptop"))
    a.sync(hub, monkeypatch)
    append(b.session_path("s1"), message("b1", "e1", "desk"))
    original = pull_module.identity_now
    calls = [0]

    def racing(*args: object) -> object:
        found = original(*args)  # type: ignore[arg-type]
        calls[0] += 1
        if calls[0] == 1:  # the merge's look at the file: the agent writes right after
            append(b.session_path("s1"), message("b2", "b1", "still typing"))
        return found

    with monkeypatch.context() as patch:
        patch.setattr(pull_module, "identity_now", racing)
        b.sync(hub, monkeypatch)
    on_b = entries(b.session_path("s1").read_bytes())
    parents = {e["id"]: e.get("parentId") for e in on_b}
    chain, current = [], on_b[-1]["id"]
    while current is not None:
        chain.append(current)
        current = parents.get(current)
    assert "b2" in chain and "a1" in parents
    for _ in range(2):
        a.sync(hub, monkeypatch)
        b.sync(hub, monkeypatch)
    assert set(entry_lines(a.session_path("s1").read_bytes())) >= {"e1", "a1", "b1", "b2"}


@pytest.mark.parametrize("kind", ["symlink", "fifo", "symlinked project dir"])
def test_a_session_path_that_is_not_a_plain_file_is_never_written_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """A session file (or its project dir) swapped for a symlink or a FIFO on this
    machine gets no merge through it: the file it names is untouched, the round says
    so, and the entries wait in the hub until a plain file is there again."""
    a, b, hub = Machine(tmp_path, "a"), Machine(tmp_path, "b"), tmp_path / "hub"
    new_session(a.session_path("s1"), "s1", message("e1", None, "hi"))
    a.sync(hub, monkeypatch)
    b.sync(hub, monkeypatch)
    here = b.session_path("s1")
    kept = here.read_bytes()
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    victim = outside / here.name
    victim.write_bytes(kept)
    if kind == "symlink":
        here.unlink()
        here.symlink_to(victim)
    elif kind == "fifo":
        here.unlink()
        os.mkfifo(here)
    else:
        project = here.parent
        for f in project.iterdir():
            f.unlink()
        project.rmdir()
        project.symlink_to(outside)
    append(a.session_path("s1"), message("e2", "e1", "more"))
    a.sync(hub, monkeypatch)
    report = b.sync(hub, monkeypatch)
    assert victim.read_bytes() == kept
    assert any(str(here) in what for what, _ in report.skipped), report.skipped
    if kind != "symlinked project dir":
        here.unlink()
        here.write_bytes(kept)
        b.sync(hub, monkeypatch)
        assert entry_lines(here.read_bytes()) == entry_lines(a.session_path("s1").read_bytes())
