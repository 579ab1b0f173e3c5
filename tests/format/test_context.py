"""build_session_context, message creators and convert_to_llm."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessiontree import (
    UNSET,
    EntryNotFoundError,
    SessionManager,
    build_session_context,
    convert_to_llm,
    create_branch_summary_message,
    create_compaction_summary_message,
    create_custom_message,
)
from sessiontree.format import (
    BRANCH_SUMMARY_PREFIX,
    COMPACTION_SUMMARY_PREFIX,
    ContextBuilder,
    parse_iso_ms,
)
from tests.conftest import examples
from tests.helpers import assistant, user

TS = "2026-02-16T10:20:30.123Z"
TS_MS = 1771237230123


def e(kind: str, id_: str, parent: str | None, **fields: Any) -> dict[str, Any]:
    return {"type": kind, "id": id_, "parentId": parent, "timestamp": TS, **fields}


def test_null_leaf_gives_empty_context_and_unknown_leaf_falls_back_to_last() -> None:
    entries = [
        e("message", "a", None, message=user("x")),
        e("message", "b", "a", message=user("y")),
    ]
    empty = build_session_context(entries, None)
    assert empty.messages == [] and empty.thinking_level == "off" and empty.models == {}
    assert empty.mode == "none" and empty.mode_data is None
    assert [m["content"] for m in build_session_context(entries, "zzz").messages] == ["x", "y"]
    assert [m["content"] for m in build_session_context(entries).messages] == ["x", "y"]
    assert [m["content"] for m in build_session_context(entries, "a").messages] == ["x"]
    assert build_session_context([]).messages == []


def test_settings_along_the_path() -> None:
    entries = [
        e("thinking_level_change", "t1", None, thinkingLevel="high"),
        e("model_change", "m1", "t1", model="openai/gpt-5"),
        e("model_change", "m2", "m1", model="google/flash", role="smol"),
        e("message", "a1", "m2", message=assistant()),
        e("ttsr_injection", "r1", "a1", injectedRules=["x", "y"]),
        e("ttsr_injection", "r2", "r1", injectedRules=["y", "z"]),
        e("mode_change", "md", "r2", mode="plan", data={"step": 1}),
        e("model_change", "m3", "md", provider="pi", modelId="format"),
        e("thinking_level_change", "t2", "m3", thinkingLevel=None),
    ]
    ctx = build_session_context(entries)
    # A null level stays null, as both pi releases (0.73.1 and 1.6.0) give it.
    assert ctx.thinking_level is None
    # pi's {provider, modelId} model_change counts as the default model, latest wins.
    assert ctx.models == {"default": "pi/format", "smol": "google/flash"}
    assert ctx.injected_ttsr_rules == ["x", "y", "z"]
    assert (ctx.mode, ctx.mode_data) == ("plan", {"step": 1})
    ctx = build_session_context(entries, "a1")
    # The assistant message after an explicit default model_change wins (spec).
    assert ctx.models == {"default": "anthropic/claude-sonnet-4-5", "smol": "google/flash"}
    assert ctx.thinking_level == "high"


def test_compaction_emits_summary_then_kept_then_after() -> None:
    entries = [
        e("message", "u1", None, message=user("1")),
        e("message", "u2", "u1", message=user("2")),
        e("message", "u3", "u2", message=user("3")),
        e("compaction", "c1", "u3", summary="S", firstKeptEntryId="u2", tokensBefore=5),
        e("message", "u4", "c1", message=user("4")),
    ]
    ctx = build_session_context(entries)
    assert ctx.messages[0] == {
        "role": "compactionSummary",
        "summary": "S",
        "tokensBefore": 5,
        "timestamp": TS_MS,
    }
    assert [m.get("content") for m in ctx.messages[1:]] == ["2", "3", "4"]


def test_only_last_compaction_counts_and_missing_first_kept_keeps_nothing() -> None:
    entries = [
        e("message", "u1", None, message=user("1")),
        e("compaction", "c1", "u1", summary="A", firstKeptEntryId="u1", tokensBefore=1),
        e("message", "u2", "c1", message=user("2")),
        e(
            "compaction",
            "c2",
            "u2",
            summary="B",
            firstKeptEntryId="nope",
            tokensBefore=2,
            shortSummary="b",
        ),
        e("message", "u3", "c2", message=user("3")),
    ]
    ctx = build_session_context(entries)
    assert ctx.messages[0]["summary"] == "B"
    assert list(ctx.messages[0]) == ["role", "summary", "shortSummary", "tokensBefore", "timestamp"]
    assert [m.get("content") for m in ctx.messages[1:]] == ["3"]


def test_custom_messages_and_branch_summaries() -> None:
    entries = [
        {
            "type": "custom_message",
            "customType": "ext",
            "content": "c",
            "display": False,
            "attribution": "user",
            "id": "c1",
            "parentId": None,
            "timestamp": TS,
        },
        e("branch_summary", "b1", "c1", fromId="root", summary="went elsewhere"),
        e("branch_summary", "b2", "b1", fromId="c1", summary=""),
        {
            "type": "custom",
            "customType": "state",
            "data": {},
            "id": "x",
            "parentId": "b2",
            "timestamp": TS,
        },
        e("session_init", "si", "x", systemPrompt="p", task="t", tools=[]),
    ]
    ctx = build_session_context(entries)
    assert ctx.messages == [
        {
            "role": "custom",
            "customType": "ext",
            "content": "c",
            "display": False,
            "attribution": "user",
            "timestamp": TS_MS,
        },
        {
            "role": "branchSummary",
            "summary": "went elsewhere",
            "fromId": "root",
            "timestamp": TS_MS,
        },
    ]


def test_parent_cycle_ends_the_walk() -> None:
    entries = [e("message", "a", "b", message=user("a")), e("message", "b", "a", message=user("b"))]
    assert [m["content"] for m in build_session_context(entries).messages] == ["a", "b"]


def test_deep_chain_is_linear_and_not_recursive() -> None:
    entries = [e("message", "0", None, message=user("0"))]
    for i in range(1, 100_000):
        entries.append(e("message", str(i), str(i - 1), message=user(str(i))))
    ctx = build_session_context(entries)
    assert len(ctx.messages) == 100_000
    assert ctx.messages[-1]["content"] == "99999"


def test_message_creators() -> None:
    assert create_custom_message("t", "c", True, UNSET, TS) == {
        "role": "custom",
        "customType": "t",
        "content": "c",
        "display": True,
        "timestamp": TS_MS,
    }
    assert create_custom_message("t", "c", True, {"d": 1}, TS, "agent")["attribution"] == "agent"
    assert create_branch_summary_message("s", "root", TS) == {
        "role": "branchSummary",
        "summary": "s",
        "fromId": "root",
        "timestamp": TS_MS,
    }
    assert create_compaction_summary_message("s", 3, TS, "x") == {
        "role": "compactionSummary",
        "summary": "s",
        "shortSummary": "x",
        "tokensBefore": 3,
        "timestamp": TS_MS,
    }
    assert create_branch_summary_message("s", "root", "garbage")["timestamp"] is None


def test_convert_to_llm() -> None:
    messages: list[dict[str, Any]] = [
        user("u"),
        assistant("a"),
        {"role": "toolResult", "toolCallId": "1", "content": [], "timestamp": 1},
        {"role": "bashExecution", "command": "ls", "output": "x", "exitCode": 2, "timestamp": 2},
        {"role": "bashExecution", "command": "ls", "output": "", "excludeFromContext": True},
        {"role": "pythonExecution", "code": "1+1", "output": "2", "exitCode": 0, "timestamp": 3},
        {"role": "custom", "customType": "t", "content": "hello", "timestamp": 4},
        {
            "role": "hookMessage",
            "customType": "t",
            "content": [{"type": "text", "text": "h"}],
            "timestamp": 5,
        },
        {"role": "branchSummary", "summary": "B", "fromId": "root", "timestamp": 6},
        {"role": "compactionSummary", "summary": "C", "tokensBefore": 1, "timestamp": 7},
        {"role": "somethingNew", "timestamp": 8},
    ]
    out = convert_to_llm(messages)
    assert out[:3] == messages[:3]
    assert out[3] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "Ran `ls`\n```\nx\n```\n\nCommand exited with code 2"}
        ],
        "timestamp": 2,
    }
    assert out[4]["content"][0]["text"].startswith("Ran Python:\n```python\n1+1\n```\nOutput:")
    assert out[5] == {
        "role": "user",
        "content": [{"type": "text", "text": "hello"}],
        "timestamp": 4,
    }
    assert out[6]["content"] == [{"type": "text", "text": "h"}]
    assert out[7]["content"][0]["text"] == BRANCH_SUMMARY_PREFIX + "B</summary>"
    assert out[8]["content"][0]["text"] == COMPACTION_SUMMARY_PREFIX + "C\n</summary>"
    assert len(out) == 9


def test_manager_context_uses_its_leaf() -> None:
    sm = SessionManager.in_memory("/w")
    a = sm.append_message(user("a"))
    sm.append_message(assistant("b"))
    sm.branch(a)
    sm.append_message(user("c"))
    assert [m["content"] for m in sm.build_session_context().messages] == ["a", "c"]
    sm.reset_leaf()
    assert sm.build_session_context().messages == []


# ----------------------------------------------------------------------------- pi 1.6
# What pi 1.6.0 added to the context (tests/interop/test_pi16_context.py compares with pi itself
# on every leaf of the sessions it wrote; these name one rule each).


def _contents(entries: list[dict[str, Any]], leaf: str | None = None) -> list[Any]:
    ctx = build_session_context(entries, leaf if leaf is not None else UNSET)
    return [m.get("content", m.get("summary")) for m in ctx.messages]


def test_latest_context_edit_on_the_branch_wins() -> None:
    entries = [
        e("message", "u1", None, message=user("one")),
        e("context_edit", "e1", "u1", targetId="u1", replacement={"content": "first"}),
        e("context_edit", "e2", "e1", targetId="u1", replacement={"content": "second"}),
        e("context_edit", "x1", "e1", targetId="u1", replacement=None),  # another branch
    ]
    assert _contents(entries, "e2") == ["second"]
    assert _contents(entries, "e1") == ["first"]
    assert _contents(entries, "x1") == []  # null drops the target
    assert _contents(entries, "u1") == ["one"]


def test_a_replacement_swaps_the_content_and_keeps_the_rest_in_place() -> None:
    answer = assistant("long answer")
    entries = [
        e("message", "a1", None, message=answer),
        e("context_edit", "e1", "a1", targetId="a1", replacement={"content": "short"}),
    ]
    (got,) = build_session_context(entries).messages
    # A string for an assistant's content becomes a text block, as pi reads it.
    assert got == {**answer, "content": [{"type": "text", "text": "short"}]}
    assert list(got) == list(answer)
    assert answer["content"] == [{"type": "text", "text": "long answer"}]  # stored one untouched


def test_edits_of_entries_a_compaction_summarized_change_nothing() -> None:
    entries = [
        e("message", "u1", None, message=user("old")),
        e("message", "u2", "u1", message=user("kept")),
        e("context_edit", "e1", "u2", targetId="u2", replacement=None),  # kept: applies
        e("compaction", "k1", "e1", summary="s", firstKeptEntryId="e1", tokensBefore=1),
        e("context_edit", "e2", "k1", targetId="u1", replacement={"content": "x"}),
    ]
    assert _contents(entries) == ["s"]
    entries[3]["firstKeptEntryId"] = "u2"
    assert _contents(entries) == ["s"]  # u2 kept, and its edit with it


def test_a_compactions_system_message_comes_before_its_summary() -> None:
    system = {"role": "system", "content": "replayed", "timestamp": 5}
    entries = [
        e("message", "u1", None, message=user("x")),
        e(
            "compaction",
            "k1",
            "u1",
            summary="s",
            firstKeptEntryId="u1",
            tokensBefore=1,
            systemMessage=system,
        ),
    ]
    messages = build_session_context(entries).messages
    assert [m["role"] for m in messages] == ["system", "compactionSummary", "user"]
    assert messages[0] == system


def test_retain_none_keeps_nothing_before_the_compaction() -> None:
    entries = [
        e("message", "u1", None, message=user("x")),
        e("compaction", "k1", "u1", summary="s", firstKeptEntryId="k1", tokensBefore=1),
        e("message", "u2", "k1", message=user("y")),
    ]
    assert _contents(entries) == ["s", "y"]


def test_system_messages_in_a_compactions_kept_range_are_dropped() -> None:
    def system(text: str) -> dict[str, Any]:
        return {"role": "system", "content": text, "timestamp": 1}

    entries = [
        e("message", "s1", None, message=system("before")),
        e("message", "u1", "s1", message=user("kept")),
        e("message", "s2", "u1", message=system("kept range")),
        e("compaction", "k1", "s2", summary="s", firstKeptEntryId="s1", tokensBefore=1),
        e("message", "s3", "k1", message=system("after")),
    ]
    assert _contents(entries) == ["s", "kept", "after"]
    assert _contents(entries, "s2") == ["before", "kept", "kept range"]  # no compaction yet


def test_null_content_reads_as_empty() -> None:
    entries = [
        e("message", "u1", None, message={"role": "user", "content": None, "timestamp": 1}),
        e("message", "a1", "u1", message=assistant(content=None)),
        e("message", "t1", "a1", message={"role": "toolResult", "toolCallId": "c", "timestamp": 1}),
        e("message", "s1", "t1", message={"role": "system", "content": None, "timestamp": 1}),
        e("custom_message", "c1", "s1", customType="n", content=None, display=True),
    ]
    ctx = build_session_context(entries)
    assert [m["content"] for m in ctx.messages] == [[], [], [], "", []]
    assert list(ctx.messages[2])[-1] == "content"  # a missing key is added last, as JS spreads
    assert entries[0]["message"]["content"] is None  # stored messages untouched


def test_convert_to_llm_passes_system_messages_on() -> None:
    system = {
        "role": "system",
        "content": "rules",
        "sections": {"a": "<a/>"},
        "toolsAdded": [{"name": "read"}],
        "toolsRemoved": [{"name": "bash"}],
        "timestamp": 1,
    }
    assert convert_to_llm([system, user("x")]) == [system, user("x")]


def test_append_context_edit_refuses_what_pi_refuses() -> None:
    sm = SessionManager.in_memory("/p")
    system = sm.append_message({"role": "system", "content": "s", "timestamp": 1})
    u1 = sm.append_message(user("one"))
    a1 = sm.append_message(assistant("a"))
    with pytest.raises(EntryNotFoundError):
        sm.append_context_edit("nope", None)
    with pytest.raises(ValueError, match="does not contribute editable"):
        sm.append_context_edit(system, None)
    with pytest.raises(ValueError, match="replacement"):
        sm.append_context_edit(u1, {"text": "x"})
    sm.branch(u1)
    with pytest.raises(ValueError, match="not on the active branch"):
        sm.append_context_edit(a1, None)
    edit = sm.append_context_edit(u1, {"content": "kept a string"})
    assert sm.get_entry(edit)["replacement"] == {"content": "kept a string"}  # type: ignore[index]
    assert [m["content"] for m in sm.build_session_context().messages] == ["s", "kept a string"]


def test_append_compaction_records_the_replayed_system_message() -> None:
    sm = SessionManager.in_memory("/p")
    sm.append_message(
        {"role": "system", "content": "base", "toolsAdded": [{"name": "read"}], "timestamp": 7}
    )
    sm.append_message(
        {
            "role": "system",
            "content": "more",
            "sections": {"s": "x"},
            "toolsRemoved": [{"name": "read"}],
            "timestamp": 8,
        }
    )
    u1 = sm.append_message(user("one"))
    k1 = sm.append_compaction("s", None, None, 10)
    entry = sm.get_entry(k1)
    assert entry is not None and entry["firstKeptEntryId"] == k1
    assert entry["systemMessage"] == {
        "role": "system",
        "content": "base\n\nmore",
        "sections": {"s": "x"},
        "timestamp": parse_iso_ms(entry["timestamp"]),
    }
    assert [m["role"] for m in sm.build_session_context().messages] == [
        "system",
        "compactionSummary",
    ]
    k2 = sm.append_compaction("t", None, u1, 10, system_message=None)
    assert "systemMessage" not in sm.get_entry(k2)  # type: ignore[operator]
    plain = SessionManager.in_memory("/p")
    plain.append_message(user("x"))
    assert "systemMessage" not in plain.get_entry(plain.append_compaction("s", None, None, 1))  # type: ignore[operator]


_OPS = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["user", "assistant", "system", "null"])),
        st.tuples(st.just("edit"), st.integers(0, 50), st.sampled_from([None, "text", "blocks"])),
        st.tuples(st.just("compact"), st.one_of(st.none(), st.integers(0, 50))),
        st.tuples(st.just("branch"), st.integers(0, 50)),
    ),
    max_size=30,
)


@settings(max_examples=examples(100))
@given(_OPS)
def test_the_kept_context_is_the_one_built_from_scratch(ops: list[tuple[Any, ...]]) -> None:
    """Appending edits, compactions (some keeping nothing) and system messages, and
    moving the leaf: the context the manager keeps up to date one entry at a time is
    the one built from the entries, by the backward walk and by the path."""
    sm = SessionManager.in_memory("/p")
    for op in ops:
        kind = op[0]
        branch = sm.get_branch()
        if kind == "user":
            sm.append_message(user("u"))
        elif kind == "null":
            sm.append_message({"role": "user", "content": None, "timestamp": 1})
        elif kind == "assistant":
            sm.append_message(assistant("a"))
        elif kind == "system":
            sm.append_message({"role": "system", "content": "s", "timestamp": 1})
        elif kind == "edit":
            editable = [
                x
                for x in branch
                if x["type"] == "message" and x["message"]["role"] in ("user", "assistant")
            ]
            if editable:
                replacement = {
                    None: None,
                    "text": {"content": "edited"},
                    "blocks": {"content": [{"type": "text", "text": "edited"}]},
                }[op[2]]
                sm.append_context_edit(editable[op[1] % len(editable)]["id"], replacement)
        elif kind == "compact":
            first = None if op[1] is None or not branch else branch[op[1] % len(branch)]["id"]
            sm.append_compaction("sum", None, first, 1)
        elif branch or sm.get_entries():
            entries = sm.get_entries()
            sm.branch(entries[op[1] % len(entries)]["id"])
        kept = sm.build_session_context()
        leaf = sm.get_leaf_id()
        scratch = build_session_context(sm.get_entries(), leaf)
        by_path = ContextBuilder.from_path(sm.get_branch()).snapshot()
        assert kept == scratch == by_path
