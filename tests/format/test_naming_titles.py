"""One title everywhere: `list`, `show`, `tree`, `search`, the web app's list
and heading, and the Markdown and HTML exports show a session by the same title, cleaned
of Claude Code's markup and shortened where it heads a page or a row."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sessiontree import SessionManager
from sessiontree.cli import app
from sessiontree.format import clean_title, shorten, shown_title
from tests import foreign_support as fs
from tests.conftest import REAL_FILES, require_module, unavailable
from tests.helpers import assistant, user

runner = CliRunner()


def out(*args: str) -> str:
    result = runner.invoke(app, list(args), env={"COLUMNS": "200"})
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return result.stdout


def test_clean_and_shorten() -> None:
    assert (
        clean_title(
            "<command-message>orchestrator is running…</command-message>\n"
            "<command-name>/orchestrator</command-name>\n<command-args>create TODO app</command-args>"
        )
        == "/orchestrator create TODO app"
    )
    assert clean_title("<system-reminder>noise</system-reminder>  fix\n the   CI") == "fix the CI"
    assert clean_title("  \n ") is None
    assert shown_title(None, "  ", "0cb5c7ea-1234") == "Session 0cb5c7ea"
    assert shown_title("", "Why does CI fail?", "x") == "Why does CI fail?"
    long = "word " * 40
    assert shorten(long.strip(), 30) == "word word word word word…"
    assert len(shown_title(long, None, "x", 30)) <= 30


@pytest.fixture
def agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    agent = tmp_path / "agent"
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(agent))
    monkeypatch.delenv("SESSIONTREE_STORE", raising=False)
    with SessionManager.create("/work/ci", str(agent / "sessions" / "--work-ci--")) as sm:
        first = sm.append_message(user("Why does CI fail?\n\nIt passed yesterday."))
        sm.append_message(assistant("Python 3.11 on CI, 3.12 here."))
        sm.append_compaction("CI runs 3.11; pin it.", "CI on 3.12", first, 1000)
        sm.append_message(user("pin it"))
        sm.append_message(assistant("Pinned."))
        return agent, sm.get_session_file() or ""


def test_the_same_title_in_every_command_and_export(
    agent: tuple[Path, str], tmp_path: Path
) -> None:
    _, path = agent
    assert "CI on 3.12" in out("list", "--all")
    assert re.search(r"Title\s+CI on 3\.12", out("show", path))
    assert "CI on 3.12" in out("tree", path).splitlines()[0]
    assert "CI on 3.12" in out("search", "pinned", "--all")
    md = tmp_path / "s.md"
    out("export", path, "-f", "md", "-o", str(md))
    assert md.read_text().startswith("# CI on 3.12\n")
    page = tmp_path / "s.html"
    out("export", path, "-f", "html", "-o", str(page))
    assert re.search(r"<h1[^>]*>CI on 3\.12</h1>", page.read_text())


def test_the_web_app_shows_that_title(agent: tuple[Path, str]) -> None:
    require_module("starlette")
    httpx = require_module("httpx")
    from sessiontree import Store
    from sessiontree.web.data import handle_of
    from sessiontree.web.server import BackgroundServer

    root, path = agent
    with BackgroundServer(Store(str(root))) as s:
        with httpx.Client(base_url=s.base, cookies=s.login_cookies(), timeout=30) as c:
            listing = c.get("/sessions").text
            assert re.search(r'<td class="title"><a [^>]*>CI on 3\.12</a>', listing)
            page = c.get(f"/s/{handle_of('s', path)}").text
            assert "<h1>CI on 3.12</h1>" in page
            assert "<title>CI on 3.12" in page


def test_a_bare_claude_command_gives_way_to_the_first_typed_prompt(tmp_path: Path) -> None:
    """A slash command without arguments (`/superpowers:brainstorm`, `/exit`) says nothing
    of the session: the first prompt typed after it titles it, in `show` and `list`
    alike; a command with arguments titles it as typed, without Claude Code's markup."""
    foreign = REAL_FILES / "foreign"
    if not foreign.is_dir():
        unavailable(f"real files {foreign} are missing")
    claude, _, placed = fs.layout(foreign, tmp_path / "stores")
    bare = "entireio__cli__26__dcd5518fea__0__full.jsonl"  # opens with a bare command
    with_args = "entireio__skills__3f__c8a587fcc7__0__raw_transcript.jsonl"
    for name, expected in (
        (bare, "B) I'd like to add 'session end' hooks to both claude and gemini"),
        (with_args, "/superpowers:brainstorming for the skills"),
    ):
        shown = out("--agent-dir", str(claude), "show", str(placed[name]))
        title = re.search(r"Title\s+(.*)", shown)
        assert title is not None and title.group(1).startswith(expected), name
    # The titles as `list` gives them (its JSON: the table cuts them to the terminal's width).
    listed = json.loads(out("--agent-dir", str(claude), "list", "--all", "--json"))
    titles = {os.path.realpath(s["path"]): s["shownTitle"] for s in listed["sessions"]}
    assert titles[os.path.realpath(placed[bare])].startswith(
        "B) I'd like to add 'session end' hooks"
    )
    assert not any("<command" in title for title in titles.values())


def test_show_prices_as_usage_does(tmp_path: Path) -> None:
    """`show` of another agent's session (no recorded cost) gives the cost `usage`
    estimates for it, marked `~` (not `0.0000` where `usage` says `~$27.58`)."""
    import json

    foreign = REAL_FILES / "foreign"
    if not foreign.is_dir():
        unavailable(f"real files {foreign} are missing")
    claude, codex, _ = fs.layout(foreign, tmp_path / "stores")
    for home in (claude, codex):
        rows = json.loads(out("--agent-dir", str(home), "usage", "session", "--json"))["rows"]
        assert rows
        for row in rows:
            shown = json.loads(out("--agent-dir", str(home), "show", row["path"], "--json"))
            assert shown["usage"]["cost"] == pytest.approx(row["cost"]), row["path"]
            assert shown["usage"]["messages"] == row["messages"], row["path"]
        priced = max(rows, key=lambda r: r["cost"])
        assert priced["estimatedCost"] > 0
        text = out("--agent-dir", str(home), "show", priced["path"])
        assert f"~${priced['cost']:,.2f}" in text
