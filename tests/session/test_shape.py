"""`SessionManager.get_tree_shape`: the tree without its entries is the tree `get_tree`
builds, for any session (duplicate ids, orphans, self-parents, cycles, labels, bad
timestamps, damaged lines), loaded whole or index first; and it reads no entry but
the siblings under a branch point."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessiontree import SessionManager, TreeShape
from sessiontree.format import SessionTreeNode

IDS = [f"e{i:02d}" for i in range(12)]


def _node_key(entry: Any) -> bytes:
    return orjson.dumps(entry, option=orjson.OPT_SORT_KEYS)


def tree_of_nodes(nodes: list[SessionTreeNode]) -> list[Any]:
    return [(_node_key(n.entry), n.label, tree_of_nodes(n.children)) for n in nodes]


def tree_of_shape(shape: TreeShape, positions: list[int] | None = None) -> list[Any]:
    out = []
    for p in shape.roots if positions is None else positions:
        entry = shape.entry(p)
        out.append(
            (_node_key(entry), shape.labels.get(p), tree_of_shape(shape, list(shape.children(p))))
        )
    return out


@st.composite
def session_lines(draw: st.DrawFn) -> list[bytes]:
    header = {
        "type": "session",
        "version": 3,
        "id": "shape-test",
        "timestamp": "2026-01-01T00:00:00.000Z",
        "cwd": "/w",
    }
    lines = [orjson.dumps(header)]
    n = draw(st.integers(1, 40))
    made: list[str] = []
    for i in range(n):
        choice = draw(st.integers(0, 19))
        if choice == 0:
            lines.append(b'{"type":"message","id":"broken","parentId":null,"timestamp":"x"')  # torn
            continue
        if choice == 1:
            lines.append(b"not json at all")
            continue
        entry_id = draw(st.sampled_from(IDS))
        parent: Any = draw(
            st.one_of(
                st.none(),
                st.just(""),
                st.sampled_from(IDS),
                st.sampled_from(made) if made else st.none(),
                st.sampled_from(made[-1:]) if made else st.none(),
                st.integers(0, 3),
            )
        )
        ms = draw(st.integers(0, 5))
        stamp = draw(
            st.one_of(
                st.just(f"2026-01-01T00:00:0{ms}.000Z"),
                st.just("not a time"),
                st.none(),
            )
        )
        if choice < 4 and made:
            entry = {
                "type": "label",
                "id": entry_id,
                "parentId": parent,
                "timestamp": stamp,
                "targetId": draw(st.sampled_from(made)),
                "label": draw(st.sampled_from(["a", "b", ""])),
            }
        elif choice < 6:
            entry = {
                "type": "compaction",
                "id": entry_id,
                "parentId": parent,
                "timestamp": stamp,
                "summary": "s",
                "firstKeptEntryId": entry_id,
                "tokensBefore": 1,
            }
        else:
            role = draw(st.sampled_from(["user", "assistant"]))
            entry = {
                "type": "message",
                "id": entry_id,
                "parentId": parent,
                "timestamp": stamp,
                "message": {"role": role, "content": f"text {i}"},
            }
        made.append(entry_id)
        lines.append(orjson.dumps(entry))
    return lines


def _open(path: Path, lazy: bool) -> SessionManager:
    return SessionManager.open(str(path), read_only=True, lazy=lazy)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=session_lines())
def test_the_shape_is_the_tree_get_tree_builds(tmp_path: Path, lines: list[bytes]) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    whole = _open(path, lazy=False)
    expected = tree_of_nodes(whole.get_tree())
    assert tree_of_shape(whole.get_tree_shape()) == expected
    # Index first: the shape, then reading everything, agree with the whole load (a
    # torn line in the writers' form is found when read, as the module doc says).
    lazy = _open(path, lazy=True)
    lazy.get_entries()
    assert tree_of_shape(lazy.get_tree_shape()) == expected
    # Every path is the branch `get_branch` gives.
    shape = whole.get_tree_shape()
    for p in range(len(shape.ids)):
        if not shape.present[p] or not isinstance(shape.ids[p], str):
            continue
        if shape.position.get(shape.ids[p]) != p:
            continue  # an earlier entry with a reused id: get_branch names the last
        got = [_node_key(e) for e in shape.entries(shape.path(p))]
        assert got == [_node_key(e) for e in whole.get_branch(shape.ids[p])]
    assert shape.size == len(whole.get_entries())
    leaf = whole.get_leaf_id()
    assert (shape.ids[shape.leaf] if shape.leaf is not None else None) == leaf


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=session_lines())
def test_the_shape_of_an_index_first_load_matches_once_its_lines_parse(
    tmp_path: Path, lines: list[bytes]
) -> None:
    good = [line for line in lines if line.endswith(b"}")]
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"\n".join(good) + b"\n")
    expected = tree_of_nodes(_open(path, lazy=False).get_tree())
    lazy = _open(path, lazy=True)
    assert tree_of_shape(lazy.get_tree_shape()) == expected


def test_the_shape_of_a_big_session_reads_only_the_siblings_at_branch_points(
    tmp_path: Path,
) -> None:
    path = tmp_path / "big.jsonl"
    header = {
        "type": "session",
        "version": 3,
        "id": "big",
        "timestamp": "2026-01-01T00:00:00.000Z",
        "cwd": "/w",
    }
    rows = [orjson.dumps(header)]
    parent = None
    for i in range(3000):
        entry_id = f"{i:08x}"
        at = "00000010" if i in (2000, 2500) else parent  # two branches back to entry 16
        rows.append(
            orjson.dumps(
                {
                    "type": "message",
                    "id": entry_id,
                    "parentId": at,
                    "timestamp": f"2026-01-01T00:00:{i % 60:02d}.000Z",
                    "message": {"role": "user", "content": "x" * 4000},
                }
            )
        )
        parent = entry_id
    path.write_bytes(b"\n".join(rows) + b"\n")
    sm = SessionManager.open(str(path), read_only=True, lazy=True)
    shape = sm.get_tree_shape()
    assert shape.size == 3000
    assert len(shape.children(16)) == 3
    index = sm._index  # the test looks under the hood: what was read
    held = sum(1 for e in index._entries if e)
    assert held <= 3 + 1  # the three siblings (and the last line, read at load)
    assert [shape.ids[p] for p in shape.tips()] == ["000007cf", "000009c3", "00000bb7"]


def _message(entry_id: Any, parent: Any, second: int = 1) -> bytes:
    return orjson.dumps(
        {
            "type": "message",
            "id": entry_id,
            "parentId": parent,
            "timestamp": f"2026-01-01T00:00:{second:02d}.000Z",
            "message": {"role": "user", "content": f"text {entry_id}"},
        }
    )


def _header() -> bytes:
    return orjson.dumps(
        {
            "type": "session",
            "version": 3,
            "id": "shape-test",
            "timestamp": "2026-01-01T00:00:00.000Z",
            "cwd": "/w",
        }
    )


def test_an_empty_parent_id_names_the_entry_with_the_empty_id_as_get_tree_does(
    tmp_path: Path,
) -> None:
    # The reference's getTree finds "" like any other id (only getBranch stops at it).
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"\n".join([_header(), _message("", None), _message("a", "")]) + b"\n")
    for lazy in (False, True):
        sm = _open(path, lazy=lazy)
        expected = tree_of_nodes(sm.get_tree())
        assert len(expected) == 1  # "a" under ""
        assert tree_of_shape(_open(path, lazy=lazy).get_tree_shape()) == expected


def test_a_sibling_found_damaged_when_the_shape_orders_it_is_not_in_the_shape(
    tmp_path: Path,
) -> None:
    # Index first, a line in the writers' form that does not parse is found when read:
    # the shape reads the siblings under a branch point, so it finds this one.
    damaged = (
        b'{"type":"message","id":"b","parentId":"a","timestamp":"2026-01-01T00:00:02.000Z",'
        b'"message":{"role":"user","content":x}}'
    )
    lines = [_header(), _message("a", None), damaged, _message("c", "b"), _message("d", "a")]
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    expected = tree_of_nodes(_open(path, lazy=False).get_tree())
    lazy = _open(path, lazy=True)
    shape = lazy.get_tree_shape()
    assert tree_of_shape(shape) == expected
    assert shape.size == 3


@pytest.mark.xfail(
    strict=True,
    reason="design: index first, a line whose prefix says one id and whose body (a repeated"
    " key) another is indexed by its prefix until it is read; the shape reads only the"
    " siblings at branch points, so it holds the prefix's id where get_tree (reading every"
    " line) holds the body's. Matching would mean reading every line, or refusing such"
    " lines at index time.",
)
def test_an_unread_line_whose_body_names_another_id_is_in_the_shape_as_get_tree_has_it(
    tmp_path: Path,
) -> None:
    repeated = (
        b'{"type":"message","id":"b","parentId":"a","timestamp":"2026-01-01T00:00:02.000Z",'
        b'"message":{"role":"user","content":"x"},"id":"other"}'
    )
    lines = [_header(), _message("a", None), repeated, _message("c", "b"), _message("d", "c")]
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    expected = tree_of_nodes(_open(path, lazy=False).get_tree())
    assert tree_of_shape(_open(path, lazy=True).get_tree_shape()) == expected


def test_the_shape_of_a_session_of_siblings_keeps_none_of_them_read(tmp_path: Path) -> None:
    # A thousand forks off one entry: ordering them reads their lines, and holding
    # them read would hold the whole session (a 1 GB one in a viewer's memory).
    lines = [_header(), _message("root", None)]
    lines += [_message(f"s{k:04d}", "root", 59 - k % 60) for k in range(1000)]
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    sm = _open(path, lazy=True)
    shape = sm.get_tree_shape()
    assert len(shape.children(0)) == 1000
    assert sum(1 for e in sm._index._entries if e) <= 2  # the last line, read at load
    assert tree_of_shape(shape) == tree_of_nodes(_open(path, lazy=False).get_tree())


def test_the_shape_names_the_leaf_the_manager_has_after_it_branches(tmp_path: Path) -> None:
    lines = [_header()] + [_message(f"e{k}", f"e{k - 1}" if k else None) for k in range(6)]
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    for lazy in (False, True):
        sm = SessionManager.open(str(path), lazy=lazy)
        shape = sm.get_tree_shape()
        assert shape.leaf is not None and shape.ids[shape.leaf] == "e5"
        sm.branch("e2")
        shape = sm.get_tree_shape()
        assert shape.leaf is not None and shape.ids[shape.leaf] == "e2"
        sm.reset_leaf()
        assert sm.get_tree_shape().leaf is None
        sm.close()
