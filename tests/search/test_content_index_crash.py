"""A content index build killed halfway: the next refresh finishes it, and the index is
the one a clean build makes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.search.test_read_ahead import build, dump, hits, write_store

# Builds the index of the store at argv[1], killing itself (SIGKILL: no cleanup of any
# kind) once argv[2] files are written, with a write transaction every few files and the
# files read ahead by workers when argv[3] is "ahead".
_BUILD_AND_DIE = """
import os, signal, sys
import sessiontree.search._content_index as content_index
import sessiontree.search._read_ahead as read_ahead
from sessiontree.search import ContentIndex, SessionSource
agent, die_at, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
content_index._BATCH_BYTES = 20_000
read_ahead._MIN_FILES = 2 if mode == "ahead" else 10**9
read_ahead._MIN_BYTES = 0
read_ahead._BATCH_BYTES = 4096
read_ahead.idle_cores = lambda: 2
paths = sorted(
    os.path.join(d, f) for d, _, names in os.walk(os.path.join(agent, "sessions")) for f in names
)
index = ContentIndex.open(agent)
count = 0
def progress(done, total):
    global count
    count += 1
    if count == die_at:
        os.kill(os.getpid(), signal.SIGKILL)
index.refresh([SessionSource(p) for p in paths], progress=progress)
"""


def _workers_of(marker: str) -> list[int]:
    """Processes still running whose command line holds `marker` (the build's workers
    are forks of it)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            continue
    return found


@pytest.mark.skipif(sys.platform != "linux", reason="looks for the workers in /proc")
@pytest.mark.parametrize("mode", ["ahead", "alone"])
def test_a_build_killed_halfway_is_finished_by_the_next_refresh(tmp_path: Path, mode: str) -> None:
    agent = tmp_path / "killed"
    paths = sorted(write_store(agent, 80))  # the order the build below takes them in
    marker = str(agent)
    proc = subprocess.run(
        [sys.executable, "-c", _BUILD_AND_DIE, marker, "50", mode], check=False, timeout=300
    )
    assert proc.returncode == -signal.SIGKILL
    deadline = time.monotonic() + 30
    while _workers_of(marker) and time.monotonic() < deadline:
        time.sleep(0.1)  # the orphaned workers find their pipe broken and exit
    assert not _workers_of(marker)
    partial = dump(agent)
    assert 0 < len(partial["files"]) < 80  # some transactions committed, not all
    done = build(agent, paths)
    assert done.entries_added and not done.stale
    clean_agent = tmp_path / "clean"
    clean = sorted(write_store(clean_agent, 80))
    build(clean_agent, clean)
    rename = dict(zip(clean, paths, strict=True))
    expected = dump(clean_agent)
    expected["files"] = {rename[p]: v for p, v in expected["files"].items()}
    expected["entries"] = sorted((rename[e[0]], *e[1:]) for e in expected["entries"])
    expected["usage"] = sorted((rename[u[0]], *u[1:]) for u in expected["usage"])
    assert dump(agent) == expected
    assert hits(agent, paths) == {
        w: [(rename[p], n) for p, n in found] for w, found in hits(clean_agent, clean).items()
    }
