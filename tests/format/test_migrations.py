"""Migrations v1 -> v2 -> v3, including the real v1 file from the ecosystem."""

from __future__ import annotations

import itertools
import shutil
import time
from pathlib import Path

from sessiontree import (
    CURRENT_SESSION_VERSION,
    BlobStore,
    SessionManager,
    load_entries_from_file,
    migrate_session_entries,
    serialize_entry,
)
from sessiontree.session import entry_line
from tests.conftest import real_file

V1_FIXTURE = "pi-v1-large-session.jsonl"


def v1_entries() -> list[dict[str, object]]:
    return [
        {"type": "session", "id": "s1", "timestamp": "2025-01-01T00:00:00.000Z", "cwd": "/w"},
        {
            "type": "message",
            "timestamp": "2025-01-01T00:00:01.000Z",
            "message": {"role": "user", "content": "a"},
        },
        {
            "type": "message",
            "timestamp": "2025-01-01T00:00:02.000Z",
            "message": {"role": "hookMessage", "content": "h"},
        },
        {
            "type": "compaction",
            "timestamp": "2025-01-01T00:00:03.000Z",
            "summary": "s",
            "firstKeptEntryIndex": 2,
            "tokensBefore": 10,
        },
    ]


def test_v1_gets_linear_ids_and_converts_first_kept_index() -> None:
    entries = v1_entries()
    assert migrate_session_entries(entries) is True
    header, first, second, compaction = entries
    assert header["version"] == CURRENT_SESSION_VERSION
    assert list(header) == ["type", "id", "timestamp", "cwd", "version"]  # appended last
    assert first["parentId"] is None
    assert second["parentId"] == first["id"]
    assert compaction["parentId"] == second["id"]
    # The index counts the header: index 2 is the second message.
    assert compaction["firstKeptEntryId"] == second["id"]
    assert "firstKeptEntryIndex" not in compaction
    assert list(compaction)[-3:] == ["id", "parentId", "firstKeptEntryId"]
    assert second["message"]["role"] == "custom"  # type: ignore[index]
    assert all(len(str(e["id"])) == 8 for e in entries[1:])


def test_index_pointing_at_header_or_later_entry_sets_nothing() -> None:
    entries = v1_entries()
    entries[3]["firstKeptEntryIndex"] = 0
    migrate_session_entries(entries)
    assert "firstKeptEntryId" not in entries[3]


def test_v2_to_v3_only_renames_hook_messages() -> None:
    entries: list[dict[str, object]] = [
        {"type": "session", "version": 2, "id": "s", "timestamp": "t", "cwd": "/"},
        {
            "type": "message",
            "id": "a",
            "parentId": None,
            "timestamp": "t",
            "message": {"role": "hookMessage"},
        },
        {
            "type": "message",
            "id": "b",
            "parentId": "a",
            "timestamp": "t",
            "message": {"role": "user"},
        },
    ]
    assert migrate_session_entries(entries) is True
    assert entries[0]["version"] == 3
    assert list(entries[0]) == ["type", "version", "id", "timestamp", "cwd"]  # updated in place
    assert entries[1]["message"] == {"role": "custom"}
    assert entries[2]["message"] == {"role": "user"}


def test_current_version_is_untouched() -> None:
    entries: list[dict[str, object]] = [
        {"type": "session", "version": 3, "id": "s", "timestamp": "t", "cwd": "/"},
        {
            "type": "message",
            "id": "a",
            "parentId": None,
            "timestamp": "t",
            "message": {"role": "hookMessage"},
        },
    ]
    assert migrate_session_entries(entries) is False
    assert entries[1]["message"] == {"role": "hookMessage"}


def test_real_v1_file_migrates_and_builds_a_sensible_context(tmp_path: Path) -> None:
    fixture = real_file(V1_FIXTURE)
    path = tmp_path / "v1.jsonl"
    shutil.copy(fixture, path)
    raw_lines = fixture.read_text().splitlines()
    started = time.perf_counter()
    sm = SessionManager.open(str(path))
    ctx = sm.build_session_context()
    elapsed = time.perf_counter() - started
    entries = sm.get_entries()
    assert len(entries) == len(raw_lines) - 1  # every line kept
    # A linear chain: one root, each entry the parent of the next.
    assert entries[0]["parentId"] is None
    assert all(b["parentId"] == a["id"] for a, b in itertools.pairwise(entries))
    assert sm.get_leaf_id() == entries[-1]["id"]
    messages = [e for e in entries if e["type"] == "message"]
    assert len(ctx.messages) == len(messages) == 914
    assert ctx.messages[0]["content"][0]["text"] == "/mode"
    assert ctx.models["default"].startswith("anthropic/")
    assert ctx.thinking_level in {"off", "minimal", "low", "medium", "high", "xhigh"}
    # Migrated on open: the file on disk is now v3 and loads without migrating again.
    reloaded = load_entries_from_file(str(path))
    assert reloaded[0]["version"] == 3
    assert [e["id"] for e in reloaded[1:]] == [e["id"] for e in entries]
    assert path.read_text().splitlines()[1] == serialize_entry(reloaded[1])
    sm.close()
    assert elapsed < 30  # sanity only; the figure that matters is in the benchmarks


def test_read_only_open_does_not_migrate_the_file(tmp_path: Path) -> None:
    path = tmp_path / "v1.jsonl"
    shutil.copy(real_file(V1_FIXTURE), path)
    before = path.read_bytes()
    sm = SessionManager.open(str(path), read_only=True)
    assert sm.get_header()["version"] == 3  # type: ignore[index]
    assert len(sm.build_session_context().messages) == 914
    sm.close()
    assert path.read_bytes() == before


def test_a_migration_writes_every_line_through_the_persistence_step(tmp_path: Path) -> None:
    """Opening a v1 file for writing (xcsh's store) rewrites it as oh-my-pi writes each
    migrated entry: transient keys dropped, strings over 500,000 characters cut, images
    of 1024+ characters in `blobs/`."""
    image = {"type": "image", "data": "QUJD" * 400, "mimeType": "image/png"}
    call = {"type": "toolCall", "id": "c1", "name": "bash", "arguments": {}, "partialJson": "{"}
    entries = [
        *v1_entries()[:2],
        {
            "type": "message",
            "timestamp": "2025-01-01T00:00:02.000Z",
            "message": {"role": "assistant", "content": [call], "jsonlEvents": [1, 2]},
        },
        {
            "type": "message",
            "timestamp": "2025-01-01T00:00:03.000Z",
            "message": {"role": "user", "content": [{"type": "text", "text": "x" * 500_001}]},
        },
        {
            "type": "message",
            "timestamp": "2025-01-01T00:00:04.000Z",
            "message": {"role": "user", "content": [image]},
        },
    ]
    path = tmp_path / "agent" / "sessions" / "--w--" / "v1.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join(serialize_entry(e) + "\n" for e in entries))
    blobs = BlobStore(str(tmp_path / "agent" / "blobs"))
    with SessionManager.open(str(path), blob_store=blobs) as sm:
        migrated = sm.get_entries()
    lines = path.read_bytes().splitlines()
    assert lines[1:] == [entry_line(e, blobs)[:-1] for e in migrated]
    text = path.read_text()
    assert "partialJson" not in text
    assert "jsonlEvents" not in text
    assert "x" * 500_000 not in text
    assert "QUJD" * 400 not in text
    assert "blob:sha256:" in text
