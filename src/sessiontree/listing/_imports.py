"""The import records in a store's sessions: each `foreign_session_import` entry's data
and line number, kept in one place for everything that asks.

`sessiontree.foreign.find_imports` asks what was imported before (source, id, path,
size); the usage report (`sessiontree.reports._usage`) asks which replies an import
copied (the marker's line, version and copied ids). Both read `import_records`, cached
per file identity in the listing cache's file (`_values`, family ``foreign_imports``):
the files are planned with `plan_changes`, an unchanged one is not read, any other is
read again whole (a marker is rare and its line is found by a byte search, so a read
costs little more than the bytes).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any, Final

from sessiontree.format import ImportMarker, import_marker, loads_line
from sessiontree.format._usage import IMPORT_CUSTOM_TYPE
from sessiontree.listing._changes import Identity, plan_changes
from sessiontree.listing._marks import Stat, stat_identity
from sessiontree.listing._values import IdentityCache, identity_family
from sessiontree.storage import SessionStorage, read_chunks

__all__ = ["IMPORT_RECORDS", "ImportRecord", "import_markers", "import_records"]

IMPORT_RECORDS: Final = identity_family("foreign_imports", 2)  # 2: each record with its line
"""The import records of each session file, as [[line, data], ...]."""

ImportRecord = tuple[int, dict[str, Any]]
"""A `foreign_session_import` entry: its line number (1-based, every line counted) and
its `data` object."""

_MARKER = b'"' + IMPORT_CUSTOM_TYPE.encode() + b'"'


def _records_in(chunks: Iterable[bytes]) -> list[ImportRecord]:
    """The import records in a file's bytes (a line without the marker is not parsed)."""
    found: list[ImportRecord] = []
    pending = b""
    number = 0
    for chunk in chunks:
        data = pending + chunk
        lines = data.split(b"\n")
        pending = lines.pop()
        for line in lines:
            number += 1
            if _MARKER in line:
                _collect(line, number, found)
    if pending and _MARKER in pending:
        _collect(pending, number + 1, found)
    return found


def _collect(line: bytes, number: int, found: list[ImportRecord]) -> None:
    try:
        entry = loads_line(line)
    except (ValueError, UnicodeError):
        return
    if (
        isinstance(entry, dict)
        and entry.get("type") == "custom"
        and entry.get("customType") == IMPORT_CUSTOM_TYPE
        and isinstance(entry.get("data"), dict)
    ):
        found.append((number, entry["data"]))


def _cached(value: object) -> list[ImportRecord] | None:
    """The records a cached value holds; None when it is not what this version keeps."""
    if not isinstance(value, list):
        return None
    out: list[ImportRecord] = []
    for item in value:
        if not (isinstance(item, list) and len(item) == 2):
            return None
        line, data = item
        if not isinstance(line, int) or not isinstance(data, dict):
            return None
        out.append((line, data))
    return out


def import_records(
    paths: Sequence[str],
    storage: SessionStorage,
    agent_dir: str | None,
    *,
    cache: bool,
) -> dict[str, list[ImportRecord]]:
    """The import records of each of `paths` that could be read, in file order.

    `cache`: the paths are this host's files, whose records are kept in `agent_dir`'s
    listing cache (rows of files deleted since are forgotten there).
    """
    listed: list[Stat] = []
    for path in paths:
        try:
            if cache:  # a host file's identity, with its ctime
                identity: Identity = stat_identity(os.stat(path))
            else:
                st = storage.stat(path)
                identity = (st.size, st.mtime_ns or int(st.mtime_ms * 1e6), st.ino, 0)
        except (OSError, ValueError):
            continue
        listed.append((path, *identity))
    table = IdentityCache(agent_dir if cache else None, IMPORT_RECORDS)
    plan = plan_changes(listed, table.fetch(), set(paths))
    found: dict[str, list[ImportRecord]] = {}
    to_read = [s for s, _ in plan.to_read]
    for s, row in plan.unchanged:
        records = _cached(row.value)
        if records is None:
            to_read.append(s)
        else:
            found[s[0]] = records
    fresh: list[tuple[str, Identity, Any]] = []
    for s in to_read:
        try:
            found[s[0]] = _records_in(read_chunks(storage, s[0]))
        except OSError:
            continue
        fresh.append((s[0], s[1:], [list(record) for record in found[s[0]]]))
    # Rows of other stores' files share the table: only those of deleted files go.
    gone = [p for p in plan.gone if not os.path.lexists(p)]
    if cache and (fresh or gone):
        table.store(fresh, gone)
    return found


def import_markers(records: Iterable[ImportRecord]) -> list[ImportMarker]:
    """The usage report's view of import records (`format.import_marker`: those that
    name a source id)."""
    out = []
    for line, data in records:
        entry = {"type": "custom", "customType": IMPORT_CUSTOM_TYPE, "data": data}
        marker = import_marker(entry, line)
        if marker is not None:
            out.append(marker)
    return out
