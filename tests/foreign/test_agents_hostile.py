"""The OpenCode, Gemini CLI and Copilot CLI readers against hostile and damaged stores.

What another agent's store holds is untrusted: an id read from a database row or a
JSON file never names a path outside that store, a value of any type in any column
never stops the rest from listing, cycles and chains of parent sessions lose no
session and never recurse without end, a file cut anywhere keeps every line that was
whole, and reading never writes beside the agent's files nor holds its writer up (a
real writer process commits throughout).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from sessiontree.cli import app
from sessiontree.foreign import _records
from sessiontree.foreign.agents import detect_file
from sessiontree.foreign.copilot import read_copilot_session
from sessiontree.foreign.gemini import is_gemini_document, read_gemini_session
from sessiontree.foreign.opencode import read_opencode_export
from sessiontree.foreign.storage import ForeignStorage
from sessiontree.foreign.store import ForeignStore
from sessiontree.format._jsonl import loads_line, serialize_entry
from tests import foreign_support as fs
from tests.conftest import REAL_FILES, unavailable
from tests.foreign.test_agents import assert_sound

runner = CliRunner()
FOREIGN = REAL_FILES / "foreign"
DB_SESSION = "ses_04ca851f7ffevKrKMHW3RsPK1U"
EXPORT = "savekirk__session-bridge__29__dbfeaf9083__0__full.jsonl"
REAL_FILES = sorted(
    str(p)
    for kind in ("opencode", "gemini", "copilot")
    for p in (FOREIGN / kind).glob("*")
    if p.is_file() and p.suffix != ".db"
)
HOSTILE = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def fixture(kind: str, name: str) -> Path:
    path = FOREIGN / kind / name
    if not path.is_file():
        unavailable(f"real file {path} is missing")
    return path


def run(*args: str) -> Any:
    result = runner.invoke(app, list(args))
    assert "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    return result


def opencode_home(root: Path) -> tuple[Path, Path]:
    """(XDG_DATA_HOME, its opencode.db): the real database, copied under `root`."""
    data = root / "xdg" / "opencode"
    data.mkdir(parents=True)
    database = data / "opencode.db"
    shutil.copyfile(fixture("opencode", fs.OPENCODE_DB), database)
    database.chmod(0o644)
    return root / "xdg", database


@contextmanager
def connect(database: Path) -> Iterator[sqlite3.Connection]:
    """A connection that commits what it did and is closed after (`sqlite3.connect` as a
    context manager only commits: a connection left open holds a WAL database)."""
    conn = sqlite3.connect(database)
    try:
        with conn:
            yield conn
    finally:
        conn.close()


def add_session(database: Path, session_id: Any, **columns: Any) -> None:
    """A session row like the real one, with `session_id` and `columns` instead."""
    with connect(database) as conn:
        row = conn.execute(
            "SELECT project_id, slug, directory, title, version, time_created, time_updated "
            "FROM session WHERE id = ?",
            (DB_SESSION,),
        ).fetchone()
        values = dict(
            zip(
                [
                    "project_id",
                    "slug",
                    "directory",
                    "title",
                    "version",
                    "time_created",
                    "time_updated",
                ],
                row,
                strict=True,
            )
        )
        values.update(columns, id=session_id)
        names = ", ".join(values)
        marks = ", ".join("?" for _ in values)
        conn.execute(f"INSERT INTO session ({names}) VALUES ({marks})", list(values.values()))


@contextmanager
def environ(**variables: str) -> Iterator[None]:
    """`variables` set for the CLI run in this process (a hypothesis example cannot use
    the function-scoped `monkeypatch`)."""
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def listed_ids(*args: str) -> set[str]:
    result = run(*args, "list", "--all", "--limit", "0", "--json")
    assert result.exit_code == 0, result.output
    return {s["id"] for s in json.loads(result.stdout)["sessions"]}


# ----------------------------------------------------------------------------- long lines


class _Counted(bytes):
    """A chunk that counts the bytes copied when it is appended to what came before."""

    copied = 0

    def __radd__(self, other: bytes) -> bytes:
        _Counted.copied += len(other) + len(self)
        return bytes(other) + bytes(self)


def test_a_long_line_is_copied_a_bounded_number_of_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A line of a gigabyte (an image pasted into a prompt, a tool's output) is read a
    chunk at a time: joining the chunks must cost its length, not its length times the
    number of chunks (a 1 GB line in 1 MiB chunks would copy 500 GB). Here a 4 MiB line
    in 4 KiB chunks: at most a few times 4 MiB copied, not 2 GiB."""
    line = b'{"id": "u1", "text": "' + b"x" * (4 << 20) + b'"}'
    path = tmp_path / "long.jsonl"
    path.write_bytes(b'{"first": 1}\n' + line + b"\n")
    real_open = open

    class Chunks:
        def __init__(self, handle: Any) -> None:
            self.handle = handle

        def __enter__(self) -> Chunks:
            return self

        def __exit__(self, *exc: object) -> None:
            self.handle.close()

        def read(self, size: int = -1) -> bytes:
            return _Counted(self.handle.read(size))

    monkeypatch.setattr(_records, "_CHUNK", 4096)
    monkeypatch.setattr(_records, "open", lambda p, m: Chunks(real_open(p, m)), raising=False)
    _Counted.copied = 0
    transcript = _records.read_transcript(str(path))
    assert [r.line for r in transcript.records] == [1, 2]
    assert _Counted.copied < 4 * len(line)


# ----------------------------------------------------------------------------- documents


def test_a_document_nested_deeper_than_python_recurses_is_read_or_reported(
    tmp_path: Path,
) -> None:
    """A one-document session (an `opencode export`, Gemini CLI's `.json`) with a value
    nested thousands deep: one JavaScript parses is read whole; one cut short there
    keeps the messages before it and reports the rest; never a RecursionError."""
    deep = "[" * 5000 + "]" * 5000
    part = '{"id": "prt_1", "type": "text", "text": "hello", "deep": ' + deep + "}"
    message = '{"info": {"id": "msg_1", "role": "user"}, "parts": [' + part + "]}"
    head = '{"info": {"id": "ses_x", "directory": "/w"}, "messages": ['
    export = tmp_path / "export.json"
    export.write_text(head + message + "]}", encoding="utf-8")
    whole = read_opencode_export(str(export))
    assert whole.damaged == []
    assert [e["message"]["content"] for e in whole.manager.get_entries()] == [
        [{"type": "text", "text": "hello"}]
    ]
    export.write_text(head + message + ", " + deep[:7000], encoding="utf-8")
    cut = read_opencode_export(str(export))
    assert [d.line for d in cut.damaged] == [1] and cut.source_id == "ses_x"
    assert len(cut.manager.get_entries()) == 1
    gemini = tmp_path / "session-deep.json"
    gemini.write_text(
        '{\n  "sessionId": "g", "projectHash": "p", "messages": ['
        '{"id": "u1", "type": "user", "content": "hello"}, ' + deep[:7000],
        encoding="utf-8",
    )
    session = read_gemini_session(str(gemini))
    assert len(session.damaged) == 1
    assert [e["message"]["content"] for e in session.manager.get_entries()] == [
        [{"type": "text", "text": "hello"}]
    ]


# ----------------------------------------------------------------------------- import


def test_an_import_whose_directory_cannot_be_a_path_is_refused_clearly(
    tmp_path: Path, agent_dir: Path
) -> None:
    """The directory a session was recorded in names the project dir of the import; one
    with a NUL byte names none: the import says so (and `--cwd` files it elsewhere)."""
    _, database = opencode_home(tmp_path / "home")
    with connect(database) as conn:
        conn.execute("UPDATE session SET directory = '/w' || char(0) || 'x'")
    refused = run("import", str(database / DB_SESSION))
    assert refused.exit_code == 1 and str(database / DB_SESSION) in refused.output
    assert "--cwd" in refused.output
    done = run("import", str(database / DB_SESSION), "--cwd", str(tmp_path), "--json")
    assert done.exit_code == 0, done.output


# ----------------------------------------------------------------------------- Copilot CLI


def test_a_copilot_rewind_into_the_middle_of_a_turn_answers_its_calls(tmp_path: Path) -> None:
    """`upToEventId` naming a tool result (not the prompt a snapshot is taken at): the
    conversation goes on from before that result, where the response's second call has
    no result; it gets the interrupted result, and the prompt that follows comes after."""
    start = {"sessionId": "s", "context": {"cwd": "/w"}, "selectedModel": "gpt-5"}
    calls = [{"toolCallId": "t1", "name": "bash"}, {"toolCallId": "t2", "name": "bash"}]
    kinds = [
        ("session.start", start),
        ("user.message", {"content": "run both"}),
        ("assistant.message", {"messageId": "m1", "content": "", "toolRequests": calls}),
        ("tool.execution_complete", {"toolCallId": "t1", "success": True}),
        ("tool.execution_complete", {"toolCallId": "t2", "success": True}),
        ("session.snapshot_rewind", {"upToEventId": "e4"}),
        ("user.message", {"content": "again"}),
    ]
    path = tmp_path / "events.jsonl"
    path.write_text(
        "".join(
            json.dumps(
                {
                    "type": kind,
                    "data": data,
                    "id": f"e{n}",
                    "timestamp": f"2026-05-01T10:00:{n:02d}.000Z",
                    "parentId": f"e{n - 1}" if n else None,
                }
            )
            + "\n"
            for n, (kind, data) in enumerate(kinds)
        ),
        encoding="utf-8",
    )
    sm = read_copilot_session(str(path)).manager
    assert_sound(sm)
    branch = [e["message"] for e in sm.get_branch() if e["type"] == "message"]
    assert [(m["role"], m.get("toolCallId")) for m in branch] == [
        ("user", None),
        ("assistant", None),
        ("toolResult", "t1"),
        ("toolResult", "t2"),
        ("user", None),
    ]
    assert branch[3]["isError"] and branch[3]["details"] == {"synthetic": True}


_COPILOT_KINDS = [
    "user.message",
    "assistant.message",
    "tool.execution_complete",
    "session.snapshot_rewind",
    "session.context_cleared",
    "session.compaction_start",
    "session.compaction_complete",
    "subagent.started",
    "session.model_change",
    "hook.end",
    "unknown.kind",
]


def _copilot_event(number: int, drawn: dict[str, Any]) -> dict[str, Any]:
    kind, call = drawn["type"], drawn["call"]
    data: dict[str, Any] = {
        "user.message": {"content": f"prompt {number}"},
        "assistant.message": {
            "messageId": f"m{number}",
            "content": f"answer {number}",
            "toolRequests": [{"toolCallId": call, "name": "bash"}] if drawn["calls"] else [],
        },
        "tool.execution_complete": {"toolCallId": call, "success": drawn["calls"]},
        "session.snapshot_rewind": {"upToEventId": drawn["parent"] or "unknown"},
        "session.context_cleared": {},
        "session.compaction_start": {},
        "session.compaction_complete": {"success": True, "summaryContent": "summary"},
        "subagent.started": {"toolCallId": call, "agentName": "explore"},
        "session.model_change": {"newModel": f"model-{number % 3}"},
        "hook.end": {"success": False},
        "unknown.kind": {"x": number},
    }[kind]
    event = {
        "type": kind,
        "data": data,
        "id": drawn["id"],
        "timestamp": f"2026-05-01T10:00:{drawn['second']:02d}.000Z",
        "parentId": drawn["parent"],
    }
    if drawn["agent"] is not None:
        event["agentId"] = drawn["agent"]
    return event


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.fixed_dictionaries(
            {
                "type": st.sampled_from(_COPILOT_KINDS),
                "id": st.sampled_from(["e0", "e1", "e2"]),  # duplicate ids
                "parent": st.one_of(st.none(), st.sampled_from(["e0", "e1", "e9"])),
                "agent": st.one_of(st.none(), st.sampled_from(["a", "b", ""])),
                "second": st.integers(0, 59),  # out of order
                "call": st.sampled_from(["t1", "t2"]),
                "calls": st.booleans(),
            }
        ),
        max_size=30,
    )
)
def test_copilot_events_in_any_order_with_any_ids_keep_every_prompt(
    drawn: list[dict[str, Any]],
) -> None:
    """Events out of time order, duplicate and dangling ids, rewinds to unknown events,
    subagents that start each other: a sound tree (every call answered right after it)
    for the session and each subagent, every prompt in it exactly once."""
    start = {
        "type": "session.start",
        "data": {"sessionId": "s", "context": {"cwd": "/w"}},
        "id": "e0",
        "timestamp": "2026-05-01T10:00:00.000Z",
        "parentId": None,
    }
    events = [start] + [_copilot_event(n, d) for n, d in enumerate(drawn)]
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "events.jsonl"
        path.write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")
        session = read_copilot_session(str(path))
    managers = [session.manager] + [sub.manager for sub in session.subsessions]
    prompts = []
    for sm in managers:
        if sm.get_entries():  # a subagent may hold nothing but bookkeeping
            assert_sound(sm)
        prompts += [
            e["message"]["content"][0]["text"]
            for e in sm.get_entries()
            if e["type"] == "message" and e["message"]["role"] == "user"
        ]
    want = [f"prompt {n}" for n, d in enumerate(drawn) if d["type"] == "user.message"]
    assert sorted(prompts) == sorted(want)


# ----------------------------------------------------------------------------- Gemini CLI


def test_a_gemini_session_id_never_names_a_directory_outside_its_chats(
    tmp_path: Path, agent_dir: Path
) -> None:
    """Subagents are read from `chats/<session id>/`; a `sessionId` that is a path
    (absolute, with `..`, a NUL) would read any directory's JSONL files as this
    session's subagents. The session reads, with none of them."""
    outside = tmp_path / "outside"
    outside.mkdir()
    meta = {"sessionId": "s", "projectHash": "p", "startTime": "2026-01-01T00:00:00Z"}
    prompt = {"id": "u1", "type": "user", "timestamp": "2026-01-01T00:00:01Z"}
    (outside / "private.jsonl").write_text(
        json.dumps(meta) + "\n" + json.dumps({**prompt, "content": [{"text": "PRIVATE"}]}) + "\n",
        encoding="utf-8",
    )
    chats = tmp_path / "gemini" / ".gemini" / "tmp" / "project" / "chats"
    chats.mkdir(parents=True)
    for number, session_id in enumerate(
        [str(outside), "../../../../../outside", "x\x00y", "..", ""]
    ):
        path = chats / f"session-{number}.jsonl"
        path.write_text(
            json.dumps({**meta, "sessionId": session_id})
            + "\n"
            + json.dumps({**prompt, "content": [{"text": "hello"}]})
            + "\n",
            encoding="utf-8",
        )
        session = read_gemini_session(str(path))
        assert session.subsessions == []
        result = run("import", str(path), "--json")
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["subsessions"] == []


_GEMINI_IDS = ["u0", "u1", "g2", "g3", "u4"]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("message"), st.sampled_from(_GEMINI_IDS)),
            st.tuples(st.just("rewind"), st.sampled_from([*_GEMINI_IDS, "unknown"])),
            st.tuples(st.just("set"), st.lists(st.sampled_from(_GEMINI_IDS), max_size=6)),
        ),
        max_size=20,
    )
)
def test_gemini_histories_written_again_and_rewound_anywhere(
    operations: list[tuple[str, Any]],
) -> None:
    """`$set.messages` histories that repeat an id (a message listed twice, one id
    before and after another: a would-be cycle) and `$rewindTo` ids that were never
    recorded: the path to the leaf is the history Gemini CLI resumes, each message
    once, in its last version."""
    records: list[dict[str, Any]] = [
        {"sessionId": "s", "projectHash": "p", "startTime": "2026-01-01T00:00:00Z"}
    ]
    history: list[str] = []
    latest: dict[str, str] = {}

    def record(mid: str, version: int) -> dict[str, Any]:
        text = f"{mid}#{version}"
        latest[mid] = text
        kind = "user" if mid.startswith("u") else "gemini"
        return {"id": mid, "type": kind, "content": [{"text": text}] if kind == "user" else text}

    for step, (operation, argument) in enumerate(operations):
        if operation == "message":
            records.append(record(argument, step))
            history += [] if argument in history else [argument]
        elif operation == "rewind":
            records.append({"$rewindTo": argument})
            history = history[: history.index(argument)] if argument in history else []
        else:
            written = [record(mid, step * 100 + n) for n, mid in enumerate(argument)]
            records.append({"$set": {"messages": written}})
            history = list(dict.fromkeys(argument))
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "session-x.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
        session = read_gemini_session(str(path))
    sm = session.manager
    if not history:
        assert sm.get_leaf_id() is None
        return
    assert_sound(sm)
    path_texts = []
    for entry in sm.get_branch():
        if entry["type"] == "message":
            content = entry["message"]["content"]
            path_texts.append(content[-1]["text"] if content else "")
    assert [t for t in path_texts if t] == [latest[mid] for mid in history]


def test_a_gemini_project_dir_that_is_a_link_is_read_where_it_leads(tmp_path: Path) -> None:
    """`~/.gemini/tmp/<project>` a link to a directory outside the home (another disk),
    beside a link to its own parent and one to nothing: the session it leads to lists
    and reads, the loop ends, nothing anywhere is written."""
    tmp = tmp_path / "home" / ".gemini" / "tmp"
    tmp.mkdir(parents=True)
    chats = tmp_path / "disk" / "project" / "chats"
    chats.mkdir(parents=True)
    shutil.copyfile(
        fixture("gemini", "computermode__test-repo__72__9ac91fce19__0__full.jsonl"),
        chats / "session-1.jsonl",
    )
    (tmp / "linked").symlink_to(chats.parent)
    (tmp / "loop").symlink_to(tmp)
    (tmp / "dangling").symlink_to(tmp / "nowhere")
    before = {str(p): p.lstat().st_mtime_ns for p in tmp_path.rglob("*")}
    store = ForeignStore.at("gemini", str(tmp.parent))
    (item,) = store.list()
    assert item.path == str(tmp / "linked" / "chats" / "session-1.jsonl")
    assert_sound(store.read(item.path).manager)
    assert {str(p): p.lstat().st_mtime_ns for p in tmp_path.rglob("*")} == before


# ----------------------------------------------------------------------------- OpenCode: ids as paths


def test_database_ids_that_cannot_be_names_are_skipped_never_read_as_paths(
    tmp_path: Path, agent_dir: Path
) -> None:
    """A session row's id becomes `<db>/<id>`: an absolute path, `..`, a separator, a
    NUL would name another file (here an `opencode export` document that would list as
    one of the database's sessions, and a FIFO that would hang the listing). Such rows
    are skipped with a warning that names the database; nothing outside it is opened."""
    xdg, database = opencode_home(tmp_path / "home")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    decoy = elsewhere / "decoy.json"
    shutil.copyfile(fixture("opencode", EXPORT), decoy)
    fifo = elsewhere / "fifo"
    os.mkfifo(fifo)
    hostile = [
        str(decoy),
        str(fifo),
        "../../../elsewhere/decoy.json",
        "..",
        ".",
        "",
        "a/b",
        "ses_\x00nul",
        "ses_" + "x" * 300,
    ]
    for number, session_id in enumerate(hostile):
        add_session(database, session_id, slug=f"hostile-{number}")
    env = {**os.environ, "XDG_DATA_HOME": str(xdg), "PI_CODING_AGENT_DIR": str(agent_dir)}
    # A subprocess: a FIFO read as a session would block the listing for good.
    listing = subprocess.run(
        [sys.executable, "-m", "sessiontree", "--agent", "opencode", "list", "--all", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert listing.returncode == 0, listing.stderr
    assert {s["id"] for s in json.loads(listing.stdout)["sessions"]} == {DB_SESSION}
    assert f"{database}: a session row whose id" in listing.stderr
    assert str(decoy) not in listing.stdout
    # What `serve` reads the store through: the database's sessions, nothing beside.
    storage = ForeignStorage(ForeignStore.at("opencode", str(database.parent)))
    assert [m.path for m in storage.list_session_meta()] == [str(database / DB_SESSION)]
    with pytest.raises(FileNotFoundError):
        storage.read_text(f"{database}/../../elsewhere/decoy.json")
    with environ(XDG_DATA_HOME=str(xdg)):
        imported = run("import", "--from", "opencode", "--all", "--json")
        assert imported.exit_code == 0, imported.output
        assert [s["sourceId"] for s in json.loads(imported.stdout)["imported"]] == [DB_SESSION]


# ----------------------------------------------------------------------------- OpenCode: hostile rows


_SQL_VALUE = st.one_of(
    st.none(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=12),
    st.binary(max_size=12),
)


_SQL_NOT_NULL = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=12),
    st.binary(max_size=12),
)


_ROW = {
    "time_created": 1,
    "title": "t",
    "directory": "/w",
    "parent_id": None,
    "revert": None,
    "summary_diffs": None,
    "share_url": None,
}
_JSON_TIME = st.one_of(
    st.none(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)


@HOSTILE
@given(
    session=st.fixed_dictionaries(
        {
            "time_created": _SQL_NOT_NULL,
            "time_updated": _SQL_NOT_NULL,
            "title": _SQL_NOT_NULL,
            "directory": _SQL_NOT_NULL,
            "parent_id": _SQL_VALUE,
            "revert": _SQL_VALUE,
            "summary_diffs": _SQL_VALUE,
            "share_url": _SQL_VALUE,
        }
    ),
    message=st.fixed_dictionaries(
        {"time_created": _SQL_NOT_NULL, "time_updated": _SQL_NOT_NULL, "data": _SQL_NOT_NULL}
    ),
    created=_JSON_TIME,
    part=_SQL_NOT_NULL,
)
@example(
    session={**_ROW, "time_updated": float("inf")},
    message={"time_created": 1, "time_updated": 2, "data": "{}"},
    created=None,
    part="{}",
)
@example(
    session={**_ROW, "time_updated": "abc"},
    message={"time_created": 1, "time_updated": 2, "data": "{}"},
    created=None,
    part="{}",
)
@example(
    session={**_ROW, "time_updated": 2**63 - 1},
    message={"time_created": 1, "time_updated": 2, "data": "{}"},
    created=None,
    part="{}",
)
@example(
    session={**_ROW, "time_updated": 1e300},
    message={"time_created": 1, "time_updated": 2, "data": "{}"},
    created=None,
    part="{}",
)
@example(
    session={**_ROW, "time_updated": 9_223_372_036_855},
    message={"time_created": 1, "time_updated": 2, "data": "{}"},
    created=None,
    part="{}",
)
def test_any_value_in_any_column_never_stops_the_store(
    tmp_path_factory: pytest.TempPathFactory,
    agent_dir: Path,
    session: dict[str, Any],
    message: dict[str, Any],
    created: Any,
    part: Any,
) -> None:
    """A row whose columns hold what OpenCode never writes (infinite, huge, negative
    or text timestamps, JSON columns that are not JSON, blobs) lists, shows and
    imports with the rest of the database, or is reported; never a traceback."""
    root = tmp_path_factory.mktemp("hostile")
    xdg, database = opencode_home(root)
    if isinstance(session["parent_id"], str):
        assume(session["parent_id"] != "ses_hostile")
    add_session(database, "ses_hostile", **session)
    with connect(database) as conn:
        conn.execute(
            "INSERT INTO message (id, session_id, time_created, time_updated, data) "
            "VALUES ('msg_hostile', 'ses_hostile', ?, ?, ?)",
            (message["time_created"], message["time_updated"], message["data"]),
        )
        good = json.dumps({"role": "user", "time": {"created": created}})
        conn.execute(
            "INSERT INTO message (id, session_id, time_created, time_updated, data) "
            "VALUES ('msg_good', 'ses_hostile', 1, 2, ?)",
            (good,),
        )
        conn.execute(
            "INSERT INTO part (id, message_id, session_id, time_created, time_updated, data) "
            "VALUES ('prt_hostile', 'msg_good', 'ses_hostile', 1, 2, ?)",
            (part,),
        )
        conn.execute(
            "INSERT INTO part (id, message_id, session_id, time_created, time_updated, data) "
            "VALUES ('prt_good', 'msg_good', 'ses_hostile', 1, 2, ?)",
            (json.dumps({"type": "text", "text": "hostile prompt"}),),
        )
    with environ(XDG_DATA_HOME=str(xdg)):
        listed = listed_ids("--agent", "opencode")
        assert DB_SESSION in listed
        shown = run("show", str(database / "ses_hostile"), "--json")
        assert shown.exit_code == 0, shown.output
        assert json.loads(shown.stdout)["roles"]["user"] >= 1
        assert run("--agent", "opencode", "search", "hostile", "--all").exit_code in (0, 1)
        imported = run("import", str(database / "ses_hostile"), "--json", "--again")
        refused = "--cwd" in imported.output  # a directory with a NUL names no project dir
        assert imported.exit_code == 0 or refused, imported.output


def test_a_session_table_of_another_schema_still_lists(tmp_path: Path) -> None:
    _, database = opencode_home(tmp_path)
    with connect(database) as conn:
        conn.execute("ALTER TABLE session RENAME COLUMN directory TO worktree")
    store = ForeignStore.at("opencode", str(database.parent))
    assert [item.meta.id for item in store.list()] == [DB_SESSION]
    (listed,) = store.list()
    assert listed.meta.cwd == ""  # the column is not there: absent
    assert store.read(listed.path).manager.get_header() is not None


def test_optional_columns_dropped_read_as_absent(tmp_path: Path) -> None:
    """Every session column but the id can go (and the part table's `time_updated`):
    the session still lists, the missing values absent."""
    _, database = opencode_home(tmp_path)
    with connect(database) as conn:
        conn.execute("DROP INDEX session_parent_idx")
        for column in ("parent_id", "directory", "title", "time_created", "time_updated"):
            conn.execute(f"ALTER TABLE session DROP COLUMN {column}")
        conn.execute("ALTER TABLE part DROP COLUMN time_updated")
    store = ForeignStore.at("opencode", str(database.parent))
    (listed,) = store.list()
    assert listed.meta.id == DB_SESSION
    assert listed.meta.parent is None
    assert store.read(listed.path).manager.get_header() is not None


def test_a_session_table_without_ids_is_skipped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _, database = opencode_home(tmp_path)
    with connect(database) as conn:
        conn.execute("ALTER TABLE session RENAME COLUMN id TO key")
    store = ForeignStore.at("opencode", str(database.parent))
    with caplog.at_level("WARNING", logger="sessiontree"):
        assert list(store.list()) == []
    assert any(
        str(database) in r.getMessage() and "no id" in r.getMessage() for r in caplog.records
    )


# ----------------------------------------------------------------------------- OpenCode: parents


_PARENT = st.one_of(st.none(), st.just("missing"), st.integers(0, 6))


def _opencode_parents(kind: str, root: Path, parents: list[Any]) -> tuple[ForeignStore, set[str]]:
    """Sessions `ses_k` whose parent is `parents[k]` (None: a root, "missing": one not
    in the store, an int: that session), in a database (beside its real session) or in
    OpenCode's JSON files; the store and the ids of every session in it."""
    names = [f"ses_{k}" for k in range(len(parents))]

    def parent_id(value: Any) -> str | None:
        if value is None:
            return None
        return "ses_missing" if value == "missing" else names[value % len(parents)]

    if kind == "database":
        _, database = opencode_home(root)
        for name, parent in zip(names, parents, strict=True):
            add_session(database, name, parent_id=parent_id(parent), title=name)
        return ForeignStore.at("opencode", str(database.parent)), {*names, DB_SESSION}
    data = root / "xdg" / "opencode"
    for name, parent in zip(names, parents, strict=True):
        info = {"id": name, "projectID": "p", "directory": "/w", "title": name}
        if parent_id(parent) is not None:
            info["parentID"] = parent_id(parent)
        path = data / "storage" / "session" / "p" / f"{name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(info), encoding="utf-8")
    return ForeignStore.at("opencode", str(data)), set(names)


@HOSTILE
@given(
    kind=st.sampled_from(["database", "files"]),
    parents=st.lists(_PARENT, min_size=1, max_size=7),
)
def test_parent_cycles_and_deep_chains_lose_no_session(
    tmp_path_factory: pytest.TempPathFactory, kind: str, parents: list[Any]
) -> None:
    """Whatever the parent links (a session its own parent, a cycle, a chain deeper
    than the children read with a session, a parent not in the store): every session
    is listed or read with a listed one, a read never holds a session twice nor itself,
    and nothing recurses without end."""
    store, everyone = _opencode_parents(kind, tmp_path_factory.mktemp("parents"), parents)
    listing = store.list()
    reached: list[str] = []
    for item in listing:
        session = store.read(item.path)
        keys = [sub.key for sub in session.subsessions]
        assert session.source_id not in keys
        assert len(set(keys)) == len(keys)
        reached += [session.source_id, *keys]
    assert set(reached) == everyone


def test_a_self_parent_and_a_chain_of_six(tmp_path: Path) -> None:
    """The shapes the property above finds, named: each listed or read, once."""
    for kind in ("database", "files"):
        store, _ = _opencode_parents(kind, tmp_path / kind / "self", [0])
        (only,) = [item for item in store.list() if item.meta.id == "ses_0"]
        assert store.read(only.path).subsessions == []
        store, _ = _opencode_parents(kind, tmp_path / kind / "chain", [None, 0, 1, 2, 3, 4])
        listed = {item.meta.id: item for item in store.list()}
        assert set(listed) - {DB_SESSION} == {"ses_0", "ses_5"}
        subs = [s.key for s in store.read(listed["ses_0"].path).subsessions]
        assert sorted(subs) == ["ses_1", "ses_2", "ses_3", "ses_4"]


def test_a_parent_that_is_no_id_leaves_the_session_listed(tmp_path: Path) -> None:
    """A JSON session file whose `parentID` is a number, `true`, an object: it names no
    parent session, so the session is listed as any other (it was neither listed nor
    read with a parent: lost, with no warning)."""
    directory = tmp_path / "opencode" / "storage" / "session" / "p"
    directory.mkdir(parents=True)
    values: list[Any] = [123, True, {"a": 1}, [], "", None]
    for number, value in enumerate(values):
        info = {"id": f"ses_{number}", "projectID": "p", "directory": "/w", "parentID": value}
        (directory / f"ses_{number}.json").write_text(json.dumps(info), encoding="utf-8")
    store = ForeignStore.at("opencode", str(tmp_path / "opencode"))
    assert sorted(item.meta.id for item in store.list()) == [f"ses_{n}" for n in range(len(values))]


# ----------------------------------------------------------------------------- OpenCode: the database file


def _writer(database: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(database, isolation_level=None, timeout=0)
    conn.execute("PRAGMA wal_autocheckpoint = 0")  # what is committed stays in the WAL
    return conn


def test_a_database_reached_by_a_symlink_reads_its_wal_and_journal(tmp_path: Path) -> None:
    """`~/.local/share/opencode/opencode.db` a link to the real file (dotfiles, another
    disk): SQLite keeps `-wal` and `-journal` beside the real file. A commit still in
    the WAL is read; a write half done (a journal beside the real file) skips the
    database, as it does when no link is in between."""
    _, database = opencode_home(tmp_path / "home")
    real = tmp_path / "disk" / "opencode.db"
    real.parent.mkdir()
    database.rename(real)
    database.symlink_to(real)
    writer = _writer(real)
    try:
        assert writer.execute("PRAGMA journal_mode = WAL").fetchone()[0] == "wal"
        add_session(real, "ses_in_wal")
        writer.execute(
            "UPDATE session SET time_updated = time_updated WHERE id = 'ses_in_wal'"
        )  # the writer keeps the WAL open: nothing checkpointed
        assert (real.parent / "opencode.db-wal").stat().st_size > 0
        store = ForeignStore.at("opencode", str(database.parent))
        assert {item.meta.id for item in store.list()} == {DB_SESSION, "ses_in_wal"}
        assert sorted(p.name for p in database.parent.iterdir()) == ["opencode.db"]
    finally:
        writer.close()
    with connect(real) as conn:
        assert conn.execute("PRAGMA journal_mode = DELETE").fetchone()[0] == "delete"
    writer = sqlite3.connect(real, isolation_level=None)
    try:
        writer.execute("BEGIN EXCLUSIVE")
        writer.execute("UPDATE part SET data = data || ' '")
        assert (real.parent / "opencode.db-journal").stat().st_size > 0
        store = ForeignStore.at("opencode", str(database.parent))
        assert store.list() == []  # skipped, named in a warning
    finally:
        writer.execute("ROLLBACK")
        writer.close()


def test_a_wal_without_its_shm_creates_nothing_beside_the_database(tmp_path: Path) -> None:
    """A `-wal` whose `-shm` is gone (a copied or restored store; a WAL that is
    garbage): no OpenCode has the database open, and a read-only reader would create
    the `-shm`. The database reads as it was last checkpointed, nothing is written."""
    for wal in (os.urandom(20_000), b""):
        _, database = opencode_home(tmp_path / str(len(wal)))
        (database.parent / "opencode.db-wal").write_bytes(wal)
        before = {p.name: p.stat().st_mtime_ns for p in database.parent.iterdir()}
        store = ForeignStore.at("opencode", str(database.parent))
        (item,) = store.list()
        assert item.meta.id == DB_SESSION
        assert len(store.read(item.path).manager.get_entries()) > 50
        after = {p.name: p.stat().st_mtime_ns for p in database.parent.iterdir()}
        assert after == before


_WRITER = textwrap.dedent(
    """
    import sqlite3, sys, time
    database, mode, stop = sys.argv[1], sys.argv[2], float(sys.argv[3])
    # Half a second of patience: a lock of a reader held longer fails a commit.
    conn = sqlite3.connect(database, timeout=0.5, isolation_level=None)
    project = conn.execute("SELECT project_id FROM session LIMIT 1").fetchone()[0]
    commits = 0
    while time.time() < stop:
        conn.execute("BEGIN IMMEDIATE")
        sid = f"ses_w{commits}"
        conn.execute(
            "INSERT INTO session (id, project_id, slug, directory, title, version, "
            "time_created, time_updated) VALUES (?, ?, 's', '/w', 'written', '1', 1, 2)",
            (sid, project),
        )
        conn.execute(
            "INSERT INTO message (id, session_id, time_created, time_updated, data) "
            "VALUES (?, ?, 1, 2, '{\\"role\\": \\"user\\"}')",
            ("msg_" + sid, sid),
        )
        conn.execute("UPDATE message SET time_updated = time_updated + 1 WHERE session_id = ?",
                     ("ses_04ca851f7ffevKrKMHW3RsPK1U",))
        conn.execute("COMMIT")
        commits += 1
        if mode == "WAL" and commits % 25 == 0:
            conn.execute("VACUUM")
    print(commits)
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["WAL", "DELETE"])
def test_a_writer_process_is_never_held_up_while_the_store_is_read(
    tmp_path: Path, agent_dir: Path, mode: str
) -> None:
    """OpenCode (another process, waiting at most half a second for a lock) commits,
    and VACUUMs, all the while the store is listed and shown: not one of its commits
    fails on a lock of ours, and every read succeeds or names the database."""
    xdg, database = opencode_home(tmp_path / "home")
    with connect(database) as conn:
        assert conn.execute(f"PRAGMA journal_mode = {mode}").fetchone()[0] == mode.lower()
    stop = time.time() + 6
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(database), mode, str(stop)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    reads = 0
    try:
        with environ(XDG_DATA_HOME=str(xdg)):
            while time.time() < stop - 0.5:
                listing = run("--agent", "opencode", "list", "--all", "--json", "--limit", "0")
                assert listing.exit_code == 0, listing.output
                shown = run("show", str(database / DB_SESSION), "--json")
                assert shown.exit_code == 0 or str(database) in shown.stderr, shown.output
                reads += 1
    finally:
        out, err = writer.communicate(timeout=60)
    assert writer.returncode == 0, err
    assert int(out) > 10 and reads >= 2


def test_a_row_with_a_string_cut_inside_an_emoji_is_read(tmp_path: Path) -> None:
    """`JSON.stringify` writes half an emoji (a tool output cut at a UTF-16 length) as a
    lone surrogate escape, which `JSON.parse` reads and orjson refuses: such a part row
    of the database, and such a part file of OpenCode's JSON layout, is read with its
    text, not skipped as damaged."""
    _, database = opencode_home(tmp_path / "db")
    cut = '{"type": "text", "text": "half an emoji \\ud83d then more"}'
    with connect(database) as conn:
        (part,) = conn.execute(
            'SELECT id FROM part WHERE session_id = ? AND data LIKE \'%"type":"text"%\' '
            "ORDER BY id LIMIT 1",
            (DB_SESSION,),
        ).fetchone()
        conn.execute("UPDATE part SET data = ? WHERE id = ?", (cut, part))
    store = ForeignStore.at("opencode", str(database.parent))
    session = store.read(str(database / DB_SESSION))
    assert session.damaged == []
    texts = json.dumps([e.get("message") for e in session.manager.get_entries()])
    assert "half an emoji \\ud83d then more" in texts
    info = fs.opencode_json_layout(fixture("opencode", EXPORT), tmp_path / "files")
    part_file = next((tmp_path / "files" / "storage" / "part").rglob("*.json"))
    part_file.write_text(cut[:-1] + ', "id": "prt_cut"}', encoding="utf-8")
    from_files = ForeignStore.at("opencode", str(tmp_path / "files")).read(str(info))
    assert from_files.damaged == []


def test_a_session_of_a_database_that_cannot_be_read_says_why(tmp_path: Path) -> None:
    """`show <db>/<id>` while OpenCode is half way through a write (a rollback journal):
    the error says the database is being written, not that there is no such session
    (which a user would take for the session being gone)."""
    _, database = opencode_home(tmp_path)
    (database.parent / "opencode.db-journal").write_bytes(b"\x00" * 512)
    shown = run("show", str(database / DB_SESSION))
    assert shown.exit_code == 1
    assert f"{database}: being written" in shown.output, shown.output


# ----------------------------------------------------------------------------- OpenCode: change


def test_parts_written_into_a_message_in_place_are_seen(tmp_path: Path, agent_dir: Path) -> None:
    """The real database was copied while OpenCode ran: its last message's reasoning
    and tool call were written as parts after the message row was last updated, and
    the session row too. A listing and a search made before those parts came see
    them once they are there (same message count, same last update)."""
    xdg, database = opencode_home(tmp_path / "home")
    with connect(database) as conn:
        late = conn.execute(
            "SELECT * FROM part WHERE time_created > "
            "(SELECT MAX(time_updated) FROM session) ORDER BY id"
        ).fetchall()
        assert len(late) == 3
        conn.executemany("DELETE FROM part WHERE id = ?", [(row[0],) for row in late])
    agent_dir.mkdir()
    with environ(XDG_DATA_HOME=str(xdg)):
        word = "Update the script to copy opencode.db"
        assert run("--agent", "opencode", "search", word, "--all").exit_code == 1
        with connect(database) as conn:
            conn.executemany(f"INSERT INTO part VALUES ({', '.join('?' * 6)})", late)
        found = run("--agent", "opencode", "search", word, "--all", "--json")
        assert found.exit_code == 0, found.output
        assert json.loads(found.stdout)["mode"] == "index"
        # A session row OpenCode updates (its title, its time) is seen as before.
        with connect(database) as conn:
            conn.execute("UPDATE session SET title = 'Renamed', time_updated = time_updated + 1")
        (listed,) = json.loads(run("--agent", "opencode", "list", "--all", "--json").stdout)[
            "sessions"
        ]
        assert listed["title"] == "Renamed"


def test_a_part_updated_in_place_is_seen(tmp_path: Path, agent_dir: Path) -> None:
    xdg, database = opencode_home(tmp_path / "home")
    agent_dir.mkdir()
    with environ(XDG_DATA_HOME=str(xdg)):
        assert run("--agent", "opencode", "search", "zyxwvut", "--all").exit_code == 1
        with connect(database) as conn:
            conn.execute(
                "UPDATE part SET data = json_set(data, '$.text', 'zyxwvut'), "
                "time_updated = time_updated + 1000 WHERE id = (SELECT id FROM part WHERE "
                'data LIKE \'%"type":"text"%\' ORDER BY id LIMIT 1)'
            )
        assert run("--agent", "opencode", "search", "zyxwvut", "--all").exit_code == 0


def test_the_listed_first_prompt_comes_from_the_sessions_own_parts(
    tmp_path: Path, agent_dir: Path
) -> None:
    """A part row of another session naming this session's first prompt as its message
    is not this session's (OpenCode joins parts on the session too): neither the
    listing nor `show` takes it."""
    xdg, database = opencode_home(tmp_path / "home")
    add_session(database, "ses_other")
    with connect(database) as conn:
        (first,) = conn.execute(
            "SELECT id FROM message WHERE session_id = ? ORDER BY time_created LIMIT 1",
            (DB_SESSION,),
        ).fetchone()
        conn.execute(
            "INSERT INTO part VALUES ('prt_0000', ?, 'ses_other', 1, 2, ?)",
            (first, json.dumps({"type": "text", "text": "INJECTED"})),
        )
    with environ(XDG_DATA_HOME=str(xdg)):
        result = run("--agent", "opencode", "list", "--all", "--json")
        prompts = {s["id"]: s["firstMessage"] for s in json.loads(result.stdout)["sessions"]}
        assert prompts[DB_SESSION].startswith("Read SPEC.md")
        shown = run("--agent", "opencode", "context", DB_SESSION)
        assert "INJECTED" not in shown.output


# ----------------------------------------------------------------------------- cut short, damaged


def _reads(path: Path) -> tuple[int, dict[str, Any] | None, str]:
    result = run("show", str(path), "--json")
    return (
        result.exit_code,
        json.loads(result.stdout) if result.exit_code == 0 else None,
        result.stderr,
    )


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_every_real_file_cut_anywhere_keeps_every_whole_line(data: st.DataObject) -> None:
    """Each real file cut at any byte (the agent was writing it, the disk filled up):
    `show FILE` never a traceback; a JSONL file reads as the lines before the cut do,
    the torn line reported with the file's name; a one-document file keeps the
    messages before the cut. What cannot be read at all is an error naming the file."""
    if not REAL_FILES:
        unavailable(f"real files {FOREIGN} are missing")
    original = Path(data.draw(st.sampled_from(REAL_FILES), label="file"))
    raw = original.read_bytes()
    cut = data.draw(st.integers(1, len(raw) - 1), label="cut")
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / ("cut" + original.suffix)
        path.write_bytes(raw[:cut])
        code, shown, stderr = _reads(path)
        if detect_file(str(path)) is None or not raw[cut:].strip():
            return  # too little left to tell whose it is; or nothing was cut
        if code != 0:
            assert str(path) in stderr or "not a session file" in stderr, stderr
            return
        assert shown is not None
        # One JSON document (Gemini's, OpenCode's export, pretty-printed or not): what is
        # cut off is the document's end, not a line.
        if is_gemini_document(raw[:4096]) or re.match(rb'\{\s*"info"', raw.lstrip()):
            assert f"{path}: skipped" in stderr
            return
        start = raw.rfind(b"\n", 0, cut) + 1
        whole = Path(directory) / ("whole" + original.suffix)
        whole.write_bytes(raw[:start])
        torn = raw[start:cut].strip()
        try:
            complete = isinstance(json.loads(torn), dict) if torn else True
        except ValueError:
            complete = False
        if complete:
            return
        assert f"{path}: skipped line" in stderr
        if detect_file(str(whole)) is None:
            return  # what stands before the cut is not enough to tell the format
        code, before, _ = _reads(whole)
        assert code == 0 and before is not None
        assert shown["roles"] == before["roles"] and shown["entries"] == before["entries"]


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(pages=st.sets(st.integers(0, 151), min_size=1, max_size=6))
def test_a_database_with_pages_zeroed_is_never_fatal(pages: set[int]) -> None:
    """The real database with pages zeroed (a disk error, a copy cut short): the store
    lists, shows and searches what it can; the database is named in each warning."""
    with tempfile.TemporaryDirectory() as directory:
        xdg, database = opencode_home(Path(directory))
        raw = bytearray(database.read_bytes())
        for page in pages:
            raw[page * 4096 : (page + 1) * 4096] = bytes(4096)
        database.write_bytes(bytes(raw))
        with environ(XDG_DATA_HOME=str(xdg), PI_CODING_AGENT_DIR=str(Path(directory) / "a")):
            listing = run("--agent", "opencode", "list", "--all", "--json", "--limit", "0")
            assert listing.exit_code in (0, 1), listing.output
            if listing.exit_code == 1 or not json.loads(listing.stdout)["sessions"]:
                assert str(database) in listing.stderr
            shown = run("show", str(database / DB_SESSION), "--json")
            assert shown.exit_code == 0 or str(database) in shown.stderr, shown.output


# ----------------------------------------------------------------------------- timestamps


def test_a_timestamp_beyond_a_double_reads_as_none(tmp_path: Path, agent_dir: Path) -> None:
    """JSON allows an integer of any length where a timestamp goes (`JSON.parse` makes
    it Infinity); a Gemini CLI message, a Copilot CLI event, an OpenCode message with
    one shows with the time next to it, and imports."""
    huge = "1" + "0" * 400
    gemini = tmp_path / "session-huge.jsonl"
    gemini.write_text(
        '{"sessionId": "g", "projectHash": "p", "startTime": ' + huge + "}\n"
        '{"id": "u1", "type": "user", "timestamp": ' + huge + ', "content": [{"text": "hi"}]}\n',
        encoding="utf-8",
    )
    copilot = tmp_path / "events.jsonl"
    copilot.write_text(
        '{"type": "session.start", "data": {"sessionId": "c", "startTime": ' + huge + "}, "
        '"id": "e0", "parentId": null, "timestamp": ' + huge + "}\n"
        '{"type": "user.message", "data": {"content": "hi"}, "id": "e1", "parentId": "e0", '
        '"timestamp": ' + huge + "}\n",
        encoding="utf-8",
    )
    export = tmp_path / "export.json"
    export.write_text(
        '{"info": {"id": "ses_h", "directory": "/w", "time": {"created": ' + huge + "}}, "
        '"messages": [{"info": {"id": "msg_1", "role": "user", "time": {"created": '
        + huge
        + '}}, "parts": [{"id": "prt_1", "type": "text", "text": "hi"}]}]}',
        encoding="utf-8",
    )
    # Kept as JavaScript keeps it: JSON.stringify(Infinity) is null.
    assert serialize_entry(loads_line('{"x": ' + huge + "}")) == '{"x":null}'
    for path in (gemini, copilot, export):
        shown = run("show", str(path), "--json")
        assert shown.exit_code == 0, shown.output
        assert json.loads(shown.stdout)["roles"]["user"] == 1
        imported = run("import", str(path), "--json")
        assert imported.exit_code == 0, imported.output


def test_gemini_subagent_files_are_read_as_subagents_of_their_parent(tmp_path: Path) -> None:
    """`chats/<parent id>/<id>.jsonl` (`kind: "subagent"`) is a subsession of the parent,
    not a session of its own in the listing."""
    chats = tmp_path / ".gemini" / "tmp" / "project" / "chats"
    (chats / "parent-1").mkdir(parents=True)
    meta = {"sessionId": "parent-1", "projectHash": "p", "startTime": "2026-01-01T00:00:00Z"}
    prompt = {"id": "u1", "type": "user", "timestamp": "2026-01-01T00:00:01Z"}
    (chats / "session-2026-01-01T00-00-parent-1.jsonl").write_text(
        json.dumps(meta) + "\n" + json.dumps({**prompt, "content": [{"text": "parent"}]}) + "\n",
        encoding="utf-8",
    )
    sub = {**meta, "sessionId": "child-1", "kind": "subagent"}
    (chats / "parent-1" / "child-1.jsonl").write_text(
        json.dumps(sub) + "\n" + json.dumps({**prompt, "content": [{"text": "child"}]}) + "\n",
        encoding="utf-8",
    )
    store = ForeignStore.at("gemini", str(tmp_path / ".gemini"))
    listed = [item for item in store.list() if item.meta.listed]
    assert [item.meta.id for item in listed] == ["parent-1"]
    session = store.read(listed[0].path)
    assert [s.key for s in session.subsessions] == ["child-1"]
