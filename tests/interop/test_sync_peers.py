"""A session merged by a sync after two machines continued it apart, and every file of
a seeded run of the sync model, opens in pi 0.73.1, pi 1.6.0 and oh-my-pi, each with
the context sessiontree computes at its leaf: the leaf marker keeps each machine's
agent where it left off."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


class _SeededDraws:
    """`st.data()` for a scripted run: each `sampled_from` drawn by a seeded generator."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def draw(self, strategy: Any) -> Any:
        return self.rng.choice(list(strategy.elements))


@pytest.fixture(scope="module")
def model_files() -> Iterator[dict[str, list[Path]]]:
    """The final files of one seeded run of the sync model (60 steps): agent -> paths,
    on both machines (checked by the model's own invariants first)."""
    from tests.sync.test_model import ACTIONS, AGENTS, MACHINES, SyncModel

    rng = random.Random(36)
    draws: Any = _SeededDraws(rng)
    model = SyncModel()
    model.setup()
    try:
        for _ in range(60):
            machine, dice = rng.choice(MACHINES), rng.random()
            if dice < 0.6:
                model.agent_writes(machine, rng.choice(ACTIONS), rng.randint(1, 60), draws)
            elif dice < 0.75:
                model.sync(machine)
            elif dice < 0.85:
                model.killed_sync(machine, rng.randint(1, 12))
            else:
                model.agent_appends_during_sync(machine, rng.randint(1, 12), draws)
        model.check_the_end()
        yield {
            agent: [
                path
                for m in MACHINES
                for path in sorted(
                    (model.machines[m].agent_dir(agent) / "sessions").rglob("*.jsonl")
                )
            ]
            for agent in AGENTS
        }
    finally:
        model.teardown()


@pytest.mark.parametrize("peer", peers.PEERS)
def test_the_sync_models_files_open_in_every_peer_at_sessiontrees_leaf(
    model_files: dict[str, list[Path]], peer: str
) -> None:
    paths = model_files["pi"] + (model_files["omp"] if peer == "omp" else [])
    assert len(paths) >= 4, "the scenario made too few sessions"
    for path in paths:
        with SessionManager.open(str(path), read_only=True) as sm:
            ours = sm.build_session_context().messages
        assert peers.peer_context(peer, path)["messages"] == ours, path
