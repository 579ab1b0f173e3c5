"""A round between two machines (two HOMEs on one host) through a dir hub: sessions made,
appended and continued on both sides arrive whole, once, byte for byte."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sessiontree.sync import LEAF_MARKER
from tests.sync_support import (
    Machine,
    append,
    entries,
    entry_lines,
    hub_files,
    message,
    new_session,
    some_hub,
)


@pytest.fixture(params=["dir", "pg"])
def two(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Machine, Machine, str]]:
    """Two machines and a hub: a dir, and a PostgreSQL database."""
    with some_hub(request.param, tmp_path) as hub:
        yield Machine(tmp_path, "laptop"), Machine(tmp_path, "desk"), hub


def test_a_session_made_on_one_machine_appears_on_the_other_byte_for_byte(
    two: tuple[Machine, Machine, str], monkeypatch: pytest.MonkeyPatch
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
    two: tuple[Machine, Machine, str], monkeypatch: pytest.MonkeyPatch
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
    two: tuple[Machine, Machine, str], monkeypatch: pytest.MonkeyPatch
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
    two: tuple[Machine, Machine, str], monkeypatch: pytest.MonkeyPatch
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


def _snapshot(hub: str, *roots: Path) -> dict[str, tuple[int, int]]:
    """(size, mtime_ns) of every file of the hub and under the roots (sync state aside)."""
    found = hub_files(hub)
    for root in roots:
        for p in sorted(root.rglob("*")):
            if p.is_file() and ".local" not in p.parts:
                st = p.stat()
                found[str(p)] = (st.st_size, st.st_mtime_ns)
    return found


def test_rounds_with_nothing_new_write_nothing_and_markers_never_answer_each_other(
    two: tuple[Machine, Machine, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, hub = two
    new_session(a.session_path("s1"), "s1", message("e1", None, "hi"))
    new_session(b.session_path("s2"), "s2", message("f1", None, "desk's own"))
    a.sync(hub, monkeypatch)
    b.sync(hub, monkeypatch)
    append(a.session_path("s1"), message("a1", "e1", "laptop"))
    append(b.session_path("s1"), message("b1", "e1", "desk"))
    for _ in range(3):
        a.sync(hub, monkeypatch)
        b.sync(hub, monkeypatch)
    before = _snapshot(hub, a.home, b.home)
    for _ in range(3):
        quiet = [a.sync(hub, monkeypatch), b.sync(hub, monkeypatch)]
        assert [r.changed for r in quiet] == [False, False]
        assert [r.bytes_read for r in quiet] == [0, 0]
    assert _snapshot(hub, a.home, b.home) == before


def test_a_marker_is_sent_before_the_first_entry_written_after_it(
    two: tuple[Machine, Machine, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, hub = two
    new_session(a.session_path("s1"), "s1", message("e1", None, "hi"))
    a.sync(hub, monkeypatch)
    b.sync(hub, monkeypatch)
    append(a.session_path("s1"), message("a1", "e1", "laptop"))
    append(b.session_path("s1"), message("b1", "e1", "desk"))
    a.sync(hub, monkeypatch)
    b.sync(hub, monkeypatch)  # b's file: ... b1 a1 <marker -> b1>
    marker = entries(b.session_path("s1").read_bytes())[-1]
    append(b.session_path("s1"), message("b2", marker["id"], "desk goes on"))
    b.sync(hub, monkeypatch)
    a.sync(hub, monkeypatch)
    on_a = entry_lines(a.session_path("s1").read_bytes())
    on_b = entry_lines(b.session_path("s1").read_bytes())
    assert on_a[marker["id"]] == on_b[marker["id"]]
    assert on_a["b2"] == on_b["b2"]
    assert list(on_a).index(marker["id"]) < list(on_a).index("b2")


def test_a_session_deleted_on_one_machine_stays_deleted_there_and_kept_on_the_other(
    two: tuple[Machine, Machine, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, hub = two
    new_session(a.session_path("s1"), "s1", message("e1", None, "hi"))
    a.sync(hub, monkeypatch)
    b.sync(hub, monkeypatch)
    a.session_path("s1").unlink()
    append(b.session_path("s1"), message("b1", "e1", "desk goes on"))
    for _ in range(2):
        a.sync(hub, monkeypatch)
        report = b.sync(hub, monkeypatch)
    assert not a.session_path("s1").exists()
    assert b.session_path("s1").exists()
    assert "b1" in entry_lines(b.session_path("s1").read_bytes())
    assert report.created == []


def test_an_oh_my_pi_title_line_is_carried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sessiontree.format import title_slot_line

    a, b = Machine(tmp_path, "a", ("omp",)), Machine(tmp_path, "b", ("omp",))
    hub = tmp_path / "hub"
    title = title_slot_line("Fix the parser", "user", "2026-12-01T10:00:00.000Z")
    path = a.session_path("s1", "omp")
    new_session(path, "s1", message("e1", None, "hi"), title=title)
    a.sync(hub, monkeypatch, ("omp",))
    b.sync(hub, monkeypatch, ("omp",))
    assert b.session_path("s1", "omp").read_bytes() == path.read_bytes()
    assert b.session_path("s1", "omp").read_bytes().startswith(title)


def test_a_local_file_whose_last_line_is_not_ended_waits_a_round(
    two: tuple[Machine, Machine, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, hub = two
    new_session(a.session_path("s1"), "s1", message("e1", None, "hi"))
    a.sync(hub, monkeypatch)
    b.sync(hub, monkeypatch)
    append(a.session_path("s1"), message("a1", "e1", "laptop"))
    a.sync(hub, monkeypatch)
    half = message("b1", "e1", "desk")
    append(b.session_path("s1"), half[:10])  # the agent is still writing it
    report = b.sync(hub, monkeypatch)
    assert report.merged == [] and report.skipped
    assert b.session_path("s1").read_bytes().endswith(half[:10])
    append(b.session_path("s1"), half[10:])
    b.sync(hub, monkeypatch)
    a.sync(hub, monkeypatch)
    for m in (a, b):
        assert {"e1", "a1", "b1"} <= set(entry_lines(m.session_path("s1").read_bytes()))


def test_one_machine_name_for_two_machines_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sessiontree.sync import MachineNameTakenError

    a, b = Machine(tmp_path, "one"), Machine(tmp_path, "two")
    b.name = "one"
    hub = tmp_path / "hub"
    a.sync(hub, monkeypatch)
    new_session(b.session_path("s1"), "s1", message("e1", None, "hi"))
    with pytest.raises(MachineNameTakenError, match="already used by another machine"):
        b.sync(hub, monkeypatch)
    assert not (hub / "sessions").exists()


def test_store_sync_syncs_that_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sessiontree import Store

    a, b = Machine(tmp_path, "a"), Machine(tmp_path, "b")
    hub = tmp_path / "hub"
    new_session(a.session_path("s1"), "s1", message("e1", None, "hi"))
    for m in (a, b):
        with m.env(monkeypatch), Store(m.agent_dir(), agent="pi") as store:
            store.sync(str(hub), machine=m.name)
    assert b.files() == a.files()


def test_a_session_of_an_agent_not_here_waits_in_the_hub_until_its_store_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = Machine(tmp_path, "a", ("pi", "omp")), Machine(tmp_path, "b", ("pi",))
    hub = tmp_path / "hub"
    new_session(a.session_path("o1", "omp"), "o1", message("e1", None, "omp's"))
    a.sync(hub, monkeypatch, ("pi", "omp"))
    report = b.sync(hub, monkeypatch, ("pi",))
    assert (
        "1 omp sessions",
        "no omp store here (its agent dir with a sessions/ dir); kept in the hub",
    ) in report.skipped
    (b.agent_dir("omp") / "sessions").mkdir(parents=True)
    b.sync(hub, monkeypatch, ("pi", "omp"))
    assert b.files("omp") == a.files("omp")
