"""`serve` with another machine's sessions a sync shows here: listed with their machine
in the store's key, opened, and never offered to their agent to resume here (it would
write into the view, which the next sync writes over)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sessiontree.store import find_stores
from tests.conftest import REAL_FILES, require_module, unavailable
from tests.web_support import AGENT_VARIABLES, CLAUDE_FIXTURE, CLAUDE_ID

httpx = require_module("httpx")
require_module("starlette")
require_module("uvicorn")

from sessiontree.web.data import handle_of  # noqa: E402
from sessiontree.web.server import BackgroundServer  # noqa: E402


@pytest.fixture
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, Path]]:
    source = REAL_FILES / "foreign" / "claude" / CLAUDE_FIXTURE
    if not source.exists():
        unavailable(f"fixture {source} is missing")
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    for name in (*AGENT_VARIABLES, "XDG_STATE_HOME"):
        monkeypatch.delenv(name, raising=False)
    view = home / ".local/state/sessiontree/sync/0a1b2c/machines/laptop/claude"
    session = view / "projects" / "-w" / f"{CLAUDE_ID}.jsonl"
    session.parent.mkdir(parents=True)
    shutil.copyfile(source, session)
    stores = [f.open() for f in find_stores()]
    assert [(s.agent, s.machine) for s in stores] == [("claude", "laptop")]
    with BackgroundServer(stores, poll_seconds=0.05) as server:
        cookies = server.login_cookies()
        with httpx.Client(base_url=server.base, cookies=cookies, timeout=30) as c:
            yield c, session
    for store in stores:
        store.close()


def test_another_machines_session_is_shown_but_not_offered_to_resume_here(
    client: tuple[Any, Path],
) -> None:
    http, session = client
    page = http.get("/s/" + handle_of("s", str(session)))
    assert page.status_code == 200 and CLAUDE_ID in page.text
    assert "claude --resume" not in page.text and "CLAUDE_CONFIG_DIR" not in page.text
    assert "sessiontree" in page.text


def test_another_machines_session_offers_no_command_at_all(client: tuple[Any, Path]) -> None:
    """No `sessiontree resume` either: it names the view's path, which no agent here
    resumes; the page says where the session is resumed instead."""
    http, session = client
    page = http.get("/s/" + handle_of("s", str(session))).text
    assert "sessiontree resume" not in page and "copy-group" not in page
    assert "made on laptop: resume it there" in page
