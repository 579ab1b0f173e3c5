"""Session text cannot drive the terminal through the CLI (review item 19).

A store from someone else can hold escape sequences anywhere: titles, prompts,
labels, entry text, model names, the project dir, file names, the agent dir's path.
Every command's human output must show them as visible escapes (and rich markup
as typed); `--json` keeps the exact text, and pipes get a path's exact bytes.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner, Result

import sessiontree.cli.common as cli_common
from sessiontree import HistoryStorage, SessionManager
from sessiontree.cli import app
from sessiontree.cli.render import terminal_safe
from sessiontree.format import serialize_entry
from tests.helpers import assistant, user

PAYLOADS = {
    "osc52": "\x1b]52;c;aGVsbG8=\x07",  # writes the clipboard
    "csi": "\x1b[2J\x1b[1;1H\x1b[31m",  # clears the screen, moves the cursor
    "bel": "\x07",
    "c1": "\x9b31m\x9d0;t\x9c",  # one-byte CSI / OSC / ST
    "bidi": "\u202ecod.exe\u2066x\u2069\u202a",  # reorders what is shown
    "markup": "[bold red]red[/] :smile:",
    "other": "\x7f\x08\x0b\x0c\r\x01",
}
HOSTILE = "".join(PAYLOADS.values())
HOSTILE_TEXT = HOSTILE + "\x00"  # a NUL can be in JSON text, not in a file name
HOSTILE_NAME = HOSTILE.replace("/", "|")  # a file or directory name

# What must never reach a terminal raw: C0 but tab and newline, DEL, C1, bidi
# embeddings/overrides/isolates, lone surrogates.
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
VISIBLE = ("\\x1b", "\\x9b", "\\u202e", "[bold red]red[/]")
"""Signs that hostile text was printed, visibly escaped or as typed."""

runner = CliRunner()


@dataclass
class Hostile:
    agent: Path
    project: Path
    path: str
    """A session whose title, texts, labels, model, cwd and file name are hostile."""
    other: str
    """A second session in the same project (for ambiguous prefixes)."""
    damaged: str
    """A session file with a hostile unparseable line."""
    session_id: str
    common: str
    """A prefix of both sessions' ids."""
    leaf: str


def _rewrite_header(path: str, target: str | None = None, **fields: object) -> None:
    """Change header fields (raw, as a peer or an attacker could write them), into `target`."""
    lines = Path(path).read_bytes().split(b"\n", 1)
    header = json.loads(lines[0])
    header.update(fields)
    Path(target or path).write_bytes(serialize_entry(header).encode() + b"\n" + lines[1])


@pytest.fixture
def hostile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Hostile:
    agent = tmp_path / ("agent" + HOSTILE_NAME)
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(agent))
    project = tmp_path / ("proj" + HOSTILE_NAME)
    project.mkdir()
    monkeypatch.chdir(project)
    sm = SessionManager.create(str(project))
    first = sm.append_message(user("needle prompt " + HOSTILE_TEXT))
    answer = sm.append_message(
        assistant("needle answer " + HOSTILE_TEXT, provider="p" + HOSTILE, model="m" + HOSTILE)
    )
    sm.append_label_change(answer, "label" + HOSTILE_TEXT)
    sm.append_compaction("needle summary " + HOSTILE_TEXT, None, answer, 100)
    sm.branch_with_summary(first, "needle branch " + HOSTILE_TEXT)
    leaf = sm.append_message(assistant("needle other " + HOSTILE_TEXT))
    sm.close()
    created = sm.get_session_file()
    assert created is not None
    # A file name an agent would not write, but a shared store can hold.
    path = created[: -len(".jsonl")] + HOSTILE_NAME + ".jsonl"
    os.rename(created, path)
    _rewrite_header(path, title="title " + HOSTILE_TEXT)
    second = SessionManager.create(str(project))
    second.append_message(user("second " + HOSTILE_TEXT))
    second.append_message(assistant("needle too"))
    second.close()
    other = second.get_session_file()
    assert other is not None
    _rewrite_header(other, title="second title " + HOSTILE_TEXT)
    damaged = os.path.join(os.path.dirname(path), "damaged" + HOSTILE_NAME + ".jsonl")
    # An older version (for migrate) with an unparseable line (for verify and repair).
    _rewrite_header(path, damaged, id="d" * 16, version=2)
    with open(damaged, "ab") as f:
        f.write(("{broken " + HOSTILE + "\n").encode())
    history = HistoryStorage(str(agent / "history.db"))
    history.add("needle history " + HOSTILE_TEXT, str(project))
    history.close()
    session_id, other_id = sm.get_session_id(), second.get_session_id()
    common = ""
    while session_id[: len(common) + 1] == other_id[: len(common) + 1] != session_id:
        common = session_id[: len(common) + 1]
    assert common, "time-ordered ids share their leading digits"
    return Hostile(agent, project, path, other, damaged, session_id, common, leaf)


COMMANDS = {
    "list": ["list"],
    "list --all": ["list", "--all"],
    "show": ["show", "{path}"],
    "show by id": ["show", "{id}"],
    "tree": ["tree", "{path}", "--full"],
    "context": ["context", "{path}"],
    "context --llm": ["context", "{path}", "--llm"],
    "search": ["search", "needle"],
    "search --all": ["search", "needle", "--all"],
    "history": ["history"],
    "stats": ["stats", "--all"],
    "resume": ["resume", "{id}"],
    "resume ambiguous": ["resume", "{common}"],
    "show ambiguous": ["show", "{common}"],
    "verify": ["verify", "--all"],
    "repair": ["repair", "--dry-run", "{damaged}"],
    "migrate": ["migrate", "--dry-run", "{damaged}"],
    "gc": ["gc"],
    "export md": ["export", "{path}"],
    "export html": ["export", "{path}", "-f", "html", "-o", "-"],
    "rename": ["rename", "{path}", "new " + HOSTILE],
    "fork": ["fork", "{path}"],
    "extract": ["extract", "{path}", "--leaf", "{leaf}"],
    "rm declined": ["rm", "{path}"],
    "rm": ["rm", "{path}", "--yes"],
    "not a session": ["show", "{agent}/sessions"],
    "no such file": ["show", "{project}/none" + HOSTILE_NAME + ".jsonl"],
}


def _args(template: list[str], h: Hostile) -> list[str]:
    values = {
        "{path}": h.path,
        "{id}": h.session_id,
        "{common}": h.common,
        "{damaged}": h.damaged,
        "{leaf}": h.leaf,
    }
    out = []
    for arg in template:
        arg = values.get(arg, arg)
        out.append(arg.replace("{agent}", str(h.agent)).replace("{project}", str(h.project)))
    return out


def _invoke(args: list[str], input: str | None = None) -> Result:
    return runner.invoke(app, args, input=input)


@pytest.mark.parametrize("name", list(COMMANDS))
def test_no_control_character_reaches_the_terminal(
    name: str, hostile: Hostile, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Paths and exports are written raw only into pipes: here stdout is a terminal.
    monkeypatch.setattr(cli_common, "stdout_is_terminal", lambda: True)
    result = _invoke(_args(COMMANDS[name], hostile), input="n\n")
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    out, err = result.stdout, result.stderr
    for stream, text in (("stdout", out), ("stderr", err)):
        raw = sorted({f"U+{ord(c):04X}" for c in RAW.findall(text)})
        assert not raw, f"{name}: raw {raw} on {stream}: {text!r}"
    # Not vacuous: the hostile text was printed, visibly.
    assert any(sign in out + err for sign in VISIBLE), (name, out, err)


def test_markup_and_escapes_in_a_title_print_as_typed(hostile: Hostile) -> None:
    def flat(text: str) -> str:  # wherever the terminal width wrapped the lines
        return "".join(text.split())

    assert "title \\x1b]52;c;aGVsbG8=" in _invoke(["list"]).stdout
    shown = flat(_invoke(["show", hostile.path]).stdout)
    assert "title\\x1b]52;c;aGVsbG8=\\x1b[2J" in shown  # visible, and in its place
    assert "\\u202ecod.exe\\u2066x\\u2069" in shown
    assert "[boldred]red[/]:smile:" in shown  # markup and emoji codes as typed
    assert "#label\\x1b]52" in shown
    tree = flat(_invoke(["tree", hostile.path]).stdout)
    assert "needleother\\x1b]52;c;aGVsbG8=" in tree


def test_json_keeps_the_exact_text(hostile: Hostile) -> None:
    document = json.loads(_invoke(["show", hostile.path, "--json"]).stdout)
    assert document["title"] == "title " + HOSTILE_TEXT
    assert document["path"] == hostile.path
    listing = json.loads(_invoke(["list", "--json"]).stdout)
    assert {s["cwd"] for s in listing["sessions"]} == {str(hostile.project)}
    hits = json.loads(_invoke(["search", "needle answer", "--json"]).stdout)["hits"]
    assert "needle answer " + HOSTILE_TEXT[:20] in hits[0]["snippet"]


def test_pipes_get_the_exact_bytes(hostile: Hostile) -> None:
    """`$(sessiontree resume ID)` must name the file, whatever bytes its name holds."""
    resumed = _invoke(["resume", hostile.session_id])
    assert resumed.stdout_bytes == os.fsencode(hostile.path) + b"\n"
    exported = _invoke(["export", hostile.path]).stdout
    assert "needle other " + HOSTILE_TEXT in exported


def test_a_terminal_shows_the_path_escaped(
    hostile: Hostile, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli_common, "stdout_is_terminal", lambda: True)
    resumed = _invoke(["resume", hostile.session_id]).stdout
    assert resumed == terminal_safe(hostile.path) + "\n"
    assert "\\x1b]52;c;aGVsbG8=\\x07" in resumed


def test_a_colour_terminal_gets_only_the_consoles_own_styles(hostile: Hostile) -> None:
    """With colours on, the only escape sequences are rich's SGR codes."""
    env = dict(os.environ, FORCE_COLOR="1", TTY_COMPATIBLE="1", COLUMNS="120")
    for args in (["list"], ["show", hostile.path], ["tree", hostile.path], ["search", "needle"]):
        proc = subprocess.run(
            [sys.executable, "-c", "from sessiontree.cli.app import main; main()", *args],
            env=env,
            capture_output=True,
            check=True,
        )
        text = proc.stdout.decode()
        assert "\x1b[" in text, args  # styled output: the test is not vacuous
        unstyled = re.sub("\x1b\\[[0-9;]*m", "", text)
        assert not RAW.search(unstyled), (args, unstyled)
        assert any(sign in unstyled for sign in VISIBLE), (args, unstyled)


def test_library_warnings_are_made_safe_too(hostile: Hostile) -> None:
    """A log record quoting session text goes through the same console."""
    with open(hostile.path, "a", encoding="utf-8") as f:
        image = {"type": "image", "data": "blob:sha256:" + HOSTILE_TEXT, "mimeType": "image/png"}
        entry = {
            "type": "message",
            "id": "feedf00d",
            "parentId": hostile.leaf,
            "timestamp": "2026-01-01T00:00:00.000Z",
            "message": {"role": "user", "content": [image], "timestamp": 1},
        }
        f.write(serialize_entry(entry) + "\n")
    result = _invoke(["context", hostile.path])
    assert result.exit_code == 0, result.stderr
    assert "sessiontree: warning:" in result.stderr
    assert not RAW.search(result.stderr), result.stderr


# -- the rule itself ------------------------------------------------------------------------


@given(st.text())
def test_terminal_safe_leaves_nothing_raw_and_is_idempotent(text: str) -> None:
    safe = terminal_safe(text)
    assert not RAW.search(safe)
    assert terminal_safe(safe) == safe
    if not RAW.search(text):
        assert safe == text  # ordinary text, tabs and newlines untouched


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("\x1b[2J", "\\x1b[2J"),
        ("a\x9bb", "a\\x9bb"),
        ("\x7f", "\\x7f"),
        ("\u202eabc", "\\u202eabc"),
        ("\u2069", "\\u2069"),
        ("caf\udce9", "caf\\xe9"),  # an undecodable file-name byte
        ("\ud83d", "\\ud83d"),  # a lone surrogate from JSON
        ("one\r\ntwo\tthree", "one\ntwo\tthree"),
        ("\r", "\\x0d"),
        ("é ✓ 日本 \u200d", "é ✓ 日本 \u200d"),
    ],
)
def test_terminal_safe_examples(raw: str, shown: str) -> None:
    assert terminal_safe(raw) == shown


def test_html_is_never_poured_into_a_terminal(
    hostile: Hostile, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Without -o, `export -f html` on a terminal writes <session id>.html here (a number
    added when taken); into a pipe it still writes stdout."""
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    monkeypatch.setattr(cli_common, "stdout_is_terminal", lambda: True)
    for expected in ("", "-2"):
        result = _invoke(["export", hostile.path, "-f", "html"])
        assert result.exit_code == 0, result.stderr
        assert "<html" not in result.stdout and "Wrote" in result.stderr
        written = [p for p in here.iterdir() if p.name.endswith(f"{expected}.html")]
        assert written and written[0].read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    names = sorted(p.name for p in here.iterdir())
    assert len(names) == 2 and all(c.isalnum() or c in "-_." for n in names for c in n)
    monkeypatch.setattr(cli_common, "stdout_is_terminal", lambda: False)
    piped = _invoke(["export", hostile.path, "-f", "html"])
    assert piped.stdout.startswith("<!DOCTYPE html>")
