"""`SessionFile` on its own: the guard's policy, without a manager in between."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path

import pytest

from sessiontree import (
    FileSessionStorage,
    SessionLockError,
    SessionPersistenceError,
    SessionWriteConflictError,
)
from sessiontree.errors import SessionClosedError
from sessiontree.session import LINK_CHECK_SECONDS, SessionFile, rescue_dir
from sessiontree.storage import MemoryBlobStore, lock_path_for

HEADER = b'{"type":"session","version":3,"id":"s1","timestamp":"t","cwd":"/p"}\n'


def line(n: int) -> bytes:
    return b'{"type":"custom","customType":"x","id":"%08d","parentId":null}\n' % n


class Memory:
    """What the manager would hand over: the whole session as bytes."""

    def __init__(self) -> None:
        self.lines = [HEADER]

    def __call__(self, rescue: bool) -> Iterable[bytes]:
        return [b"".join(self.lines)]


def new_file(path: Path, storage: object | None = None) -> tuple[SessionFile, Memory]:
    memory = Memory()
    file = SessionFile(
        storage or FileSessionStorage(),  # type: ignore[arg-type]
        str(path),
        memory,
        MemoryBlobStore(),
    )
    return file, memory


def append(file: SessionFile, memory: Memory, n: int) -> None:
    file.append(line(n))
    memory.lines.append(line(n))


def test_nothing_exists_until_create_then_appends_are_lines(tmp_path: Path) -> None:
    path = tmp_path / "dir" / "s.jsonl"
    file, memory = new_file(path)
    assert not file.on_disk and not (tmp_path / "dir").exists()
    file.create(memory(False))
    assert file.on_disk and os.path.exists(lock_path_for(str(path)))
    for n in range(3):
        append(file, memory, n)
    file.close()
    assert path.read_bytes() == b"".join(memory.lines)
    assert not os.path.exists(lock_path_for(str(path)))
    with pytest.raises(SessionClosedError):
        file.append(line(9))


def test_create_refuses_a_file_that_is_there_and_saves_a_rescue(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"someone's\n")
    file, memory = new_file(path)
    with pytest.raises(SessionWriteConflictError) as info:
        file.create(memory(False))
    assert path.read_bytes() == b"someone's\n"
    assert info.value.saved_to and Path(info.value.saved_to).read_bytes() == HEADER
    blank = tmp_path / "blank.jsonl"
    blank.write_bytes(b"  \n")
    other, memory = new_file(blank)
    other.create(memory(False))  # a blank file may be initialised
    assert blank.read_bytes() == HEADER
    other.close()


def test_an_append_by_another_program_is_caught_by_the_next_append(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    file, memory = new_file(path)
    file.create(memory(False))
    append(file, memory, 1)  # the writer is open from here on
    with open(path, "ab") as f:
        f.write(line(99))
    with pytest.raises(SessionWriteConflictError, match="size changed"):
        file.append(line(2))
    assert path.read_bytes().endswith(line(99))  # their line, and nothing of ours after it


def test_a_delete_is_caught_once_the_link_check_is_due(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    file, memory = new_file(path)
    file.create(memory(False))
    append(file, memory, 1)
    os.unlink(path)
    time.sleep(LINK_CHECK_SECONDS * 2)
    append(file, memory, 2)  # notices, recreates from memory, then appends
    assert path.read_bytes() == b"".join(memory.lines)
    file.close()


def test_a_delete_between_link_checks_is_answered_by_flush(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    file, memory = new_file(path)
    file.create(memory(False))
    append(file, memory, 1)
    os.unlink(path)
    append(file, memory, 2)  # may land in the unlinked inode ...
    file.flush()  # ... but flush checks the path and recreates it from memory
    assert path.read_bytes() == b"".join(memory.lines)
    file.close()


def test_a_rewrite_compares_every_byte(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    file, memory = new_file(path)
    file.create(memory(False))
    for n in range(50):
        append(file, memory, n)
    data = path.read_bytes()
    path.write_bytes(data.replace(b"00000003", b"00000004", 1))  # same size, same inode
    with pytest.raises(SessionWriteConflictError, match="bytes changed"):
        file.rewrite(memory(False))
    with pytest.raises(SessionWriteConflictError):
        file.flush()  # the error stays


def test_a_lost_lock_is_retaken_when_only_its_file_vanished(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    file, memory = new_file(path)
    file.create(memory(False))
    os.unlink(lock_path_for(str(path)))
    file.flush()  # re-takes it: nobody else holds the name
    assert os.path.exists(lock_path_for(str(path)))
    os.unlink(lock_path_for(str(path)))
    intruder, _ = new_file(path)
    intruder.load()  # someone else takes the lock meanwhile
    with pytest.raises(SessionLockError, match="writer lock lost"):
        file.flush()
    intruder.close()


class UnwritableBeside(FileSessionStorage):
    """A storage where nothing new can be written (a full or read-only volume)."""

    def write_atomic(self, path: str, chunks: Iterable[bytes]) -> None:  # type: ignore[override]
        raise OSError(28, "No space left on device", path)


def test_a_rescue_goes_to_the_agent_dir_when_the_sessions_volume_refuses(
    tmp_path: Path, agent_dir: Path
) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(HEADER)
    file, memory = new_file(path, UnwritableBeside())
    file.load()
    with pytest.raises(SessionPersistenceError) as info:
        file.rewrite(memory(False))
    saved = [p for p in os.listdir(rescue_dir())]
    assert len(saved) == 1 and saved[0] in str(info.value)
    assert (Path(rescue_dir()) / saved[0]).read_bytes() == HEADER


def test_a_rescue_goes_to_the_temp_dir_when_the_agent_dir_refuses_too(
    tmp_path: Path, agent_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    agent_dir.parent.mkdir(parents=True, exist_ok=True)
    agent_dir.write_text("a file where the agent dir should be: nothing goes in it\n")
    path = tmp_path / "s.jsonl"
    path.write_bytes(HEADER)
    file, memory = new_file(path, UnwritableBeside())
    file.load()
    with pytest.raises(SessionPersistenceError) as info:
        file.rewrite(memory(False))
    (folder,) = os.listdir(tmp_path / "tmp")
    assert folder == f"sessiontree-rescue-{os.getuid()}"
    (saved,) = os.listdir(tmp_path / "tmp" / folder)
    assert saved in str(info.value)
    assert (tmp_path / "tmp" / folder / saved).read_bytes() == HEADER


@pytest.mark.parametrize("squatted", ["another user's", "readable by others", "symlink", "file"])
def test_a_rescue_never_goes_into_a_temp_dir_that_is_not_ours(
    tmp_path: Path, agent_dir: Path, monkeypatch: pytest.MonkeyPatch, squatted: str
) -> None:
    """`<tmp>/sessiontree-rescue-<uid>` made by someone else (who could delete the only
    copy), open to others, or a link to elsewhere: left alone, and the copy goes to a
    new private directory, which the error names."""
    import stat
    import tempfile

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    agent_dir.parent.mkdir(parents=True, exist_ok=True)
    agent_dir.write_text("a file where the agent dir should be: nothing goes in it\n")
    name = f"sessiontree-rescue-{os.getuid()}"
    squat = tmp / name
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    if squatted == "another user's":
        if os.getuid() != 0:
            pytest.skip("giving a directory to another user needs root")
        squat.mkdir(mode=0o700)
        os.chown(squat, 4242, 4242)
    elif squatted == "readable by others":
        squat.mkdir()
        squat.chmod(0o755)
    elif squatted == "symlink":
        squat.symlink_to(elsewhere)
    else:
        squat.write_text("not a directory\n")
    before = os.lstat(squat)
    path = tmp_path / "s.jsonl"
    path.write_bytes(HEADER)
    file, memory = new_file(path, UnwritableBeside())
    file.load()
    with pytest.raises(SessionPersistenceError) as info:
        file.rewrite(memory(False))
    (fresh,) = [p for p in tmp.iterdir() if p.name != name]
    assert fresh.name.startswith(name + "-")
    st = os.lstat(fresh)
    assert stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()
    assert stat.S_IMODE(st.st_mode) == 0o700
    (saved,) = os.listdir(fresh)
    assert str(fresh / saved) in str(info.value)
    assert (fresh / saved).read_bytes() == HEADER
    # What was there is untouched, and nothing went into it (or where it points).
    after = os.lstat(squat)
    assert (after.st_ino, after.st_mode, after.st_uid) == (
        before.st_ino,
        before.st_mode,
        before.st_uid,
    )
    assert os.listdir(elsewhere) == []
    if squat.is_dir() and not squat.is_symlink():
        assert os.listdir(squat) == []


def test_a_rescue_reuses_its_own_private_temp_dir(
    tmp_path: Path, agent_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tempfile

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    agent_dir.parent.mkdir(parents=True, exist_ok=True)
    agent_dir.write_text("not a directory\n")
    ours = tmp / f"sessiontree-rescue-{os.getuid()}"
    ours.mkdir(mode=0o700)
    (ours / "earlier.conflict").write_bytes(b"an earlier rescue\n")
    path = tmp_path / "s.jsonl"
    path.write_bytes(HEADER)
    file, memory = new_file(path, UnwritableBeside())
    file.load()
    with pytest.raises(SessionPersistenceError):
        file.rewrite(memory(False))
    assert [p.name for p in tmp.iterdir()] == [ours.name]
    assert len(os.listdir(ours)) == 2
