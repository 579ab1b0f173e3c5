"""A long session's page in Chromium, at a laptop's width and a phone's: the index of
its prompts opens from the sidebar, a prompt far back opens the page from it and the
rest loads on demand; entries only the agent uses show after one click; nothing is
wider than the window."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sessiontree import SessionManager
from sessiontree.layout import encode_session_dir_name
from sessiontree.storage import FileSessionStorage
from tests.conftest import real_file, require_module, unavailable
from tests.helpers import assistant, user
from tests.web_support import BROWSER_ARGS, CHROMIUM

pytestmark = pytest.mark.slow

sync_api = require_module("playwright.sync_api")
require_module("starlette")
require_module("uvicorn")

from sessiontree.web.data import handle_of  # noqa: E402
from sessiontree.web.server import BackgroundServer  # noqa: E402
from sessiontree.web.sessions import PATH_CHUNK  # noqa: E402

WIDE = """() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]"""


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Path:
    agent = tmp_path_factory.mktemp("prompts") / "agent"
    folder = agent / "sessions" / encode_session_dir_name("/work/pi-mono")
    folder.mkdir(parents=True)
    shutil.copyfile(real_file("pi-v1-large-session.jsonl"), folder / "2025-11-20_large.jsonl")
    with SessionManager.create("/work/small", str(agent / "sessions" / "--work-small--")) as sm:
        sm.append_message(user("what hooks ran?"))
        sm.append_custom_entry("claude-code:system", {"subtype": "stop_hook_summary"})
        sm.append_message(assistant("one hook"))
    return agent


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not os.access(CHROMIUM, os.X_OK):
        unavailable(f"{CHROMIUM} is missing (apt-get install chromium; scripts/test does)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
        yield b
        b.close()


@pytest.mark.parametrize("width", [1280, 400])
def test_the_prompt_index_reaches_every_prompt(browser: Any, agent: Path, width: int) -> None:
    large = next((agent / "sessions").glob("*pi-mono*/*.jsonl"))
    context = browser.new_context(viewport={"width": width, "height": 900})
    context.set_default_timeout(10_000)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    with BackgroundServer(FileSessionStorage(), str(agent)) as server:
        page.goto(server.new_link())
        page.wait_for_url(server.base + "/")
        page.goto(f"{server.base}/s/{handle_of('s', str(large))}")
        if width < 760:  # a phone: the sidebar is the Tree drawer
            page.locator("#tree-toggle").click()
        page.locator("#prompts summary").click()
        items = page.locator("ol.prompt-index li a")
        items.first.wait_for()
        assert items.count() == 88
        assert page.locator("#prompts summary").inner_text() == "Prompts on this path (88)"
        assert page.evaluate(WIDE)[0] <= width
        # A prompt far back: the page from it on, later entries on demand.
        wanted = str(items.nth(3).get_attribute("data-id"))
        items.nth(3).click()
        page.wait_for_url(f"**at={wanted}")
        entries = page.locator("#entries article.entry")
        assert wanted in entries.evaluate_all("as => as.slice(0, 3).map(a => a.dataset.id)")
        assert entries.count() == PATH_CHUNK
        later = page.locator("#later")
        assert later.is_visible() and "not shown" in later.inner_text()
        later.click()
        page.wait_for_function(
            f"() => document.querySelectorAll('#entries article').length > {PATH_CHUNK}"
        )
        assert page.evaluate(WIDE)[0] <= width
    assert errors == []
    context.close()


@pytest.mark.parametrize("width", [1280, 400])
def test_entries_only_the_agent_uses_show_after_one_click(
    browser: Any, agent: Path, width: int
) -> None:
    small = next((agent / "sessions" / "--work-small--").glob("*.jsonl"))
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    with BackgroundServer(FileSessionStorage(), str(agent)) as server:
        page.goto(server.new_link())
        page.wait_for_url(server.base + "/")
        page.goto(f"{server.base}/s/{handle_of('s', str(small))}")
        folded = page.locator("#entries article.agent-only")
        assert folded.count() == 1 and not folded.is_visible()
        assert page.locator("#entries article.user").is_visible()
        assert page.locator("#entries article.user time").is_visible()
        page.locator("#show-agent-only").click()
        assert folded.is_visible()
        assert page.evaluate(WIDE)[0] <= width
    context.close()
