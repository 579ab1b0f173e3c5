"""The file backend's writers meet a FIFO put where a session was (after it was listed,
before the write): the write is refused by name at once, and nothing on disk changes.

A plain `O_WRONLY` open of a FIFO blocks until a reader comes (forever); a non-blocking
one fails with ENXIO, which is said as what is there ("a FIFO, not a regular file").
Each write runs in a thread that fails the test when it blocks (`without_hang`).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from sessiontree import SessionManager
from sessiontree.storage import FileSessionStorage
from tests.helpers import assistant, user, without_hang

STORAGE = FileSessionStorage()
WRITES: dict[str, Callable[[str], object]] = {
    "open_writer a": lambda p: STORAGE.open_writer(p, "a"),
    "open_writer w": lambda p: STORAGE.open_writer(p, "w"),
    "write_text": lambda p: STORAGE.write_text(p, "{}\n"),
    "write_atomic": lambda p: STORAGE.write_atomic(p, [b"{}\n"]),
    "write_atomic_unsynced": lambda p: STORAGE.write_atomic_unsynced(p, [b"{}\n"]),
    "sync_files": lambda p: STORAGE.sync_files([p]),
}


def _listed_then_swapped(tmp_path: Path) -> str:
    """A session written, listed, then replaced by a FIFO; its path."""
    with SessionManager.create("/proj", session_dir=str(tmp_path)) as sm:
        sm.append_message(user("hello"))
        sm.append_message(assistant("hi"))
        path = sm.get_session_file()
    assert path is not None
    assert STORAGE.list_files(str(tmp_path), "*.jsonl") == [path]
    os.unlink(path)
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("write", sorted(WRITES))
def test_a_write_to_a_fifo_is_refused_by_name_and_changes_nothing(
    tmp_path: Path, write: str
) -> None:
    path = _listed_then_swapped(tmp_path)
    before = sorted(os.listdir(tmp_path))
    error = without_hang(lambda: WRITES[write](path), path)
    assert isinstance(error, OSError), error
    assert path in str(error) and "a FIFO, not a regular file" in str(error)
    assert stat.S_ISFIFO(os.lstat(path).st_mode)
    assert sorted(os.listdir(tmp_path)) == before


def test_a_manager_whose_file_became_a_fifo_appends_nothing_through_it(tmp_path: Path) -> None:
    """Opened, then the file swapped: the append is refused (the file was replaced),
    never blocked on, and the FIFO stays."""
    with SessionManager.create("/proj", session_dir=str(tmp_path)) as sm:
        sm.append_message(user("hello"))
        sm.append_message(assistant("hi"))
        path = sm.get_session_file()
    assert path is not None
    sm = SessionManager.open(path)
    os.unlink(path)
    os.mkfifo(path)
    error = without_hang(lambda: sm.append_message(user("more")), path)
    assert isinstance(error, Exception), error
    without_hang(sm.close, path)
    assert stat.S_ISFIFO(os.lstat(path).st_mode)
