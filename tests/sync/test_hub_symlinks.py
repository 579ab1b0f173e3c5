"""A hub whose dirs another machine replaced by symlinks: nothing is written outside it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sessiontree.sync import HubError
from tests.sync_support import Machine, message, new_session


@pytest.mark.parametrize("planted", ["machines/a", "sessions/pi", "sessions"])
def test_a_symlinked_hub_dir_writes_nothing_outside_the_hub(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, planted: str
) -> None:
    a, b, hub = Machine(tmp_path, "a"), Machine(tmp_path, "b"), tmp_path / "hub"
    new_session(b.session_path("s0"), "s0", message("f1", None, "first"))
    b.sync(hub, monkeypatch)  # the hub exists, with b's session
    outside = tmp_path / "outside"
    outside.mkdir()
    target = hub / planted
    if target.exists():
        os.rename(target, outside / "moved")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.symlink_to(outside)
    new_session(a.session_path("s1"), "s1", message("e1", None, "hi"))
    try:
        a.sync(hub, monkeypatch)
    except HubError:
        pass
    assert sorted(p.name for p in outside.iterdir()) == (
        ["moved"] if planted != "machines/a" else []
    )
