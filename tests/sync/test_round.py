"""A round between two machines (two HOMEs on one host) through a dir hub: sessions made,
appended and continued on both sides arrive whole, once, byte for byte."""

from __future__ import annotations

from pathlib import Path

import pytest

from sessiontree.sync import LEAF_MARKER
from tests.sync_support import Machine, append, entries, entry_lines, message, new_session


@pytest.fixture
def two(tmp_path: Path) -> tuple[Machine, Machine, Path]:
    return Machine(tmp_path, "laptop"), Machine(tmp_path, "desk"), tmp_path / "hub"


def test_a_session_made_on_one_machine_appears_on_the_other_byte_for_byte(
    two: tuple[Machine, Machine, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, hub = two
    path = a.session_path("s1")
    new_session(path, "s1", message("e1", None, "hi"), message("e2", "e1", "yo", "assistant"))
    report = a.sync(hub, monkeypatch)
    assert report.sent_lines == 3
    report = b.sync(hub, monkeypatch)
    assert report.created == [str(b.session_path("s1"))]
    assert b.files() == a.files()


def test_an_append_sends_only_the_new_lines(
    two: tuple[Machine, Machine, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, hub = two
    path = a.session_path("s1")
    new_session(path, "s1", message("e1", None, "hi"))
    a.sync(hub, monkeypatch)
    b.sync(hub, monkeypatch)
    append(path, message("e2", "e1", "more"))
    sent = a.sync(hub, monkeypatch)
    assert (sent.sent_lines, sent.sent_bytes) == (1, len(message("e2", "e1", "more")))
    got = b.sync(hub, monkeypatch)
    assert got.received_lines == 1 and got.leaf_markers == []
    assert b.files() == a.files()


def test_a_session_continued_on_the_other_machine_gets_no_marker(
    two: tuple[Machine, Machine, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, hub = two
    new_session(a.session_path("s1"), "s1", message("e1", None, "hi"))
    a.sync(hub, monkeypatch)
    b.sync(hub, monkeypatch)
    append(b.session_path("s1"), message("b1", "e1", "from desk"))
    b.sync(hub, monkeypatch)
    report = a.sync(hub, monkeypatch)
    assert report.leaf_markers == []
    assert a.files() == b.files()


def test_diverged_sessions_end_with_the_union_and_a_marker_at_each_leaf(
    two: tuple[Machine, Machine, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, hub = two
    new_session(a.session_path("s1"), "s1", message("e1", None, "hi"))
    a.sync(hub, monkeypatch)
    b.sync(hub, monkeypatch)
    append(a.session_path("s1"), message("a1", "e1", "laptop"))
    append(b.session_path("s1"), message("b1", "e1", "desk"))
    for _ in range(3):
        a.sync(hub, monkeypatch)
        b.sync(hub, monkeypatch)
    on_a = entry_lines(a.session_path("s1").read_bytes())
    on_b = entry_lines(b.session_path("s1").read_bytes())
    shared = {k: v for k, v in on_a.items() if LEAF_MARKER.encode() not in v}
    assert shared == {k: v for k, v in on_b.items() if LEAF_MARKER.encode() not in v}
    assert set(shared) == {"e1", "a1", "b1"}
    last_a, last_b = (
        entries(a.session_path("s1").read_bytes())[-1],
        entries(b.session_path("s1").read_bytes())[-1],
    )
    assert (last_a["customType"], last_a["parentId"]) == (LEAF_MARKER, "a1")
    assert (last_b["customType"], last_b["parentId"]) == (LEAF_MARKER, "b1")
