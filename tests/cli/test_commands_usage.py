"""`sessiontree usage` and the content-index options of `sessiontree search`, in-process."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from typer.main import get_command
from typer.testing import CliRunner, Result

import sessiontree.cli.commands_usage as commands_usage
import sessiontree.cli.common as cli_common
from sessiontree import SessionManager
from sessiontree.cli import app
from tests.conftest import FIXTURES
from tests.helpers import assistant, user

runner = CliRunner()
NOW_MS = 1_772_359_200_000  # 2026-03-01T10:00:00Z


def run(*args: str) -> Result:
    return runner.invoke(app, list(args))


def as_json(*args: str, code: int = 0) -> dict[str, Any]:
    result = run(*args, "--json")
    assert result.exit_code == code, (result.stdout, result.stderr, result.exception)
    document: dict[str, Any] = json.loads(result.stdout)
    assert document["schemaVersion"] == 1
    return document


def make(cwd: str, messages: list[dict[str, Any]], parent: str | None = None) -> str:
    sm = SessionManager.create(cwd)
    if parent is not None:
        sm.new_session(parent_session=parent)
    for message in messages:
        sm.append_message(message)
    sm.close()
    path = sm.get_session_file()
    assert path is not None
    return path


@pytest.fixture
def sessions(agent_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    at = NOW_MS - 3_600_000
    return {
        "here": make(
            str(project),
            [
                user("How do I parse the config?"),
                assistant("Use tomllib to parse it.", timestamp=at),
                assistant("Or configparser.", timestamp=at + 60_000),
            ],
        ),
        "there": make(
            "/elsewhere",
            [
                user("unrelated"),
                assistant("parse error fixed", timestamp=at - 86_400_000),
                assistant(
                    "free reply",
                    provider="openrouter",
                    model="qwen/qwen3-coder:free",
                    usage={"input": 10, "output": 5, "cacheRead": 0, "cacheWrite": 0},
                    timestamp=at - 86_400_000,
                ),
                assistant(
                    "estimated reply",
                    usage={"input": 1000, "output": 100, "cacheRead": 0, "cacheWrite": 0},
                    timestamp=at - 86_400_000,
                ),
            ],
        ),
    }


def test_usage_commands_have_help() -> None:
    group: Any = get_command(app)
    usage = group.commands["usage"]
    assert set(usage.commands) == {"daily", "weekly", "monthly", "session", "project", "blocks"}
    for name, command in usage.commands.items():
        assert command.help and command.help.strip(), name
        for param in command.params:
            assert getattr(param, "help", None), f"usage {name} {param.name}"
        assert run("usage", name, "--help").exit_code == 0


def test_usage_daily_json_and_text(sessions: dict[str, str]) -> None:
    document = as_json("usage", "daily", "--tz", "UTC")
    assert document["report"] == "daily" and document["timeZone"] == "UTC"
    assert document["prices"]["table"] == "genai-prices" and document["prices"]["version"]
    assert [row["period"] for row in document["rows"]] == ["2026-02-28", "2026-03-01"]
    totals = document["totals"]
    assert totals["messages"] == 5 and totals["estimatedMessages"] == 1
    assert totals["input"] == 3 * 100 + 10 + 1000
    assert totals["recordedCost"] == pytest.approx(0.9)
    assert totals["cost"] == pytest.approx(0.9 + totals["estimatedCost"])
    assert totals["estimatedCost"] == pytest.approx(1000 * 3e-6 + 100 * 15e-6)
    models = document["rows"][0]["models"]
    assert set(models) == {"anthropic/claude-sonnet-4-5", "openrouter/qwen/qwen3-coder:free"}
    assert models["openrouter/qwen/qwen3-coder:free"]["cost"] == 0
    text = run("usage", "daily", "--tz", "UTC", "--breakdown").stdout
    assert "2026-03-01" in text and "claude-sonnet-4-5" in text and "estimated" in text
    assert "~$" in text  # the estimated row is marked


def test_usage_reports_filter_by_time_and_project(sessions: dict[str, str], tmp_path: Path) -> None:
    only = as_json("usage", "monthly", "--since", "2026-03-01", "--tz", "UTC")
    assert only["totals"]["messages"] == 2 and only["rows"][0]["period"] == "2026-03"
    project = as_json("usage", "project", "--project", str(tmp_path / "project"))
    assert [row["project"] for row in project["rows"]] == [str(tmp_path / "project")]
    every = as_json("usage", "project")
    assert {row["project"] for row in every["rows"]} == {str(tmp_path / "project"), "/elsewhere"}
    per_session = as_json("usage", "session")
    assert {row["path"] for row in per_session["rows"]} == set(sessions.values())
    assert all(row["sessionId"] for row in per_session["rows"])
    weekly = as_json("usage", "weekly", "--until", "2026-02-28", "--tz", "UTC")
    assert weekly["totals"]["messages"] == 3 and weekly["rows"][0]["period"] == "2026-02-23"
    assert run("usage", "daily", "--tz", "Mars/Olympus").exit_code == 1
    assert run("usage", "daily", "--since", "2026-03-02", "--until", "2026-03-01").exit_code == 2


def test_usage_blocks_json_text_and_live(
    sessions: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The command's own clock, not the time module's: a patched time.sleep or time.time is
    # seen by every thread and library of the process (the content index's reader thread,
    # SQLite retries), and a sleep of theirs counted here kept --live from ever ending.
    clock = SimpleNamespace(time=lambda: NOW_MS / 1000, sleep=time.sleep)
    monkeypatch.setattr(commands_usage, "time", clock)
    document = as_json("usage", "blocks")
    found = [b for b in document["blocks"] if not b["gap"]]
    assert [b["messages"] for b in found] == [3, 2]
    assert found[-1]["start"] == "2026-03-01T09:00:00.000Z" and found[-1]["active"]
    assert found[-1]["burnRate"] is not None and found[-1]["projection"] is not None
    assert any(b["gap"] for b in document["blocks"])
    text = run("usage", "blocks").stdout
    assert "ACTIVE" in text and "Burn rate" in text
    assert "Ctrl-C" not in text  # nothing to stop: the report has ended
    ticks = []

    def sleep(seconds: float) -> None:
        ticks.append(seconds)
        if len(ticks) >= 2:
            raise KeyboardInterrupt

    clock.sleep = sleep
    live = run("usage", "blocks", "--live", "--interval", "0.1")
    assert live.exit_code == 0 and "Active block" in live.stdout and ticks == [0.1, 0.1]
    # the frame left when the run has ended does not say how to stop it
    assert "Ctrl-C stops" not in live.stdout.rstrip().splitlines()[-1]
    assert run("usage", "blocks", "--live", "--json").exit_code == 2


def test_search_options(sessions: dict[str, str]) -> None:
    hits = as_json("search", "parse", "--all")["hits"]
    assert {h["path"] for h in hits} == set(sessions.values())
    times = [h["timestamp"] for h in hits]
    assert times == sorted(times, reverse=True)
    document = as_json("search", "pars(e|ing) (the|it)", "--regex", "--all")
    assert document["mode"] == "index" and len(document["hits"]) == 2
    assert {h["role"] for h in as_json("search", "parse", "--all", "--role", "user")["hits"]} == {
        "user"
    }
    # Entry times are when the lines were written: just now.
    recent = as_json("search", "parse", "--all", "--since", "1h")["hits"]
    assert len(recent) == len(hits)
    assert as_json("search", "parse", "--all", "--until", "2000-01-01", code=1)["hits"] == []
    short = as_json("search", "Or", "--all")
    assert short["mode"] == "scan" and "3+ characters" in short["notes"][0]
    scanned = as_json("search", "parse", "--all", "--no-index")
    assert scanned["mode"] == "scan" and len(scanned["hits"]) == len(hits)
    here = as_json("search", "parse", "--project", "/elsewhere")["hits"]
    assert {h["path"] for h in here} == {sessions["there"]}
    assert run("search", "x", "--all", "--project", "/p").exit_code == 2
    assert run("search", "(unclosed", "--regex").exit_code == 1
    assert "bad regular expression" in run("search", "(unclosed", "--regex").stderr
    text = run("search", "Or", "--all")
    assert "note:" in text.stderr and "configparser" in text.stdout


def test_reading_commands_write_only_private_cache_files(
    sessions: dict[str, str], agent_dir: Path
) -> None:
    for args in (["usage", "daily"], ["usage", "blocks"], ["search", "parse", "--all"]):
        assert run(*args).exit_code == 0
    cache = agent_dir / "cache"
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    names = set(os.listdir(cache))
    assert "content-index.db" in names
    for name in names:
        assert stat.S_IMODE((cache / name).stat().st_mode) == 0o600, name


def test_usage_session_titles_the_sessions_of_every_store_read(
    homes_in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli_common.console, "width", 200)
    name = "fe5e1c67-53e7-4862-81ae-d0e013e3270b"
    projects = homes_in_tmp / ".claude" / "projects" / "-sample"
    projects.mkdir(parents=True)
    source = next((FIXTURES / "real" / "foreign" / "claude").glob(f"*{name}.jsonl"))
    (projects / f"{name}.jsonl").write_bytes(source.read_bytes())
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(homes_in_tmp / ".pi" / "agent"))
    make("/work/pi-project", [user("Tidy the pi store"), assistant("Tidied.")])
    monkeypatch.delenv("PI_CODING_AGENT_DIR")
    result = run("usage", "session")
    assert result.exit_code == 0, result.stderr
    # Claude Code's session by its title, as `list` shows it, not by its bare id
    assert "Empty Repo Setup" in result.stdout and name not in result.stdout
    assert "Tidy the pi store" in result.stdout
