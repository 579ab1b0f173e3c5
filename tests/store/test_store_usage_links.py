"""A session file reached under two names (a symlink in a store to a file of it, or of
another store) is one session's replies: usage and stats count them once."""

from __future__ import annotations

from pathlib import Path

from sessiontree.store import Store, Stores
from tests.helpers import assistant, user


def one_reply(agent: Path, text: str) -> str:
    with Store(agent).create("/w") as sm:
        sm.append_message(user(text))
        sm.append_message(assistant("noted"))
        path = sm.get_session_file()
    assert path is not None
    return path


def test_a_session_linked_into_its_own_store_and_another_is_counted_once(
    tmp_path: Path,
) -> None:
    first, second = tmp_path / "one", tmp_path / "two"
    own, other = one_reply(first, "alpha"), one_reply(second, "beta")
    folder = Path(own).parent
    (folder / "2026-01-01T00-00-00-000Z_0000000000000001.jsonl").symlink_to(own)
    (folder / "2026-01-01T00-00-00-000Z_0000000000000002.jsonl").symlink_to(other)
    with Store(first) as one, Store(second, agent="pi") as two:
        assert one.usage().totals.messages == 2
        assert Stores([one, two]).usage().totals.messages == 2
        assert one.stats().usage.messages == 2
