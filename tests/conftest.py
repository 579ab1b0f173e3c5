"""Shared fixtures: every test gets its own agent dir and no terminal identity."""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent / "data"
SHARED_FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures"


@pytest.fixture(autouse=True)
def agent_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private agent dir per test, so nothing touches the user's real store."""
    directory = tmp_path / "agent"
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(directory))
    monkeypatch.delenv("SESSIONTREE_STORE", raising=False)  # the CLI's database, if any
    for var in ("TMUX_PANE", "KITTY_WINDOW_ID", "TERM_SESSION_ID", "WT_SESSION"):
        monkeypatch.delenv(var, raising=False)
    return directory
