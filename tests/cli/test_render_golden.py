"""Golden output: `list`, `show`, `tree`, `usage` (by session, by project, blocks) and
`stats` at 80 and 200 columns on a store written byte by byte (fixed ids, times and
file dates), compared with tests/data/golden/. `SESSIONTREE_GOLDEN=write` writes them again (then read the diff)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import sessiontree.cli.common as cli_common
from sessiontree.cli import app
from sessiontree.reports import price_table
from tests.conftest import FIXTURES

GOLDEN = FIXTURES / "golden"
DAY = 1_767_600_000  # 2026-01-05T08:00:00Z


def _line(value: dict[str, Any]) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _message(
    n: int, parent: str | None, role: str, text: str, usage: bool = False
) -> dict[str, Any]:
    stamp = f"2026-01-05T08:{n:02d}:00.000Z"
    message: dict[str, Any] = {"role": role, "content": [{"type": "text", "text": text}]}
    if role == "assistant":
        message |= {
            "provider": "anthropic",
            "model": "claude-sonnet-4-5",
            "api": "anthropic-messages",
        }
        message["usage"] = {
            "input": 1200 * n,
            "output": 340 * n,
            "cacheRead": 56_000 * n,
            "cacheWrite": 7_800,
            "totalTokens": 1200 * n + 340 * n + 56_000 * n + 7_800,
            "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
        }
        message["stopReason"] = "stop"
    message["timestamp"] = DAY * 1000 + n * 60_000
    return {
        "type": "message",
        "id": f"e{n:07d}",
        "parentId": parent,
        "timestamp": stamp,
        "message": message,
    }


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    agent = tmp_path / "agent"
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(agent))
    monkeypatch.delenv("SESSIONTREE_STORE", raising=False)
    monkeypatch.setenv("TZ", "UTC")
    paths = {}
    specs = [
        (
            "0cb5c7ea00000001",
            "/work/sessiontree",
            "Why does CI fail on Python 3.12 but pass locally on my laptop?",
        ),
        (
            "0cb5c7ea00000002",
            "/work/a-very-long-project-directory-name",
            "Übersicht 🚀 der Woche: was ist passiert?",
        ),
        ("0cb5c7eb00000003", "/work/site", "Make the homepage faster"),
    ]
    for k, (sid, cwd, prompt) in enumerate(specs):
        directory = agent / "sessions" / ("-" + cwd.replace("/", "-") + "--")
        directory.mkdir(parents=True)
        header = {
            "type": "session",
            "version": 3,
            "id": sid,
            "timestamp": "2026-01-05T08:00:00.000Z",
            "cwd": cwd,
        }
        lines = [header, _message(1, None, "user", prompt)]
        lines.append(
            _message(2, "e0000001", "assistant", "The runner has **3.11**; pin it in `.ci/run`.")
        )
        lines.append(_message(3, "e0000002", "user", "Pin it then."))
        lines.append(_message(4, "e0000003", "assistant", "Pinned python3.11 in .ci/run."))
        if k == 0:  # a second branch from the first answer
            lines.append(_message(5, "e0000002", "user", "Or install 3.12 in the image?"))
            lines.append(_message(6, "e0000005", "assistant", "That works too."))
        path = directory / f"2026-01-05T08-00-00-000Z_{sid}.jsonl"
        path.write_text("".join(_line(v) + "\n" for v in lines), encoding="utf-8")
        os.utime(path, (DAY + 3600 * k, DAY + 3600 * k))
        paths[sid] = str(path)
    return paths


def _check(name: str, text: str) -> None:
    target = GOLDEN / f"{name}.txt"
    if os.environ.get("SESSIONTREE_GOLDEN") == "write":
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    assert target.is_file(), f"{target} is missing: SESSIONTREE_GOLDEN=write writes it"
    assert text == target.read_text(encoding="utf-8"), f"{name} differs from {target}"


@pytest.mark.parametrize("columns", [80, 200])
@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("list", ["list", "--all"]),
        ("show", ["show", "0cb5c7ea00000001"]),
        ("tree", ["tree", "0cb5c7ea00000001"]),
        ("usage", ["usage", "session"]),
        ("projects", ["usage", "project"]),
        ("blocks", ["usage", "blocks"]),
        ("stats", ["stats"]),
    ],
)
def test_golden_output(
    store: dict[str, str],
    name: str,
    args: list[str],
    columns: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The console takes its width from $COLUMNS once, when the CLI is imported.
    monkeypatch.setattr(cli_common.console, "width", columns)
    # Estimates name the price table's release; the golden files name none (a newer
    # genai-prices changes no layout), so the release is written as N.N.N here.
    monkeypatch.setattr(price_table(), "version", "N.N.N")
    monkeypatch.setattr(cli_common.err_console, "width", columns)
    # What a terminal shows (the runner's stdout is a pipe, where lines are not wrapped).
    monkeypatch.setattr(cli_common.console, "writes_to_terminal", lambda: True)
    result = CliRunner().invoke(app, args, env={"COLUMNS": str(columns), "TZ": "UTC"})
    assert result.exit_code == 0, (result.stdout, result.stderr)
    text = result.stdout
    for path in store.values():  # the temporary directory, named alike everywhere
        text = text.replace(path, "<path of " + Path(path).name[25:41] + ">")
    assert all(len(line) <= columns for line in text.splitlines()), text
    _check(f"{name}-{columns}", text)
