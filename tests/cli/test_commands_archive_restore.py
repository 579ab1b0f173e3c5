"""`restore` used without paths: its help says where the archive's sessions are listed,
`--all --to DIR` keeps each agent's files apart, an OpenCode session restored says how
OpenCode takes it back."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sessiontree.cli import app
from tests.conftest import REAL_FILES
from tests.foreign_support import OPENCODE_DB, codex_rollouts

pytestmark = pytest.mark.usefixtures("homes_in_tmp")

PI_ID = "cccccccc-0000-0000-0000-000000000003"


def _pi_and_codex(home: Path) -> tuple[Path, Path]:
    """A pi session and a Codex rollout: both kept under their home's `sessions/`."""
    project = home / ".pi" / "agent" / "sessions" / "--w--"
    project.mkdir(parents=True)
    pi = project / f"2026-01-01T00-00-00-000Z_{PI_ID}.jsonl"
    pi.write_bytes(b'{"type":"session","version":3,"id":"%s","cwd":"/w"}\n' % PI_ID.encode())
    rollout, _ = codex_rollouts(home / ".codex")
    return pi, rollout


def _archive(home: Path) -> str:
    archive = str(home / "archive")
    result = CliRunner().invoke(app, ["archive", "--to", archive])
    assert result.exit_code == 0, result.output
    return archive


def test_the_help_sends_people_to_the_archives_listing() -> None:
    """It sent them to `archive --stats`, a page of figures with no session on it."""
    result = CliRunner().invoke(app, ["restore", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "--agent-dir ARCHIVE list" in text
    assert "archive --stats" not in text


def test_restore_all_to_a_dir_writes_a_dir_per_agent(homes_in_tmp: Path) -> None:
    """pi's and Codex's `sessions/` landed in one folder."""
    pi, rollout = _pi_and_codex(homes_in_tmp)
    archive = _archive(homes_in_tmp)
    out = homes_in_tmp / "copy"
    result = CliRunner().invoke(app, ["restore", "--all", "--from", archive, "--to", str(out)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["codex", "pi"]
    home_of_pi = homes_in_tmp / ".pi" / "agent"
    assert (out / "pi" / pi.relative_to(home_of_pi)).read_bytes() == pi.read_bytes()
    home_of_codex = homes_in_tmp / ".codex"
    copied = out / "codex" / rollout.relative_to(home_of_codex)
    assert copied.read_bytes() == rollout.read_bytes()


def test_the_archives_sessions_are_listed_and_restored_by_the_id_shown(
    homes_in_tmp: Path,
) -> None:
    _, rollout = _pi_and_codex(homes_in_tmp)
    archive = _archive(homes_in_tmp)
    runner = CliRunner()
    listed = runner.invoke(app, ["--agent-dir", archive, "list", "--all", "--json"])
    assert listed.exit_code == 0, listed.output
    (codex,) = [
        r for r in json.loads(listed.stdout)["sessions"] if r["path"].endswith(rollout.name)
    ]
    rollout.unlink()
    restored = runner.invoke(app, ["restore", codex["id"][:8], "--from", archive])
    assert restored.exit_code == 0, restored.output
    assert rollout.is_file()


def test_an_opencode_session_restored_says_how_opencode_takes_it_back(
    homes_in_tmp: Path,
) -> None:
    """OpenCode reads its sessions from its database, not from the file written."""
    data = homes_in_tmp / ".local" / "share" / "opencode"
    data.mkdir(parents=True)
    shutil.copyfile(REAL_FILES / "foreign" / "opencode" / OPENCODE_DB, data / "opencode.db")
    archive = _archive(homes_in_tmp)
    listed = CliRunner().invoke(app, ["--agent", "opencode", "list", "--all", "--json"])
    (row,) = json.loads(listed.stdout)["sessions"]
    out = homes_in_tmp / "out"
    result = CliRunner().invoke(
        app, ["restore", row["id"], "--from", archive, "--to", str(out), "--json"]
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    (written,) = document["written"]
    assert written == str(out / "export" / "opencode.db" / f"{row['id']}.json")
    assert any(f"opencode import {written}" in note for note in document["notes"])
