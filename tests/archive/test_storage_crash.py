"""A run stopped at any write of the archive's storage (each chunk written without its
fsync, `sync_files` before the manifest that names them, each manifest): the files
archived before are as they were, nothing is named that is not whole, and the next run
catches up, each session restored byte for byte. The stop is a power cut's: every file
written without its fsync since (its rename made, its bytes not) is left torn."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sessiontree.archive import ArchiveSource, archive_stores, restore_session, verify_archive
from sessiontree.storage import _file as file_storage

pytestmark = pytest.mark.usefixtures("homes_in_tmp")

A = "aaaaaaaa-0000-0000-0000-000000000001"
B = "bbbbbbbb-0000-0000-0000-000000000002"


class Crash(BaseException):
    """The process stopping (not an error any code handles)."""


def archived_then_changed(root: Path) -> tuple[ArchiveSource, str, dict[str, Path]]:
    project = root / ".claude" / "projects" / "-w"
    project.mkdir(parents=True)
    grown, rewritten = project / f"{A}.jsonl", project / f"{B}.jsonl"
    grown.write_bytes(
        b"".join(
            b'{"type":"user","n":%d,"pad":"%s"}\n' % (i, b"x" * (i * 37 % 900)) for i in range(1200)
        )
    )
    rewritten.write_bytes(b'{"type":"user"}\n')
    source = ArchiveSource("claude", str(root / ".claude"), ("projects",))
    archive = str(root / "archive")
    archive_stores(archive, [source])
    with grown.open("ab") as f:
        f.write(b'{"type":"user","later":1}\n' * 2000)
    rewritten.write_bytes(b'{"type":"user","rewritten":1}\n')
    return source, archive, {A: grown, B: rewritten}


def run_stopped_at(root: Path, monkeypatch: pytest.MonkeyPatch, where: str, at: int) -> bool:
    """Archive the changed files, the run stopped at its `at`-th `where` (write or
    sync); check the archive, run again, restore. Whether the run was stopped."""
    real_write, real_sync = file_storage.atomic_write, file_storage.FileSessionStorage.sync_files
    source, archive, sessions = archived_then_changed(root)
    calls = 0

    unsynced: set[str] = set()  # what a power cut now may leave torn

    def power_cut() -> Crash:
        for path in unsynced:
            data = Path(path).read_bytes()
            Path(path).write_bytes(data[: len(data) // 2])
        return Crash()

    def write(path: str, chunks: Any, **kw: Any) -> Any:
        nonlocal calls
        calls += where == "write"
        durable = kw.get("durable", True) is not False
        if where == "write" and calls == at:
            if not durable:  # renamed before its bytes were on disk
                real_write(path, chunks, **kw)
                unsynced.add(path)
            raise power_cut()  # a durable write is fsynced before its rename: not there
        done = real_write(path, chunks, **kw)
        if not durable:
            unsynced.add(path)
        return done

    def sync(self: Any, paths: Any) -> None:
        nonlocal calls
        calls += where == "sync"
        paths = list(paths)
        if where == "sync" and calls == at:
            raise power_cut()
        real_sync(self, paths)
        unsynced.difference_update(paths)

    with monkeypatch.context() as patched:
        patched.setattr(file_storage, "atomic_write", write)
        patched.setattr(file_storage.FileSessionStorage, "sync_files", sync)
        try:
            archive_stores(archive, [source])
            stopped = False
        except Crash:
            stopped = True
    assert verify_archive(archive) == []
    archive_stores(archive, [source])
    assert verify_archive(archive) == []
    for session_id, path in sessions.items():
        out = root / "out"
        restore_session(archive, session_id, to=str(out))
        assert (out / "projects" / "-w" / path.name).read_bytes() == path.read_bytes()
    return stopped


@pytest.mark.parametrize("where", ["write", "sync"])
def test_a_run_stopped_at_any_write_loses_nothing_and_the_next_catches_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    at = 1
    while run_stopped_at(tmp_path / f"{where}-{at}", monkeypatch, where, at):
        at += 1
    assert at > 2  # the run was stopped at more than one place before it ran through
