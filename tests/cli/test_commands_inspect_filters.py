"""Finding sessions: titles are searched, `list` filters by text and time,
and an unknown value is an error that names the known ones, not an empty result."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sessiontree import SessionManager
from sessiontree.cli import app
from tests.helpers import assistant, user

runner = CliRunner()
TITLE = "Übersicht 🚀 der Woche"


def run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), env={"COLUMNS": "200"})
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    agent = tmp_path / "agent"
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(agent))
    monkeypatch.delenv("SESSIONTREE_STORE", raising=False)
    paths = []
    for n in range(7):
        cwd = f"/work/p{n % 2}"
        directory = agent / "sessions" / f"--work-p{n % 2}--"
        with SessionManager.create(cwd, str(directory)) as sm:
            sm.append_message(user(f"question {n}"))
            sm.append_message(assistant(f"answer {n}"))
            if n < 5:
                sm.set_session_name(f"{TITLE} {n}", "user")
            paths.append(sm.get_session_file() or "")
    # Two old sessions: modified in 2025.
    for path in paths[5:]:
        old = time.mktime((2025, 3, 1, 12, 0, 0, 0, 0, -1))
        os.utime(path, (old, old))
    return paths


def test_titles_are_searched(agent: list[str]) -> None:
    code, out, _ = run("search", "übersicht 🚀", "--all", "--json")
    assert code == 0
    hits = json.loads(out)["hits"]
    assert sorted(h["path"] for h in hits) == sorted(agent[:5])
    assert {h["role"] for h in hits} == {"title"}
    for h in hits:
        assert h["snippet"][h["matchStart"] : h["matchEnd"]] == "Übersicht 🚀"
    code, out, _ = run("search", "ÜBERSICHT 🚀", "--all")
    assert code == 0 and out.count(TITLE) == 10  # each session's heading, and its hit
    # A role filter without `title` leaves titles out.
    code, _, _ = run("search", "übersicht", "--all", "-r", "user")
    assert code == 1


def test_list_filters_by_text_and_time(agent: list[str]) -> None:
    listed = json.loads(run("list", "--all", "--json")[1])
    assert listed["total"] == 7
    found = json.loads(run("list", "übersicht 🚀", "--all", "--json")[1])
    assert sorted(s["path"] for s in found["sessions"]) == sorted(agent[:5])
    found = json.loads(run("list", "question 6", "--all", "--json")[1])
    assert [s["path"] for s in found["sessions"]] == [agent[6]]
    recent = json.loads(run("list", "--all", "--since", "2026-01-01", "--json")[1])
    assert sorted(s["path"] for s in recent["sessions"]) == sorted(agent[:5])
    old = json.loads(run("list", "--all", "--until", "2025-12-31", "--json")[1])
    assert sorted(s["path"] for s in old["sessions"]) == sorted(agent[5:])
    code, out, _ = run("list", "nothing like this", "--all")
    assert code == 0 and "No sessions matching the filters" in out


def test_unknown_values_are_errors_that_name_the_known_ones(agent: list[str]) -> None:
    code, out, err = run("search", "question", "--all", "-r", "asistant")
    assert code == 2 and out == ""
    assert "unknown role 'asistant' (did you mean assistant?)" in err
    assert "user, assistant, toolResult" in err
    code, out, err = run("search", "question", "-p", "/work/nowhere")
    assert code == 2 and out == ""
    assert "no sessions of a project in /work/nowhere" in err
    assert "/work/p0, /work/p1" in err
    # Known values still find what they did.
    assert run("search", "question", "--all", "-r", "user")[0] == 0
    assert run("search", "question", "-p", "/work/p1")[0] == 0


def _commands() -> list[list[str]]:
    from typer.main import get_command

    root = get_command(app)
    out = []
    for name in root.list_commands(None):  # type: ignore[attr-defined]
        command = root.get_command(None, name)  # type: ignore[attr-defined]
        subs = getattr(command, "list_commands", None)
        if subs is not None:
            out += [[name, sub] for sub in subs(None)]
        out.append([name])
    return out


def test_help_placeholders_and_short_flags_are_plain_and_consistent() -> None:
    import re

    for words in _commands():
        code, text, _ = run(*words, "--help")
        assert code == 0, words
        usage = text.splitlines()[0]
        assert "{" not in usage, (words, usage)
        options = [line for line in text.splitlines() if line.startswith("  -")]
        for line in options:
            assert not re.match(r"\s+(-\w, )?--[\w-]+ +<", line), (words, line)
            if line.lstrip().startswith("-n,"):
                assert "--limit" in line, (words, line)
            if line.lstrip().startswith("-p,"):
                assert "--project" in line, (words, line)
            if "--dry-run" in line:
                assert line.lstrip().startswith("--dry-run"), (words, line)


def test_a_bad_choice_is_one_clean_line() -> None:
    code, out, err = run("export", "x", "-f", "pdf")
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [
        "sessiontree: error: --format/-f: 'pdf' is not one of md, html, jsonl "
        "(see sessiontree export --help)"
    ]
    code, _, err = run("list", "-n", "many")
    assert code == 2 and "--limit/-n: not a whole number" in err


HOSTILE_TIMES = [
    "9999-12-31",
    "99999999999999999999d",
    "1000000000h",
    "9" * 5000 + "d",
    "0001-01-01",
]


@pytest.mark.parametrize("value", HOSTILE_TIMES, ids=lambda v: v[:24])
def test_a_time_out_of_range_is_a_clean_error(agent: list[str], value: str) -> None:
    """`--until 9999-12-31` printed an OverflowError's traceback, a 5,000-digit `--since`
    a ValueError's, and `--since 99999999999999999999d` overflowed the content index's
    SQLite integers (searches fell back to reading every session, the web app gave 500)."""
    for args in (["list", "--all"], ["search", "answer", "--all"]):
        for flag in ("--since", "--until"):
            code, out, err = run(*args, flag, value)
            assert code == 1, (args, flag, out, err)  # as for any unreadable time
            assert "Traceback" not in out + err
            assert "the time" in err and err.count("\n") == 1, err
