"""The usage report meets a session swapped for a FIFO after the store was listed: it
never blocks, counts nothing of what the index held of the old file, and names the FIFO
in its notes (with the content index and without)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from sessiontree import SessionManager, Store
from tests.helpers import assistant, user, without_hang


@pytest.mark.parametrize("use_index", [True, False], ids=["index", "no index"])
def test_a_session_swapped_for_a_fifo_after_the_listing_is_named_not_counted(
    agent_dir: Path, monkeypatch: pytest.MonkeyPatch, use_index: bool
) -> None:
    paths = []
    for i in range(3):
        with SessionManager.create("/proj") as sm:
            sm.append_message(user(f"hello {i}"))
            sm.append_message(assistant(f"hi {i}"))
            paths.append(sm.get_session_file() or "")
    store = Store(str(agent_dir))
    assert len(store.replies().replies) == 3  # the index holds every file's usage
    fifo = paths[1]
    listed = Store.files

    def listed_then_swapped(self: Store, *args: Any, **kwargs: Any) -> Any:
        files = listed(self, *args, **kwargs)
        os.unlink(fifo)
        os.mkfifo(fifo)
        return files

    monkeypatch.setattr(Store, "files", listed_then_swapped)
    replies = without_hang(lambda: store.replies(use_index=use_index), fifo)
    assert not isinstance(replies, BaseException), replies
    assert sorted(r.session.path for r in replies.replies) == [paths[0], paths[2]]
    assert f"{fifo}: a FIFO, not a regular file; passed over" in replies.notes
