"""A session merged by a sync after two machines continued it apart opens in pi 0.73.1,
pi 1.6.0 and oh-my-pi, each with the context sessiontree computes at its leaf: the
leaf marker keeps each machine's agent where it left off."""

from __future__ import annotations

from pathlib import Path

import pytest

from sessiontree import SessionManager
from sessiontree.sync import LEAF_MARKER
from tests import peers
from tests.sync_support import Machine, append, entries, message, new_session


@pytest.mark.parametrize("peer", peers.PEERS)
def test_a_merged_diverged_session_opens_in_every_peer_at_its_own_leaf(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, peer: str
) -> None:
    a, b, hub = Machine(tmp_path, "a"), Machine(tmp_path, "b"), tmp_path / "hub"
    new_session(
        a.session_path("s1"),
        "s1",
        message("e1", None, "hi"),
        message("e2", "e1", "hello", "assistant"),
    )
    a.sync(hub, monkeypatch)
    b.sync(hub, monkeypatch)
    append(a.session_path("s1"), message("a1", "e2", "on the laptop"))
    append(a.session_path("s1"), message("a2", "a1", "laptop reply", "assistant"))
    append(b.session_path("s1"), message("b1", "e2", "on the desk"))
    for _ in range(2):
        a.sync(hub, monkeypatch)
        b.sync(hub, monkeypatch)
    for machine, own in ((a, "laptop reply"), (b, "on the desk")):
        path = machine.session_path("s1")
        assert entries(path.read_bytes())[-1]["customType"] == LEAF_MARKER
        with SessionManager.open(str(path), read_only=True) as sm:
            ours = sm.build_session_context().messages
        theirs = peers.peer_context(peer, path)["messages"]
        assert theirs == ours
        last = ours[-1]["content"]
        assert own in (last if isinstance(last, str) else last[0]["text"])
