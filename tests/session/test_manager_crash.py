"""Crash safety: real child processes killed with SIGKILL at random moments.

Each child is forked from the test process (no interpreter start-up, so hundreds
of kills stay fast), appends to a persistent session and reports over a pipe which
entries it had flushed. After every kill the file must load, every reported entry
must be there unchanged, and the next writer must carry on cleanly. The same is
done during full rewrites (rename, migration on open): the file is always either
entirely old or entirely new. `SESSIONTREE_CRASH_KILLS` raises the kill count.
"""

from __future__ import annotations

import os
import random
import select
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from sessiontree import SessionManager, load_entries_from_file
from sessiontree.session import read_session
from sessiontree.storage import FileSessionStorage
from tests.conftest import real_file

pytestmark = pytest.mark.slow  # hundreds of child processes, each killed after a wait

KILLS = int(os.environ.get("SESSIONTREE_CRASH_KILLS", "200"))


def run_child(body: Callable[[int], None]) -> tuple[int, int]:
    """Fork a child running `body(write_fd)`; returns (pid, read_fd)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never return into pytest
        code = 0
        try:
            os.close(read_fd)
            body(write_fd)
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(write_fd)
    return pid, read_fd


def kill_and_collect(pid: int, read_fd: int, delay: float) -> str:
    """Let the child run for `delay` seconds, SIGKILL it, return what it reported."""
    deadline = time.monotonic() + delay
    chunks: list[bytes] = []
    while (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([read_fd], [], [], left)
        if ready:
            data = os.read(read_fd, 65536)
            if not data:
                break
            chunks.append(data)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    while data := os.read(read_fd, 65536):
        chunks.append(data)
    os.close(read_fd)
    return b"".join(chunks).decode()


def appender(path: str, generation: int) -> Callable[[int], None]:
    def body(out: int) -> None:
        sm = SessionManager.open(path)
        pending: list[str] = []
        i = 0
        while True:
            text = f"g{generation}-{i}-" + "x" * (i % 300)
            pending.append(sm.append_message({"role": "user", "content": text, "timestamp": i}))
            i += 1
            if i % 7 == 0:
                sm.flush()
                os.write(out, ("F " + " ".join(pending) + "\n").encode())
                pending = []

    return body


def test_sigkill_during_appends_loses_no_flushed_entry(tmp_path: Path) -> None:
    rng = random.Random(1234)
    kills = 0
    file_index = 0
    while kills < KILLS:
        path = str(tmp_path / f"s{file_index}.jsonl")
        file_index += 1
        with SessionManager.create("/crash", str(tmp_path)) as sm:
            sm.ensure_on_disk()
            shutil.move(sm.get_session_file() or "", path)
        flushed: dict[str, str] = {}
        for generation in range(20):
            if kills >= KILLS:
                break
            pid, fd = run_child(appender(path, generation))
            report = kill_and_collect(pid, fd, rng.uniform(0.01, 0.06))
            kills += 1
            loaded = read_session(path, FileSessionStorage())
            assert loaded.header is not None, f"kill {kills}: header lost"
            by_id = {e["id"]: e for e in loaded.entries}
            for line in report.splitlines():
                if line.startswith("F "):
                    for entry_id in line[2:].split():
                        flushed.setdefault(entry_id, "")
            missing = [i for i in flushed if i not in by_id]
            assert missing == [], f"kill {kills}: flushed entries lost: {missing[:5]}"
            for entry_id in flushed:
                content = by_id[entry_id]["message"]["content"]
                assert flushed[entry_id] in ("", content)
                flushed[entry_id] = content
            # At most one torn line per crash, and the next writer never glued onto it.
            assert len(loaded.malformed_lines) <= generation + 1
    assert kills == KILLS


def renamer(path: str) -> Callable[[int], None]:
    def body(out: int) -> None:
        sm = SessionManager.open(path)
        i = 0
        while True:
            sm.set_session_name(f"name {i}")
            os.write(out, f"N {i}\n".encode())
            i += 1

    return body


def test_sigkill_during_full_rewrites_leaves_old_or_new_file(tmp_path: Path) -> None:
    rng = random.Random(99)
    with SessionManager.create("/crash", str(tmp_path)) as sm:
        for i in range(400):
            sm.append_message({"role": "user", "content": "y" * 2000 + str(i), "timestamp": i})
        sm.ensure_on_disk()
        path = sm.get_session_file() or ""
    ids = [e["id"] for e in load_entries_from_file(path)[1:]]
    kills = max(20, KILLS // 5)
    previous_title = None
    for kill in range(kills):
        pid, fd = run_child(renamer(path))
        report = kill_and_collect(pid, fd, rng.uniform(0.005, 0.08))
        entries = load_entries_from_file(path)
        assert entries, f"kill {kill}: file unreadable"
        assert [e["id"] for e in entries[1:]] == ids
        title = entries[0].get("title")
        names = [int(x[2:]) for x in report.splitlines() if x.startswith("N ")]
        done = names[-1] if names else -1
        # Entirely old or entirely new: the title before this child, or one it wrote
        # (at most the one in flight when it died).
        allowed = {previous_title} | {f"name {k}" for k in range(done + 2)}
        assert title in allowed
        previous_title = title
    leftovers = [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]
    # A killed rewrite may leave its temp file; it is never the session itself.
    assert all(not p.endswith(".jsonl") for p in leftovers)


def test_sigkill_during_migration_on_open_leaves_v1_or_v3(tmp_path: Path) -> None:
    rng = random.Random(7)
    original = real_file("pi-v1-large-session.jsonl").read_bytes()
    count = original.count(b"\n")
    for kill in range(max(10, KILLS // 20)):
        path = tmp_path / f"v1-{kill}.jsonl"
        path.write_bytes(original)

        def body(out: int, p: str = str(path)) -> None:
            SessionManager.open(p).close()
            os.write(out, b"done\n")
            time.sleep(10)

        pid, fd = run_child(body)
        kill_and_collect(pid, fd, rng.uniform(0.001, 0.05))
        data = path.read_bytes()
        if data != original:
            entries = load_entries_from_file(str(path))
            assert entries[0]["version"] == 3 and len(entries) == count
