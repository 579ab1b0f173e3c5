"""`import SESSION` without `--from`: whose session an id or prefix is.

Every other agent's store is laid out where that agent keeps it (Claude Code, Codex,
OpenCode, Gemini CLI, Copilot CLI; HOME and their variables point into the test's
dir). An id found in one store is imported from it; found in several, a usage error
names them; found in none, an error says where it looked. `--from` and a file's
path work as before.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from sessiontree import load_entries_from_file
from sessiontree.cli import app
from tests import foreign_support as fs
from tests.conftest import REAL_FILES, unavailable

runner = CliRunner()
FOREIGN = REAL_FILES / "foreign"
CLAUDE_ID = "20b81bf8-77cd-4205-8ac9-727b573a70e4"
COPILOT_ID = "e07fc822-e277-4d5d-898a-1b91eedea7b6"
OPENCODE_DB_ID = "ses_04ca851f7ffevKrKMHW3RsPK1U"
GEMINI_ID = "cdb14b05-cceb-4354-a9d8-8c9182ece8bf"


def _nowhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """HOME and every agent's variable in the test's dir, nothing there yet."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for var in ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "GEMINI_CLI_HOME", "COPILOT_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(home / ".local" / "share"))
    monkeypatch.setenv("COLUMNS", "200")
    return home


@pytest.fixture
def homes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    if not FOREIGN.is_dir():
        unavailable(f"real files {FOREIGN} are missing")
    _nowhere(tmp_path, monkeypatch)
    claude, codex, placed = fs.layout(FOREIGN, tmp_path / "stores")
    more = fs.layout_more(FOREIGN, tmp_path / "more")
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(claude))
    monkeypatch.setenv("CODEX_HOME", str(codex))
    monkeypatch.setenv("XDG_DATA_HOME", str(more["xdg"]))
    monkeypatch.setenv("GEMINI_CLI_HOME", str(more["gemini"]))
    monkeypatch.setenv("COPILOT_HOME", str(more["copilot"]))
    return {"claude": claude, "codex": codex, "placed": placed | more["placed"]}


def run(*args: str) -> Any:
    result = runner.invoke(app, list(args))
    assert "Traceback" not in result.output, result.output
    return result


def imported(*args: str) -> dict[str, Any]:
    result = run("import", *args, "--json")
    assert result.exit_code == 0, result.output
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


@pytest.mark.parametrize(
    ("arg", "agent", "source_id"),
    [
        ("20b81bf8", "claude", CLAUDE_ID),
        (CLAUDE_ID, "claude", CLAUDE_ID),
        ("e07fc822", "copilot", COPILOT_ID),
        ("ses_04ca", "opencode", OPENCODE_DB_ID),
        ("cdb14b05", "gemini", GEMINI_ID),
    ],
)
def test_an_id_in_one_store_is_imported_from_it(
    homes: dict[str, Any], arg: str, agent: str, source_id: str
) -> None:
    done = imported(arg)
    assert (done["source"], done["sourceId"]) == (agent, source_id)
    record = load_entries_from_file(done["path"])[-1]
    assert record["customType"] == "foreign_session_import"
    assert record["data"]["source"] == agent
    # The same as with --from: a second import is refused as one of the same source.
    again = run("import", arg, "--from", agent)
    assert again.exit_code == 1 and "imported before" in again.output


def test_a_codex_id_is_found_in_codex_only(homes: dict[str, Any]) -> None:
    listed = json.loads(run("--agent", "codex", "list", "--all", "--json").stdout)
    ids = sorted(s["id"] for s in listed["sessions"])
    assert ids
    # An id no other store holds a session starting with.
    others = {
        s["id"].lower()
        for agent in ("claude", "opencode", "gemini", "copilot")
        for s in json.loads(run("--agent", agent, "list", "--all", "--json").stdout)["sessions"]
    }
    chosen = next(i for i in ids if not any(o.startswith(i.lower()) for o in others))
    assert imported(chosen)["source"] == "codex"


def test_an_id_in_several_stores_asks_whose(homes: dict[str, Any]) -> None:
    # A Claude Code session filed under the name of a Copilot CLI session's id.
    project = homes["claude"] / "projects" / "-fixtures"
    shutil.copyfile(project / f"{CLAUDE_ID}.jsonl", project / f"{COPILOT_ID}.jsonl")
    result = run("import", "e07fc822")
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "matches sessions in 2 agents' stores" in text
    assert "Claude Code:" in text and "Copilot CLI:" in text
    assert "--from claude|copilot" in text
    # --from says whose: each imports its own.
    assert imported("e07fc822", "--from", "copilot")["source"] == "copilot"
    assert imported("e07fc822", "--from", "claude")["source"] == "claude"


def test_an_id_in_no_store_is_an_error(homes: dict[str, Any]) -> None:
    result = run("import", "zzzz")
    assert result.exit_code == 1
    text = " ".join(result.output.split())
    assert "no session matches 'zzzz' in the stores of Claude Code, Codex, OpenCode" in text
    assert str(homes["claude"] / "projects") in text
    assert "--from claude|codex|opencode|gemini|copilot" in text


def test_no_store_here_at_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _nowhere(tmp_path, monkeypatch)
    result = run("import", "20b81bf8")
    assert result.exit_code == 1
    text = " ".join(result.output.split())
    assert "no other agent's store found here" in text and "sessiontree stores" in text


def test_a_path_is_still_read_for_its_format(homes: dict[str, Any], tmp_path: Path) -> None:
    # Outside every store, its format says whose it is.
    copy = tmp_path / "elsewhere.jsonl"
    shutil.copyfile(homes["claude"] / "projects" / "-fixtures" / f"{CLAUDE_ID}.jsonl", copy)
    assert imported(str(copy))["source"] == "claude"
    missing = run("import", str(tmp_path / "gone.jsonl"))
    assert missing.exit_code == 1 and "no such file" in missing.output
