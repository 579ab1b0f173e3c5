"""Push: only complete lines with ids the hub lacks go, each once; a file not at the
current format version, or whose header is not its name's, stays here and is named."""

from __future__ import annotations

from pathlib import Path

import pytest

from sessiontree.format import title_slot_line
from tests.sync_support import Machine, append, header, hub_files, message, new_session


def _log(hub: Path, machine: Machine, sid: str) -> bytes:
    stem = machine.session_path(sid).stem
    return (
        hub
        / "sessions"
        / "pi"
        / machine.session_path(sid).parent.name
        / stem
        / f"{machine.name}.jsonl"
    ).read_bytes()


def test_lines_that_are_no_entries_are_not_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, hub = Machine(tmp_path, "a"), tmp_path / "hub"
    path = a.session_path("s1")
    new_session(path, "s1", message("e1", None, "hi"), b"{broken\n", b'{"type":"note"}\n')
    report = a.sync(hub, monkeypatch)
    assert _log(hub, a, "s1") == header("s1") + message("e1", None, "hi")
    assert len([w for w, _ in report.skipped if str(path) in w]) == 2


def test_a_file_rewritten_with_its_lines_sends_none_of_them_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, hub = Machine(tmp_path, "a", ("omp",)), tmp_path / "hub"
    path = a.session_path("s1", "omp")
    slot = title_slot_line("first", "auto", "2026-12-01T10:00:00.000Z")
    new_session(path, "s1", message("e1", None, "hi"), title=slot)
    a.sync(hub, monkeypatch, ("omp",))
    before = hub_files(hub)
    # oh-my-pi renames in place: the fixed-width title line rewritten, same size
    renamed = title_slot_line("second", "user", "2026-12-01T10:05:00.000Z")
    path.write_bytes(renamed + path.read_bytes()[len(slot) :])
    report = a.sync(hub, monkeypatch, ("omp",))
    assert report.sent_lines == 0 and hub_files(hub) == before


def test_an_append_reads_only_the_new_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, hub = Machine(tmp_path, "a"), tmp_path / "hub"
    path = a.session_path("s1")
    new_session(path, "s1", *(message(f"e{i}", None, "x" * 1000) for i in range(100)))
    a.sync(hub, monkeypatch)
    more = message("n1", "e99", "new")
    append(path, more)
    report = a.sync(hub, monkeypatch)
    assert report.bytes_read == len(more)
    assert report.sent_bytes == len(more)


def test_a_file_of_an_older_format_version_is_not_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, hub = Machine(tmp_path, "a"), tmp_path / "hub"
    path = a.session_path("s1")
    path.parent.mkdir(parents=True)
    path.write_bytes(
        header("s1").replace(b'"version":3', b'"version":2') + message("e1", None, "x")
    )
    report = a.sync(hub, monkeypatch)
    assert report.sent_lines == 0
    assert any("sessiontree migrate" in why for _, why in report.skipped)


def test_a_file_whose_header_is_not_its_names_is_not_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, hub = Machine(tmp_path, "a"), tmp_path / "hub"
    path = a.session_path("s1")
    path.parent.mkdir(parents=True)
    path.write_bytes(header("other") + message("e1", None, "x"))
    report = a.sync(hub, monkeypatch)
    assert report.sent_lines == 0
    assert any("header's id" in why for _, why in report.skipped)
