"""The Claude Code and Codex readers on the 22 real files and on generated shapes.

Every real file reads without error into a session whose tree holds together; the
facts each file is known for (SOURCES.md) are checked on its tree: merged response
lines with usage counted once, chained parallel tool results, the rewind branch,
compactions, titles, inline sidechains, the resumed leaf, Codex usage and injected
context, the legacy format. Generated files cover what the real ones lack.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from sessiontree import SessionManager, build_session_context
from sessiontree.foreign import ForeignSession, read_claude_session, read_codex_session
from sessiontree.foreign.store import ForeignStore
from sessiontree.layout import store_parts
from tests import foreign_support as fs
from tests.conftest import REAL_FILES, unavailable

FOREIGN = REAL_FILES / "foreign"
CLAUDE = sorted(p.name for p in (FOREIGN / "claude").glob("*.jsonl"))
CODEX = sorted(p.name for p in (FOREIGN / "codex").glob("*.jsonl"))


def fixture(kind: str, name: str) -> Path:
    path = FOREIGN / kind / name
    if not path.is_file():
        unavailable(f"real file {path} is missing")
    return path


def read(kind: str, name: str) -> ForeignSession:
    path = str(fixture(kind, name))
    return read_claude_session(path) if kind == "claude" else read_codex_session(path)


def records(kind: str, name: str) -> list[dict[str, Any]]:
    out = []
    for line in fixture(kind, name).read_text(encoding="utf-8").splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            out.append(value)
    return out


def messages(sm: SessionManager, role: str) -> list[dict[str, Any]]:
    return [
        e["message"]
        for e in sm.get_entries()
        if e["type"] == "message" and e["message"]["role"] == role
    ]


def test_the_shared_fixtures_are_all_there() -> None:
    if not FOREIGN.is_dir():
        unavailable(f"real files {FOREIGN} are missing")
    assert (len(CLAUDE), len(CODEX)) == (12, 10)


# ----------------------------------------------------------------------------- all files


@pytest.mark.parametrize(
    ("kind", "name"), [("claude", n) for n in CLAUDE] + [("codex", n) for n in CODEX]
)
def test_every_real_file_reads_into_a_sound_tree(kind: str, name: str) -> None:
    session = read(kind, name)
    sm = session.manager
    entries = sm.get_entries()
    ids = [e["id"] for e in entries]
    assert entries and len(set(ids)) == len(ids)
    by_id = {e["id"]: e for e in entries}
    for entry in entries:
        assert len(entry["id"]) == 8 and int(entry["id"], 16) >= 0
        assert entry["parentId"] is None or entry["parentId"] in by_id
        assert entry["timestamp"].endswith("Z")
    assert session.damaged == []
    # The leaf is an end of the tree, and the context at it builds.
    leaf = sm.get_leaf_id()
    assert leaf is not None and not sm.get_children(leaf)
    context = sm.build_session_context()
    assert context.messages == build_session_context(entries, leaf).messages
    # Every tool result answers a call made before it on its path.
    for entry in entries:
        message = entry.get("message")
        if entry["type"] == "message" and message["role"] == "toolResult":
            calls = {
                b["id"]
                for e in sm.get_branch(entry["id"])
                if e["type"] == "message" and e["message"]["role"] == "assistant"
                for b in e["message"]["content"]
                if b["type"] == "toolCall"
            }
            assert message["toolCallId"] in calls or name in fs.HAND_ASSEMBLED
    # Reading is deterministic: the same file gives the same ids.
    assert [e["id"] for e in read(kind, name).manager.get_entries()] == ids
    # Nothing writes a cost: the source recorded none.
    for message in messages(sm, "assistant"):
        assert message["usage"]["cost"] == dict.fromkeys(
            ("input", "output", "cacheRead", "cacheWrite", "total"), 0
        )


@pytest.mark.parametrize("name", [n for n in CLAUDE if n not in fs.HAND_ASSEMBLED])
def test_claude_branches_are_real_ones(name: str) -> None:
    """Parallel tool calls make no branch; what branches is a prompt given twice."""
    sm = read("claude", name).manager
    branch_points = [e for e in sm.get_entries() if len(sm.get_children(e["id"])) > 1]
    for point in branch_points:
        starts = [
            c
            for c in sm.get_children(point["id"])
            if c["type"] in ("message", "custom_message")
            and (c["type"] == "custom_message" or c["message"]["role"] == "user")
        ]
        assert len(starts) == len(sm.get_children(point["id"])), point
    expected = 1 if name.startswith("entireio__cli__de__") else 0
    assert len(branch_points) == expected


@pytest.mark.parametrize("name", [n for n in CLAUDE if n not in fs.HAND_ASSEMBLED])
def test_claude_response_lines_are_one_message_with_usage_once(name: str) -> None:
    """One assistant message per API response (message.id + requestId), its usage the
    response's last line's: the rule for split lines and for replays, on the real files."""
    lines = [
        r
        for r in records("claude", name)
        if r.get("type") == "assistant" and not r.get("isSidechain")
    ]
    last_usage: dict[str, dict[str, Any]] = {}
    requests: dict[str, set[object]] = {}
    for line in lines:
        mid = line["message"]["id"]
        last_usage[mid] = line["message"]["usage"]
        requests.setdefault(mid, set()).add(line.get("requestId"))
    # On the real files no response is replayed under another request id.
    assert all(len(r) == 1 for r in requests.values())
    ours = {m["responseId"]: m for m in messages(read("claude", name).manager, "assistant")}
    assert set(ours) == set(last_usage)
    for mid, usage in last_usage.items():
        got = ours[mid]["usage"]
        assert (got["input"], got["output"], got["cacheRead"], got["cacheWrite"]) == (
            usage["input_tokens"],
            usage["output_tokens"],
            usage["cache_read_input_tokens"],
            usage["cache_creation_input_tokens"],
        )


def test_claude_rewind_keeps_both_prompts_and_resumes_the_newest() -> None:
    sm = read("claude", "entireio__cli__de__22551397e1__0__full.jsonl").manager
    (point,) = [e for e in sm.get_entries() if len(sm.get_children(e["id"])) > 1]
    first, second = sm.get_children(point["id"])
    path = {e["id"] for e in sm.get_branch()}
    assert second["id"] in path and first["id"] not in path
    assert second["message"]["content"].startswith("ok, works")


@pytest.mark.parametrize(
    ("name", "pre_tokens"),
    [
        ("entireio__cli__76__62d755ef9f__2__full.jsonl", None),
        ("entireio__cli__a6__e4c2a0fbd1__0__full.jsonl", None),
    ],
)
def test_claude_compaction(name: str, pre_tokens: None) -> None:
    raw = records("claude", name)
    boundary = next(r for r in raw if r.get("subtype") == "compact_boundary")
    summary = next(r for r in raw if r.get("isCompactSummary"))
    sm = read("claude", name).manager
    (compaction,) = [e for e in sm.get_entries() if e["type"] == "compaction"]
    assert compaction["summary"] == summary["message"]["content"]
    assert compaction["tokensBefore"] == boundary["compactMetadata"]["preTokens"]
    assert compaction["firstKeptEntryId"] == compaction["id"]
    # It hangs under the boundary's logical parent: the history stays on the path.
    assert compaction["parentId"] is not None
    context = sm.build_session_context().messages
    assert context[0]["role"] == "compactionSummary"
    assert context[0]["summary"] == compaction["summary"]


@pytest.mark.parametrize(
    ("name", "title", "source"),
    [
        ("entireio__skills__31__a1d14a1bd2__0__raw_transcript.jsonl", "ai-title", "auto"),
        (
            "d-kimuson__claude-code-viewer__mock-global-claude-dir__projects__sample-project__fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl",
            "summary",
            "auto",
        ),
        (
            "jazzyalex__agent-sessions__Resources__Fixtures__stage0__agents__claude__small.jsonl",
            "custom-title",
            "user",
        ),
    ],
)
def test_claude_titles_name_the_session(name: str, title: str, source: str) -> None:
    key = {"ai-title": "aiTitle", "summary": "summary", "custom-title": "customTitle"}[title]
    want = [r[key] for r in records("claude", name) if r.get("type") == title][-1]
    session = read("claude", name)
    assert (session.name, session.name_source) == (want, source)
    assert session.manager.get_session_name() == want


def test_claude_inline_sidechains_become_subsessions() -> None:
    name = "d-kimuson__claude-code-viewer__mock-global-claude-dir__projects__sample-project__fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl"
    raw = records("claude", name)
    session = read("claude", name)
    main_text = json.dumps(session.manager.get_entries())
    side_uuids = {r["uuid"] for r in raw if r.get("isSidechain")}
    assert side_uuids and not any(u in main_text for u in side_uuids)
    roots = [r for r in raw if r.get("isSidechain") and r.get("parentUuid") is None]
    assert len(session.subsessions) == len(roots)
    calls = {
        b["id"]: b["input"]
        for r in raw
        if r.get("type") == "assistant" and not r.get("isSidechain")
        for b in r["message"]["content"]
        if b.get("type") == "tool_use" and b.get("name") == "Task"
    }
    for sub in session.subsessions:
        assert sub.tool_call_id in calls
        assert sub.name == calls[sub.tool_call_id]["description"]
        first = sub.manager.get_entries()[0]["message"]
        assert first["content"] == calls[sub.tool_call_id]["prompt"]
    side_lines = sum(1 for r in raw if r.get("isSidechain"))
    side_messages = sum(
        1 for s in session.subsessions for e in s.manager.get_entries() if e["type"] == "message"
    )
    assert 0 < side_messages <= side_lines


def test_claude_meta_lines_are_hidden_messages_in_the_context() -> None:
    name = "entireio__skills__3f__c8a587fcc7__0__raw_transcript.jsonl"
    raw = [r for r in records("claude", name) if r.get("isMeta") and r.get("type") == "user"]
    sm = read("claude", name).manager
    metas = [e for e in sm.get_entries() if e["type"] == "custom_message"]
    assert len(metas) == len(raw)
    assert all(e["customType"] == "claude-code:meta" and e["display"] is False for e in metas)
    on_path = {e["id"] for e in sm.get_branch()}
    in_context = [m for m in sm.build_session_context().messages if m["role"] == "custom"]
    assert len(in_context) == sum(1 for e in metas if e["id"] in on_path)


def test_claude_line_kinds_kept_dropped_and_counted() -> None:
    name = "entireio__cli__26__dcd5518fea__0__full.jsonl"
    kinds = Counter(r.get("type") for r in records("claude", name))
    session = read("claude", name)
    assert session.skipped == {
        "progress": kinds["progress"],
        "file-history-snapshot": kinds["file-history-snapshot"],
        "queue-operation": kinds["queue-operation"],
    }
    custom = Counter(
        e["customType"] for e in session.manager.get_entries() if e["type"] == "custom"
    )
    assert custom["claude-code:system"] == kinds["system"]


def test_claude_unknown_line_kinds_are_kept_as_custom_entries() -> None:
    name = "jazzyalex__agent-sessions__Resources__Fixtures__stage0__agents__claude__small.jsonl"
    kinds = Counter(r.get("type") for r in records("claude", name))
    custom = Counter(
        e["customType"] for e in read("claude", name).manager.get_entries() if e["type"] == "custom"
    )
    for kind in ("relocated", "worktree-state", "atis-latch", "pr-link", "started", "result"):
        assert custom[f"claude-code:{kind}"] == kinds[kind], kind


# ----------------------------------------------------------------------------- Codex


@pytest.mark.parametrize("name", [n for n in CODEX if n not in fs.HAND_ASSEMBLED])
def test_codex_usage_adds_up_to_the_rollouts_total(name: str) -> None:
    """Per-response usage from `last_token_usage`: summed, it is the final cumulative
    `total_token_usage` (cached input is part of `input_tokens`)."""
    totals = [
        r["payload"]["info"]["total_token_usage"]
        for r in records("codex", name)
        if r.get("type") == "event_msg"
        and r["payload"].get("type") == "token_count"
        and isinstance(r["payload"].get("info"), dict)
    ]
    ours = messages(read("codex", name).manager, "assistant")
    summed = [sum(m["usage"][k] for m in ours) for k in ("input", "output", "cacheRead")]
    if not totals:
        assert summed == [0, 0, 0]
        return
    final = totals[-1]
    assert summed == [
        final["input_tokens"] - final["cached_input_tokens"],
        final["output_tokens"],
        final["cached_input_tokens"],
    ]


def test_codex_one_response_is_one_assistant_message() -> None:
    name = "entireio__skills__01__da544acf74__0__raw_transcript.jsonl"
    sm = read("codex", name).manager
    (first, second) = messages(sm, "assistant")
    assert [b["type"] for b in first["content"]] == ["thinking", "text", "toolCall", "toolCall"]
    assert first["stopReason"] == "toolUse"
    assert json.loads(first["content"][0]["thinkingSignature"])["type"] == "reasoning"
    assert first["model"] == "gpt-5.4" and first["provider"] == "openai"
    results = messages(sm, "toolResult")
    assert [r["toolCallId"] for r in results] == [b["id"] for b in first["content"][2:]]
    assert {r["toolName"] for r in results} == {"exec_command"}
    assert [b["type"] for b in second["content"]] == ["thinking"]


def test_codex_injected_context_is_marked_not_a_prompt() -> None:
    name = "entireio__skills__01__da544acf74__0__raw_transcript.jsonl"
    sm = read("codex", name).manager
    prompts = messages(sm, "user")
    assert [p["content"][0]["text"] for p in prompts] == ["$entire collab"]
    marked = Counter(e["customType"] for e in sm.get_entries() if e["type"] == "custom_message")
    assert marked == {"codex:developer": 2, "codex:context": 2}


def test_codex_model_and_effort_changes() -> None:
    name = "entireio__entire-graph__bb__ef1c2a76a9__0__full.jsonl"
    contexts = [r["payload"] for r in records("codex", name) if r.get("type") == "turn_context"]
    sm = read("codex", name).manager
    changes = [e["model"] for e in sm.get_entries() if e["type"] == "model_change"]
    models = [c["model"] for c in contexts]
    expected = [m for i, m in enumerate(models) if i == 0 or m != models[i - 1]]
    assert changes == [f"openai/{m}" for m in expected]
    levels = [e["thinkingLevel"] for e in sm.get_entries() if e["type"] == "thinking_level_change"]
    efforts = [c["effort"] for c in contexts]
    assert levels == [e for i, e in enumerate(efforts) if i == 0 or e != efforts[i - 1]]


def test_codex_compacted_becomes_a_compaction() -> None:
    name = "entireio__entire-graph__d9__4ea7db13b9__0__full.jsonl"
    (raw,) = [r["payload"] for r in records("codex", name) if r.get("type") == "compacted"]
    sm = read("codex", name).manager
    (compaction,) = [e for e in sm.get_entries() if e["type"] == "compaction"]
    # A remote compaction's summary is the encrypted item in its history: no text.
    assert raw["message"] == ""
    assert compaction["summary"] == "Context compacted by Codex."
    remote = compaction["preserveData"]["openaiRemoteCompaction"]
    assert remote["replacementHistory"] == raw["replacement_history"]
    assert compaction["tokensBefore"] > 0
    assert sm.build_session_context().messages[0]["role"] == "compactionSummary"


def test_codex_legacy_rollout() -> None:
    name = "AcidicSoil__codex-session-viewer__docs__example.jsonl"
    raw = records("codex", name)
    session = read("codex", name)
    assert session.source_id == raw[0]["id"]
    assert session.cwd == "/home/user/projects/codex-session-viewer"  # from the environment
    assert session.skipped == {"state": sum(1 for r in raw if r.get("record_type") == "state")}
    sm = session.manager
    calls = sum(1 for r in raw if r.get("type") == "function_call")
    assert (
        sum(1 for m in messages(sm, "assistant") for b in m["content"] if b["type"] == "toolCall")
        == calls
    )
    assert len(messages(sm, "toolResult")) == calls
    (instructions,) = [e for e in sm.get_entries() if e.get("customType") == "codex:instructions"]
    assert instructions["content"] == raw[0]["instructions"]


def test_codex_unknown_and_rare_lines_are_custom_entries() -> None:
    name = "entireio__entire-graph__37__05cde00da0__0__full.jsonl"
    kinds = Counter(r.get("type") for r in records("codex", name))
    custom = Counter(
        e["customType"] for e in read("codex", name).manager.get_entries() if e["type"] == "custom"
    )
    assert custom["codex:world_state"] == kinds["world_state"]
    assert (
        custom["codex:inter_agent_communication_metadata"]
        == kinds["inter_agent_communication_metadata"]
    )


# ----------------------------------------------------------------------------- generated shapes


def test_claude_v2_subagent_file_and_its_replay(tmp_path: Path) -> None:
    path = fs.claude_subagent_session(tmp_path / "projects")
    session = read_claude_session(str(path))
    (sub,) = session.subsessions
    assert (sub.key, sub.name, sub.tool_call_id) == ("a5f0c2", "Find the bug", "toolu_task")
    assert sub.source_path.endswith("subagents/agent-a5f0c2.jsonl")
    replay, own = messages(sub.manager, "assistant")
    # The replayed parent response keeps its content, but its usage counts in the parent.
    assert replay["responseId"] == "msg_main_1" and replay["content"][0]["type"] == "toolCall"
    assert replay["usage"]["output"] == 0
    assert own["responseId"] == "msg_sub_1"
    assert [b["type"] for b in own["content"]] == ["thinking", "text"]
    assert own["usage"]["output"] == 12  # the response's last line
    parent = messages(session.manager, "assistant")
    assert parent[0]["usage"]["output"] == 40
    (result,) = messages(session.manager, "toolResult")
    assert result["details"] == {"agentId": "a5f0c2", "status": "completed"}


def test_claude_fork_names_its_parent(tmp_path: Path) -> None:
    fs.claude_subagent_session(tmp_path / "projects")
    fork = read_claude_session(str(fs.claude_fork(tmp_path / "projects")))
    assert fork.parent_source_id == fs.CLAUDE_SESSION
    assert (fork.name, fork.name_source) == ("Find the bug (fork)", "user")
    assert fork.header()["parentSession"] == fs.CLAUDE_SESSION
    header = fork.manager.get_header()
    assert header is not None and header["parentSession"] == fs.CLAUDE_SESSION


def test_codex_image_rollback_and_fork(tmp_path: Path) -> None:
    parent_path, child_path = fs.codex_rollouts(tmp_path)
    parent = read_codex_session(str(parent_path))
    sm = parent.manager
    first = messages(sm, "user")[0]["content"]
    assert first[1] == {"type": "image", "data": fs.PNG, "mimeType": "image/png"}
    # The rolled-back turn stays, as a branch off the answer before it.
    blue, green = [
        e for e in sm.get_entries() if e["type"] == "message" and e["message"]["role"] == "user"
    ][1:]
    assert blue["parentId"] == green["parentId"]
    context = [m["content"][0]["text"] for m in sm.build_session_context().messages]
    assert context == [
        "What is in this screenshot?",
        "A login form.",
        "Make it green instead",
        "Done, it is green.",
    ]
    assert parent.name == "Screenshot colors"
    child = read_codex_session(str(child_path))
    assert child.parent_source_id == fs.CODEX_PARENT
    assert [
        e["thinkingLevel"]
        for e in child.manager.get_entries()
        if e["type"] == "thinking_level_change"
    ] == ["high"]


@pytest.mark.parametrize("kind", ["claude", "codex"])
def test_damaged_lines_are_skipped_and_reported(tmp_path: Path, kind: str) -> None:
    if kind == "claude":
        good = fs.claude_subagent_session(tmp_path / "projects")
    else:
        good, _ = fs.codex_rollouts(tmp_path)
    lines = good.read_bytes().split(b"\n")
    damaged = tmp_path / f"damaged-{kind}.jsonl"
    damaged.write_bytes(
        b"\n".join([lines[0], b"{not json", b"[1, 2]", b"\xff\xfe", *lines[1:-1]])
        + b"\n"
        + lines[-2][:20]  # a torn last line, as while the agent writes
    )
    reader = read_claude_session if kind == "claude" else read_codex_session
    session = reader(str(damaged))
    assert [(d.line, d.reason) for d in session.damaged] == [
        (2, "not valid JSON"),
        (3, "not a JSON object"),
        (4, "not valid UTF-8"),
        (len(lines) + 3, "not valid JSON"),
    ]
    whole = reader(str(good))
    got = [(e["type"], e.get("message")) for e in session.manager.get_entries()]
    want = [(e["type"], e.get("message")) for e in whole.manager.get_entries()]
    assert got == want[: len(got)] and len(got) >= len(want) - 2


@pytest.mark.parametrize("kind", ["claude", "codex"])
def test_the_same_transcript_gives_the_same_tree_wherever_it_lives(
    tmp_path: Path, kind: str
) -> None:
    """Entry ids derive from the transcript, not from where it lies: a file whose
    `sessionId` is not a UUID, copied elsewhere (as a clean checkout does), reads the same."""
    source = fixture(
        kind, f"jazzyalex__agent-sessions__Resources__Fixtures__stage0__agents__{kind}__small.jsonl"
    )
    copy = tmp_path / "elsewhere" / source.name
    copy.parent.mkdir()
    copy.write_bytes(source.read_bytes())
    reader = read_claude_session if kind == "claude" else read_codex_session

    def tree(session: ForeignSession) -> tuple[Any, ...]:
        return (
            session.source_id,
            [(e["id"], e.get("parentId")) for e in session.manager.get_entries()],
            [[e["id"] for e in s.manager.get_entries()] for s in session.subsessions],
        )

    assert tree(reader(str(source))) == tree(reader(str(copy)))


def test_an_import_into_a_given_agent_dir_puts_its_images_there(
    tmp_path: Path, agent_dir: Path
) -> None:
    from sessiontree.foreign.importer import import_session

    given = tmp_path / "given"  # not the configured agent dir, and without blobs/ yet
    parent_path, _ = fs.codex_rollouts(tmp_path / "codex")
    done = import_session(read_codex_session(str(parent_path)), store_parts(agent_dir=str(given)))
    assert done.path.startswith(str(given / "sessions"))
    assert "blob:sha256:" in Path(done.path).read_text()
    assert len(list((given / "blobs").iterdir())) >= 1
    assert not (agent_dir / "blobs").exists()
    with SessionManager.open(done.path, read_only=True) as sm:
        image = messages(sm, "user")[0]["content"][1]
    assert image == {"type": "image", "data": fs.PNG, "mimeType": "image/png"}


@pytest.mark.parametrize(
    "names",
    [
        [],
        [("summary", "summary", "A summary")],
        [("ai-title", "aiTitle", "AI title"), ("summary", "summary", "A summary")],
        [("custom-title", "customTitle", "Mine"), ("ai-title", "aiTitle", "Later AI title")],
        [("custom-title", "customTitle", "First"), ("custom-title", "customTitle", "Second")],
    ],
)
def test_the_listing_and_the_import_name_a_claude_session_alike(
    tmp_path: Path, names: list[tuple[str, str, str]]
) -> None:
    source = fs.claude_subagent_session(tmp_path / "projects")
    lines = [json.loads(line) for line in source.read_text().splitlines()]
    for kind, key, value in names:
        lines.append({"type": kind, "sessionId": fs.CLAUDE_SESSION, key: value})
    path = fs.write_jsonl(tmp_path / "named" / source.name, lines)
    (row,) = ForeignStore.single("claude", str(path)).list()
    listed = row.meta
    session = read_claude_session(str(path), subagents=False)
    assert listed.title == session.name
    assert listed.title_source == (session.name_source if session.name else None)
    assert listed.parent == session.parent_source_id
