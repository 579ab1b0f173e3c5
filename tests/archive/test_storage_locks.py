"""The archive's lock against runs of the version before it: that version locked the
archive by a `flock` on its `.lock` file, not the storage's writer lock of `ARCHIVE`. A
run of either version beside a run of the other exits at once, as two runs of one do."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sessiontree.archive import (
    ArchiveBusyError,
    ArchiveError,
    ArchiveSource,
    _storage,
    archive_stores,
)

pytestmark = pytest.mark.usefixtures("homes_in_tmp")

HOLD = (
    "import fcntl,os,sys,time; fd=os.open(sys.argv[1],os.O_RDWR|os.O_CREAT,0o600); "
    "fcntl.flock(fd,fcntl.LOCK_EX); print('held',flush=True); time.sleep(30)"
)


def one_session(root: Path) -> ArchiveSource:
    project = root / ".claude" / "projects" / "-w"
    project.mkdir(parents=True)
    (project / "aaaaaaaa-0000-0000-0000-000000000001.jsonl").write_bytes(b'{"type":"user"}\n')
    return ArchiveSource("claude", str(root / ".claude"), ("projects",))


def test_a_run_beside_a_run_of_the_previous_version_exits(tmp_path: Path) -> None:
    """A run of the previous version holds `.lock`: this one exits, not writing beside it."""
    source = one_session(tmp_path)
    archive = tmp_path / "archive"
    archive_stores(str(archive), [source])
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(archive / ".lock")], stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"held"
        with pytest.raises(ArchiveBusyError, match="exits"):
            archive_stores(str(archive), [source])
    finally:
        holder.kill()
        holder.wait()
        assert holder.stdout is not None
        holder.stdout.close()
    archive_stores(str(archive), [source])


def test_a_run_of_the_previous_version_finds_this_run_holding_the_archive(
    tmp_path: Path,
) -> None:
    """While this version runs, the `.lock` a previous version's run would take is held."""
    source = one_session(tmp_path)
    archive = tmp_path / "archive"
    archive_stores(str(archive), [source])
    held: list[bool] = []

    def probe(path: str) -> None:
        if held:
            return
        fd = os.open(archive / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            held.append(True)
        else:
            held.append(False)
        finally:
            os.close(fd)

    (tmp_path / ".claude" / "projects" / "-w" / "b.jsonl").write_bytes(b'{"type":"user"}\n')
    archive_stores(str(archive), [source], progress=probe)
    assert held == [True]


@pytest.mark.parametrize("planted", ["symlink", "fifo"])
def test_a_lock_file_planted_as_a_symlink_or_fifo_is_refused_and_left_alone(
    tmp_path: Path, planted: str
) -> None:
    source = one_session(tmp_path)
    archive = tmp_path / "archive"
    archive_stores(str(archive), [source])
    target = tmp_path / "theirs"
    target.write_bytes(b"not yours\n")
    (archive / ".lock").unlink(missing_ok=True)
    if planted == "symlink":
        (archive / ".lock").symlink_to(target)
    else:
        os.mkfifo(archive / ".lock")
    with pytest.raises(ArchiveError, match="not a regular file"):
        archive_stores(str(archive), [source])
    assert target.read_bytes() == b"not yours\n"
    (archive / ".lock").unlink()
    archive_stores(str(archive), [source])  # the lock of ARCHIVE was let go


def test_in_postgresql_a_run_beside_a_run_of_the_previous_version_exits(tmp_path: Path) -> None:
    """The previous version locked an archive in a database by the writer lock of its
    `.lock` row's path: held, this version's run exits."""
    from sessiontree.storage import close_storage, open_storage
    from tests.pg_support import fresh_schema

    source = one_session(tmp_path)
    with fresh_schema() as (url, schema):
        target = url + ("&" if "?" in url else "?") + f"schema={schema}"
        archive_stores(target, [source])
        previous = open_storage(target, agent_dir=_storage._PG_ROOT)
        try:
            held = previous.acquire_lock(f"{_storage._PG_ROOT}/.lock")  # type: ignore[attr-defined]
            try:
                with pytest.raises(ArchiveBusyError, match="exits"):
                    archive_stores(target, [source])
            finally:
                held.release()
        finally:
            close_storage(previous)
        archive_stores(target, [source])
