"""`Stores` given a store twice, or a store that fails: a store given more than once
(the same value, or the same dir under another name) is read once; a store other than
the first that fails while searched is passed over and named, as when it fails to list."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

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


def test_a_store_that_fails_while_searched_is_skipped_not_the_search(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Listed, then gone unreadable before its search (a disk, a mount gone): its hits
    are left out and `skipped` names it, as when it fails to list."""
    first, second = a_store(tmp_path / "one"), a_store(tmp_path / "two")
    with Store(first) as one, Store(second, agent="pi") as two:
        both = Stores([one, two])
        listed = both.list()

        def gone(*args: object, **kwargs: object) -> object:
            raise OSError(errno.EIO, "Input/output error", str(second))

        monkeypatch.setattr(two, "_search", gone)  # what Stores.search asks of each store
        found = both.search("quokka", sessions=listed)
        assert [hit.store for hit in found.hits] == ["xcsh"]
        assert [(s.store, s.location) for s in both.skipped] == [("pi", str(second))]
