"""The append fast paths against the slow paths they short-cut.

`entry_line` and `serialize_entry_bytes` first let orjson write the value and let
one walk (`jsonl.as_is_checker`) vouch for the bytes; anything it cannot vouch for
takes the old path. These properties compare both on random entries: the same
bytes, the same error (naming the same key path), the same blobs stored, and,
where the fast path answers, the old transforms leave the entry itself.
"""

from __future__ import annotations

import base64
import enum
from collections import OrderedDict
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessiontree._util.unset import UNSET
from sessiontree.errors import EntryNotSerializableError
from sessiontree.format import _jsonl as jsonl
from sessiontree.format import js_number, serialize_entry_bytes
from sessiontree.session import MAX_PERSIST_CHARS, entry_line, prepare_for_persist
from sessiontree.session import _persistence as persistence
from sessiontree.storage import MemoryBlobStore
from tests.conftest import examples


class Str(str):
    pass


class Big(enum.IntEnum):
    HUGE = 2**60


# Floats in every exponent range (subnormals to near the maximum), signed zeros,
# integral floats, the edges where orjson and JavaScript switch layouts.
EDGE_FLOATS = [
    0.0,
    -0.0,
    1.0,
    -1.0,
    100.0,
    1e-4,
    -1e-4,
    9.999999999999999e-5,
    1e-5,
    1e-6,
    1e-7,
    5e-324,
    2.2250738585072014e-308,
    1e15,
    1e15 + 0.5,
    9999999999999998.0,
    1e16,
    1e20,
    1e21,
    1.7976931348623157e308,
    0.0003,
    0.00075,
    0.00105,
    float("nan"),
    float("inf"),
    float("-inf"),
]
floats = (
    st.floats()
    | st.sampled_from(EDGE_FLOATS)
    | st.builds(
        lambda m, e: m * 10.0**e,
        st.floats(min_value=1.0, max_value=10.0) | st.floats(min_value=-10.0, max_value=-1.0),
        st.integers(min_value=-325, max_value=308),
    )
)
ints = (
    st.integers(min_value=-(2**70), max_value=2**70)
    | st.sampled_from([2**53 - 1, 2**53, 2**53 + 1, -(2**53), -(2**53) - 1, 2**63, 2**64])
    | st.integers(min_value=-1000, max_value=1000)
)
B64 = base64.b64encode(bytes(range(256)) * 4).decode()  # 1368 units: over the blob threshold
special_strings = st.sampled_from(
    [
        "image",
        "image/png",
        "IMAGE/JPEG",
        "thinking",
        "text",
        "toolCall",
        "reasoning",
        "image_generation_call",
        "openaiResponsesHistory",
        "anthropicCompaction",
        "web_search",
        "data:image/png;base64," + B64,
        "data:image/png;base64,AAAA",
        "blob:sha256:" + "0" * 64,
        B64,
        B64[:1020],
        "\ud800",
        "a\udfffb",
        "😀",
    ]
)
strings = st.text(st.characters(exclude_categories=()), max_size=12) | special_strings
image_urls = st.sampled_from(
    [
        "data:image/png;base64,AAAA",
        "data:image/jpeg;base64," + B64,
        "data:text/plain,x",
        "https://x",
    ]
)
KEYS = [
    "type",
    "data",
    "result",
    "image_url",
    "jsonlEvents",
    "partialJson",
    "providerPayload",
    "content",
    "images",
    "frames",
    "mimeType",
    "thinkingSignature",
    "textSignature",
    "thoughtSignature",
    "encrypted_content",
    "id",
    "lineCount",
    "text",
    "role",
    "items",
    "block",
    "name",
    "tool_use_id",
    "usage",
    "cost",
    "0",
    "1",
    "42",
    "007",
    "4294967294",
    "4294967295",
    "-1",
    "1.5",
]
keys = st.sampled_from(KEYS) | st.text(max_size=6)
leaves = (
    st.none()
    | st.booleans()
    | ints
    | floats
    | strings
    | st.just(UNSET)
    | st.just(Big.HUGE)
    | st.builds(Str, st.text(max_size=4))
)


def _containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return (
        st.lists(children, max_size=4)
        | st.dictionaries(keys, children, max_size=5)
        | st.builds(tuple, st.lists(children, max_size=3))
        | st.builds(OrderedDict, st.dictionaries(keys, children, max_size=3))
    )


values = st.recursive(leaves, _containers, max_leaves=30)

# The shapes agents write, with random parts: what the fast path must get right most.
text_block = st.fixed_dictionaries({"type": st.just("text"), "text": strings})
image_block = st.fixed_dictionaries(
    {
        "type": st.just("image"),
        "data": st.sampled_from([B64, B64[:1020], "blob:sha256:" + "1" * 64]),
        "mimeType": st.sampled_from(["image/png", "image/jpeg"]),
    }
)
thinking_block = st.fixed_dictionaries(
    {
        "type": st.just("thinking"),
        "thinking": strings,
        "thinkingSignature": st.sampled_from(
            [
                '{"type":"reasoning","id":"rs_1","encrypted_content":"ENC"}',
                '{"type":"reasoning","id":"rs_2"}',
                "sig",
                "",
            ]
        ),
    }
)
cost = st.fixed_dictionaries(
    {"input": floats, "output": floats, "cacheRead": ints, "cacheWrite": ints, "total": floats}
)
usage = st.fixed_dictionaries(
    {
        "input": ints,
        "output": ints,
        "cacheRead": ints,
        "cacheWrite": ints,
        "totalTokens": ints,
        "cost": cost,
    }
)
payload = st.fixed_dictionaries(
    {
        "type": st.sampled_from(["openaiResponsesHistory", "other"]),
        "items": st.lists(
            st.fixed_dictionaries(
                {
                    "type": st.just("reasoning"),
                    "id": st.sampled_from(["rs_1", "rs_2"]),
                    "encrypted_content": st.sampled_from(["ENC", "X"]),
                }
            ),
            max_size=2,
        ),
    }
)
message = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["user", "assistant", "toolResult"]),
        "content": st.lists(text_block | image_block | thinking_block | values, max_size=4)
        | strings,
        "timestamp": ints,
    },
    optional={
        "api": strings,
        "provider": strings,
        "model": strings,
        "usage": usage,
        "stopReason": strings,
        "providerPayload": payload,
        "details": values,
        "images": st.lists(image_block, max_size=2),
        "jsonlEvents": values,
        "extra": values,
        "input": st.fixed_dictionaries({"image_url": image_urls | st.lists(image_urls)}),
    },
)
header = {
    "type": st.just("message"),
    "id": st.text(min_size=1, max_size=8),
    "parentId": st.none() | st.text(max_size=8),
    "timestamp": st.just("2026-02-16T10:20:30.000Z"),
}
# OpenAI Responses replays: a signature that providerPayload duplicates is dropped.
replayed = st.fixed_dictionaries(
    {
        "role": st.just("assistant"),
        "content": st.lists(thinking_block | text_block, min_size=1, max_size=3),
        "providerPayload": payload,
    },
    optional={"usage": usage},
)
message_entries = st.fixed_dictionaries({**header, "message": message | replayed})
other_entries = st.fixed_dictionaries(
    {**header, "type": st.sampled_from(["custom", "image_generation_call", "label", "x"])},
    optional={
        "data": values,
        "result": st.sampled_from([B64, "short"]),
        "image_url": image_urls,
        "0": values,
        "payload": values,
    },
)
entries = message_entries | other_entries | st.dictionaries(keys, values, max_size=6)


def _outcome(fn: Any, *args: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(*args)
    except EntryNotSerializableError as exc:
        return "refused", exc.key_path
    except (TypeError, ValueError) as exc:
        return "error", type(exc)


def _blobs(store: MemoryBlobStore) -> dict[str, bytes]:
    return dict(store._blobs)


def _same_line(entry: dict[str, Any]) -> None:
    fast_store, slow_store = MemoryBlobStore(), MemoryBlobStore()
    fast = _outcome(entry_line, entry, fast_store)
    slow = _outcome(persistence._entry_line_slow, entry, slow_store)
    assert fast == slow
    assert _blobs(fast_store) == _blobs(slow_store)


@pytest.mark.slow
@settings(max_examples=examples(1500), suppress_health_check=[HealthCheck.too_slow])
@given(entries)
def test_entry_line_fast_path_writes_what_the_slow_path_writes(entry: dict[str, Any]) -> None:
    _same_line(entry)


@pytest.mark.slow
@settings(max_examples=examples(1500), suppress_health_check=[HealthCheck.too_slow])
@given(entries)
def test_what_the_fast_path_vouches_for_the_transforms_leave_alone(entry: dict[str, Any]) -> None:
    try:
        line = persistence.orjson.dumps(entry, option=persistence._LINE_OPTIONS)
    except TypeError:
        return
    if len(line) <= persistence._SAFE_LEN and persistence._written_as_is(entry):
        assert prepare_for_persist(entry, MemoryBlobStore()) is entry
        assert jsonl._jsify(entry) is entry
        assert line == jsonl._serialize_slow(entry) + b"\n"


@settings(max_examples=examples(1500), suppress_health_check=[HealthCheck.too_slow])
@given(values)
def test_serialize_fast_path_writes_what_the_slow_path_writes(value: Any) -> None:
    assert _outcome(serialize_entry_bytes, value) == _outcome(jsonl._serialize_slow, value)


@settings(max_examples=examples(3000))
@given(floats | ints)
def test_every_number_comes_out_as_javascript_writes_it(value: float | int) -> None:
    expected = js_number(value)
    assert serialize_entry_bytes({"v": value, "a": [value]}) == (
        f'{{"v":{expected},"a":[{expected}]}}'.encode()
    )
    assert entry_line({"v": value}, MemoryBlobStore()) == f'{{"v":{expected}}}\n'.encode()


@pytest.mark.parametrize(
    "length", [250_000 - 20, 250_000, 250_001, 499_953, 500_000, 500_001, 500_100]
)
@pytest.mark.parametrize("char", ["a", "é", "😀"])
@pytest.mark.parametrize("key", ["text", "thinkingSignature", "data"])
def test_strings_around_the_limits(length: int, char: str, key: str) -> None:
    big = char * (length // (2 if char == "😀" else 1))  # `length` UTF-16 units
    entry = {
        "type": "message",
        "id": "a",
        "parentId": None,
        "timestamp": "t",
        "message": {"role": "user", "content": [{"type": "text", key: big}], "u": 0.5},
    }
    _same_line(entry)
    line = entry_line(entry, MemoryBlobStore())
    if key == "text" and persistence.js_len(big) > MAX_PERSIST_CHARS:
        assert persistence.TRUNCATION_NOTICE.encode() in line.replace(b"\\n", b"\n")


def test_keys_that_need_a_look_are_looked_at_every_time() -> None:
    # The key cache must never let a key whose rule said "fine" once pass unseen later.
    store = MemoryBlobStore()
    for data in ({"x": 1}, None, [1]):
        entry_line({"type": "custom", "content": [{"type": "image", "data": data}]}, store)
    image = {"type": "custom", "content": [{"type": "image", "data": B64, "mimeType": "image/png"}]}
    line = entry_line(image, store)
    assert B64.encode() not in line and b"blob:sha256:" in line
    for rule_key, value in [("jsonlEvents", 1), ("partialJson", "x")]:
        assert rule_key.encode() not in entry_line({"a": {rule_key: value}}, store)
    entry_line({"a": {"result": "short"}}, store)
    line = entry_line({"a": {"type": "image_generation_call", "result": B64}}, store)
    assert b"blob:sha256:" in line


def test_the_key_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jsonl, "_KNOWN_KEYS_MAX", 0)
    check = jsonl.as_is_checker()
    assert check({"fresh-key": {"another": [1, "x", 0.5]}})
    assert check({"fresh-key": 1})
    assert not check({"fresh-key": 1.0})
    assert not check({"0": 1})
    assert not check({"fresh-key": (1,)})


def test_an_unserializable_entry_is_refused_naming_its_path() -> None:
    entry = {"type": "message", "message": {"content": [{"type": "text", "text": {1, 2}}]}}
    outcome = _outcome(entry_line, entry, MemoryBlobStore())
    assert outcome == ("refused", "message.content[0].text")


# -- get_tree: the chain pass against the general build ---------------------------------------

TIMESTAMPS = [
    "2026-01-01T00:00:00.000Z",
    "2026-01-01T00:00:00.001Z",
    "2026-01-01T00:00:01.000Z",
    "2025-12-31T23:59:59.999Z",
    "2026-01-01T01:00:00.000+01:00",
    "2026-01-01",
    "not a time",
    None,
    17,
]


@st.composite
def sessions(draw: st.DrawFn) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Mostly chains, as appends write them, with branches, orphans, roots, children
    written before their parent, self-parented and cyclic entries, and sometimes
    duplicated or non-string ids."""
    n = draw(st.integers(min_value=0, max_value=40))
    ids = [f"e{i}" for i in range(n)]
    if n and draw(st.booleans()):
        for _ in range(draw(st.integers(min_value=1, max_value=3))):
            ids[draw(st.integers(0, n - 1))] = draw(
                st.sampled_from(ids) | st.sampled_from([None, 7, Str("e0"), "", ["x"]])
            )
    entries = []
    for i, entry_id in enumerate(ids):
        how = draw(
            st.sampled_from(["chain"] * 6 + ["earlier", "later", "root", "self", "name", "odd"])
        )
        if how == "chain":
            parent = ids[i - 1] if i else None
        elif how == "earlier":
            parent = ids[draw(st.integers(0, i - 1))] if i else None
        elif how == "later":
            parent = ids[draw(st.integers(i, n - 1))]
        elif how == "root":
            parent = None
        elif how == "self":
            parent = entry_id
        elif how == "name":  # a plain string naming any entry, whatever its id's type
            parent = f"e{draw(st.integers(0, n - 1))}"
        else:
            parent = draw(st.sampled_from(["gone", 3, Str(f"e{max(i - 1, 0)}"), ""]))
        entry: dict[str, Any] = {"type": "message", "id": entry_id, "parentId": parent}
        if draw(st.integers(0, 9)):
            entry["timestamp"] = draw(st.sampled_from(TIMESTAMPS))
        entries.append(entry)
    string_ids = [i for i in ids if type(i) is str]
    targets = st.sampled_from(string_ids) if string_ids else st.just("none")
    labels = draw(st.dictionaries(targets | st.just("gone"), st.text(min_size=1, max_size=3)))
    return entries, labels


def _shape(roots: list[Any], entries: list[dict[str, Any]]) -> list[Any]:
    """The tree flat, depth first: (entry position, label, children's positions)."""
    where = {id(e): i for i, e in enumerate(entries)}
    out: list[Any] = [("roots", [where[id(r.entry)] for r in roots])]
    stack = list(reversed(roots))
    while stack:
        node = stack.pop()
        out.append((where[id(node.entry)], node.label, [where[id(c.entry)] for c in node.children]))
        stack.extend(reversed(node.children))
    return out


@pytest.mark.slow
@settings(max_examples=examples(1500))
@given(sessions())
def test_the_chain_build_is_the_general_build(
    session: tuple[list[dict[str, Any]], dict[str, str]],
) -> None:
    from sessiontree.format import _tree as tree

    entries, labels = session
    general = _shape(tree._build_tree_general(entries, labels), entries)
    fast = tree._build_tree(entries, labels)
    assert _shape(fast, entries) == general
    assert all(type(node) is tree.SessionTreeNode for node in fast)
    # From an index's lists (what EntryIndex holds): each id and parentId, and the
    # last position of each string id.
    ids = [e.get("id") for e in entries]
    parents = [e.get("parentId") for e in entries]
    position = {i: p for p, i in enumerate(ids) if type(i) is str}
    indexed = tree.build_tree(entries, labels, ids=ids, parents=parents, position=position)
    assert _shape(indexed, entries) == general


def test_the_chain_build_answers_a_long_chain_with_one_branch() -> None:
    from sessiontree.format import _tree as tree

    entries: list[dict[str, Any]] = [
        {"id": f"{i:08x}", "parentId": f"{i - 1:08x}" if i else None, "timestamp": "t"}
        for i in range(1000)
    ]
    entries.append({"id": "branch", "parentId": f"{10:08x}", "timestamp": "t"})
    entries.insert(0, {"id": "before", "parentId": f"{500:08x}", "timestamp": "t"})
    roots = tree._build_tree(entries, {"00000002": "L"})
    assert _shape(roots, entries) == _shape(
        tree._build_tree_general(entries, {"00000002": "L"}), entries
    )
    node = roots[0]
    for _ in range(10):
        node = node.children[0]
    assert [c.entry["id"] for c in node.children] == ["0000000b", "branch"]
