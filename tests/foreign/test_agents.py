"""The OpenCode, Gemini CLI and Copilot CLI readers on the real files and on generated shapes.

Every real file (`tests/data/real/foreign/{opencode,gemini,copilot}`, SOURCES.md)
reads into a sound tree whose context a provider accepts (after `convert_to_llm`
every assistant's tool calls are answered right after it). What each file is known
for is checked on its tree, against the agent's own records where it keeps them:
OpenCode's session token totals, Copilot's per-model output at shutdown, the tool
calls and statuses Gemini recorded. Damaged inputs keep what they can and say what
was skipped; Gemini's `$rewindTo` histories are checked against a model of Gemini
CLI's own loader.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessiontree import SessionManager
from sessiontree.foreign import ForeignSession
from sessiontree.foreign._builder import TreeBuilder
from sessiontree.foreign._chain import Chain
from sessiontree.foreign.agents import detect_file
from sessiontree.foreign.copilot import read_copilot_session
from sessiontree.foreign.gemini import read_gemini_session
from sessiontree.foreign.opencode import (
    INTERRUPTED,
    convert_opencode,
    read_opencode_export,
    read_opencode_json,
)
from sessiontree.foreign.opencode_db import load_db_session
from sessiontree.foreign.storage import session_bytes
from sessiontree.format import build_session_context, convert_to_llm
from tests import foreign_support as fs
from tests.conftest import REAL_FILES, examples, unavailable

FOREIGN = REAL_FILES / "foreign"
OPENCODE = sorted(p.name for p in (FOREIGN / "opencode").glob("*.jsonl"))
GEMINI = sorted(p.name for p in (FOREIGN / "gemini").iterdir()) if FOREIGN.is_dir() else []
COPILOT = sorted(p.name for p in (FOREIGN / "copilot").glob("*.jsonl"))
DB_SESSION = "ses_04ca851f7ffevKrKMHW3RsPK1U"
STARCAR = "polecatspeaks__StarCar__4b__a9fe109041__0__full.jsonl"
COMPACTED = "savekirk__session-bridge__13__dddd416599__0__full.jsonl"
MODEL_SWITCH = "savekirk__session-bridge__13__dddd416599__1__full.jsonl"
CHILD = "savekirk__session-bridge__29__dbfeaf9083__0__full.jsonl"
CANCELLED = "savekirk__session-bridge__e9__4f17cdc65d__0__full.jsonl"
ASK_USER = "computermode__test-repo__79__d52455f160__0__full.jsonl"


def fixture(kind: str, name: str) -> Path:
    path = FOREIGN / kind / name
    if not path.is_file():
        unavailable(f"real file {path} is missing")
    return path


def db_copy(tmp_path: Path) -> Path:
    """The real database copied where a test may open it (the fixture stays untouched)."""
    target = tmp_path / "opencode" / "opencode.db"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(fixture("opencode", fs.OPENCODE_DB).read_bytes())
    return target


def read(kind: str, name: str, tmp_path: Path) -> ForeignSession:
    if kind == "opencode-db":
        return convert_opencode(load_db_session(str(db_copy(tmp_path)), DB_SESSION))
    path = str(fixture(kind, name))
    reader = {
        "opencode": read_opencode_export,
        "gemini": read_gemini_session,
        "copilot": read_copilot_session,
    }[kind]
    return reader(path)


def messages(sm: SessionManager, role: str) -> list[dict[str, Any]]:
    return [
        e["message"]
        for e in sm.get_entries()
        if e["type"] == "message" and e["message"]["role"] == role
    ]


def assert_answered(llm: list[dict[str, Any]]) -> None:
    """After each assistant message, its tool calls' results and nothing else."""
    for index, message in enumerate(llm):
        if message["role"] != "assistant":
            continue
        calls = [b["id"] for b in message["content"] if b.get("type") == "toolCall"]
        following = llm[index + 1 : index + 1 + len(calls)]
        assert [m["role"] for m in following] == ["toolResult"] * len(calls), index
        assert sorted(m["toolCallId"] for m in following) == sorted(calls), index


def assert_sound(sm: SessionManager) -> None:
    """Unique ids, parents that exist, a leaf, and a context a provider accepts on
    every path that ends at a leaf of the tree."""
    entries = sm.get_entries()
    ids = [e["id"] for e in entries]
    assert entries and len(set(ids)) == len(ids)
    by_id = {e["id"]: e for e in entries}
    for entry in entries:
        parent = entry.get("parentId")
        assert parent is None or parent in by_id
        if entry["type"] == "compaction":
            assert entry["firstKeptEntryId"] in by_id
    assert sm.get_leaf_id() in by_id
    parents = {e.get("parentId") for e in entries}
    for tip in [e["id"] for e in entries if e["id"] not in parents]:
        assert_answered(convert_to_llm(build_session_context(entries, tip).messages))


ALL = (
    [("opencode-db", DB_SESSION)]
    + [("opencode", n) for n in OPENCODE]
    + [("gemini", n) for n in GEMINI]
    + [("copilot", n) for n in COPILOT]
)


def test_the_shared_fixtures_are_all_there() -> None:
    if not FOREIGN.is_dir():
        unavailable(f"real files {FOREIGN} are missing")
    assert (len(OPENCODE), len(GEMINI), len(COPILOT)) == (4, 7, 3)
    assert (FOREIGN / "opencode" / fs.OPENCODE_DB).is_file()


@pytest.mark.parametrize(("kind", "name"), ALL)
def test_every_real_file_reads_into_a_sound_tree(kind: str, name: str, tmp_path: Path) -> None:
    session = read(kind, name, tmp_path)
    assert_sound(session.manager)
    assert session.damaged == []
    for sub in session.subsessions:
        assert_sound(sub.manager)
    # The same source reads as the same tree every time (ids derive from it).
    again = read(kind, name, tmp_path)
    assert session_bytes(again) == session_bytes(session)


@pytest.mark.parametrize(("kind", "name"), ALL)
def test_every_real_file_is_detected_by_its_first_bytes(
    kind: str, name: str, tmp_path: Path
) -> None:
    path = db_copy(tmp_path) / DB_SESSION if kind == "opencode-db" else fixture(kind, name)
    assert detect_file(str(path)) == kind.split("-")[0]


# ----------------------------------------------------------------------------- OpenCode


def test_the_database_session_counts_what_opencode_counted(tmp_path: Path) -> None:
    """Usage: each step's `step-finish` once; the totals OpenCode keeps on the session
    row are the same sums. The last message's tool never finished (the turn was cut
    off): it is answered as interrupted."""
    database = db_copy(tmp_path)
    session = convert_opencode(load_db_session(str(database), DB_SESSION))
    sm = session.manager
    with sqlite3.connect(f"file:{database}?mode=ro&immutable=1", uri=True) as conn:
        row = conn.execute(
            "SELECT tokens_input, tokens_output, tokens_reasoning, tokens_cache_read, "
            "tokens_cache_write, directory FROM session WHERE id = ?",
            (DB_SESSION,),
        ).fetchone()
        finished = conn.execute(
            "SELECT COUNT(*) FROM part WHERE session_id = ? AND data LIKE '%\"step-finish\"%'",
            (DB_SESSION,),
        ).fetchone()[0]
    assistants = messages(sm, "assistant")
    totals = Counter[str]()
    for message in assistants:
        totals.update({k: v for k, v in message["usage"].items() if isinstance(v, int)})
    assert (totals["input"], totals["output"], totals["cacheRead"], totals["cacheWrite"]) == (
        row[0],
        row[1] + row[2],
        row[3],
        row[4],
    )
    assert len(assistants) == 27 and sum(1 for m in assistants if m["usage"]["output"]) == finished
    assert [m["role"] for m in messages(sm, "user")] == ["user"] * 8
    results = messages(sm, "toolResult")
    assert len(results) == 21 and not any(r.get("details", {}).get("synthetic") for r in results)
    # The copy was taken mid-step: its last step has no step-finish, so no usage yet.
    assert assistants[-1]["usage"]["totalTokens"] == 0 and assistants[-1]["content"]
    assert session.cwd == row[5] == "/workspace"
    assert session.name is None  # "New session - <time>" is OpenCode's placeholder
    thinking = [b for m in assistants for b in m["content"] if b["type"] == "thinking"]
    assert len(thinking) == 27 and all(b.get("thinkingSignature") for b in thinking)


def test_a_tool_still_running_is_answered_as_interrupted(tmp_path: Path) -> None:
    """A session read while OpenCode runs a tool (its part `running`, no output yet):
    the call gets the error result OpenCode itself sends for it, and the prompt typed
    after it comes after that result."""
    database = db_copy(tmp_path)
    with sqlite3.connect(database) as conn:
        part, data = conn.execute(
            'SELECT id, data FROM part WHERE session_id = ? AND data LIKE \'{"type":"tool"%\' '
            "ORDER BY id LIMIT 1",
            (DB_SESSION,),
        ).fetchone()
        value = json.loads(data)
        value["state"] = {
            "status": "running",
            "input": value["state"]["input"],
            "time": {"start": 1},
        }
        conn.execute("UPDATE part SET data = ? WHERE id = ?", (json.dumps(value), part))
    sm = convert_opencode(load_db_session(str(database), DB_SESSION)).manager
    assert_sound(sm)
    (interrupted,) = [r for r in messages(sm, "toolResult") if r["toolCallId"] == value["callID"]]
    assert interrupted["isError"] and interrupted["content"] == [
        {"type": "text", "text": INTERRUPTED}
    ]
    assert interrupted["details"] == {"synthetic": True}


def test_an_export_with_a_compaction(tmp_path: Path) -> None:
    """The request (a `compaction` part) is a custom entry; the summary message is kept
    with its usage, then a compaction entry with its text; the text/plain file part,
    whose content OpenCode sent as synthetic text, is kept as a custom entry, that text
    as a hidden custom message."""
    document = json.loads(fixture("opencode", COMPACTED).read_text(encoding="utf-8"))
    session = read("opencode", COMPACTED, tmp_path)
    sm = session.manager
    entries = sm.get_entries()
    types = Counter(e.get("customType") for e in entries if e["type"] == "custom")
    assert types["opencode:compaction"] == 1 and types["opencode:file"] == 1
    assert types["opencode:patch"] == 17
    (compaction,) = [e for e in entries if e["type"] == "compaction"]
    summary = next(m for m in document["messages"] if m["info"].get("summary") is True)
    text = "\n\n".join(p["text"] for p in summary["parts"] if p["type"] == "text")
    assert compaction["summary"] == text and compaction["firstKeptEntryId"] == compaction["id"]
    hidden = [e for e in entries if e["type"] == "custom_message"]
    assert [e["customType"] for e in hidden] == ["opencode:synthetic"] * 2
    assert all(e["display"] is False for e in hidden)
    # Usage: every step's tokens once; OpenCode wrote one step per message here, so the
    # sums equal those of the messages' own counts.
    want = Counter[str]()
    for message in document["messages"]:
        tokens = message["info"].get("tokens")
        if message["info"]["role"] == "assistant" and tokens:
            want.update(
                {
                    "input": tokens["input"],
                    "output": tokens["output"] + tokens["reasoning"],
                    "cacheRead": tokens["cache"]["read"],
                }
            )
    got = Counter[str]()
    for message in messages(sm, "assistant"):
        got.update({k: message["usage"][k] for k in ("input", "output", "cacheRead")})
    assert got == want
    assert len(messages(sm, "assistant")) == 69 and len(messages(sm, "toolResult")) == 72
    assert session.name == "Implement Entire CLI commands"
    # The context after the compaction starts with its summary.
    context = sm.build_session_context().messages
    assert context[0]["role"] == "compactionSummary"


def test_a_model_switch_and_a_child_session(tmp_path: Path) -> None:
    switched = read("opencode", MODEL_SWITCH, tmp_path).manager
    changes = [e["model"] for e in switched.get_entries() if e["type"] == "model_change"]
    assert changes == ["google/gemini-3.1-pro-preview", "github-copilot/claude-sonnet-4.5"]
    child = read("opencode", CHILD, tmp_path)
    assert child.parent_source_id == "ses_2bef27598ffe7m6Lx2BIiN92bh"
    assert child.header()["parentSession"] == "ses_2bef27598ffe7m6Lx2BIiN92bh"
    assert len(messages(child.manager, "toolResult")) == 14


@pytest.mark.parametrize("name", OPENCODE)
def test_the_json_files_read_as_the_export_does(name: str, tmp_path: Path) -> None:
    """OpenCode before 1.2 kept the same objects in one file each: the same tree."""
    export = read_opencode_export(str(fixture("opencode", name)))
    info = fs.opencode_json_layout(fixture("opencode", name), tmp_path / "data")
    files = read_opencode_json(str(info))
    assert session_bytes(files) == session_bytes(export)


def test_a_child_session_is_read_with_its_parent(tmp_path: Path) -> None:
    """A child (`parentID`) is a subsession of its parent, tied to the `task` call whose
    metadata names it, in the JSON files as in a database."""
    child = fixture("opencode", CHILD)
    document = json.loads(child.read_text(encoding="utf-8"))
    parent_id = document["info"]["parentID"]
    parent = {
        "info": {
            "id": parent_id,
            "projectID": document["info"]["projectID"],
            "directory": document["info"]["directory"],
            "title": "Parent",
            "time": {"created": 1774912900000, "updated": 1774912930000},
        },
        "messages": [
            {
                "info": {"id": "msg_p1", "role": "user", "time": {"created": 1774912900001}},
                "parts": [{"id": "prt_p1", "type": "text", "text": "Explore the code"}],
            },
            {
                "info": {
                    "id": "msg_p2",
                    "role": "assistant",
                    "parentID": "msg_p1",
                    "providerID": "github-copilot",
                    "modelID": "claude-opus-4.6",
                    "time": {"created": 1774912900002},
                    "tokens": {
                        "input": 10,
                        "output": 5,
                        "reasoning": 0,
                        "cache": {"read": 0, "write": 0},
                    },
                },
                "parts": [
                    {"id": "prt_p2", "type": "step-start"},
                    {
                        "id": "prt_p3",
                        "type": "tool",
                        "tool": "task",
                        "callID": "call_task",
                        "state": {
                            "status": "completed",
                            "input": {"prompt": "explore"},
                            "output": "done",
                            "title": "Explore",
                            "metadata": {"sessionId": document["info"]["id"]},
                            "time": {"start": 1774912900003, "end": 1774912929000},
                        },
                    },
                ],
            },
        ],
    }
    export = tmp_path / "parent.json"
    export.write_text(json.dumps(parent), encoding="utf-8")
    info = fs.opencode_json_layout(export, tmp_path / "data")
    fs.opencode_json_layout(child, tmp_path / "data")
    session = read_opencode_json(str(info))
    (sub,) = session.subsessions
    assert sub.key == document["info"]["id"] and sub.tool_call_id == "call_task"
    assert len(messages(sub.manager, "toolResult")) == 14


# ----------------------------------------------------------------------------- Gemini CLI


def test_gemini_tool_calls_and_their_statuses(tmp_path: Path) -> None:
    document = json.loads(fixture("gemini", CANCELLED).read_text(encoding="utf-8"))
    sm = read("gemini", CANCELLED, tmp_path).manager
    calls = [c for m in document["messages"] for c in m.get("toolCalls") or ()]
    results = messages(sm, "toolResult")
    assert [r["toolCallId"] for r in results] == [c["id"] for c in calls]
    assert [r["isError"] for r in results] == [c["status"] != "success" for c in calls]
    assert sum(r["isError"] for r in results) == 2
    assert all(r["details"]["status"] == c["status"] for r, c in zip(results, calls, strict=True))
    assistants = messages(sm, "assistant")
    assert len(assistants) == 38 and len(messages(sm, "user")) == 4
    total = sum(m["tokens"]["total"] for m in document["messages"] if m.get("tokens"))
    assert sum(m["usage"]["totalTokens"] for m in assistants) == total
    ui = [e for e in sm.get_entries() if e.get("customType") == "gemini:info"]
    assert len(ui) == 2
    asked = read("gemini", ASK_USER, tmp_path).manager
    failed = [r for r in messages(asked, "toolResult") if r["isError"]]
    assert [r["toolName"] for r in failed] == ["ask_user", "list_directory"] or len(failed) >= 1


def gemini_lines(records: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def gemini_meta(session: str = "g-1") -> dict[str, Any]:
    return {
        "sessionId": session,
        "projectHash": "0" * 64,
        "startTime": "2026-05-01T10:00:00.000Z",
        "lastUpdated": "2026-05-01T10:00:00.000Z",
        "kind": "main",
    }


def gemini_message(mid: str, kind: str, second: int, **extra: Any) -> dict[str, Any]:
    record = {
        "id": mid,
        "timestamp": f"2026-05-01T10:{second // 60:02d}:{second % 60:02d}.000Z",
        "type": kind,
        "content": [{"text": f"{mid} text"}] if kind == "user" else f"{mid} text",
    }
    if kind == "gemini":
        record["model"] = "gemini-3-flash-preview"
    record.update(extra)
    return record


def test_a_message_recorded_again_is_one_message(tmp_path: Path) -> None:
    """Gemini CLI appends a message again when its tool calls and tokens arrive: the
    last version stands where the first was, its usage counted once."""
    call = {
        "id": "c1",
        "name": "read_file",
        "args": {"path": "a"},
        "result": [
            {"functionResponse": {"id": "c1", "name": "read_file", "response": {"output": "A"}}}
        ],
        "status": "success",
        "timestamp": "2026-05-01T10:00:03.000Z",
    }
    tokens = {"input": 100, "output": 10, "cached": 60, "thoughts": 5, "tool": 0, "total": 115}
    path = tmp_path / "session-2026-05-01T10-00-g1.jsonl"
    path.write_text(
        gemini_lines(
            [
                gemini_meta(),
                gemini_message("u1", "user", 1),
                {"$set": {"lastUpdated": "2026-05-01T10:00:01.000Z"}},
                gemini_message("a1", "gemini", 2),
                gemini_message("a1", "gemini", 2, toolCalls=[call]),
                gemini_message("a1", "gemini", 2, toolCalls=[call], tokens=tokens),
                gemini_message("a2", "gemini", 4, tokens=tokens),
                {"$set": {"summary": "Reading a"}},
            ]
        ),
        encoding="utf-8",
    )
    session = read_gemini_session(str(path))
    sm = session.manager
    assert_sound(sm)
    assistants = messages(sm, "assistant")
    assert [m["responseId"] for m in assistants] == ["a1", "a2"]
    assert assistants[0]["usage"] == {
        "input": 40,
        "output": 15,
        "cacheRead": 60,
        "cacheWrite": 0,
        "totalTokens": 115,
        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
    }
    (result,) = messages(sm, "toolResult")
    assert result["content"] == [{"type": "text", "text": "A"}] and not result["isError"]
    assert session.name == "Reading a" and session.skipped == {"metadata": 1, "$set": 2}


def gemini_history(
    operations: list[tuple[str, int]],
) -> tuple[list[dict[str, Any]], list[str], dict[str, str | None]]:
    """The records an operation sequence writes, the history Gemini CLI's loader
    (`loadConversationRecord`) ends with (appends and updates go into an ordered map, a
    rewind drops its target and everything after it; everything, for an unknown id),
    and the message each one followed when it was recorded."""
    records: list[dict[str, Any]] = [gemini_meta()]
    history: list[str] = []
    made: list[str] = []
    after: dict[str, str | None] = {}
    for step, (operation, pick) in enumerate(operations):
        if operation == "rewind" and made:
            target = made[pick % len(made)]
            records.append({"$rewindTo": target})
            history = history[: history.index(target)] if target in history else []
        elif operation == "update" and history:
            mid = history[pick % len(history)]
            kind = "user" if mid.startswith("u") else "gemini"
            edited = f"{mid} edited {step}"
            content: Any = [{"text": edited}] if kind == "user" else edited
            records.append(gemini_message(mid, kind, step, content=content))
        else:
            kind = "user" if operation == "user" else "gemini"
            mid = f"{kind[0]}{len(made)}"
            made.append(mid)
            records.append(gemini_message(mid, kind, step))
            after[mid] = history[-1] if history else None
            history.append(mid)
    return records, history, after


@settings(max_examples=examples(60), deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["user", "gemini", "rewind", "update"]), st.integers(0, 50)),
        max_size=25,
    )
)
def test_rewinds_give_the_branches_gemini_had(operations: list[tuple[str, int]]) -> None:
    """Whatever appends, updates and rewinds a JSONL session went through: the path to
    the leaf is the history Gemini CLI resumes, every message ever recorded is in the
    tree (a rewound one on the branch it was cut from), each once, in its last version,
    under the message that was before it when it was recorded."""
    import tempfile

    records, history, after = gemini_history(operations)
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "session.jsonl"
        path.write_text(gemini_lines(records), encoding="utf-8")
        session = read_gemini_session(str(path))
    sm = session.manager
    entries = sm.get_entries()
    by_id = {e["id"]: e for e in entries}
    ids = {
        e["id"]: e["message"].get("responseId") or _user_id(e["message"])
        for e in entries
        if e["type"] == "message"
    }
    path_ids = [ids[e["id"]] for e in sm.get_branch() if e["type"] == "message" and e["id"] in ids]
    assert path_ids == history
    recorded = {r["id"] for r in records if "id" in r}
    assert sorted(ids.values()) == sorted(recorded)
    latest = {r["id"]: r for r in records if "id" in r}
    for entry in entries:
        if entry["type"] != "message":
            continue
        mid = ids[entry["id"]]
        content = entry["message"]["content"]
        text = content[-1]["text"] if isinstance(content, list) else content
        want = latest[mid]["content"]
        assert text == (want[-1]["text"] if isinstance(want, list) else want)
        # Under the message it followed (model changes and the like in between).
        parent = entry.get("parentId")
        while parent is not None and parent not in ids:
            parent = by_id[parent].get("parentId")
        assert (ids[parent] if parent is not None else None) == after[mid]
    rewinds = sum(1 for r in records if "$rewindTo" in r)
    assert sum(1 for e in entries if e.get("customType") == "gemini:rewind") == rewinds


def _user_id(message: dict[str, Any]) -> str:
    return str(message["content"][0]["text"]).split()[0]


# ----------------------------------------------------------------------------- Copilot CLI


def test_copilot_usage_is_what_the_cli_recorded(tmp_path: Path) -> None:
    """Copilot writes each response's output tokens; at shutdown, the session's totals
    per model. Each response's count is its message's usage, once: the sums are the
    CLI's own totals (the tiny sessions ran one model and shut down once)."""
    for name in COPILOT:
        events = [
            json.loads(line)
            for line in fixture("copilot", name).read_text(encoding="utf-8").splitlines()
        ]
        session = read("copilot", name, tmp_path)
        managers = [session.manager] + [s.manager for s in session.subsessions]
        output = sum(m["usage"]["output"] for sm in managers for m in messages(sm, "assistant"))
        recorded = sum(
            e["data"].get("outputTokens") or 0 for e in events if e["type"] == "assistant.message"
        )
        assert output == recorded > 0
        if name != STARCAR:
            (shutdown,) = [e for e in events if e["type"] == "session.shutdown"]
            metrics = shutdown["data"]["modelMetrics"]
            assert output == sum(m["usage"]["outputTokens"] for m in metrics.values())
            kept = [
                e
                for e in session.manager.get_entries()
                if e.get("customType") == "copilot:session.shutdown"
            ]
            assert kept[0]["data"]["modelMetrics"] == metrics


def test_copilot_subagents_compaction_and_failures(tmp_path: Path) -> None:
    events = [
        json.loads(line)
        for line in fixture("copilot", STARCAR).read_text(encoding="utf-8").splitlines()
    ]
    session = read("copilot", STARCAR, tmp_path)
    started = {e["agentId"]: e["data"] for e in events if e["type"] == "subagent.started"}
    assert {s.key: s.tool_call_id for s in session.subsessions} == {
        k: v["toolCallId"] for k, v in started.items()
    }
    for sub in session.subsessions:
        mine = [e for e in events if e.get("agentId") == sub.key]
        calls = sum(
            len(e["data"].get("toolRequests") or ())
            for e in mine
            if e["type"] == "assistant.message"
        )
        assert len(messages(sub.manager, "toolResult")) == calls
        assert sub.name == "car"
    sm = session.manager
    (compaction,) = [e for e in sm.get_entries() if e["type"] == "compaction"]
    complete = next(e for e in events if e["type"] == "session.compaction_complete")
    assert compaction["summary"] == complete["data"]["summaryContent"]
    assert compaction["tokensBefore"] == complete["data"]["preCompactionTokens"]
    # Copilot compacted in the background: what happened meanwhile stays in the context.
    assert compaction["firstKeptEntryId"] != compaction["id"]
    kept = sm.get_entry(compaction["firstKeptEntryId"])
    assert kept is not None and kept.get("message", {}).get("role") != "toolResult"
    failed = [
        e["data"]["toolCallId"]
        for e in events
        if e["type"] == "tool.execution_complete" and e["data"].get("success") is False
    ]
    results = [
        m
        for s in [sm] + [x.manager for x in session.subsessions]
        for m in messages(s, "toolResult")
    ]
    assert sorted(m["toolCallId"] for m in results if m["isError"]) == sorted(failed)
    assert len(failed) == 6
    changes = [e["model"] for e in sm.get_entries() if e["type"] == "model_change"]
    assert changes[-1] == "github-copilot/claude-fable-5"


def copilot_event(number: int, kind: str, data: dict[str, Any], **extra: Any) -> dict[str, Any]:
    event = {
        "type": kind,
        "data": data,
        "id": f"e{number}",
        "timestamp": f"2026-05-01T10:00:{number:02d}.000Z",
        "parentId": f"e{number - 1}" if number else None,
    }
    event.update(extra)
    return event


def test_copilot_rewind_clear_and_unanswered_calls(tmp_path: Path) -> None:
    """A snapshot rewind leaves the removed turn as a branch; after a context clear the
    next prompt starts a new root; a call with no result (the session ended mid-turn)
    is answered as interrupted; a prompt typed while calls ran comes after their results."""
    assistant = {"messageId": "m1", "content": "", "outputTokens": 7}
    events = [
        copilot_event(
            0,
            "session.start",
            {
                "sessionId": "s1",
                "startTime": "2026-05-01T10:00:00.000Z",
                "context": {"cwd": "/w"},
                "selectedModel": "gpt-5",
            },
        ),
        copilot_event(1, "user.message", {"content": "first"}),
        copilot_event(2, "assistant.message", {**assistant, "content": "one"}),
        copilot_event(3, "user.message", {"content": "second"}),
        copilot_event(4, "assistant.message", {**assistant, "messageId": "m2", "content": "two"}),
        copilot_event(5, "session.snapshot_rewind", {"upToEventId": "e3", "eventsRemoved": 2}),
        copilot_event(6, "user.message", {"content": "second, again"}),
        copilot_event(
            7,
            "assistant.message",
            {
                **assistant,
                "messageId": "m3",
                "toolRequests": [
                    {"toolCallId": "t1", "name": "bash", "arguments": {"command": "ls"}},
                    {"toolCallId": "t2", "name": "bash", "arguments": {"command": "pwd"}},
                ],
            },
        ),
        copilot_event(8, "user.message", {"content": "steer", "delivery": "steering"}),
        copilot_event(
            9,
            "tool.execution_complete",
            {"toolCallId": "t1", "success": True, "result": {"content": "a b"}},
        ),
        copilot_event(10, "session.context_cleared", {"messagesCleared": 6}),
        copilot_event(11, "user.message", {"content": "fresh start"}),
        copilot_event(
            12,
            "assistant.message",
            {
                **assistant,
                "messageId": "m4",
                "toolRequests": [
                    {"toolCallId": "t3", "name": "bash", "arguments": {}},
                ],
            },
        ),
    ]
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events) + '{"torn', encoding="utf-8")
    session = read_copilot_session(str(path))
    sm = session.manager
    assert_sound(sm)
    assert [str(d) for d in session.damaged] == ["line 14: not valid JSON"]
    entries = sm.get_entries()
    roots = [e for e in entries if e.get("parentId") is None]
    assert len(roots) == 2  # the cleared context, and what followed the clear
    branch = [e for e in sm.get_branch() if e["type"] == "message"]
    assert [m["message"]["role"] for m in branch] == ["user", "assistant", "toolResult"]
    assert branch[0]["message"]["content"][0]["text"] == "fresh start"
    assert branch[2]["message"]["content"][0]["text"].startswith("[Tool execution was interrupted")
    before_clear = build_session_context(entries, _tip_with(sm, "steer")).messages
    prompts = [m["content"][0]["text"] for m in before_clear if m["role"] == "user"]
    assert prompts == ["first", "second, again", "steer"]
    roles = [m["role"] for m in before_clear]
    assert roles[-4:] == ["assistant", "toolResult", "toolResult", "user"]
    # The rewound turn ("second", "two") is a branch beside "second, again".
    two = next(
        e for e in entries if e["type"] == "message" and e["message"].get("responseId") == "m2"
    )
    assert two["id"] not in {e["id"] for e in sm.get_branch(_tip_with(sm, "steer"))}


def _tip_with(sm: SessionManager, text: str) -> str:
    entry = next(
        e
        for e in sm.get_entries()
        if e["type"] == "message"
        and e["message"]["role"] == "user"
        and e["message"]["content"]
        and e["message"]["content"][0].get("text") == text
    )
    return str(entry["id"])


# ----------------------------------------------------------------------------- damage


def test_a_document_cut_short_keeps_what_came_before(tmp_path: Path) -> None:
    """A Gemini CLI session file or an `opencode export` cut off mid-write: the
    messages before the cut read, the cut is reported with its line."""
    for kind, name, reader in (
        ("gemini", CANCELLED, read_gemini_session),
        ("opencode", COMPACTED, read_opencode_export),
    ):
        data = fixture(kind, name).read_bytes()
        cut = tmp_path / f"{kind}.json"
        cut.write_bytes(data[: len(data) // 2])
        whole = reader(str(fixture(kind, name)))
        half = reader(str(cut))
        (damage,) = half.damaged
        assert "cut short" in damage.reason and damage.line > 1
        assert 0 < len(half.manager.get_entries()) < len(whole.manager.get_entries())
        assert_sound(half.manager)
        # What was read is the start of the whole session.
        prefix = [e["message"] for e in half.manager.get_entries() if e["type"] == "message"]
        full = [e["message"] for e in whole.manager.get_entries() if e["type"] == "message"]
        assert prefix[:-3] == full[: len(prefix) - 3]


def test_damaged_lines_and_rows_are_skipped_and_reported(tmp_path: Path) -> None:
    lines = (
        fixture(
            "gemini",
            "jazzyalex__agent-sessions__Resources__Fixtures__stage0__agents__gemini__jsonl_v040.jsonl",
        )
        .read_bytes()
        .splitlines(keepends=True)
    )
    damaged = tmp_path / "session.jsonl"
    damaged.write_bytes(lines[0] + lines[1] + b"\xff\xfe not json\n" + b"".join(lines[2:]))
    session = read_gemini_session(str(damaged))
    assert [str(d) for d in session.damaged] == ["line 3: not valid UTF-8"]
    assert len(messages(session.manager, "assistant")) == 2
    database = db_copy(tmp_path)
    with sqlite3.connect(database) as conn:
        part = conn.execute(
            "SELECT id FROM part WHERE session_id = ? AND data LIKE '%\"reasoning\"%' LIMIT 1",
            (DB_SESSION,),
        ).fetchone()[0]
        conn.execute("UPDATE part SET data = '{not json' WHERE id = ?", (part,))
    read_back = convert_opencode(load_db_session(str(database), DB_SESSION))
    assert [str(d) for d in read_back.damaged] == [
        f"line 0: {database}: part {part}: not a JSON object"
    ]
    assert_sound(read_back.manager)


# ----------------------------------------------------------------------------- the chain


@settings(max_examples=examples(150), deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("assistant"), st.integers(0, 3)),
            st.tuples(st.just("result"), st.integers(0, 9)),
            st.tuples(st.sampled_from(["user", "hidden", "custom"]), st.just(0)),
        ),
        max_size=30,
    )
)
def test_the_chain_keeps_every_call_answered_right_after_it(
    operations: list[tuple[str, int]],
) -> None:
    """Whatever order a transcript gives responses, results (of open calls, of calls
    long answered, of calls never made) and other entries in, the context has each
    response's results right after it, and every other entry still in it, in order."""
    builder = TreeBuilder("/w", "seed")
    chain = Chain(builder)
    made: list[str] = []
    others: list[str] = []
    for number, (operation, pick) in enumerate(operations):
        key = f"k{number}"
        if operation == "assistant":
            calls = [f"c{number}:{n}" for n in range(pick)]
            made += calls
            content = [{"type": "toolCall", "id": c, "name": "t", "arguments": {}} for c in calls]
            message = {
                "role": "assistant",
                "content": content,
                "provider": "p",
                "model": "m",
                "timestamp": number,
            }
            chain.assistant(message, key, number)
        elif operation == "result" and made:
            chain.result(made[pick % len(made)], [{"type": "text", "text": "r"}], key, number)
        elif operation == "user":
            others.append(key)
            chain.message({"role": "user", "content": key, "timestamp": number}, key, number)
        elif operation == "hidden":
            others.append(key)
            chain.custom_message("x:hidden", key, key, number)
        elif operation == "custom":
            chain.custom("x:custom", {"n": number}, key, number)
    chain.close()
    if not builder.sm.get_entries():
        return
    sm = builder.finish(chain.current)
    llm = convert_to_llm(sm.build_session_context().messages)
    assert_answered(llm)
    texts = [
        m["content"] if isinstance(m["content"], str) else m["content"][0]["text"]
        for m in llm
        if m["role"] == "user"
    ]
    assert texts == others


def test_a_file_whose_first_line_is_damaged_is_still_told_apart(tmp_path: Path) -> None:
    """Detection looks past a torn first line: a Gemini CLI JSONL session is not taken
    for Claude Code's (both have `user` lines), and the reader then reports the line."""
    name = (
        "jazzyalex__agent-sessions__Resources__Fixtures__stage0__agents__gemini__jsonl_v040.jsonl"
    )
    lines = fixture("gemini", name).read_bytes().splitlines(keepends=True)
    torn = tmp_path / "session.jsonl"
    torn.write_bytes(b'{"sessionId": "gemini_st\n' + b"".join(lines[1:]))
    assert detect_file(str(torn)) == "gemini"
    session = read_gemini_session(str(torn))
    assert [str(d) for d in session.damaged] == ["line 1: not valid JSON"]
    assert session.source_id == "session" and len(messages(session.manager, "assistant")) == 2


def test_a_reverted_session_keeps_the_reverted_messages_as_a_branch(tmp_path: Path) -> None:
    """OpenCode's undo (`revert`) hides the messages from the one it names on until the
    next prompt deletes them: the leaf is before that message, the rest a branch."""
    database = db_copy(tmp_path)
    with sqlite3.connect(database) as conn:
        users = [
            row[0]
            for row in conn.execute(
                'SELECT id FROM message WHERE session_id = ? AND data LIKE \'%"role":"user"%\' '
                "ORDER BY time_created, id",
                (DB_SESSION,),
            )
        ]
        conn.execute(
            "UPDATE session SET revert = ? WHERE id = ?",
            (json.dumps({"messageID": users[-1], "snapshot": "abc"}), DB_SESSION),
        )
    whole = convert_opencode(load_db_session(str(db_copy(tmp_path / "whole")), DB_SESSION))
    session = convert_opencode(load_db_session(str(database), DB_SESSION))
    sm = session.manager
    assert_sound(sm)
    assert len(sm.get_entries()) == len(whole.manager.get_entries())
    path = [e["message"] for e in sm.get_branch() if e["type"] == "message"]
    assert [m["role"] for m in path].count("user") == len(users) - 1
    assert path[-1]["role"] == "assistant" and path[-1]["stopReason"] == "stop"
    last_prompt = messages(whole.manager, "user")[-1]
    assert last_prompt not in path and last_prompt in messages(sm, "user")


def test_a_history_written_again_follows_what_matches_and_branches_where_it_differs(
    tmp_path: Path,
) -> None:
    """`$set.messages` (Gemini CLI writing its history again, e.g. after compressing
    it): the messages it keeps are the ones already there; where it differs it
    branches; a user record of function responses answers the calls before it."""
    call = {"functionCall": {"id": "f1", "name": "ls", "args": {"dir": "."}}}
    response = {"functionResponse": {"id": "f1", "name": "ls", "response": {"output": "a b"}}}
    u1, a1 = gemini_message("u1", "user", 1), gemini_message("a1", "gemini", 2)
    rewritten = [
        u1,
        a1,
        gemini_message("s1", "user", 5, content=[{"text": "s1 summary of the rest"}]),
        gemini_message("g1", "gemini", 6, content=[call]),
        gemini_message("r1", "user", 7, content=[response]),
        gemini_message("g2", "gemini", 8),
    ]
    path = tmp_path / "session.jsonl"
    path.write_text(
        gemini_lines(
            [
                gemini_meta(),
                u1,
                a1,
                gemini_message("u2", "user", 3),
                gemini_message("a2", "gemini", 4),
                {"$set": {"messages": rewritten, "lastUpdated": "2026-05-01T10:00:09.000Z"}},
            ]
        ),
        encoding="utf-8",
    )
    sm = read_gemini_session(str(path)).manager
    assert_sound(sm)
    entries = sm.get_entries()
    assert len(messages(sm, "user")) == 3  # u1 once, u2, s1; r1 answers g1
    on_path = [e["message"] for e in sm.get_branch() if e["type"] == "message"]
    assert [m.get("responseId") or m["role"] for m in on_path] == [
        "user",
        "a1",
        "user",
        "g1",
        "toolResult",
        "g2",
    ]
    assert on_path[4]["content"] == [{"type": "text", "text": "a b"}]
    a1_entry = next(e for e in entries if e.get("message", {}).get("responseId") == "a1")
    children = [e for e in entries if e.get("parentId") == a1_entry["id"]]
    assert len(children) == 2  # u2 (the old history) and s1 (the new)
