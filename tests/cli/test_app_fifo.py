"""The commands meet a session file swapped for a FIFO after it was listed: none blocks;
one naming it exits 1 with one line naming the file and what it is (no traceback), a
write changes nothing, and a command walking the store (`usage`, `search`) says it passed
it over and reports the others.

Each command runs in a child process with a timeout: a hang fails the test.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import sessiontree.cli.commands_inspect as commands_inspect
import sessiontree.cli.commands_manage as commands_manage
from sessiontree import SessionManager
from sessiontree.cli import app
from tests.helpers import assistant, run_cli_within, user, without_hang


def _run(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    return run_cli_within(*args, home=home)


def _listed_then_swapped(home: Path) -> tuple[str, str]:
    """Two sessions, listed (and indexed), then the first swapped for a FIFO."""
    paths = []
    for i in range(2):
        with SessionManager.create("/proj") as sm:
            sm.append_message(user(f"hello needle {i}"))
            sm.append_message(assistant(f"hi {i}"))
            paths.append(sm.get_session_file() or "")
    assert _run("list", "--all", home=home).returncode == 0
    assert _run("search", "--all", "needle", home=home).returncode == 0
    os.unlink(paths[0])
    os.mkfifo(paths[0])
    return paths[0], paths[1]


@pytest.mark.parametrize(
    "command",
    [
        ("show",),
        ("tree",),
        ("context",),
        ("export",),
        ("export", "--format", "html"),
        ("verify",),
        ("repair",),
        ("rename", "{path}", "new title"),
        ("fork",),
        ("migrate",),
        ("rm",),
    ],
    ids=lambda c: c[0] if len(c) < 3 or c[1] != "--format" else "export html",
)
def test_a_command_naming_a_fifo_says_so_in_one_line(
    agent_dir: Path, tmp_path: Path, command: tuple[str, ...]
) -> None:
    fifo, _ = _listed_then_swapped(tmp_path)
    args = [a.format(path=fifo) for a in command]
    if "{path}" not in command:
        args.insert(1, fifo)
    before = sorted(os.listdir(os.path.dirname(fifo)))
    done = _run(*args, home=tmp_path)
    assert done.returncode == 1, done.stderr
    assert done.stderr == f"sessiontree: error: {fifo}: a FIFO, not a regular file\n"
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(os.listdir(os.path.dirname(fifo))) == before


def test_usage_and_search_pass_a_fifo_over_and_report_the_others(
    agent_dir: Path, tmp_path: Path
) -> None:
    fifo, other = _listed_then_swapped(tmp_path)
    usage = _run("usage", "session", "--json", home=tmp_path)
    assert usage.returncode == 0, usage.stderr
    report = json.loads(usage.stdout)
    assert f"{fifo}: a FIFO, not a regular file; passed over" in report["notes"]
    found = _run("search", "--all", "needle", "--json", home=tmp_path)
    assert found.returncode == 0, found.stderr
    assert [hit["path"] for hit in json.loads(found.stdout)["hits"]] == [other]


@pytest.mark.parametrize(
    ("module", "command"),
    [
        (commands_inspect, ("show",)),
        (commands_inspect, ("tree",)),
        (commands_manage, ("rename", "{path}", "new title")),
        (commands_manage, ("fork",)),
    ],
    ids=["show", "tree", "rename", "fork"],
)
def test_a_session_swapped_for_a_fifo_after_it_was_resolved_is_said_in_one_line(
    agent_dir: Path, monkeypatch: pytest.MonkeyPatch, module: Any, command: tuple[str, ...]
) -> None:
    """The swap between the command's look at the path and its open: the open refuses
    it (no hang), in one line naming the file; the FIFO stays."""
    with SessionManager.create("/proj") as sm:
        sm.append_message(user("hello"))
        sm.append_message(assistant("hi"))
        fifo = sm.get_session_file() or ""
    resolved = module.resolve_session

    def resolved_then_swapped(arg: str) -> str:
        path: str = resolved(arg)
        os.unlink(path)
        os.mkfifo(path)
        return path

    monkeypatch.setattr(module, "resolve_session", resolved_then_swapped)
    args = [a.format(path=fifo) for a in command]
    if "{path}" not in command:
        args.insert(1, fifo)
    done = without_hang(lambda: CliRunner().invoke(app, args), fifo)
    assert done.exit_code == 1, (done.stdout, done.stderr, done.exception)
    assert done.stderr == f"sessiontree: error: {fifo}: a FIFO, not a regular file\n"
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
