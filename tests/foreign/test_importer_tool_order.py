"""Imported sessions keep the order the model APIs require.

After `build_session_context` + `convert_to_llm`, every assistant message with tool
calls is followed at once by the tool results answering exactly those calls, before
any user or assistant message; only the last turn may still be in flight (some
results not written yet). Claude Code runs tools while a response streams, so one
response's lines interleave calls, results and the text a tool injects (`isMeta`
lines linked by `sourceToolUseID`); Codex events and injected messages can fall
between a response's calls and their outputs. Checked on a hand-made transcript of
each, on every real file of `tests/data/real/foreign`, and on generated transcripts
that interleave calls, results, meta lines, events and streaming splits, with
nothing lost: every line's content is in the tree once, usage is counted once.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessiontree import SessionManager, build_session_context, convert_to_llm
from sessiontree.foreign import ForeignSession, read_claude_session, read_codex_session
from sessiontree.foreign.importer import import_session
from sessiontree.layout import store_parts
from tests import foreign_support as fs
from tests.conftest import REAL_FILES, examples, unavailable

FOREIGN = REAL_FILES / "foreign"
CLAUDE = sorted(p.name for p in (FOREIGN / "claude").glob("*.jsonl"))
CODEX = sorted(p.name for p in (FOREIGN / "codex").glob("*.jsonl"))


def order_problems(messages: list[dict[str, Any]]) -> list[str]:
    """Where LLM messages break the tool call order the APIs require (empty: none).

    Every assistant message's calls are answered, right after it, by results for
    exactly those calls; a result answers the assistant message just before it. The
    last assistant message may be in flight: the results after it answer some of its
    calls, each once, and no other result follows."""
    problems: list[str] = []
    assistants = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    answered: set[int] = set()
    for i in assistants:
        calls = [b["id"] for b in messages[i]["content"] if b.get("type") == "toolCall"]
        j = i + 1
        results: list[str] = []
        while j < len(messages) and messages[j]["role"] == "toolResult":
            results.append(messages[j]["toolCallId"])
            answered.add(j)
            j += 1
        if Counter(results) == Counter(calls):
            continue
        in_flight = (
            i == assistants[-1]
            and len(set(results)) == len(results)
            and set(results) <= set(calls)
            and not any(m["role"] == "toolResult" for m in messages[j:])
        )
        if not in_flight:
            following = messages[j]["role"] if j < len(messages) else "the end"
            problems.append(f"message {i}: calls {calls}, results {results}, then {following}")
    for j, m in enumerate(messages):
        if m["role"] == "toolResult" and j not in answered:
            problems.append(f"message {j}: result {m['toolCallId']} follows no assistant message")
    return problems


def leaves(sm: SessionManager) -> list[str]:
    entries = sm.get_entries()
    parents = {e.get("parentId") for e in entries}
    return [e["id"] for e in entries if e["id"] not in parents]


def tree_problems(sm: SessionManager) -> list[str]:
    """Order problems at every leaf of the tree; and every parent comes before its
    children (an append-only file: readers may rely on it)."""
    entries = sm.get_entries()
    seen: set[str] = set()
    problems = []
    for entry in entries:
        parent = entry.get("parentId")
        if parent is not None and parent not in seen:
            problems.append(f"entry {entry['id']} comes before its parent {parent}")
        seen.add(entry["id"])
    for leaf in leaves(sm):
        messages = convert_to_llm(build_session_context(entries, leaf).messages)
        problems += [f"leaf {leaf}: {p}" for p in order_problems(messages)]
    return problems


def sessions(session: ForeignSession) -> list[tuple[str, SessionManager]]:
    return [("main", session.manager)] + [(s.key, s.manager) for s in session.subsessions]


# ----------------------------------------------------------------------------- Claude Code

SESSION = "5f0c2d9e-8a11-4c8e-9a51-7d1c4f0e0b7e"


class Claude:
    """Lines in the shape Claude Code 2.1 writes them (envelope keys, ids, usage)."""

    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []
        self.t = 0

    def line(self, kind: str, parent: str | None, **fields: Any) -> str:
        self.t += 1
        uid = f"{len(self.lines):08d}-0000-4000-8000-000000000000"
        line: dict[str, Any] = {"parentUuid": parent, "isSidechain": False, "type": kind}
        line.update(fields)
        line.update(
            {
                "uuid": uid,
                "timestamp": f"2026-06-05T05:{self.t // 60:02d}:{self.t % 60:02d}.000Z",
                "userType": "external",
                "cwd": "/work/app",
                "sessionId": SESSION,
                "version": "2.1.152",
            }
        )
        self.lines.append(line)
        return uid

    def prompt(self, parent: str | None, text: str) -> str:
        return self.line("user", parent, message={"role": "user", "content": text})

    def block(
        self, parent: str | None, response: str, block: dict[str, Any], output: int, final: bool
    ) -> str:
        message = {
            "model": "claude-opus-4-7",
            "id": response,
            "type": "message",
            "role": "assistant",
            "content": [block],
            "stop_reason": "tool_use" if final and block["type"] == "tool_use" else None,
            "usage": {
                "input_tokens": 7,
                "cache_creation_input_tokens": 11,
                "cache_read_input_tokens": 13,
                "output_tokens": output,
            },
        }
        return self.line("assistant", parent, message=message, requestId=f"req_{response}")

    def result(self, parent: str | None, call: str, text: str, extra: str | None = None) -> str:
        content: list[dict[str, Any]] = [
            {"type": "tool_result", "tool_use_id": call, "content": text}
        ]
        if extra is not None:
            content.append({"type": "text", "text": extra})
        return self.line(
            "user",
            parent,
            message={"role": "user", "content": content},
            toolUseResult={"stdout": text},
            sourceToolAssistantUUID=parent,
        )

    def meta(self, parent: str | None, call: str, text: str) -> str:
        return self.line(
            "user",
            parent,
            message={"role": "user", "content": [{"type": "text", "text": text}]},
            isMeta=True,
            sourceToolUseID=call,
        )


def tool_use(call: str, name: str = "Skill") -> dict[str, Any]:
    return {"type": "tool_use", "id": call, "name": name, "input": {"skill": call}}


def test_claude_skill_text_comes_after_every_result_of_its_response(tmp_path: Path) -> None:
    """The issue's case: one response streams call A, its result, the skill text A
    injects, call B and B's result. The context was assistant[A, B], result A, skill
    text, result B: a user message between two results, and pi's provider invented a
    "No result provided" error for B. The results come first, then the skill text."""
    cc = Claude()
    p = cc.prompt(None, "fix the PR issues")
    a = cc.block(p, "msg_1", tool_use("toolu_A"), 5, False)
    ra = cc.result(a, "toolu_A", "Launching skill: review")
    m = cc.meta(ra, "toolu_A", "Base directory for this skill: /skills/review")
    b = cc.block(m, "msg_1", tool_use("toolu_B", "Bash"), 9, True)
    rb = cc.result(b, "toolu_B", "2 files changed")
    cc.block(rb, "msg_2", {"type": "text", "text": "Both done."}, 3, True)
    path = fs.write_jsonl(tmp_path / f"{SESSION}.jsonl", cc.lines)

    session = read_claude_session(str(path))
    sm = session.manager
    llm = convert_to_llm(sm.build_session_context().messages)
    assert [(m["role"], m.get("toolCallId")) for m in llm] == [
        ("user", None),
        ("assistant", None),
        ("toolResult", "toolu_A"),
        ("toolResult", "toolu_B"),
        ("user", None),
        ("assistant", None),
    ]
    assert [b["id"] for b in llm[1]["content"]] == ["toolu_A", "toolu_B"]
    assert llm[4]["content"] == [
        {"type": "text", "text": "Base directory for this skill: /skills/review"}
    ]
    assert tree_problems(sm) == []
    # Nothing lost, usage once: one message per response, the last line's usage.
    assert [e["type"] for e in sm.get_entries()].count("custom_message") == 1
    usage = [
        m["usage"]["output"]
        for m in (e["message"] for e in sm.get_entries() if e["type"] == "message")
        if m["role"] == "assistant"
    ]
    assert usage == [9, 3]
    # The import writes the same order, and reads back with it.
    done = import_session(session, store_parts(agent_dir=str(tmp_path / "agent")))
    reopened = SessionManager.open(done.path, read_only=True)
    try:
        assert convert_to_llm(reopened.build_session_context().messages) == llm
        assert tree_problems(reopened) == []
    finally:
        reopened.close()


def test_claude_results_with_text_and_skill_text_before_a_result(tmp_path: Path) -> None:
    """The family around it: a result line that carries text after its result, and a
    skill text written before its own result; the results still come first."""
    cc = Claude()
    p = cc.prompt(None, "go")
    a = cc.block(p, "msg_1", tool_use("toolu_A"), 2, False)
    m = cc.meta(a, "toolu_A", "skill text")
    b = cc.block(m, "msg_1", tool_use("toolu_B"), 4, False)
    cc.block(b, "msg_1", tool_use("toolu_C"), 6, True)
    ra = cc.result(a, "toolu_A", "A done")
    rb = cc.result(ra, "toolu_B", "B done", extra="[Image: screenshot]")
    cc.result(rb, "toolu_C", "C done")
    path = fs.write_jsonl(tmp_path / f"{SESSION}.jsonl", cc.lines)
    sm = read_claude_session(str(path)).manager
    llm = convert_to_llm(sm.build_session_context().messages)
    assert [(m["role"], m.get("toolCallId")) for m in llm] == [
        ("user", None),
        ("assistant", None),
        ("toolResult", "toolu_A"),
        ("toolResult", "toolu_B"),
        ("toolResult", "toolu_C"),
        ("user", None),
        ("user", None),
    ]
    assert [m["content"][0]["text"] for m in llm[5:]] == ["skill text", "[Image: screenshot]"]
    assert tree_problems(sm) == []


@pytest.mark.parametrize("later", [1, 7, 40])
def test_claude_a_late_result_goes_back_to_its_call(tmp_path: Path, later: int) -> None:
    """A result written only after `later` more responses (a resumed tool): it answers
    its call right after the call's response, before the responses that followed."""
    cc = Claude()
    line = cc.prompt(None, "go")
    line = cc.block(line, "msg_0", tool_use("toolu_A"), 1, False)
    line = cc.block(line, "msg_0", tool_use("toolu_B"), 2, True)
    line = cc.result(line, "toolu_A", "A done")
    for n in range(1, later + 1):
        line = cc.block(line, f"msg_{n}", tool_use(f"toolu_{n}", "Bash"), 1, True)
        line = cc.result(line, f"toolu_{n}", f"{n} done")
    cc.result(line, "toolu_B", "B done")
    path = fs.write_jsonl(tmp_path / f"{SESSION}.jsonl", cc.lines)
    sm = read_claude_session(str(path)).manager
    llm = convert_to_llm(sm.build_session_context().messages)
    assert [m.get("toolCallId") for m in llm[:4]] == [None, None, "toolu_A", "toolu_B"]
    assert len(llm) == 4 + 2 * later
    assert tree_problems(sm) == []


def test_claude_a_result_on_another_branch_stays_there(tmp_path: Path) -> None:
    """A result whose call was made on another branch (a rewound prompt) is not moved
    across: it stays where the source put it, its call's branch keeps no result."""
    cc = Claude()
    first = cc.prompt(None, "first")
    cc.block(first, "msg_1", tool_use("toolu_A"), 1, True)
    rewound = cc.prompt(None, "second")
    cc.result(rewound, "toolu_A", "A done")
    path = fs.write_jsonl(tmp_path / f"{SESSION}.jsonl", cc.lines)
    sm = read_claude_session(str(path)).manager
    (result,) = [
        e
        for e in sm.get_entries()
        if e["type"] == "message" and e["message"]["role"] == "toolResult"
    ]
    parent = sm.get_entry(result["parentId"])
    assert parent is not None and parent["message"]["content"] == "second"


# ----------------------------------------------------------------------------- Codex


def _cx(t: int, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {
        "timestamp": f"2026-06-05T04:{t // 60:02d}:{t % 60:02d}.000Z",
        "type": kind,
        "payload": payload,
    }


CODEX_ID = "019e9625-802f-7e91-840a-cfe88d14117c"


def _codex_head() -> list[dict[str, Any]]:
    meta = {
        "id": CODEX_ID,
        "timestamp": "2026-06-05T04:00:00.000Z",
        "cwd": "/work/app",
        "originator": "codex_exec",
        "cli_version": "0.135.0",
        "model_provider": "openai",
    }
    return [
        _cx(0, "session_meta", meta),
        _cx(1, "turn_context", {"cwd": "/work/app", "model": "gpt-5.5", "effort": "medium"}),
    ]


def _call(t: int, call: str) -> dict[str, Any]:
    payload = {"type": "function_call", "name": "spawn_agent", "arguments": "{}", "call_id": call}
    return _cx(t, "response_item", payload)


def _output(t: int, call: str) -> dict[str, Any]:
    payload = {"type": "function_call_output", "call_id": call, "output": f"{call} done"}
    return _cx(t, "response_item", payload)


def _prompt(t: int, text: str) -> list[dict[str, Any]]:
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    return [
        _cx(t, "response_item", item),
        _cx(t, "event_msg", {"type": "user_message", "message": text, "images": []}),
    ]


def _tokens(t: int, output: int, total: int) -> dict[str, Any]:
    def usage(o: int) -> dict[str, int]:
        return {
            "input_tokens": 100,
            "cached_input_tokens": 40,
            "output_tokens": o,
            "reasoning_output_tokens": 0,
            "total_tokens": 100 + o,
        }

    info = {"last_token_usage": usage(output), "total_token_usage": usage(total)}
    return _cx(t, "event_msg", {"type": "token_count", "info": info})


def test_codex_events_and_injected_text_between_calls_and_outputs(tmp_path: Path) -> None:
    """A sub-agent event between two calls of one response, and a developer message
    between their outputs. The event ended the response: assistant[A], assistant[B],
    result A, result B; and the message fell between the results. Now the response is
    one message, its results right after it, then the message."""
    lines = [
        *_codex_head(),
        *_prompt(2, "spawn two agents"),
        _call(3, "call_A"),
        _cx(4, "event_msg", {"type": "sub_agent_activity", "agent": "a1"}),
        _call(5, "call_B"),
        _tokens(6, 20, 20),
        _output(7, "call_A"),
        _cx(8, "response_item", {"type": "message", "role": "developer", "content": "note"}),
        _output(9, "call_B"),
    ]
    path = fs.write_jsonl(tmp_path / f"rollout-2026-06-05T04-00-00-{CODEX_ID}.jsonl", lines)
    sm = read_codex_session(str(path)).manager
    llm = convert_to_llm(sm.build_session_context().messages)
    assert [(m["role"], m.get("toolCallId")) for m in llm] == [
        ("user", None),
        ("assistant", None),
        ("toolResult", "call_A"),
        ("toolResult", "call_B"),
        ("user", None),
    ]
    assert [b["id"] for b in llm[1]["content"]] == ["call_A", "call_B"]
    assert llm[1]["usage"]["output"] == 20
    assert llm[4]["content"] == [{"type": "text", "text": "note"}]
    kept = [e["customType"] for e in sm.get_entries() if e["type"] == "custom"]
    assert kept == ["codex:sub_agent_activity"]
    assert tree_problems(sm) == []


# ----------------------------------------------------------------------------- real files


@pytest.mark.parametrize(
    ("kind", "name"), [("claude", n) for n in CLAUDE] + [("codex", n) for n in CODEX]
)
def test_every_real_file_keeps_the_api_order(kind: str, name: str) -> None:
    path = FOREIGN / kind / name
    if not path.is_file():
        unavailable(f"real file {path} is missing")
    session = read_claude_session(str(path)) if kind == "claude" else read_codex_session(str(path))
    for key, sm in sessions(session):
        assert tree_problems(sm) == [], key


def test_the_real_files_are_there() -> None:
    if not FOREIGN.is_dir():
        unavailable(f"real files {FOREIGN} are missing")
    assert CLAUDE and CODEX


# ----------------------------------------------------------------------------- generated


def _texts(content: object) -> list[str]:
    if isinstance(content, str):
        return [content]
    return [b["text"] for b in content if isinstance(b, dict) and b.get("type") == "text"]


@st.composite
def claude_transcripts(draw: st.DrawFn) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A Claude Code transcript: prompts, responses streamed one block a line, each call's
    result line somewhere after the call's line (under that line or the line before it),
    skill text after a result, text typed while a tool ran, attachment and progress
    lines anywhere; the last response may still be in flight (results missing). With
    what the tree must hold."""
    cc = Claude()
    want: dict[str, Any] = {"user": [], "results": [], "meta": [], "responses": {}}
    previous: str | None = None
    calls = 0

    extra: str | None = None  # the last line, when it is an attachment or progress line

    def extras() -> None:
        nonlocal previous, extra
        extra = None
        for kind in draw(st.lists(st.sampled_from(["attachment", "progress"]), max_size=2)):
            if kind == "attachment":
                previous = cc.line("attachment", previous, attachment={"type": "todo"})
            else:
                previous = cc.line("progress", previous, data={"type": "hook_progress"})
            extra = previous

    turns = draw(st.integers(1, 3))
    for turn in range(turns):
        previous = cc.prompt(previous, f"prompt {turn}")
        want["user"].append(f"prompt {turn}")
        extras()
        responses = draw(st.integers(1, 3))
        for number in range(responses):
            response = f"msg_{turn}_{number}"
            kinds = draw(st.lists(st.sampled_from(["thinking", "text", "call"]), min_size=1))
            blocks: list[dict[str, Any]] = []
            for kind in kinds[:5]:
                if kind == "call":
                    blocks.append(tool_use(f"toolu_{calls:03d}"))
                    calls += 1
                elif kind == "text":
                    blocks.append({"type": "text", "text": f"{response} says {len(blocks)}"})
                else:
                    blocks.append({"type": "thinking", "thinking": f"{response} thinks"})
            in_flight = turn == turns - 1 and number == responses - 1
            ids = [b["id"] for b in blocks if b["type"] == "tool_use"]
            missing = draw(st.sets(st.sampled_from(ids))) if in_flight and ids else set()
            # What may be written next: the response's next block, or a result (or the
            # skill text or typed text after it) whose call was written.
            queue = list(blocks)
            ready: list[tuple[str, str, str]] = []  # (kind, call id, line its parent may be)
            output = 0
            want["responses"][response] = [_block_view(b) for b in blocks]
            while queue or ready:
                pick = draw(st.integers(0, len(ready) - (0 if queue else 1)))
                if pick == len(ready):
                    block = queue.pop(0)
                    output += draw(st.integers(1, 9))
                    previous = cc.block(previous, response, block, output, not queue)
                    if not queue:
                        want["responses"][response + ":output"] = output
                    if block["type"] == "tool_use" and block["id"] not in missing:
                        ready.append(("result", block["id"], previous))
                else:
                    kind, call, line = ready.pop(pick)
                    # Claude Code chains attachment and progress lines: the next line
                    # hangs under them (a result under its call line only otherwise).
                    parent = line if extra is None and draw(st.booleans()) else previous
                    if kind == "result":
                        typed = f"typed during {call}" if draw(st.booleans()) else None
                        previous = cc.result(parent, call, f"{call} output", typed)
                        want["results"].append(call)
                        if typed is not None:
                            want["user"].append(typed)
                        if draw(st.booleans()):
                            ready.append(("meta", call, previous))
                    else:
                        previous = cc.meta(parent, call, f"skill text of {call}")
                        want["meta"].append(f"skill text of {call}")
                extras()
    return cc.lines, want


def _block_view(block: dict[str, Any]) -> tuple[str, str]:
    kind = block["type"]
    if kind == "tool_use":
        return ("toolCall", block["id"])
    return (kind, block.get("text") or block.get("thinking") or "")


@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(claude_transcripts())
def test_generated_claude_transcripts_keep_the_api_order_and_lose_nothing(
    case: tuple[list[dict[str, Any]], dict[str, Any]],
) -> None:
    lines, want = case
    with tempfile.TemporaryDirectory() as tmp:
        path = fs.write_jsonl(Path(tmp) / f"{SESSION}.jsonl", lines)
        session = read_claude_session(str(path))
    sm = session.manager
    assert session.damaged == []
    assert tree_problems(sm) == []
    # Everything is in the tree, once: prompts and typed text, every result, every
    # skill text, every response as one message with its blocks in order and the
    # usage of its last line.
    messages = [
        e["message"] if e["type"] == "message" else {"role": "custom", **e}
        for e in sm.get_entries()
        if e["type"] in ("message", "custom_message")
    ]
    by_role: dict[str, list[dict[str, Any]]] = {}
    for message in messages:
        by_role.setdefault(message["role"], []).append(message)
    users = [t for m in by_role.get("user", []) for t in _texts(m["content"])]
    assert Counter(users) == Counter(want["user"])
    assert [t for t in users if t.startswith("prompt")] == [
        t for t in want["user"] if t.startswith("prompt")
    ]
    results = [m["toolCallId"] for m in by_role.get("toolResult", [])]
    assert Counter(results) == Counter(want["results"])
    metas = [t for m in by_role.get("custom", []) for t in _texts(m["content"])]
    assert Counter(metas) == Counter(want["meta"])
    responses = {k: v for k, v in want["responses"].items() if not k.endswith(":output")}
    assistants = by_role.get("assistant", [])
    assert [m["responseId"] for m in assistants] == list(responses)
    for message in assistants:
        view = [
            ("toolCall", b["id"])
            if b["type"] == "toolCall"
            else (b["type"], b.get("text") or b.get("thinking"))
            for b in message["content"]
        ]
        assert view == responses[message["responseId"]]
        assert message["usage"]["output"] == want["responses"][message["responseId"] + ":output"]
    # All of it on one path, the resumed one; unless the last message line is a skill
    # text, where Claude Code (its SDK) resumes an older end, and so does the reader.
    last = [line for line in lines if line["type"] in ("user", "assistant")][-1]
    if not last.get("isMeta"):
        assert len(sm.build_session_context().messages) == len(messages)


@st.composite
def codex_rollouts(draw: st.DrawFn) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A Codex rollout: prompts, responses of reasoning, text and calls (a turn goes on
    after calls only) with UI events between the items, then the outputs in any order
    with the response's token count, events and developer messages between them; the
    last response may still be in flight (outputs missing). Codex writes a response's
    items together: an output comes after them (the real files), unlike Claude Code."""
    lines = _codex_head()
    want: dict[str, Any] = {"user": [], "results": [], "developer": [], "output": 0}
    t = 2
    calls = 0
    total = 0
    turns = draw(st.integers(1, 3))
    for turn in range(turns):
        lines += _prompt(t, f"prompt {turn}")
        want["user"].append(f"prompt {turn}")
        responses = draw(st.integers(1, 3))
        for number in range(responses):
            kinds = draw(st.lists(st.sampled_from(["reasoning", "text", "call"]), min_size=1))
            kinds = kinds[:5]
            if number < responses - 1 and "call" not in kinds:
                kinds[-1] = "call"  # Codex samples again only after calls
            items: list[dict[str, Any]] = []
            ids = []
            for kind in kinds:
                t += 1
                if kind == "call":
                    ids.append(f"call_{calls:03d}")
                    items.append(_call(t, ids[-1]))
                    calls += 1
                elif kind == "text":
                    content = [{"type": "output_text", "text": f"answer {t}"}]
                    payload = {"type": "message", "role": "assistant", "content": content}
                    items.append(_cx(t, "response_item", payload))
                else:
                    summary = [{"type": "summary_text", "text": f"thought {t}"}]
                    items.append(_cx(t, "response_item", {"type": "reasoning", "summary": summary}))
            in_flight = turn == turns - 1 and number == responses - 1
            missing = draw(st.sets(st.sampled_from(ids))) if in_flight and ids else set()
            for item in items:
                if draw(st.booleans()):
                    lines.append(_cx(t, "event_msg", {"type": "sub_agent_activity", "n": t}))
                lines.append(item)
            # Then the outputs, in any order, the response's token count somewhere among
            # them, events and messages Codex injects between them.
            outputs = draw(st.permutations([i for i in ids if i not in missing]))
            count_at = draw(st.integers(0, len(outputs)))
            output = draw(st.integers(1, 50))
            total += output
            want["output"] = total
            for index in range(len(outputs) + 1):
                t += 1
                if index == count_at:
                    lines.append(_tokens(t, output, total))
                other = draw(st.sampled_from(["none", "none", "event", "developer"]))
                if other == "event":
                    lines.append(_cx(t, "event_msg", {"type": "sub_agent_activity", "n": t}))
                elif other == "developer":
                    payload = {"type": "message", "role": "developer", "content": f"note {t}"}
                    lines.append(_cx(t, "response_item", payload))
                    want["developer"].append(f"note {t}")
                if index < len(outputs):
                    lines.append(_output(t, outputs[index]))
                    want["results"].append(outputs[index])
    return lines, want


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(codex_rollouts())
def test_generated_codex_rollouts_keep_the_api_order_and_lose_nothing(
    case: tuple[list[dict[str, Any]], dict[str, Any]],
) -> None:
    lines, want = case
    with tempfile.TemporaryDirectory() as tmp:
        name = f"rollout-2026-06-05T04-00-00-{CODEX_ID}.jsonl"
        session = read_codex_session(str(fs.write_jsonl(Path(tmp) / name, lines)))
    sm = session.manager
    assert tree_problems(sm) == []
    context = sm.build_session_context().messages
    assert order_problems(convert_to_llm(context)) == []
    users = [t for m in context if m["role"] == "user" for t in _texts(m["content"])]
    assert users == want["user"]
    results = [m["toolCallId"] for m in context if m["role"] == "toolResult"]
    assert Counter(results) == Counter(want["results"])
    notes = [t for m in context if m["role"] == "custom" for t in _texts(m["content"])]
    assert Counter(notes) == Counter(want["developer"])
    assistants = [m for m in context if m["role"] == "assistant"]
    assert sum(m["usage"]["output"] for m in assistants) == want["output"]
    calls = [b["id"] for m in assistants for b in m["content"] if b["type"] == "toolCall"]
    assert sorted(calls) == sorted(f"call_{i:03d}" for i in range(len(calls)))
    in_tree = [e for e in sm.get_entries() if e["type"] in ("message", "custom_message")]
    assert len(in_tree) == len(context)
