"""Tree, leaf and label semantics, plus property tests against a naive model."""

from __future__ import annotations

import itertools
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessiontree import (
    UNSET,
    EntryNotFoundError,
    SessionContext,
    SessionManager,
    build_session_context,
    serialize_entry,
)
from sessiontree.format import ContextBuilder, build_tree, path_to_root
from tests.conftest import examples
from tests.helpers import assistant, user

ID = re.compile(r"^[0-9a-f]{8}$")


def test_append_methods_write_the_reference_shapes() -> None:
    sm = SessionManager.in_memory("/w")
    ids = [
        sm.append_message(user()),
        sm.append_thinking_level_change(None),
        sm.append_thinking_level_change("high"),
        sm.append_model_change("openai/gpt-5"),
        sm.append_model_change("openai/gpt-5", "smol"),
        sm.append_custom_entry("state", {"k": 1}),
        sm.append_custom_entry("bare"),
        sm.append_custom_message_entry("note", "text", True),
        sm.append_custom_message_entry(
            "note", [{"type": "text", "text": "t"}], False, {"d": 1}, None
        ),
        sm.append_ttsr_injection(["r1"]),
        sm.append_session_init("sys", "task", [{"name": "read"}]),
        sm.append_session_init("sys", "task", [], {"type": "object"}),
        sm.append_mode_change("plan"),
        sm.append_mode_change("plan", {"x": 1}),
    ]
    sm.append_compaction("sum", None, ids[0], 100)
    sm.append_compaction(
        "sum", "short", ids[0], 100, details={"f": []}, from_extension=True, preserve_data={"p": 1}
    )
    sm.append_label_change(ids[0], "first")
    sm.append_label_change(ids[0], None)
    assert all(ID.match(i) for i in ids)
    shapes = [list(entry) for entry in sm.get_entries()]
    base = ["type", "id", "parentId", "timestamp"]
    assert shapes == [
        [*base, "message"],
        [*base, "thinkingLevel"],
        [*base, "thinkingLevel"],
        [*base, "model"],
        [*base, "model", "role"],
        ["type", "customType", "data", "id", "parentId", "timestamp"],
        ["type", "customType", "id", "parentId", "timestamp"],
        ["type", "customType", "content", "display", "attribution", "id", "parentId", "timestamp"],
        ["type", "customType", "content", "display", "details", "id", "parentId", "timestamp"],
        [*base, "injectedRules"],
        [*base, "systemPrompt", "task", "tools"],
        [*base, "systemPrompt", "task", "tools", "outputSchema"],
        [*base, "mode"],
        [*base, "mode", "data"],
        [*base, "summary", "firstKeptEntryId", "tokensBefore"],
        [
            *base,
            "summary",
            "shortSummary",
            "firstKeptEntryId",
            "tokensBefore",
            "details",
            "fromExtension",
            "preserveData",
        ],
        [*base, "targetId", "label"],
        [*base, "targetId"],
    ]
    assert '"thinkingLevel":null' in serialize_entry(sm.get_entry(ids[1]))  # type: ignore[arg-type]
    entries = sm.get_entries()
    assert all(b["parentId"] == a["id"] for a, b in itertools.pairwise(entries))
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", entries[0]["timestamp"])


def test_unset_and_none_both_omit_optional_keys() -> None:
    sm = SessionManager.in_memory()
    sm.append_mode_change("m", UNSET)
    sm.append_mode_change("m", None)
    assert all("data" not in entry for entry in sm.get_entries())


def test_branch_reset_and_branch_with_summary() -> None:
    sm = SessionManager.in_memory()
    a = sm.append_message(user("a"))
    b = sm.append_message(assistant("b"))
    sm.branch(a)
    assert sm.get_leaf_id() == a
    c = sm.append_message(user("c"))
    assert sm.get_entry(c)["parentId"] == a  # type: ignore[index]
    assert [x["id"] for x in sm.get_children(a)] == [b, c]
    sm.reset_leaf()
    assert sm.get_leaf_id() is None and sm.get_leaf_entry() is None
    root2 = sm.append_message(user("new root"))
    assert sm.get_entry(root2)["parentId"] is None  # type: ignore[index]
    s1 = sm.branch_with_summary(None, "from the root")
    assert sm.get_entry(s1) == {**sm.get_entry(s1), "parentId": None, "fromId": "root"}  # type: ignore[dict-item]
    s2 = sm.branch_with_summary(b, "back to b", details={"files": []})
    entry = sm.get_entry(s2)
    assert entry is not None and entry["parentId"] == b and entry["fromId"] == b
    assert list(entry)[-3:] == ["fromId", "summary", "details"]
    with pytest.raises(EntryNotFoundError):
        sm.branch("nope")
    with pytest.raises(KeyError):
        sm.branch_with_summary("nope", "x")
    with pytest.raises(EntryNotFoundError):
        sm.append_label_change("nope", "x")
    assert [x["id"] for x in sm.get_branch(s2)] == [a, b, s2]
    assert sm.get_branch("unknown") == []


def test_labels_resolve_latest_and_clear() -> None:
    sm = SessionManager.in_memory()
    a = sm.append_message(user("a"))
    b = sm.append_message(user("b"))
    sm.append_label_change(a, "one")
    sm.append_label_change(b, "bee")
    sm.append_label_change(a, "two")
    assert sm.get_label(a) == "two"
    sm.append_label_change(a, "")
    assert sm.get_label(a) is None
    sm.append_label_change(b, None)
    assert sm.get_label(b) is None
    sm.append_label_change(a, "three")
    roots = sm.get_tree()
    assert roots[0].label == "three" and roots[0].children[0].label is None


def test_tree_orphans_self_parents_and_sorting() -> None:
    entries: list[dict[str, Any]] = [
        {"type": "message", "id": "a", "parentId": None, "timestamp": "2026-01-01T00:00:00.000Z"},
        {"type": "message", "id": "late", "parentId": "a", "timestamp": "2026-01-01T00:00:09.000Z"},
        {
            "type": "message",
            "id": "early",
            "parentId": "a",
            "timestamp": "2026-01-01T00:00:01.000Z",
        },
        {
            "type": "message",
            "id": "same1",
            "parentId": "a",
            "timestamp": "2026-01-01T00:00:05.000Z",
        },
        {
            "type": "message",
            "id": "same2",
            "parentId": "a",
            "timestamp": "2026-01-01T00:00:05.000Z",
        },
        {
            "type": "message",
            "id": "orphan",
            "parentId": "gone",
            "timestamp": "2026-01-01T00:00:00.000Z",
        },
        {
            "type": "message",
            "id": "self",
            "parentId": "self",
            "timestamp": "2026-01-01T00:00:00.000Z",
        },
        {"type": "message", "id": "c1", "parentId": "c2", "timestamp": "2026-01-01T00:00:00.000Z"},
        {"type": "message", "id": "c2", "parentId": "c1", "timestamp": "2026-01-01T00:00:00.000Z"},
    ]
    roots = build_tree(entries, {"a": "L"})
    assert [r.entry["id"] for r in roots] == ["a", "orphan", "self"]
    assert roots[0].label == "L"
    assert [c.entry["id"] for c in roots[0].children] == ["early", "same1", "same2", "late"]


def test_deep_tree_is_built_iteratively() -> None:
    sm = SessionManager.in_memory()
    for i in range(100_000):
        sm.append_custom_entry("x", i)
    roots = sm.get_tree()
    depth, node = 1, roots[0]
    while node.children:
        node = node.children[0]
        depth += 1
    assert depth == 100_000
    assert len(sm.get_branch()) == 100_000


def test_get_entries_returns_a_copy_and_header_exists() -> None:
    sm = SessionManager.in_memory("/w")
    sm.append_message(user())
    sm.get_entries().clear()
    assert len(sm.get_entries()) == 1
    header = sm.get_header()
    assert header is not None and header["type"] == "session" and header["version"] == 3
    assert header["cwd"] == "/w" and re.match(r"^[0-9a-f]{16}$", sm.get_session_id())
    assert sm.get_session_file() is None and not sm.is_persisted()


def test_create_branched_session_in_memory_keeps_path_and_labels() -> None:
    sm = SessionManager.in_memory()
    a = sm.append_message(user("a"))
    b = sm.append_message(assistant("b"))
    sm.append_label_change(a, "start")
    sm.branch(a)
    c = sm.append_message(user("c"))
    sm.append_label_change(c, "side")
    assert sm.create_branched_session(b) is None
    entries = sm.get_entries()
    assert [x["type"] for x in entries] == ["message", "message", "label"]
    assert entries[2]["targetId"] == a and entries[2]["parentId"] == b
    assert sm.get_label(a) == "start" and sm.get_entry(c) is None


def test_injected_ttsr_rules_and_usage() -> None:
    sm = SessionManager.in_memory()
    sm.append_ttsr_injection(["a", "b"])
    sm.append_message(assistant())
    sm.append_ttsr_injection(["b", "c"])
    sm.append_message(assistant())
    assert sm.get_injected_ttsr_rules() == ["a", "b", "c"]
    stats = sm.get_usage_statistics()
    assert (stats.input, stats.output, stats.cache_read, stats.cache_write) == (200, 40, 10, 2)
    assert stats.cost == pytest.approx(0.6)


# --------------------------------------------------------------------------- properties


def naive_context(entries: list[dict[str, Any]], leaf: str | None) -> list[Any]:
    """A deliberately simple reference: O(n^2) walks, no indexes."""
    if leaf is None:
        return []
    by = {x["id"]: x for x in entries}
    current = by.get(leaf) or (entries[-1] if entries else None)
    path: list[dict[str, Any]] = []
    while current is not None:
        path.insert(0, current)
        current = by.get(current["parentId"]) if current["parentId"] else None
    compactions = [i for i, x in enumerate(path) if x["type"] == "compaction"]

    def msg(x: dict[str, Any]) -> Any:
        if x["type"] == "message":
            return x["message"]
        if x["type"] == "branch_summary" and x["summary"]:
            return ("branch", x["summary"])
        if x["type"] == "custom_message":
            return ("custom", x["content"])
        return None

    if not compactions:
        out = [msg(x) for x in path]
    else:
        ci = compactions[-1]
        comp = path[ci]
        kept_ids = [x["id"] for x in path[:ci]]
        start = (
            kept_ids.index(comp["firstKeptEntryId"]) if comp["firstKeptEntryId"] in kept_ids else ci
        )
        out = [("compaction", comp["summary"])]
        out += [msg(x) for x in path[start:ci] + path[ci + 1 :]]
    return [m for m in out if m is not None]


def shape(ctx: SessionContext) -> list[Any]:
    out: list[Any] = []
    for m in ctx.messages:
        role = m["role"]
        if role == "compactionSummary":
            out.append(("compaction", m["summary"]))
        elif role == "branchSummary":
            out.append(("branch", m["summary"]))
        elif role == "custom":
            out.append(("custom", m["content"]))
        else:
            out.append(m)
    return out


ops = st.lists(
    st.one_of(
        st.tuples(st.just("user"), st.text(max_size=3)),
        st.tuples(st.just("assistant"), st.text(max_size=3)),
        st.tuples(st.just("branch"), st.integers(0, 50)),
        st.tuples(st.just("reset"), st.none()),
        st.tuples(st.just("label"), st.integers(0, 50)),
        st.tuples(st.just("compact"), st.integers(0, 50)),
        st.tuples(st.just("summary"), st.integers(-1, 50)),
        st.tuples(st.just("custom_message"), st.text(max_size=3)),
        st.tuples(st.just("custom"), st.none()),
        st.tuples(st.just("model"), st.sampled_from(["default", "smol", "slow", None])),
        st.tuples(st.just("thinking"), st.sampled_from(["low", "high", None])),
        st.tuples(st.just("ttsr"), st.lists(st.sampled_from("abc"), max_size=3)),
        st.tuples(st.just("mode"), st.sampled_from(["plan", "none"])),
    ),
    max_size=40,
)


@settings(max_examples=examples(200), deadline=None)
@given(ops)
def test_random_operations_keep_tree_invariants(script: list[tuple[str, Any]]) -> None:
    sm = SessionManager.in_memory()
    ids: list[str] = []
    last_appended: str | None = None
    for op, arg in script:
        before = len(ids)
        if op == "user":
            ids.append(sm.append_message(user(arg)))
        elif op == "assistant":
            ids.append(sm.append_message(assistant(arg)))
        elif op == "branch" and ids:
            sm.branch(ids[arg % len(ids)])
        elif op == "reset":
            sm.reset_leaf()
        elif op == "label" and ids:
            ids.append(
                sm.append_label_change(ids[arg % len(ids)], None if arg % 3 == 0 else f"l{arg}")
            )
        elif op == "compact" and ids:
            path = sm.get_branch()
            # On the path (an appended compaction may keep only that), else keep nothing.
            target = path[arg % len(path)]["id"] if path else None
            ids.append(sm.append_compaction(f"c{arg}", None, target, arg))
        elif op == "summary":
            target = ids[arg % len(ids)] if ids and arg >= 0 else None
            ids.append(sm.branch_with_summary(target, f"s{arg}"))
        elif op == "custom_message":
            ids.append(sm.append_custom_message_entry("t", arg, True))
        elif op == "custom":
            ids.append(sm.append_custom_entry("t"))
        elif op == "model":
            ids.append(sm.append_model_change(f"p/{arg}", arg))
        elif op == "thinking":
            ids.append(sm.append_thinking_level_change(arg))
        elif op == "ttsr":
            ids.append(sm.append_ttsr_injection(arg))
        elif op == "mode":
            ids.append(sm.append_mode_change(arg, {"n": len(ids)}))
        if len(ids) > before:
            last_appended = ids[-1]
            assert sm.get_leaf_id() == last_appended
        # The manager's incremental context equals a fresh build at every step.
        assert sm.build_session_context() == build_session_context(
            sm.get_entries(), sm.get_leaf_id()
        )
    entries = sm.get_entries()
    known = {x["id"] for x in entries}
    assert len(known) == len(entries)
    assert all(x["parentId"] is None or x["parentId"] in known for x in entries)
    branch = sm.get_branch()
    if sm.get_leaf_id() is not None:
        assert branch[-1]["id"] == sm.get_leaf_id()
        assert branch[0]["parentId"] is None
    # Every entry appears exactly once in the tree.
    seen: list[str] = []
    stack = list(sm.get_tree())
    while stack:
        node = stack.pop()
        seen.append(node.entry["id"])
        stack.extend(node.children)
    assert sorted(seen) == sorted(known)
    by_id = {x["id"]: x for x in entries}
    for leaf in [None, *ids]:
        assert shape(build_session_context(entries, leaf)) == naive_context(entries, leaf)
        if leaf is not None:
            # The one-walk build equals the two-phase build, key order included.
            walked = ContextBuilder.from_leaf(by_id, by_id[leaf]).snapshot()
            phased = ContextBuilder.from_path(path_to_root(by_id, by_id[leaf])).snapshot()
            assert walked == phased
            assert list(walked.models) == list(phased.models)
