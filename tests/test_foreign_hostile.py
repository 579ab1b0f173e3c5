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
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import foreign_support as fs
from conftest import SHARED_FIXTURES, unavailable
from sessiontree.cli import app
from sessiontree.foreign import _records
from sessiontree.foreign.copilot import read_copilot_session
from sessiontree.foreign.gemini import read_gemini_session
from sessiontree.foreign.opencode import read_opencode_export
from sessiontree.foreign.store import ForeignStore
from test_foreign_agents import assert_sound

runner = CliRunner()
FOREIGN = SHARED_FIXTURES / "foreign"
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
        unavailable(f"shared fixture {path} is missing")
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
