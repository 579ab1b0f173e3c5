"""A round killed at any point, run again, loses no entry and writes none twice."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sessiontree.sync import LEAF_MARKER
from tests.sync_support import Machine, append, entry_lines, message, new_session, pg_hub


class Killed(BaseException):
    """The process dying at this point (not an error any code would catch)."""


def _kill_at(
    monkeypatch: pytest.MonkeyPatch, target: str, name: str, after: bool, nth: int
) -> None:
    """Make the `nth` call of `target.name` die (before it does its work, or after)."""
    import importlib

    owner: Any = importlib.import_module(target)
    if "." in name:
        cls_name, name = name.split(".")
        owner = getattr(owner, cls_name)
    original: Callable[..., Any] = getattr(owner, name)
    calls = [0]

    def dying(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] == nth and not after:
            raise Killed
        result = original(*args, **kwargs)
        if calls[0] == nth:
            raise Killed
        return result

    monkeypatch.setattr(owner, name, dying)


POINTS = [
    ("sessiontree.sync._hub", "Hub.append", True),
    ("sessiontree.sync._hub", "Hub.append", False),
    ("sessiontree.sync._push", "append_journal", False),
    ("sessiontree.sync._push", "send_blobs", True),
    ("sessiontree.sync._pull", "create_new", True),
    ("sessiontree.sync._pull", "_append", True),
    ("sessiontree.sync._durable", "Barrier.flush", False),
    ("sessiontree.sync._pull", "fetch_blobs", True),
    ("sessiontree.sync._state", "SyncState.set_file", False),
    ("sessiontree.sync._state", "SyncState.set_log_offset", True),
    ("sessiontree.sync._state", "SyncState.hold", False),
    ("sessiontree.sync._round", "write_status", False),
]


@pytest.mark.parametrize(("target", "name", "after"), POINTS)
@pytest.mark.parametrize("nth", [1, 2])
def test_a_killed_round_run_again_loses_and_doubles_nothing(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    target: str,
    name: str,
    after: bool,
    nth: int,
) -> None:
    _killed_round(str(tmp_path / "hub"), tmp_path, monkeypatch, target, name, after, nth)


@pytest.mark.parametrize(("target", "name", "after"), POINTS[:3])
def test_a_killed_round_with_a_database_hub_loses_and_doubles_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str, name: str, after: bool
) -> None:
    with pg_hub() as hub:
        _killed_round(hub, tmp_path, monkeypatch, target, name, after, 2)


def _killed_round(
    hub: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    target: str,
    name: str,
    after: bool,
    nth: int,
) -> None:
    a, b = Machine(tmp_path, "a"), Machine(tmp_path, "b")
    new_session(a.session_path("s1"), "s1", message("e1", None, "hi"))
    new_session(a.session_path("s2"), "s2", message("g1", None, "second"))
    a.sync(hub, monkeypatch)
    b.sync(hub, monkeypatch)
    append(a.session_path("s1"), message("a1", "e1", "laptop"))
    append(b.session_path("s1"), message("b1", "e1", "desk"))
    append(a.session_path("s2"), message("g2", "g1", "laptop"))
    new_session(b.session_path("s3"), "s3", message("h1", None, "desk's"))
    new_session(a.session_path("s4"), "s4", message("k1", None, "laptop's"))
    with monkeypatch.context() as patch:
        _kill_at(patch, target, name, after, nth)
        died = 0
        for machine in (a, b, a, b):
            try:
                machine.sync(hub, monkeypatch)
            except Killed:
                died += 1
        assert died == 1
    for _ in range(2):
        a.sync(hub, monkeypatch)
        b.sync(hub, monkeypatch)
    want = {"s1": {"e1", "a1", "b1"}, "s2": {"g1", "g2"}, "s3": {"h1"}, "s4": {"k1"}}
    for sid, ids in want.items():
        on_a = entry_lines(a.session_path(sid).read_bytes())  # fails on an id twice
        on_b = entry_lines(b.session_path(sid).read_bytes())
        shared_a = {k: v for k, v in on_a.items() if LEAF_MARKER.encode() not in v}
        shared_b = {k: v for k, v in on_b.items() if LEAF_MARKER.encode() not in v}
        assert set(shared_a) == ids
        assert shared_a == shared_b


def test_a_file_a_crash_left_empty_is_filled_as_it_was_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, hub = Machine(tmp_path, "a"), Machine(tmp_path, "b"), tmp_path / "hub"
    new_session(a.session_path("s1"), "s1", message("e1", None, "hi"))
    a.sync(hub, monkeypatch)
    with monkeypatch.context() as patch:
        _kill_at(patch, "sessiontree.sync._pull", "create_new", True, 1)
        with pytest.raises(Killed):
            b.sync(hub, monkeypatch)
    b.session_path("s1").write_bytes(b"")  # written, not yet durable: the power went
    b.sync(hub, monkeypatch)
    assert b.files() == a.files()
