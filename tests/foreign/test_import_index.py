"""The store's import lock (a holder that died, one that holds on, a lock file that is
not a file, a read-only store) and the import records asked again under it."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sessiontree.foreign import _import_index, find_imports
from sessiontree.foreign._import_index import ImportLockError, import_index
from sessiontree.foreign.claude import read_claude_session
from sessiontree.foreign.importer import import_session
from sessiontree.layout import StoreParts, store_parts
from sessiontree.storage import _locks, lock_path_for
from tests.conftest import REPO_ROOT
from tests.foreign.test_importer_concurrent import BACKENDS, _backend, _parts, _source

HOLDER = r"""
import json, sys, time
from pathlib import Path
from tests.foreign.test_importer_concurrent import _parts
from sessiontree.foreign._import_index import import_lock
backend, root, pg = json.loads(sys.argv[1])
with _parts(backend, Path(root), tuple(pg) if pg else None) as parts, import_lock(parts):
    print("held", flush=True)
    time.sleep(120)
"""


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[Any]:
    """Starts a process that takes the store's import lock and keeps it; killed after."""
    started: list[subprocess.Popen[str]] = []

    def start(backend: str, pg: tuple[str, str] | None) -> subprocess.Popen[str]:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), *sys.path])}
        process = subprocess.Popen(
            [sys.executable, "-c", HOLDER, json.dumps([backend, str(tmp_path / "root"), pg])],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        started.append(process)
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "held"
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait()
        if process.stdout is not None:
            process.stdout.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_holder_that_died_leaves_no_lock_behind(
    tmp_path: Path, backend: str, holder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_import_index, "LOCK_WAIT", 5.0)  # a lock left behind fails, not hangs
    source = _source(tmp_path)
    with _backend(backend) as pg:
        process = holder(backend, pg)
        os.kill(process.pid, signal.SIGKILL)  # a crash while holding the lock
        process.wait()
        with _parts(backend, tmp_path / "root", pg) as parts:
            if backend == "files":  # its lock file stays, naming a dead process
                assert (Path(parts.sessions_dir) / "..import.writer-lock").exists()
            done = import_session(read_claude_session(str(source)), parts)
            assert [e.path for e in find_imports(parts)] == [done.path]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_holder_that_holds_on_is_named_and_nothing_is_written(
    tmp_path: Path,
    backend: str,
    holder: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(_import_index, "LOCK_WAIT", 0.3)
    monkeypatch.setattr(_import_index, "NOTICE_AFTER", 0.05)
    source = _source(tmp_path)
    with _backend(backend) as pg:
        process = holder(backend, pg)
        with _parts(backend, tmp_path / "root", pg) as parts:
            with pytest.raises(ImportLockError, match=f"held by process {process.pid}"):
                import_session(read_claude_session(str(source)), parts)
            assert find_imports(parts) == []
    [said] = [r.getMessage() for r in caplog.records if "waiting for" in r.getMessage()]
    assert f"held by process {process.pid}" in said  # the wait is said once


def _no_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    # `time.sleep` is the process's: a thread left by an earlier test (a history
    # writer's, say) sleeps through the original, only this test's thread may not wait.
    sleep = time.sleep
    tester = threading.current_thread()

    def waited(seconds: float) -> None:
        if threading.current_thread() is not tester:
            sleep(seconds)
            return
        raise AssertionError("waited for a lock file that waiting does not change")

    monkeypatch.setattr(_import_index.time, "sleep", waited)


@pytest.mark.parametrize("kind", ["symlink", "fifo"])
def test_a_lock_file_that_is_not_a_file_is_refused_at_once(
    tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_wait(monkeypatch)
    source = _source(tmp_path)
    parts = store_parts(agent_dir=str(tmp_path / "agent"))
    os.makedirs(parts.sessions_dir)
    lock = lock_path_for(os.path.join(parts.sessions_dir, ".import"))
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")
    if kind == "symlink":
        os.symlink(target, lock)
    else:
        os.mkfifo(lock)
    with pytest.raises(ImportLockError, match="not a regular file") as refused:
        import_session(read_claude_session(str(source)), parts)
    assert lock in str(refused.value)
    assert target.read_text() == "keep me\n"  # never truncated through the link
    assert find_imports(parts) == []


def test_a_lock_file_that_is_a_hard_link_locks_without_writing_into_its_other_name(
    tmp_path: Path,
) -> None:
    source = _source(tmp_path)
    parts = store_parts(agent_dir=str(tmp_path / "agent"))
    os.makedirs(parts.sessions_dir)
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")
    os.link(target, lock_path_for(os.path.join(parts.sessions_dir, ".import")))
    import_session(read_claude_session(str(source)), parts)
    assert target.read_text() == "keep me\n"  # the holder's pid went into no other file
    assert len(find_imports(parts)) == 1


def test_a_read_only_store_is_named_and_nothing_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_wait(monkeypatch)
    source = _source(tmp_path)
    parts = store_parts(agent_dir=str(tmp_path / "agent"))
    os.makedirs(parts.sessions_dir)
    real_open = _locks.open_regular

    def read_only(path: str, flags: int, *args: Any) -> int:
        if flags & os.O_CREAT:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), path)
        return real_open(path, flags, *args)

    monkeypatch.setattr(_locks, "open_regular", read_only)
    with pytest.raises(ImportLockError, match="read-only store") as refused:
        import_session(read_claude_session(str(source)), parts)
    assert parts.sessions_dir in str(refused.value)
    assert find_imports(parts) == []


def _write_import(parts: StoreParts, tmp_path: Path, n: int) -> str:
    """Another process's import: a session written without this process's index."""
    source = _source(tmp_path, n)
    code = (
        "import sys\nfrom sessiontree.foreign.claude import read_claude_session\n"
        "from sessiontree.foreign.importer import import_session\n"
        "from sessiontree.layout import store_parts\n"
        "print(import_session(read_claude_session(sys.argv[1]), "
        "store_parts(agent_dir=sys.argv[2])).path)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(source), parts.agent_dir],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def test_the_index_sees_what_another_process_imported_and_forgets_what_went(
    tmp_path: Path,
) -> None:
    parts = store_parts(agent_dir=str(tmp_path / "agent"))
    index = import_index(parts)
    first = _write_import(parts, tmp_path, 0)
    assert [e.path for e in index.imports(parts)] == [first]
    second = _write_import(parts, tmp_path, 1)  # perhaps within the same clock tick
    assert sorted(e.path for e in index.imports(parts)) == sorted([first, second])
    os.unlink(first)  # a copy deleted: its source may be imported again
    assert [e.path for e in index.imports(parts)] == [second]
    assert [e.path for e in find_imports(parts)] == [second]


def test_a_dir_noted_long_after_it_changed_is_not_listed_again(tmp_path: Path) -> None:
    parts = store_parts(agent_dir=str(tmp_path / "agent"))
    first = _write_import(parts, tmp_path, 0)
    project = os.path.dirname(first)
    long_ago = (1_000_000_123, 1_000_000_123)  # at a fine grain
    for d in (parts.sessions_dir, project):
        os.utime(d, ns=long_ago)
    index = import_index(parts)
    assert [e.path for e in index.imports(parts)] == [first]
    planted = os.path.join(project, "planted.jsonl")
    shutil.copyfile(first, planted)
    os.utime(project, ns=long_ago)  # its dir as it was noted: not listed again
    assert [e.path for e in index.imports(parts)] == [first]
    os.utime(project)  # the dir changed: listed, its new name read
    assert sorted(e.path for e in index.imports(parts)) == sorted([first, planted])
