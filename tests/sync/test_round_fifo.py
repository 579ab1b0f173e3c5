"""A round meets a FIFO put where a file it knows was (between the round that listed it
and this one): in this machine's store, or in the hub. It never blocks on it (a plain
open of a FIFO waits for the other end: forever), names it in the report's `skipped`,
writes nothing through it, and syncs the other files."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

import sessiontree.sync._push as push_module
from tests.helpers import without_hang
from tests.sync_support import Machine, append, entry_lines, message, new_session


def _hub_file(hub: Path, name: str) -> Path:
    """The hub's copy of machine a's session `name` (`sessions/<agent>/<project>/<file
    stem>/<machine>.jsonl`)."""
    found = list(hub.glob(f"sessions/pi/*/*_{name}/a.jsonl"))
    assert len(found) == 1, found
    return found[0]


def test_a_hub_file_swapped_for_a_fifo_is_skipped_and_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, hub = Machine(tmp_path, "a"), Machine(tmp_path, "b"), tmp_path / "hub"
    new_session(a.session_path("s1"), "s1", message("e1", None, "hi"))
    new_session(a.session_path("s2"), "s2", message("f1", None, "other"))
    a.sync(hub, monkeypatch)
    in_hub = _hub_file(hub, "s1")
    in_hub.unlink()
    os.mkfifo(in_hub)
    append(a.session_path("s1"), message("e2", "e1", "more"))
    append(a.session_path("s2"), message("f2", "f1", "more"))
    pushed = without_hang(lambda: a.sync(hub, monkeypatch), str(in_hub))
    assert not isinstance(pushed, BaseException), pushed
    assert any(str(in_hub) in what for what, _ in pushed.skipped), pushed.skipped
    pulled = without_hang(lambda: b.sync(hub, monkeypatch), str(in_hub))
    assert not isinstance(pulled, BaseException), pulled
    # The other machine finds no log of s1 it can read, and says so of s1.
    assert any("_s1.jsonl (hub)" in what for what, _ in pulled.skipped), pulled.skipped
    assert stat.S_ISFIFO(os.lstat(in_hub).st_mode)
    # The other session went both ways.
    assert set(entry_lines(b.session_path("s2").read_bytes())) == {"f1", "f2"}


def test_a_local_file_swapped_for_a_fifo_is_skipped_and_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, hub = Machine(tmp_path, "a"), tmp_path / "hub"
    new_session(a.session_path("s1"), "s1", message("e1", None, "hi"))
    new_session(a.session_path("s2"), "s2", message("f1", None, "other"))
    a.sync(hub, monkeypatch)
    here = a.session_path("s1")
    append(here, message("e2", "e1", "more"))
    append(a.session_path("s2"), message("f2", "f1", "more"))
    listed = push_module.local_files

    def listed_then_swapped(*args: Any) -> Any:
        files = listed(*args)
        here.unlink()
        os.mkfifo(here)
        return files

    monkeypatch.setattr(push_module, "local_files", listed_then_swapped)
    report = without_hang(lambda: a.sync(hub, monkeypatch), str(here))
    assert not isinstance(report, BaseException), report
    assert (str(here), "a FIFO, not a regular file; not synced") in report.skipped
    assert stat.S_ISFIFO(os.lstat(here).st_mode)
    assert set(entry_lines(_hub_file(hub, "s2").read_bytes())) >= {"f1", "f2"}
