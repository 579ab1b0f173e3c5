"""`usage --json` of a store whose files hold negative token counts (a pi session's, a
Claude Code transcript's): no number in the report is negative, and each count is the
others' sum (a negative one counted as 0), whatever the period."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from sessiontree import SessionManager
from sessiontree.cli import app
from tests.foreign_support import write_jsonl
from tests.helpers import assistant, user

runner = CliRunner()


def _numbers(value: Any) -> list[float]:
    if isinstance(value, bool):
        return []
    if isinstance(value, int | float):
        return [value]
    if isinstance(value, dict):
        return [n for v in value.values() for n in _numbers(v)]
    if isinstance(value, list):
        return [n for v in value for n in _numbers(v)]
    return []


def _usage(i: int, o: int, r: int, w: int) -> dict[str, Any]:
    cost = {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0.01}
    return {
        "input": i,
        "output": o,
        "cacheRead": r,
        "cacheWrite": w,
        "totalTokens": 0,
        "cost": cost,
    }


@pytest.mark.parametrize("period", ["daily", "monthly", "session", "project"])
@pytest.mark.parametrize("use_index", [True, False], ids=["index", "no index"])
def test_usage_json_of_negative_counts_shows_no_negative_number(
    agent_dir: Path, period: str, use_index: bool
) -> None:
    with SessionManager.create("/proj") as sm:
        sm.append_message(user("q"))
        sm.append_message(assistant("a", usage=_usage(-5, 7, -1_000_000, 3), responseId="r1"))
        sm.append_message(user("q2"))
        sm.append_message(assistant("b", usage=_usage(10, -2, 4, -9), responseId="r2"))
    args = ["usage", period, "--json", *([] if use_index else ["--no-index"])]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, (result.stdout, result.stderr)
    report = json.loads(result.stdout)
    assert [n for n in _numbers(report) if n < 0] == []
    (row,) = report["rows"]
    assert {k: row[k] for k in ("input", "output", "cacheRead", "cacheWrite")} == {
        "input": 10,
        "output": 7,
        "cacheRead": 4,
        "cacheWrite": 3,
    }


def test_usage_json_of_a_claude_transcripts_negative_counts_shows_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "claude"
    message = {
        "id": "m1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-20250514",
        "content": [{"type": "text", "text": "done"}],
        "usage": {
            "input_tokens": -10,
            "output_tokens": 20,
            "cache_read_input_tokens": -300,
            "cache_creation_input_tokens": 40,
            "cache_creation": {"ephemeral_1h_input_tokens": -40},
        },
    }
    base = {"isSidechain": False, "sessionId": "0f4c1d2e-3b4a-4c5d-8e6f-7a8b9c0d1e2f"}
    lines = [
        {
            **base,
            "parentUuid": None,
            "type": "user",
            "uuid": "u1",
            "message": {"role": "user", "content": "go"},
            "timestamp": "2025-08-01T10:00:00.000Z",
            "cwd": "/work/app",
        },
        {
            **base,
            "parentUuid": "u1",
            "type": "assistant",
            "uuid": "a1",
            "message": message,
            "requestId": "r1",
            "timestamp": "2025-08-01T10:00:01.000Z",
            "cwd": "/work/app",
        },
    ]
    write_jsonl(home / "projects" / "-work-app" / f"{base['sessionId']}.jsonl", lines)
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(home))
    result = runner.invoke(app, ["--agent", "claude", "usage", "daily", "--json"])
    assert result.exit_code == 0, (result.stdout, result.stderr)
    report = json.loads(result.stdout)
    assert [n for n in _numbers(report) if n < 0] == []
    (row,) = report["rows"]
    assert (row["input"], row["output"], row["cacheRead"], row["cacheWrite"]) == (0, 20, 0, 40)


@pytest.mark.parametrize("command", ["usage", "show"])
@pytest.mark.parametrize("use_index", [True, False], ids=["index", "no index"])
def test_a_negative_recorded_cost_shows_no_negative_cost(
    agent_dir: Path, command: str, use_index: bool
) -> None:
    # A reply's `usage.cost.total` below 0 is no cost spent, as a negative count is no
    # token: it was summed as recorded (cost -5 in the report and in show).
    usage = _usage(1, 2, 3, 4)
    usage["cost"] = {**usage["cost"], "total": -5.0}
    with SessionManager.create("/proj") as sm:
        sm.append_message(user("q"))
        sm.append_message(assistant("a", usage=usage, responseId="r1"))
        path = sm.get_session_file()
        stats = sm.get_usage_statistics()
    assert path is not None
    assert stats.cost >= 0
    if command == "usage":
        args = ["usage", "session", "--json", *([] if use_index else ["--no-index"])]
    else:
        args = ["show", "--json", path]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert [n for n in _numbers(json.loads(result.stdout)) if n < 0] == []
