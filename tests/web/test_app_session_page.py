"""A long session's page through HTTP: the index of its prompts, a page that starts
at a prompt far from the end and loads the rest on demand, entries only the agent uses
marked for folding. The real 1,018-entry pi session (88 prompts on one path)."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sessiontree import SessionManager
from sessiontree.layout import encode_session_dir_name
from sessiontree.storage import FileSessionStorage
from tests.conftest import real_file, require_module
from tests.helpers import assistant, user

httpx = require_module("httpx")
require_module("starlette")
require_module("uvicorn")

from sessiontree.web.data import handle_of  # noqa: E402
from sessiontree.web.server import BackgroundServer  # noqa: E402
from sessiontree.web.sessions import PATH_CHUNK  # noqa: E402

LARGE = "pi-v1-large-session.jsonl"


@pytest.fixture(scope="module")
def large(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    agent = tmp_path_factory.mktemp("page") / "agent"
    folder = agent / "sessions" / encode_session_dir_name("/work/pi-mono")
    folder.mkdir(parents=True)
    path = folder / "2025-11-20T23-33-50-805Z_d703a1a9.jsonl"
    shutil.copyfile(real_file(LARGE), path)
    return agent, path


@pytest.fixture(scope="module")
def client(large: tuple[Path, Path]) -> Iterator[Any]:
    with BackgroundServer(FileSessionStorage(), str(large[0])) as server:
        with httpx.Client(base_url=server.base, cookies=server.login_cookies(), timeout=30) as c:
            yield c


def _prompts(path: Path) -> list[str]:
    with SessionManager.open(str(path), read_only=True) as sm:
        return [
            e["id"]
            for e in sm.get_branch()
            if e.get("type") == "message" and e["message"].get("role") == "user"
        ]


def _shown(html: str) -> list[str]:
    return re.findall(r'<article class="entry[^"]*" data-n="\d+" data-id="([^"]+)"', html)


def test_the_index_lists_every_prompt_of_the_path(client: Any, large: tuple[Path, Path]) -> None:
    handle = handle_of("s", str(large[1]))
    page = client.get(f"/s/{handle}").text
    assert 'id="prompts"' in page  # in the sidebar, read when opened
    assert len(_shown(page)) == PATH_CHUNK  # the page itself stays one chunk
    data = client.get(f"/s/{handle}/prompts").json()
    wanted = _prompts(large[1])
    assert data["count"] == len(wanted) == 88
    assert re.findall(r'data-id="([^"]+)"', data["html"]) == wanted


def test_a_prompt_far_back_opens_the_page_from_it_and_the_rest_loads_on_demand(
    client: Any, large: tuple[Path, Path]
) -> None:
    handle = handle_of("s", str(large[1]))
    first = client.get(f"/s/{handle}").text
    leaf = re.search(r'data-leaf="([^"]+)"', first)
    assert leaf is not None
    prompt = _prompts(large[1])[3]
    index = client.get(f"/s/{handle}/prompts").json()["html"]
    link = re.search(rf'href="([^"]+)" data-id="{prompt}"', index)
    assert link is not None
    page = client.get(link.group(1).replace("&amp;", "&")).text
    shown = _shown(page)
    assert prompt in shown[:3] and len(shown) == PATH_CHUNK
    later = int(re.search(r'data-later="(\d+)"', page).group(1))  # type: ignore[union-attr]
    assert later > 0 and 'id="later"' in page
    more = client.get(
        f"/s/{handle}/path", params={"leaf": leaf.group(1), "following": shown[-1]}
    ).json()
    assert _shown(more["html"])[0] != shown[-1] and more["later"] == later - PATH_CHUNK


def test_entries_only_the_agent_uses_are_marked_for_folding(tmp_path: Path) -> None:
    agent = tmp_path / "agent"
    with SessionManager.create("/w", str(agent / "sessions" / encode_session_dir_name("/w"))) as sm:
        sm.append_message(user("hi"))
        sm.append_message(assistant("hello"))
        hidden = sm.append_custom_entry("claude-code:system", {"subtype": "hook"})
        path = str(sm.get_session_file())
    with BackgroundServer(FileSessionStorage(), str(agent)) as server:
        with httpx.Client(base_url=server.base, cookies=server.login_cookies()) as c:
            page = c.get(f"/s/{handle_of('s', path)}").text
    assert re.search(rf'class="entry note agent-only" data-n="\d+" data-id="{hidden}"', page)
    assert 'id="show-agent-only"' in page
    assert "<time datetime=" in page
