"""The id `list` shows for an archived session, so that `restore` takes it: most agents
name a session's file by its id; Copilot CLI names its dir, Gemini CLI only the first 8
characters, and Codex, Copilot CLI, Gemini CLI and a Claude Code file not named by a
UUID say it in their first lines, which are read from the archive (the newest
version's first chunk) only for those."""

from __future__ import annotations

import json
import re
from typing import Any

from sessiontree.archive._chunks import get_chunk
from sessiontree.archive._manifests import load_manifest
from sessiontree.archive._model import ArchivedFile, ArchiveError
from sessiontree.archive._sessions import PI_FORMAT, find_session
from sessiontree.archive._storage import ArchiveStorage, opened
from sessiontree.format import file_session_id

_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_SESSION_ID = re.compile(rb'"sessionId"\s*:\s*"([^"\\]+)"')
_HEAD = 256 * 1024
"""Bytes of a session's first chunk read for its id: its header lines, not its whole
transcript (a chunk may be 4 MiB)."""


def name_id(file: ArchivedFile) -> str | None:
    """The id the session's path gives, None where only its lines say it."""
    parts = file.rel.split("/")
    stem = parts[-1].rsplit(".", 1)[0]
    if file.agent in PI_FORMAT:
        return file_session_id(stem) or stem
    if file.agent == "opencode":
        return stem
    if file.agent == "claude" and _UUID.fullmatch(stem):
        return stem.lower()
    if file.agent == "copilot" and parts[-1] == "events.jsonl" and _UUID.fullmatch(parts[-2]):
        return parts[-2]
    return None


def _records(head: bytes) -> list[dict[str, Any]]:
    records = []
    for line in head.splitlines()[:50]:
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            records.append(value)
    return records


def _text(value: object, key: str) -> str | None:
    found = value.get(key) if isinstance(value, dict) else None
    return found if isinstance(found, str) and found else None


def content_id(file: ArchivedFile, head: bytes) -> str:
    """The id `list` shows for a session whose path does not give it, from `head` (its
    first bytes), as each agent's reader takes it."""
    parts = file.rel.split("/")
    stem = parts[-1].rsplit(".", 1)[0]
    records = _records(head)
    found: str | None = None
    if file.agent == "claude":
        found = next(
            (s.lower() for r in records if (s := _text(r, "sessionId")) and _UUID.fullmatch(s)),
            None,
        )
    elif file.agent == "codex":
        first = records[0] if records else {}
        if "payload" not in first and "type" not in first:  # the legacy header line
            found = _text(first, "id")
        for record in records:
            if found is None and record.get("type") == "session_meta":
                found = _text(record.get("payload"), "id")
        rollout = _UUID.findall(stem)
        found = found or (rollout[-1].lower() if rollout else None)
    elif file.agent == "copilot":
        for record in records:
            if found is None and record.get("type") == "session.start":
                found = _text(record.get("data"), "sessionId")
        found = found or (parts[-2] if parts[-1] == "events.jsonl" else None)
    elif file.agent == "gemini":
        found = next(
            (_text(r, "sessionId") for r in records if _text(r, "projectHash") is not None),
            None,
        )
        match = _SESSION_ID.search(head)  # a document: `{"sessionId": ...` over many lines
        if found is None and match is not None:
            found = match.group(1).decode("utf-8", "replace")
    return found or stem


def _head(place: ArchiveStorage, file: ArchivedFile) -> bytes:
    manifest = load_manifest(place, file.key) or {}
    chunks = manifest.get("chunks")
    if not isinstance(chunks, list) or not chunks:
        return b""
    try:
        digest, length = chunks[0]
        return get_chunk(place, str(digest), int(length))[:_HEAD]
    except (ArchiveError, OSError, TypeError, ValueError):
        return b""  # a damaged chunk: the session is still found by its name


def find_archived_session(
    archive: str, every: list[ArchivedFile], session: str
) -> tuple[ArchivedFile, str]:
    """The archived session `session` names (its path, file name or id as `list` shows
    it, of its store or of the archive read as one, or a prefix of one) and its id
    (ArchiveError: none, or several, named with their ids)."""
    with opened(archive) as place:
        known: dict[str, str] = {}

        def id_of(file: ArchivedFile) -> str:
            if file.key not in known:
                known[file.key] = name_id(file) or content_id(file, _head(place, file))
            return known[file.key]

        found = find_session(every, session, id_of)
        return found, id_of(found)
