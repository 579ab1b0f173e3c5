"""What the commands say on the terminal: `show` prints the file path on one
line and no empty model rows, `rm` asks with the title and size, `repair` says what to
do with its copy, `history` names the database it read; a note is said once, a search
with no hit here points to --all, an empty machine says where it looked."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

import sessiontree.cli.common as cli_common
from sessiontree import SessionManager
from sessiontree.cli import app
from tests.helpers import assistant, user


def run(*args: str, input: str | None = None, columns: int = 40) -> tuple[int, str, str]:
    # The console takes its width from $COLUMNS once, when the CLI is imported.
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cli_common.console, "width", columns)
        mp.setattr(cli_common.err_console, "width", columns)
        result = CliRunner().invoke(app, list(args), input=input, env={"COLUMNS": str(columns)})
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    agent = tmp_path / "agent"
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(agent))
    monkeypatch.delenv("SESSIONTREE_STORE", raising=False)
    directory = agent / "sessions" / "--work-a-rather-long-project-directory-name--"
    with SessionManager.create("/work/a-rather-long-project-directory-name", str(directory)) as sm:
        sm.append_model_change("openai/gpt-5")  # named, never replied with
        sm.append_message(user("Why is the build red?"))
        sm.append_message(assistant("A missing pin."))
        sm.set_session_name("Red build", "user")
        return sm.get_session_file() or ""


def test_show_prints_the_path_on_one_line_and_no_empty_model_rows(session: str) -> None:
    code, out, _ = run("show", session)
    assert code == 0
    assert any(line.startswith("File") and session in line for line in out.splitlines())
    assert "openai/gpt-5" not in out  # no reply: no row
    # At 40 columns the usage is a line per model: no number cut.
    assert "replies 1 · input 100 · output 20" in out.replace("\n", " ")
    # the directory is cut in the middle on its one line, never broken over two
    (directory,) = [line for line in out.splitlines() if line.startswith("Directory")]
    assert "/work/a-r" in directory and directory.rstrip().endswith("name") and "…" in directory


def test_rm_asks_with_the_title_and_size(session: str) -> None:
    code, _, err = run("rm", session, input="n\n", columns=200)
    assert code == 1
    assert "Delete 'Red build' (2 messages, " in err and " B): " in err


def test_repair_says_what_to_do_with_its_copy(session: str) -> None:
    with open(session, "a", encoding="utf-8") as f:
        f.write('{"type":"message","id":"torn"\n')
    code, out, _ = run("repair", session, columns=400)
    assert code == 0, out
    assert "Next: check it (sessiontree show " in out
    assert f"then replace the original with it: mv {session}.repaired {session}" in out


def test_history_names_the_database_it_read(session: str, tmp_path: Path) -> None:
    code, out, _ = run("history", columns=400)
    assert code == 0
    assert f"No prompts found in {tmp_path / 'agent' / 'history.db'}." in out


def test_a_note_of_every_store_is_said_once(homes_in_tmp: Path) -> None:
    for home in (homes_in_tmp / ".pi" / "agent", homes_in_tmp / ".omp" / "agent"):
        with SessionManager.create("/work/x", str(home / "sessions" / "--work-x--")) as sm:
            sm.append_message(user("ok then"))
            sm.append_message(assistant("ok"))
    code, _, err = run("search", "ok", "--all", columns=200)
    assert code == 0, err
    notes = [line for line in err.splitlines() if line.startswith("sessiontree: note:")]
    assert len(notes) == 1 and "3+ characters" in notes[0], err


def test_a_search_without_hits_here_says_all_looks_everywhere(session: str) -> None:
    code, out, _ = run("search", "nowhere-to-be-found", columns=200)
    assert code == 1
    assert "--all looks in the sessions of every project" in out
    code, out, _ = run("search", "nowhere-to-be-found", "--all", columns=200)
    assert code == 1 and "--all" not in out


def test_an_empty_machine_says_where_it_looked_and_offers_the_demo(homes_in_tmp: Path) -> None:
    code, out, err = run("list", columns=200)
    assert code == 0, err
    assert "No sessions found on this machine" in out and "sessiontree demo" in out
    lines = [line.strip() for line in out.splitlines()]
    assert f"{homes_in_tmp / '.claude'} (Claude Code)" in lines
    assert f"{homes_in_tmp / '.pi' / 'agent'} (pi)" in lines
