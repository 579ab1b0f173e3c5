"""One summary of a session: on the real files of every agent sessiontree reads, `list`,
`show`, `tree`, the Markdown and HTML exports and the web page give the same title, message
count and size (docs/cli.md, "One summary of a session").

The files: the real Claude Code, Codex, OpenCode, Gemini CLI and Copilot CLI sessions
(`tests/data/real/foreign`, laid out as each agent keeps them), the real pi v1 session, and
a session of each kind the peers wrote (pi, pi 1.6, oh-my-pi: `tests/data/peers`), in one
agent dir.
"""

from __future__ import annotations

import html
import json
import re
import shutil
from typing import Any

import pytest
from typer.testing import CliRunner

from sessiontree.cli import app
from sessiontree.format import SHORT_TITLE_CHARS, human_size, shorten
from tests import foreign_support as fs
from tests.conftest import FIXTURES, REAL_FILES, require_module, unavailable

require_module("starlette")
require_module("httpx")

from starlette.testclient import TestClient  # noqa: E402

from sessiontree.store import Store  # noqa: E402
from sessiontree.web.app import ServeOptions, create_app  # noqa: E402
from sessiontree.web.data import handle_of  # noqa: E402

runner = CliRunner()
FOREIGN = REAL_FILES / "foreign"
PEERS = FIXTURES / "peers"
AGENTS = ["pi", "claude", "codex", "opencode", "gemini", "copilot"]


@pytest.fixture(scope="module")
def homes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every real file where its agent keeps it; a pi agent dir with the pi-family files."""
    if not FOREIGN.is_dir() or not PEERS.is_dir():
        unavailable("the real files are missing")
    root = tmp_path_factory.mktemp("summary")
    claude, codex, _ = fs.layout(FOREIGN, root / "a")
    more = fs.layout_more(FOREIGN, root / "b")
    sessions = root / "pi" / "sessions" / "--fixtures--"
    sessions.mkdir(parents=True)
    shutil.copyfile(REAL_FILES / "pi-v1-large-session.jsonl", sessions / "pi-v1.jsonl")
    for peer in sorted(p for p in PEERS.iterdir() if p.is_dir()):
        first = min(peer.glob("*.jsonl"), default=None)  # the run's first session
        if first is not None:
            shutil.copyfile(first, sessions / f"{peer.name}.jsonl")
    return {
        "CLAUDE_CONFIG_DIR": str(claude),
        "CODEX_HOME": str(codex),
        "XDG_DATA_HOME": str(more["xdg"]),
        "GEMINI_CLI_HOME": str(more["gemini"]),
        "COPILOT_HOME": str(more["copilot"]),
        "pi": str(root / "pi"),
    }


@pytest.fixture
def env(homes: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    for name, value in homes.items():
        if name.isupper():
            monkeypatch.setenv(name, value)
    monkeypatch.setenv("COLUMNS", "200")
    return homes


def _store_args(agent: str, homes: dict[str, Any]) -> list[str]:
    return ["--agent-dir", homes["pi"]] if agent == "pi" else ["--agent", agent]


def _cli(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def _header(page: str) -> tuple[str, str]:
    """(the h1, the meta line under it) of a session page or an HTML export, as text."""
    title = re.search(r"<h1>(.*?)</h1>", page, re.S)
    meta = re.search(r'<div class="meta">(.*?)</div>', page, re.S)
    assert title is not None and meta is not None
    return html.unescape(title.group(1)), html.unescape(re.sub(r"<[^>]+>", "", meta.group(1)))


def _web_client(agent: str, homes: dict[str, Any]) -> tuple[TestClient, Store]:
    store = Store(homes["pi"]) if agent == "pi" else Store(agent=agent)
    options = ServeOptions(cookie="summary", allowed_hosts=("testserver",))
    client = TestClient(create_app(store, options))
    cookie = options.keys.redeem(options.keys.new_link())
    assert cookie is not None
    client.cookies.set("summary", cookie)
    return client, store


@pytest.mark.parametrize("agent", AGENTS)
def test_every_view_says_the_same_of_each_session(env: dict[str, Any], agent: str) -> None:
    where = _store_args(agent, env)
    listed = json.loads(_cli(*where, "list", "--all", "--limit", "0", "--json"))["sessions"]
    assert listed, f"no {agent} session listed"
    client, store = _web_client(agent, env)
    with client, store:
        for row in listed:
            path = row["path"]
            title, count, size = row["shownTitle"], row["messageCount"], row["size"]
            short = shorten(title, SHORT_TITLE_CHARS)
            said = f"{path}: list says {title!r}, {count} messages, {size} bytes"
            shown = json.loads(_cli(*where, "show", path, "--json"))
            assert (shown["shownTitle"], shown["messageCount"], shown["size"]) == (
                title,
                count,
                size,
            ), said
            tree = json.loads(_cli(*where, "tree", path, "--json"))
            assert (tree["shownTitle"], tree["messageCount"]) == (title, count), said
            markdown = _cli(*where, "export", path, "-f", "md").splitlines()
            assert markdown[0] == f"# {short}", said
            assert f"- Messages: {count:,} (every branch) · {human_size(size)}" in markdown, said
            page_title, meta = _header(_cli(*where, "export", path, "-f", "html", "-o", "-"))
            assert page_title == short, said
            assert f"{count:,} messages" in meta and human_size(size) in meta, said
            response = client.get(f"/s/{handle_of('s', path)}")
            assert response.status_code == 200, said
            page_title, meta = _header(response.text)
            assert page_title == short, said
            assert f"{count:,} messages" in meta and f"· {human_size(size)} ·" in meta, said


def test_estimated_costs_are_marked_on_every_page(env: dict[str, Any]) -> None:
    """Claude Code records no cost: `usage` estimates every reply's, and each page that
    shows a cost marks it `~`, as `show` and `usage` do."""
    client, store = _web_client("claude", env)
    with client, store:
        data = client.app.state.routes.data  # type: ignore[attr-defined]
        snapshot = None
        for _ in range(120):  # the usage pass runs in the background: until it is done
            snapshot, error = data.usage(wait=1.0)
            assert error is None
            if snapshot is not None and snapshot.complete:
                break
        assert snapshot is not None and snapshot.complete
        assert snapshot.total.estimated_cost == snapshot.total.cost > 0  # all of it estimated
        for url in ("/", "/sessions", "/usage"):
            costs = re.findall(r'data-label="Cost">([^<]*)<', client.get(url).text)
            shown = [c for c in costs if c not in ("…", "$0")]
            assert url == "/usage" or shown, url
            assert all(c.startswith("~$") for c in shown), (url, shown)
