"""Every store found without setup: `stores`, `list` across stores, and
writing commands that need one store."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sessiontree.cli import app
from sessiontree.store import Store, find_stores
from tests.conftest import REAL_FILES, unavailable
from tests.helpers import assistant, user

CLAUDE = "entireio__cli__26__dcd5518fea__0__full.jsonl"
CLAUDE_ID = "aaaaaaaa-1111-2222-3333-444444444444"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty home with no variable naming a store."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for name in (
        "PI_CODING_AGENT_DIR",
        "SESSIONTREE_STORE",
        "CLAUDE_CONFIG_DIR",
        "CODEX_HOME",
        "XDG_DATA_HOME",
        "GEMINI_CLI_HOME",
        "COPILOT_HOME",
        "XDG_STATE_HOME",
    ):
        monkeypatch.delenv(name, raising=False)
    return home


def pi_session(agent_dir: Path, cwd: Path, text: str) -> str:
    with Store(agent_dir).create(cwd) as sm:
        sm.append_message(user(text))
        sm.append_message(assistant(f"answer to {text}"))
        return str(sm.get_session_file())


def claude_session(home: Path) -> Path:
    source = REAL_FILES / "foreign" / "claude" / CLAUDE
    if not source.exists():
        unavailable(f"fixture {source} is missing")
    target = home / ".claude" / "projects" / "-w" / f"{CLAUDE_ID}.jsonl"
    target.parent.mkdir(parents=True)
    shutil.copyfile(source, target)
    return target


def run(*args: str) -> object:
    return CliRunner().invoke(app, list(args))


def test_a_pi_only_home_lists_its_sessions_with_no_options(home: Path, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    pi_session(home / ".pi" / "agent", project, "hello from pi")
    os.chdir(project)
    result = CliRunner().invoke(app, ["list", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["total"] == 1
    assert document["stores"] == [
        {"agent": "pi", "machine": None, "location": str(home / ".pi" / "agent")}
    ]
    # and a writing command works on the only store
    session = document["sessions"][0]["id"]
    renamed = CliRunner().invoke(app, ["rename", session, "Named"])
    assert renamed.exit_code == 0, renamed.output


def test_list_reads_every_store_and_says_where_it_looked(home: Path, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    pi_session(home / ".pi" / "agent", tmp_path / "elsewhere", "in another project")
    claude_session(home)
    os.chdir(project)
    result = CliRunner().invoke(app, ["list"])
    assert result.exit_code == 0, result.output
    assert "No sessions for" in result.stdout
    text = "".join(result.stdout.split())
    assert str(home / ".pi" / "agent") in text
    assert str(home / ".claude") in text
    assert "2 sessions of other projects" in result.stdout
    every = json.loads(CliRunner().invoke(app, ["list", "--all", "--json"]).stdout)
    assert {s["agent"] for s in every["sessions"]} == {"pi", "claude"}
    # a session of another store is found by its id too
    shown = CliRunner().invoke(app, ["show", CLAUDE_ID[:13]])
    assert shown.exit_code == 0, shown.output
    # and resume finds every session show finds: its path, which its agent resumes
    resumed = CliRunner().invoke(app, ["resume", CLAUDE_ID[:13]])
    assert resumed.exit_code == 0, resumed.output
    assert resumed.stdout.strip() == str(
        home / ".claude" / "projects" / "-w" / f"{CLAUDE_ID}.jsonl"
    )


def test_stores_lists_counts_and_sizes(home: Path, tmp_path: Path) -> None:
    pi_session(home / ".pi" / "agent", tmp_path, "one")
    claude_session(home)
    result = CliRunner().invoke(app, ["stores", "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["agent"]: r for r in json.loads(result.stdout)["stores"]}
    assert rows["pi"]["sessions"] == 1 and rows["pi"]["readOnly"] is False
    assert rows["claude"]["sessions"] == 1 and rows["claude"]["readOnly"] is True
    assert rows["claude"]["bytes"] == (REAL_FILES / "foreign" / "claude" / CLAUDE).stat().st_size
    text = CliRunner().invoke(app, ["stores"])
    assert "Claude Code" in text.stdout and "pi" in text.stdout


def test_writing_needs_one_store_named_or_the_only_one(home: Path, tmp_path: Path) -> None:
    path = pi_session(home / ".pi" / "agent", tmp_path, "one")
    pi_session(home / ".omp" / "agent", tmp_path, "two")
    assert [f.agent for f in find_stores()] == ["omp", "pi"]
    result = CliRunner().invoke(app, ["rename", path, "x"])
    assert result.exit_code == 2
    assert "several are here" in result.output
    named = CliRunner().invoke(
        app, ["--agent-dir", str(home / ".pi" / "agent"), "rename", path, "x"]
    )
    assert named.exit_code == 0, named.output


def test_nothing_found_says_so(home: Path) -> None:
    assert find_stores() == []
    result = CliRunner().invoke(app, ["stores"])
    assert "No agent store found" in result.stdout


def test_search_reads_every_store_found(home: Path, tmp_path: Path) -> None:
    pi_session(home / ".pi" / "agent", tmp_path / "p", "the word zanzibar in pi")
    claude_session(home)
    result = CliRunner().invoke(app, ["search", "zanzibar", "--all", "--json"])
    assert result.exit_code == 0, result.output
    hits = json.loads(result.stdout)["hits"]
    assert {h["path"].startswith(str(home / ".pi")) for h in hits} == {True}
    # a word of the Claude Code session is found in its store
    claude_text = "entire"
    both = json.loads(CliRunner().invoke(app, ["search", claude_text, "--all", "--json"]).stdout)
    assert any(h["path"].startswith(str(home / ".claude")) for h in both["hits"])


def test_other_machines_stores_a_sync_shows_here_are_found_marked_with_their_machine(
    home: Path, tmp_path: Path
) -> None:
    claude_session(home)
    machines = home / ".local" / "state" / "sessiontree" / "sync" / "0a1b2c" / "machines"
    view = machines / "laptop" / "claude"
    claude_session(view.parent / "home")
    (view.parent / "home" / ".claude").rename(view)
    (view.parent / "home").rmdir()
    # passed over: a name no machine has, a symlink, an agent that is not carried read-only
    shutil.copytree(view, machines / "-bad" / "claude")
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(view, elsewhere / "claude")
    os.symlink(elsewhere, machines / "linked")
    (machines / "laptop" / "pi" / "sessions").mkdir(parents=True)

    found = [f for f in find_stores() if f.machine is not None]
    assert [(f.agent, f.machine, f.via, f.home) for f in found] == [
        ("claude", "laptop", "sync", str(view))
    ]
    assert found[0].name == "Claude Code (laptop)" and found[0].agent_name == "Claude Code"
    store = found[0].open()
    assert store.read_only and store.machine == "laptop"
    assert [s.id for s in store.list()] == [CLAUDE_ID]

    table = run("stores")
    assert table.exit_code == 0, table.output
    rows = [[w for w in line.split() if w not in ("┃", "│")] for line in table.output.splitlines()]
    assert rows[0][:3] == ["Agent", "Machine", "Sessions"]
    assert ["Claude", "Code", "laptop", "1"] in [row[:4] for row in rows]
    assert ["Claude", "Code", "here", "1"] in [row[:4] for row in rows]
    listing = run("list", "--all")
    assert "claude@laptop" in listing.output and "claude " in listing.output
