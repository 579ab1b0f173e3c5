"""A session file dated after 2262 (`touch -d 2300-01-01`: ext4 keeps times up to 2446)
has an `st_mtime_ns` beyond 64 bits, which the sync state's INTEGER does not hold: a
round syncs it (and what is appended to it later) as any other."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import unavailable
from tests.sync_support import Machine, append, entry_lines, message, new_session

FAR_NS = 10_413_792_000 * 10**9  # 2300-01-01: 1.04e19 > 2**63


def _date_far(path: Path, ns: int) -> None:
    try:
        os.utime(path, ns=(ns, ns))
    except (OSError, OverflowError):  # pragma: no cover - a file system of 32-bit times
        unavailable("this file system keeps no time after 2262")
    if os.stat(path).st_mtime_ns < 1 << 63:  # pragma: no cover - clamped
        unavailable("this file system keeps no time after 2262")


def test_a_file_dated_after_2262_is_synced_and_its_appends_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, hub = Machine(tmp_path, "a"), Machine(tmp_path, "b"), tmp_path / "hub"
    new_session(a.session_path("s1"), "s1", message("e1", None, "hi"))
    new_session(a.session_path("s2"), "s2", message("f1", None, "other"))
    _date_far(a.session_path("s1"), FAR_NS)
    a.sync(hub, monkeypatch)  # raised OverflowError: Python int too large for SQLite
    append(a.session_path("s1"), message("e2", "e1", "more"))
    _date_far(a.session_path("s1"), FAR_NS + 10**9)
    a.sync(hub, monkeypatch)
    b.sync(hub, monkeypatch)
    assert set(entry_lines(b.session_path("s1").read_bytes())) == {"e1", "e2"}
    assert set(entry_lines(b.session_path("s2").read_bytes())) == {"f1"}
