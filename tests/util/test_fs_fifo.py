"""A FIFO named like a session is never blocked on: every reader refuses it by name.

A plain `open()` of a FIFO blocks until a writer comes, so one `*.jsonl` FIFO in a
store hung `verify --all`, `stats`, `usage`, `migrate --all` and `import --all`
forever. Session files are opened for reading through one function
(`sessiontree._util.fs.read_fd`: non-blocking open, fstat, regular files only), and
the commands that walk a store pass a FIFO over with a warning.

The library readers run in a thread: on a hang the test opens the FIFO for writing
(which lets the blocked reader go on) and fails. The commands run in a child
process with a timeout, killed when they hang.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from sessiontree import SessionManager
from sessiontree._util.fs import not_regular, open_regular, refuse_non_regular
from sessiontree.foreign._document import read_document
from sessiontree.foreign._files import HOST_FILES
from sessiontree.storage import FileSessionStorage
from sessiontree.storage._file import FilePin
from tests.helpers import assistant, run_cli_within, user, without_hang

HANG = 60.0  # seconds: far beyond any of these commands on a tiny store


def _no_hang(read: Callable[[], object], fifo: str) -> BaseException | None:
    """Run `read`; the error it raised (None: it returned). Fails when it blocks."""
    outcome = without_hang(read, fifo, HANG)
    return outcome if isinstance(outcome, BaseException) else None


STORAGE = FileSessionStorage()
READERS: dict[str, Callable[[str], object]] = {
    "read_text": STORAGE.read_text,
    "read_text_prefix": lambda p: STORAGE.read_text_prefix(p, 100),
    "iter_chunks": lambda p: list(STORAGE.iter_chunks(p)),
    "read_bytes_range": lambda p: STORAGE.read_bytes_range(p, 0, 100),
    "pin": FilePin.open,
    "SessionManager.open": SessionManager.open,
    "foreign document": read_document,
    "foreign file": lambda p: HOST_FILES.open(p).read(),
}


@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_reader_refuses_a_fifo_by_name_without_blocking(tmp_path: Path, reader: str) -> None:
    fifo = str(tmp_path / "2026-01-01T00-00-00-000Z_fifo.jsonl")
    os.mkfifo(fifo)
    error = _no_hang(lambda: READERS[reader](fifo), fifo)
    assert error is not None, "a FIFO was read as an empty file"
    assert fifo in str(error) and "a FIFO, not a regular file" in str(error)


def _store_with_a_fifo(agent_dir: Path) -> tuple[str, str]:
    """A store holding one session and a FIFO beside it; (session, fifo)."""
    with SessionManager.create("/proj") as sm:
        sm.append_message(user("hello"))
        sm.append_message(assistant("hi"))
        path = sm.get_session_file()
    assert path is not None
    fifo = os.path.join(os.path.dirname(path), "2026-01-01T00-00-00-000Z_fifo.jsonl")
    os.mkfifo(fifo)
    return path, fifo


def _run(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    return run_cli_within(*args, home=home, timeout=HANG)


@pytest.mark.parametrize(
    "args",
    [
        ("verify", "--all"),
        ("stats",),
        ("usage", "daily"),
        ("migrate", "--all"),
        ("import", "--all", "--from", "claude"),
    ],
    ids=lambda a: " ".join(a),
)
def test_a_command_walking_the_store_passes_a_fifo_over_with_a_warning(
    agent_dir: Path, tmp_path: Path, args: tuple[str, ...]
) -> None:
    _, fifo = _store_with_a_fifo(agent_dir)
    (tmp_path / "home" / ".claude" / "projects").mkdir(parents=True)
    done = _run(*args, home=tmp_path / "home")
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stderr.split())
    assert f"{fifo}: a FIFO, not a regular file; passed over" in said
    assert os.path.exists(fifo)


def test_passed_over_fifos_are_no_invalid_files(agent_dir: Path, tmp_path: Path) -> None:
    session, fifo = _store_with_a_fifo(agent_dir)
    stats = json.loads(_run("stats", "--json", home=tmp_path).stdout)
    assert stats["sessions"] == 1 and stats["invalidFiles"] == 0
    verify = json.loads(_run("verify", "--all", "--json", home=tmp_path).stdout)
    assert [f["path"] for f in verify["files"]] == [session]
    usage = json.loads(_run("usage", "daily", "--json", home=tmp_path).stdout)
    assert f"{fifo}: a FIFO, not a regular file; passed over" in usage["notes"]


@pytest.mark.parametrize("planted", ["fifo", "dangling symlink"])
def test_a_rewrite_passes_a_non_file_planted_at_oh_my_pis_lock_name(
    tmp_path: Path, planted: str
) -> None:
    """oh-my-pi's publish lock file (`.<file>.lock`) holds `<pid>:<ms>`; a FIFO under
    that name blocked every rewrite of the session forever (the stale-lock check read it
    with a plain open), and a dangling symlink made each one fail as if oh-my-pi held
    the lock. Neither is anyone's lock: once it is older than oh-my-pi's wait it is
    taken for a stale one, removed, and the rewrite goes on."""
    path = tmp_path / "s.jsonl"
    with SessionManager.open(str(path)) as sm:
        sm.append_message(user("hi"))
        sm.append_message(assistant("hello"))
    lock = tmp_path / ".s.jsonl.lock"
    if planted == "fifo":
        os.mkfifo(lock)
    else:
        lock.symlink_to(tmp_path / "nowhere")
    os.utime(lock, (1, 1), follow_symlinks=False)  # long past oh-my-pi's 500 ms wait

    def rename() -> None:
        with SessionManager.open(str(path)) as sm:
            sm.set_session_name("renamed")

    assert _no_hang(rename, str(lock)) is None
    assert json.loads(path.read_bytes().split(b"\n")[0])["title"] == "renamed"
    assert not os.path.lexists(lock)


@pytest.mark.parametrize("flags", ["O_WRONLY", "O_WRONLY|O_APPEND|O_CREAT", "O_RDWR"])
def test_a_writer_refuses_a_fifo_by_name_without_blocking(tmp_path: Path, flags: str) -> None:
    """No one reads the FIFO: a non-blocking open for writing fails with ENXIO, said as
    what is there, as for a reader."""
    fifo = str(tmp_path / "s.jsonl")
    os.mkfifo(fifo)
    mode = 0
    for flag in flags.split("|"):
        mode |= getattr(os, flag)
    error = _no_hang(lambda: open_regular(fifo, mode), fifo)
    assert isinstance(error, OSError) and error.errno == errno.EINVAL, error
    assert error.filename == fifo and error.strerror == "a FIFO, not a regular file"
    assert not_regular(error) == "a FIFO, not a regular file"


def test_a_rewrite_refuses_a_fifo_and_leaves_a_dir_to_the_rename(tmp_path: Path) -> None:
    fifo = tmp_path / "s.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="a FIFO, not a regular file"):
        refuse_non_regular(str(fifo))
    (tmp_path / "d.jsonl").mkdir()
    refuse_non_regular(str(tmp_path / "d.jsonl"))
    refuse_non_regular(str(tmp_path / "missing.jsonl"))
    (tmp_path / "f.jsonl").write_bytes(b"")
    refuse_non_regular(str(tmp_path / "f.jsonl"))
