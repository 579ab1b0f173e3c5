"""OpenCode's database sessions, archived as the documents `opencode export` writes
(not files of their own)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from sessiontree.archive._model import ArchiveReport
from sessiontree.archive._sources import listdir


@dataclass(frozen=True, slots=True)
class VirtualFile:
    """A session that is not a file of its own (an OpenCode database's): the document
    it is kept as, and what changes when it does."""

    data: bytes
    signal: list[int]
    st_mtime_ns: int
    st_ino: int = 0

    @property
    def st_size(self) -> int:
        return len(self.data)


def opencode_sessions(
    home: str, report: ArchiveReport, unreadable: set[str]
) -> Iterator[tuple[str, Callable[[], VirtualFile | None], list[int]]]:
    """Each session of OpenCode's databases in `home`: its path in the archive
    (`export/<db>/<session id>.json`, as `opencode export` writes it and `opencode
    import` takes it), how to read it, and its change signal. A database that cannot
    be read now is passed over (named in `report.skipped`)."""
    from sessiontree.foreign.opencode_db import DatabaseError, list_db_sessions, load_db_session

    for name in sorted(listdir(home)):
        if not (name.startswith("opencode") and name.endswith(".db")):
            continue
        database = os.path.join(home, name)
        if os.path.islink(database) or not os.path.isfile(database):
            continue
        try:
            rows = list_db_sessions(database)
        except (DatabaseError, OSError) as exc:
            report.skipped.append(f"{database}: {exc}")
            unreadable.add(f"export/{name}/")
            continue
        for row in rows:
            signal = [row.messages, row.updated_ms, row.parts, row.parts_updated]

            def read(
                row_id: str = row.id, updated: int = row.updated_ms, database: str = database
            ) -> VirtualFile | None:
                try:
                    session = load_db_session(database, row_id, children=False)
                except (DatabaseError, OSError) as exc:
                    report.skipped.append(f"{database}/{row_id}: {exc}")
                    return None
                return VirtualFile(
                    _export_document(session.info, session.messages), [], updated * 1_000_000
                )

            yield f"export/{name}/{row.id}.json", read, signal


def _export_document(
    info: dict[str, Any], messages: list[tuple[dict[str, Any], list[dict[str, Any]]]]
) -> bytes:
    """`opencode export`'s document, one message a line (so that a session's unchanged
    messages are chunks already stored)."""

    def dump(value: Any) -> str:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))

    lines = [f'{{"info":{dump(info)},"messages":[']
    for number, (message, parts) in enumerate(messages):
        comma = "," if number < len(messages) - 1 else ""
        lines.append(dump({"info": message, "parts": parts}) + comma)
    lines.append("]}")
    return ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")


_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
"""An id of an export document that may name a file: one plain path component (the
document is the archive's, not trusted)."""


def export_as_storage(data: bytes) -> list[tuple[str, bytes]] | None:
    """An `opencode export` document as OpenCode's JSON files (`storage/session/<project>/
    <id>.json`, `storage/message/<id>/`, `storage/part/<message id>/`), which OpenCode's
    store is read from: (path under its home, bytes), the session's own file last. None
    when it is no such document, or an id in it is not a plain name."""
    try:
        document = json.loads(data)
    except (ValueError, RecursionError):  # a document nested deeper than the parser goes
        return None
    info = document.get("info") if isinstance(document, dict) else None
    messages = document.get("messages") if isinstance(document, dict) else None
    if not isinstance(info, dict) or not isinstance(messages, list):
        return None

    def named(value: object) -> str | None:
        found = value.get("id") if isinstance(value, dict) else None
        return found if isinstance(found, str) and _ID.fullmatch(found) else None

    session_id, project = named(info), info.get("projectID") or "global"
    if session_id is None or not isinstance(project, str) or not _ID.fullmatch(project):
        return None
    files = []
    for message in messages:
        message_info = message.get("info") if isinstance(message, dict) else None
        message_id = named(message_info)
        parts = message.get("parts") if isinstance(message, dict) else None
        if message_id is None or not isinstance(parts, list):
            return None
        files.append((f"storage/message/{session_id}/{message_id}.json", _dumped(message_info)))
        for part in parts:
            part_id = named(part)
            if part_id is None:
                return None
            files.append((f"storage/part/{message_id}/{part_id}.json", _dumped(part)))
    files.append((f"storage/session/{project}/{session_id}.json", _dumped(info)))
    return files


def _dumped(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, indent=2).encode("utf-8", "surrogatepass")
