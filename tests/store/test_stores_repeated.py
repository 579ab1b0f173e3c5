"""A store given to `Stores` more than once (the same value, or the same dir under
another name) is read once: each session is listed, found and counted once."""

from __future__ import annotations

from pathlib import Path

from sessiontree.store import Store, Stores
from tests.helpers import assistant, user


def a_store(root: Path) -> Path:
    agent = root / "agent"
    with Store(agent).create(root / "project") as sm:
        sm.append_message(user("quokka sighting"))
        sm.append_message(assistant("noted"))
    return agent


def test_a_store_given_twice_is_read_once(tmp_path: Path) -> None:
    agent = a_store(tmp_path)
    (tmp_path / "link").symlink_to(agent)
    with Store(agent) as one, Store(tmp_path / "link") as again:
        both = Stores([one, one, again])
        assert list(both) == ["xcsh"]
        assert [listed.store for listed in both.list()] == ["xcsh"]
        assert len(both.search("quokka").hits) == 1
        assert both.stats().total.sessions == 1
