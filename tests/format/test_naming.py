"""One naming rule: `get_session_name()`, `SessionInfo.title` and the PostgreSQL listing
agree on every file (SessionInfo alone falls back to the compaction's short summary)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessiontree import SessionManager
from sessiontree.format import (
    TITLE_SLOT_BYTES,
    entry_name,
    head_kind,
    head_title,
    head_title_source,
    header_in,
    listing_title,
    new_header,
    session_name,
    title_slot_line,
)
from sessiontree.layout import store_parts
from sessiontree.listing import list_sessions
from tests.conftest import examples

names = st.one_of(st.none(), st.sampled_from(["", "  ", "Alpha", " Beta ", "Gamma"]))


def _file(
    header_title: str | None,
    slot_title: str | None,
    name_entries: list[tuple[str, object]],
    short: str | None,
) -> bytes:
    header: dict[str, Any] = {
        "type": "session",
        "version": 3,
        "id": "0cb0000000000001",
        "timestamp": "2026-01-01T00:00:00.000Z",
        "cwd": "/p",
    }
    if header_title is not None:
        header["title"] = header_title
    lines = [json.dumps(header, separators=(",", ":")).encode() + b"\n"]
    if slot_title is not None:
        lines.insert(0, title_slot_line(slot_title, "user", "2026-01-01T00:00:00.000Z"))
    parent = None
    for i, (kind, value) in enumerate(name_entries):
        entry: dict[str, Any] = {"type": kind, "id": f"{i:08x}", "parentId": parent}
        entry["timestamp"] = "2026-01-01T00:00:01.000Z"
        entry["name" if kind == "session_info" else "title"] = value
        lines.append(json.dumps(entry, separators=(",", ":")).encode() + b"\n")
        parent = entry["id"]
    if short is not None:
        compaction = {
            "type": "compaction",
            "id": "ffffffff",
            "parentId": parent,
            "timestamp": "2026-01-01T00:00:02.000Z",
            "summary": "s",
            "shortSummary": short,
            "firstKeptEntryId": "ffffffff",
            "tokensBefore": 1,
        }
        lines.append(json.dumps(compaction, separators=(",", ":")).encode() + b"\n")
    return b"".join(lines)


@settings(max_examples=examples(150), deadline=None)
@given(
    header_title=names,
    slot_title=names,
    name_entries=st.lists(
        st.tuples(st.sampled_from(["session_info", "title_change"]), st.one_of(names, st.just(3))),
        max_size=3,
    ),
    short=names,
)
def test_the_manager_and_the_listing_name_every_file_alike(
    header_title: str | None,
    slot_title: str | None,
    name_entries: list[tuple[str, object]],
    short: str | None,
) -> None:
    root = tempfile.mkdtemp(prefix="st-naming-")
    try:
        directory = os.path.join(root, "sessions", "--p--")
        os.makedirs(directory)
        path = os.path.join(directory, "2026-01-01T00-00-00-000Z_0cb0000000000001.jsonl")
        with open(path, "wb") as f:
            f.write(_file(header_title, slot_title, name_entries, short))
        with SessionManager.open(path, read_only=True) as sm:
            name = sm.get_session_name()
        (info,) = list_sessions("/p", store_parts(), session_dir=directory, cache=False)
        assert info.title == listing_title(name, short)
        # The rule, spelled out once more: the header's title (the slot replacing it)...
        head = slot_title if slot_title is not None else header_title
        if head is not None and head.strip():
            assert name == head
        else:  # ... else the latest name entry, a blank one clearing the name.
            latest = (
                entry_name(
                    {
                        "type": name_entries[-1][0],
                        "name": name_entries[-1][1],
                        "title": name_entries[-1][1],
                    }
                )
                if name_entries
                else None
            )
            assert name == (latest or None)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_session_name_and_listing_title() -> None:
    assert session_name("Header", "Entry") == "Header"
    assert session_name("  ", "Entry") == "Entry"
    assert session_name(None, "") is None  # a blank name entry clears
    assert listing_title(None, "short") == "short"
    assert listing_title(None, "  ") is None


def test_the_slot_replaces_the_header_title_and_its_source() -> None:
    # Rule 1 as the listing, PostgreSQL's metadata and SessionHead all apply it.
    assert head_title(False, None, "Header") == "Header"
    assert head_title(True, "Slot", "Header") == "Slot"
    assert head_title(True, "", "Header") is None  # an empty slot removes the title
    assert head_title(True, None, "Header") is None
    assert head_title(False, "Slot", 3) is None
    assert head_title_source(True, "user", "auto") == "user"
    assert head_title_source(True, None, "auto") is None
    assert head_title_source(False, "user", "auto") == "auto"


def test_new_header_orders_its_keys_as_the_reference_writes_them() -> None:
    header = new_header("/p", "/parent.jsonl", title="T", title_source="user")
    assert list(header) == [
        "type",
        "version",
        "id",
        "timestamp",
        "cwd",
        "title",
        "titleSource",
        "parentSession",
    ]
    given = new_header("/p", session_id="0cb0000000000001", timestamp="2026-01-01T00:00:00.000Z")
    assert given == {
        "type": "session",
        "version": 3,
        "id": "0cb0000000000001",
        "timestamp": "2026-01-01T00:00:00.000Z",
        "cwd": "/p",
    }
    assert "titleSource" not in new_header("/p", title_source="user")  # no title, no source


def test_head_kind_and_header_in() -> None:
    slot = json.loads(title_slot_line("T", None, "2026-01-01T00:00:00.000Z"))
    assert len(title_slot_line("T", None, "x")) == TITLE_SLOT_BYTES
    assert head_kind(slot, True) == "slot" and head_kind(slot, False) == "invalid"
    assert head_kind({"type": "session", "id": "x"}, False) == "header"
    text = title_slot_line("T", None, "x").decode() + '{"type":"session","id":"s"}\n'
    assert header_in(text) == {"type": "session", "id": "s"}
    assert header_in('garbage\n{"type":"session","id":"s"}\n') == {"type": "session", "id": "s"}
    assert header_in('{"type":"message"}\n{"type":"session","id":"s"}\n') is None


@pytest.mark.parametrize("kind", ["session_info", "title_change"])
def test_a_rename_here_shows_over_older_name_entries(tmp_path: Any, kind: str) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(_file(None, None, [(kind, "Old")], None))
    with SessionManager.open(str(path), breadcrumb=False) as sm:
        assert sm.get_session_name() == "Old"
        assert sm.set_session_name("New", "user")
        assert sm.get_session_name() == "New"
    (info,) = list_sessions("/p", store_parts(), session_dir=str(tmp_path), cache=False)
    assert info.title == "New"
