"""`restore` takes every id `list` shows, of the store and of the archive read as one:
each agent's real files archived from a home, each session restored by its whole id
and by the 8 characters the table shows; an ambiguous prefix names its candidates."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from sessiontree.archive import ArchiveError, archive_stores, restore_session
from sessiontree.cli import app
from sessiontree.cli.commands_archive import _sources
from tests.conftest import REAL_FILES
from tests.foreign_support import OPENCODE_DB, claude_layout_name, opencode_json_layout

FOREIGN = REAL_FILES / "foreign"
AGENTS = ("pi", "omp", "claude", "codex", "opencode", "gemini", "copilot")
HOME_VARIABLES = (
    "PI_CODING_AGENT_DIR",
    "CLAUDE_CONFIG_DIR",
    "CODEX_HOME",
    "XDG_DATA_HOME",
    "GEMINI_CLI_HOME",
    "COPILOT_HOME",
    "SESSIONTREE_STORE",
)


def _pi_session(home: Path, agent: str, session_id: str) -> None:
    project = home / f".{agent}" / "agent" / "sessions" / "--w--"
    project.mkdir(parents=True)
    (project / f"2026-01-01T00-00-00-000Z_{session_id}.jsonl").write_text(
        json.dumps({"type": "session", "version": 3, "id": session_id, "cwd": "/w",
                    "timestamp": "2026-01-01T00:00:00.000Z"})
        + "\n"
        + json.dumps({"type": "message", "id": "m1", "parentId": None,
                      "timestamp": "2026-01-01T00:00:01.000Z",
                      "message": {"role": "user", "content": f"hello {agent}", "timestamp": 1}})
        + "\n",
        encoding="utf-8",
    )  # fmt: skip


def _lay_out(home: Path) -> None:
    """A home holding each agent's store as it keeps it, of real files where there are
    some: files not named by their id (a Codex rollout, Gemini CLI's 8 characters, a
    Copilot CLI dir) included."""
    _pi_session(home, "pi", "cccccccc-0000-0000-0000-000000000003")
    _pi_session(home, "omp", "dddddddd-0000-0000-0000-000000000004")
    claude = (
        FOREIGN
        / "claude"
        / ("kvsankar__agent-history__tests__fixtures__real_sessions__claude__session-01.jsonl")
    )
    projects = home / ".claude" / "projects" / "-w"
    projects.mkdir(parents=True)
    shutil.copyfile(claude, projects / f"{claude_layout_name(claude)}.jsonl")
    rollouts = home / ".codex" / "sessions" / "2026" / "01" / "01"
    rollouts.mkdir(parents=True)
    for name in (
        "kvsankar__agent-history__tests__fixtures__real_sessions__codex__session-01.jsonl",
        "entireio__skills__15__94d668ead7__0__raw_transcript.jsonl",
    ):  # named by no id: `list` shows the one of its `session_meta`
        shutil.copyfile(FOREIGN / "codex" / name, rollouts / f"rollout-2026-01-01-{name[:8]}.jsonl")
    data = home / ".local" / "share" / "opencode"
    data.mkdir(parents=True)
    shutil.copyfile(FOREIGN / "opencode" / OPENCODE_DB, data / "opencode.db")
    opencode_json_layout(
        FOREIGN / "opencode" / "savekirk__session-bridge__29__dbfeaf9083__0__full.jsonl", data
    )
    chats = home / ".gemini" / "tmp" / "project" / "chats"
    chats.mkdir(parents=True)
    (chats.parent / ".project_root").write_text("/work/project", encoding="utf-8")
    for number, name in enumerate(
        (
            "kvsankar__agent-history__tests__fixtures__real_sessions__gemini__session-01.json",
            "savekirk__session-bridge__23__607762cc12__0__full.jsonl",
        )
    ):
        suffix = Path(name).suffix
        shutil.copyfile(
            FOREIGN / "gemini" / name, chats / f"session-2026-01-01T00-0{number}-0000000{number}{suffix}"
        )  # fmt: skip
    for name in (
        "computermode__test-repo__69__9504f045e2__0__full.jsonl",
        "computermode__test-repo__d6__c5b42b281b__0__full.jsonl",
    ):
        source = FOREIGN / "copilot" / name
        first = json.loads(source.read_text(encoding="utf-8").splitlines()[0])
        target = home / ".copilot" / "session-state" / first["data"]["sessionId"] / "events.jsonl"
        target.parent.mkdir(parents=True)
        shutil.copyfile(source, target)


@pytest.fixture(scope="module")
def archived(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The home, its archive, and the sessions `list` shows of each (agent, id, path)."""
    root = tmp_path_factory.mktemp("home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HOME", str(root))
        for variable in HOME_VARIABLES:
            patch.delenv(variable, raising=False)
        _lay_out(root)
        archive = root / "archive"
        archive_stores(str(archive), _sources(str(archive)))
        runner = CliRunner()
        listed = {}
        for name, options in (("store", []), ("archive", ["--agent-dir", str(archive)])):
            result = runner.invoke(app, [*options, "list", "--all", "--json", "--limit", "0"])
            assert result.exit_code == 0, result.output
            listed[name] = json.loads(result.stdout)["sessions"]
        yield {"home": root, "archive": str(archive), "listed": listed, "patch": patch}


@pytest.mark.parametrize("agent", AGENTS)
def test_every_id_list_shows_is_restored(
    archived: dict[str, Any], agent: str, tmp_path: Path
) -> None:
    """Codex's sessions were listed by their id and restored only by their file name, a
    Copilot CLI or Gemini CLI id was not found."""
    rows = [r for r in archived["listed"]["store"] if r["agent"] == agent]
    rows += [r for r in archived["listed"]["archive"] if r["agent"] == agent]
    assert rows, f"no {agent} session listed"
    for number, row in enumerate(rows):
        source = Path(row["path"])
        for query in (row["id"], row["id"][:8]):
            out = tmp_path / f"{number}-{len(query)}"
            report = restore_session(archived["archive"], query, to=str(out))
            assert report.written, (agent, query)
            session = Path(report.written[0])
            if session.parent.parent.name == "export":  # an OpenCode database's session:
                # its `opencode export` document (the view shows it as OpenCode's JSON files)
                assert session.name == f"{row['id']}.json", query
                continue
            assert session.name == source.name, (agent, query)
            assert session.read_bytes() == source.read_bytes(), (agent, query)


def test_the_archive_lists_every_session_of_the_store(archived: dict[str, Any]) -> None:
    """An OpenCode database's sessions (archived as export documents) were missing."""
    listed = {
        name: {(r["agent"], r["id"]) for r in rows} for name, rows in archived["listed"].items()
    }
    assert {agent for agent, _ in listed["store"]} == set(AGENTS)
    assert listed["archive"] == listed["store"]


def test_an_ambiguous_prefix_names_each_candidate_with_its_id(archived: dict[str, Any]) -> None:
    with pytest.raises(ArchiveError) as raised:
        restore_session(archived["archive"], "ses_", to="/nonexistent")
    message = str(raised.value)
    assert "'ses_' matches" in message and "give more of the id" in message
    opencode = [r["id"] for r in archived["listed"]["store"] if r["agent"] == "opencode"]
    assert len(opencode) == 2
    assert all(session_id in message for session_id in opencode)
