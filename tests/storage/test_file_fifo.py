"""The file backend's writers meet a FIFO put where a session was (after it was listed,
before the write): the write is refused by name at once, and nothing on disk changes.

A plain `O_WRONLY` open of a FIFO blocks until a reader comes (forever); a non-blocking
one fails with ENXIO, which is said as what is there ("a FIFO, not a regular file").
Each write runs in a thread that fails the test when it blocks (`without_hang`).
"""

from __future__ import annotations

import errno
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


def test_a_truncating_writer_never_truncates_through_a_symlink(tmp_path: Path) -> None:
    """`open_writer(path, "w")` truncates after its checks: a symlink put under the
    session's name is refused, and the file it points at keeps every byte."""
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me\n")
    path = tmp_path / "s.jsonl"
    os.symlink(precious, path)
    with pytest.raises(OSError):
        STORAGE.open_writer(str(path), "w")
    assert precious.read_text() == "keep me\n"
    assert os.path.islink(path)


def test_a_truncation_that_fails_leaves_the_file_whole_and_no_descriptor_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(b'{"type":"session"}\n')
    fds = len(os.listdir("/proc/self/fd"))

    def fails(fd: int, length: int) -> None:
        raise OSError(errno.EIO, "the disk went away")

    monkeypatch.setattr(os, "ftruncate", fails)
    with pytest.raises(OSError, match="the disk went away"):
        STORAGE.open_writer(str(path), "w")
    monkeypatch.undo()
    assert path.read_bytes() == b'{"type":"session"}\n'
    assert len(os.listdir("/proc/self/fd")) == fds


def test_a_truncating_writer_empties_what_another_program_just_appended(tmp_path: Path) -> None:
    """ "w" is a rewrite from nothing, whatever was appended a moment before the open:
    the writer starts from an empty file, and its own lines are all there is."""
    path = tmp_path / "s.jsonl"
    path.write_bytes(b'{"a":1}\n')
    with open(path, "ab") as other:
        other.write(b'{"b":2}\n')
    writer = STORAGE.open_writer(str(path), "w")
    try:
        writer.write_line('{"c":3}\n')
    finally:
        writer.close()
    assert path.read_bytes() == b'{"c":3}\n'
