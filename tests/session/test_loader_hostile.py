"""Hostile and broken input: arbitrary bytes and JSON shapes never crash or hang.

The only errors allowed are the documented ones (InvalidSessionFileError for a
file without a header). Valid lines are never dropped, whatever surrounds them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessiontree import (
    InvalidSessionFileError,
    SessionManager,
    build_session_context,
    load_entries_from_file,
    migrate_session_entries,
    parse_jsonl_lenient,
    serialize_entry,
)
from sessiontree.format import build_tree
from sessiontree.layout import get_terminal_id, is_safe_name
from sessiontree.session import read_session
from sessiontree.storage import MemorySessionStorage
from tests.conftest import examples

FUZZ = settings(
    max_examples=examples(150, "SESSIONTREE_FUZZ_EXAMPLES"),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
json_values = st.recursive(
    scalars,
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=6), c, max_size=4),
    max_leaves=12,
)
ids = st.sampled_from(["a", "b", "c", "d", "root", ""]) | json_values
entry_types = st.sampled_from(
    [
        "message",
        "model_change",
        "thinking_level_change",
        "compaction",
        "branch_summary",
        "custom",
        "custom_message",
        "label",
        "ttsr_injection",
        "session_init",
        "mode_change",
        "title_change",
        "session_info",
        "context_edit",
        "usage",
        "unknown_future_type",
    ]
)
field_names = st.sampled_from(
    [
        "message",
        "model",
        "role",
        "provider",
        "modelId",
        "thinkingLevel",
        "summary",
        "shortSummary",
        "firstKeptEntryId",
        "firstKeptEntryIndex",
        "tokensBefore",
        "fromId",
        "customType",
        "content",
        "display",
        "details",
        "attribution",
        "targetId",
        "replacement",
        "systemMessage",
        "label",
        "injectedRules",
        "mode",
        "data",
        "timestamp",
    ]
)
hostile_entries = st.builds(
    lambda t, i, p, extra: {"type": t, "id": i, "parentId": p, **extra},
    entry_types | json_values,
    ids,
    ids,
    st.dictionaries(field_names, json_values, max_size=5),
)


@FUZZ
@given(st.binary(max_size=2000))
def test_arbitrary_bytes_load_without_crashing(data: bytes) -> None:
    storage = MemorySessionStorage()
    storage.ensure_dir("/s")
    storage.write_atomic("/s/x.jsonl", [data])
    loaded = read_session("/s/x.jsonl", storage)
    assert loaded.header is None or loaded.header["type"] == "session"
    assert isinstance(parse_jsonl_lenient(data.decode("utf-8", "replace")), list)
    try:
        sm = SessionManager.open("/s/x.jsonl", storage=storage, read_only=True)
    except InvalidSessionFileError as exc:
        assert exc.path == "/s/x.jsonl"
    except FileNotFoundError:
        assert loaded.blank  # read-only open of an empty file
    else:
        sm.get_tree()
        sm.build_session_context()


@FUZZ
@given(st.lists(hostile_entries, max_size=25), st.one_of(st.none(), ids))
def test_arbitrary_entry_shapes_never_crash_context_or_tree(
    entries: list[dict[str, Any]], leaf: Any
) -> None:
    leaf_id = leaf if isinstance(leaf, str) or leaf is None else "zz"
    ctx = build_session_context(entries, leaf_id)
    assert isinstance(ctx.messages, list)
    roots = build_tree(entries, {})
    seen = 0
    stack = list(roots)
    while stack:
        node = stack.pop()
        seen += 1
        stack.extend(node.children)
    assert seen <= len(entries)
    header = {"type": "session", "id": "s", "timestamp": "t", "cwd": "/"}
    raw = [header, *entries]
    migrate_session_entries(raw)  # v1 path: ids minted, index converted, never raises


@FUZZ
@given(st.lists(hostile_entries, max_size=25))
def test_hostile_file_loads_every_valid_line_and_rewrites_identically(
    entries: list[dict[str, Any]],
) -> None:
    storage = MemorySessionStorage()
    storage.ensure_dir("/s")
    header = {"type": "session", "version": 3, "id": "s", "timestamp": "t", "cwd": "/"}
    lines = [serialize_entry(header)]
    for i, entry in enumerate(entries):
        lines.append(serialize_entry(entry))
        if i % 3 == 0:
            lines.append('{"torn": ')  # garbage between valid lines
    storage.write_atomic("/s/x.jsonl", [("\n".join(lines) + "\n").encode()])
    loaded = load_entries_from_file("/s/x.jsonl", storage)
    assert [serialize_entry(e) for e in loaded] == [serialize_entry(header)] + [
        serialize_entry(e) for e in entries
    ]
    sm = SessionManager.open("/s/x.jsonl", storage=storage, read_only=True)
    assert len(sm.get_entries()) == len(entries)
    sm.get_tree()
    sm.build_session_context()


def test_a_type_that_is_no_string_before_a_compaction_is_no_kind() -> None:
    """Found by the property above: a list as "type" on the path before a compaction's
    kept entries made the context's setting filter hash it."""
    storage = MemorySessionStorage()
    storage.ensure_dir("/s")
    lines = [
        {"type": "session", "version": 3, "id": "s", "timestamp": "t", "cwd": "/"},
        {"type": "message", "id": "a", "parentId": None, "message": {"role": "user"}},
        {"type": [], "id": "b", "parentId": "a"},
        {"type": {"k": 1}, "id": "c", "parentId": "b"},
        {
            "type": "compaction",
            "id": "d",
            "parentId": "c",
            "firstKeptEntryId": "d",
            "summary": "s",
            "tokensBefore": 1,
        },
    ]
    text = "".join(serialize_entry(e) + "\n" for e in lines)
    storage.write_atomic("/s/x.jsonl", [text.encode()])
    for lazy in (False, True):
        sm = SessionManager.open("/s/x.jsonl", storage=storage, read_only=True, lazy=lazy)
        assert [m["role"] for m in sm.build_session_context().messages] == ["compactionSummary"]


def test_cycles_and_a_leaf_inside_a_cycle_terminate() -> None:
    entries = [
        {"type": "message", "id": "a", "parentId": "c", "message": {"role": "user"}},
        {"type": "message", "id": "b", "parentId": "a", "message": {"role": "user"}},
        {"type": "message", "id": "c", "parentId": "b", "message": {"role": "user"}},
        {"type": "message", "id": "d", "parentId": "d", "message": {"role": "user"}},
    ]
    assert len(build_session_context(entries, "b").messages) == 3
    assert len(build_session_context(entries, "d").messages) == 1
    assert [n.entry["id"] for n in build_tree(entries, {})] == ["d"]


def test_deeply_nested_and_huge_lines(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    header = '{"type":"session","version":3,"id":"s","timestamp":"t","cwd":"/"}'
    deep = '{"type":"custom","id":"x","parentId":null,"data":' + "[" * 5000 + "]" * 5000 + "}"
    huge = serialize_entry(
        {"type": "message", "id": "h", "parentId": "x", "message": {"content": "z" * 3_000_000}}
    )
    path.write_text("\n".join([header, deep, huge, "\xff not utf8?"]) + "\n")
    with open(path, "ab") as f:
        f.write(b'{"type":"message","id":"bad","text":"\xff\xfe"}\n')
    loaded = load_entries_from_file(str(path))
    assert [e["id"] for e in loaded[1:]] == ["x", "h", "bad"]
    assert loaded[3]["text"] == "\ufffd\ufffd"  # invalid UTF-8 decodes as JS would


def test_duplicate_ids_and_missing_header_fields(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text(
        '{"type":"session","version":3,"id":"s"}\n'
        '{"type":"message","id":"a","parentId":null,"message":{"role":"user","content":"1"}}\n'
        '{"type":"message","id":"a","parentId":null,"message":{"role":"user","content":"2"}}\n'
    )
    sm = SessionManager.open(str(path), read_only=True)
    assert len(sm.get_entries()) == 2
    assert [m["content"] for m in sm.build_session_context().messages] == ["2"]
    assert len(sm.get_tree()) == 2


@pytest.mark.parametrize(
    "name", ["", ".", "..", "a/b", "../x", "/etc/passwd", "a\x00b", "a\nb", "a\\b", "x" * 300]
)
def test_unsafe_names_are_refused(name: str) -> None:
    assert not is_safe_name(name)


def test_safe_names_of_other_shapes_are_accepted() -> None:
    for name in ["019aa4b0-6777-791b-b358-4f8cd8f16adf", "0cb2425433cb1000", "pts-3", "tmux-%1"]:
        assert is_safe_name(name)


def test_hostile_terminal_ids_never_become_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", None)
    for value in ["../../etc", "/abs", "a\x01b"]:
        monkeypatch.setenv("TMUX_PANE", value)
        assert get_terminal_id() is None
    monkeypatch.setenv("TMUX_PANE", "%3")
    assert get_terminal_id() == "tmux-%3"


def test_deeply_nested_entry_round_trips_through_a_persistent_session(tmp_path: Path) -> None:
    nested: list[Any] = []
    for _ in range(3000):
        nested = [nested]
    with SessionManager.create("/p", str(tmp_path)) as sm:
        entry_id = sm.append_custom_entry("deep", nested)
        sm.ensure_on_disk()
    reopened = SessionManager.open(sm.get_session_file() or "", read_only=True)
    # (compared as text: == on 3000 nested lists would itself hit the recursion limit)
    assert serialize_entry(reopened.get_entry(entry_id)) == serialize_entry(sm.get_entry(entry_id))


def test_a_role_that_is_no_string_is_no_role_for_pi_16s_rules() -> None:
    """A list as a message's role, with null content and a context edit of it: no rule
    of pi 1.6 (null content, edits) applies, nothing raises."""
    entries = [
        {
            "type": "message",
            "id": "a",
            "parentId": None,
            "message": {"role": ["x"], "content": None},
        },
        {
            "type": "context_edit",
            "id": "b",
            "parentId": "a",
            "targetId": "a",
            "replacement": {"content": "x"},
        },
    ]
    assert build_session_context(entries).messages == [{"role": ["x"], "content": None}]
