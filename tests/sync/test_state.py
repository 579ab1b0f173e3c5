"""This machine's memory of a hub: two syncs with one hub take turns, and a lost state
costs bytes, never an entry or a line twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from sessiontree.sync import SyncBusyError
from sessiontree.sync._state import locked_state, state_path
from tests.sync_support import Machine, append, entry_lines, message, new_session


def test_a_second_sync_with_the_same_hub_waits_then_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = Machine(tmp_path, "a")
    with a.env(monkeypatch), locked_state(str(tmp_path / "hub")):
        with pytest.raises(SyncBusyError, match="another sync"):
            with locked_state(str(tmp_path / "hub"), wait=0.3):
                pass


def test_a_lost_state_costs_a_re_read_and_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, hub = Machine(tmp_path, "a"), Machine(tmp_path, "b"), tmp_path / "hub"
    new_session(a.session_path("s1"), "s1", message("e1", None, "hi"))
    a.sync(hub, monkeypatch)
    b.sync(hub, monkeypatch)
    append(a.session_path("s1"), message("a1", "e1", "laptop"))
    append(b.session_path("s1"), message("b1", "e1", "desk"))
    a.sync(hub, monkeypatch)
    for m in (a, b):
        with m.env(monkeypatch):
            Path(state_path(str(hub))).unlink()
    for _ in range(2):
        a.sync(hub, monkeypatch)
        b.sync(hub, monkeypatch)
    for m in (a, b):
        ids = entry_lines(m.session_path("s1").read_bytes())  # fails on an id twice
        assert {"e1", "a1", "b1"} <= set(ids)
