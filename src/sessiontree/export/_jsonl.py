"""A path of a session as a new session file (`export_jsonl`), and the path itself."""

from __future__ import annotations

import re

from sessiontree.errors import EntryNotFoundError
from sessiontree.format import Entry, branch_with_labels, new_header, serialize_entry_bytes
from sessiontree.session import SessionManager

_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]*")
_RASTER = {"image/png", "image/jpeg", "image/jpg", "image/gif", "image/webp"}


# ---------------------------------------------------------------------- paths


def _path(sm: SessionManager, leaf_id: str | None) -> list[Entry]:
    leaf = leaf_id if leaf_id is not None else sm.get_leaf_id()
    if leaf is None:
        return []
    if sm.get_entry(leaf) is None:
        raise EntryNotFoundError(leaf)
    return sm.get_branch(leaf)


def branch_entries(sm: SessionManager, leaf_id: str | None = None) -> list[Entry]:
    """The root -> leaf path without label entries, then the path's labels re-created.

    The same selection `create_branched_session` keeps, as new dicts.
    """
    return [dict(e) for e in branch_with_labels(_path(sm, leaf_id), sm.get_labels())]


def export_jsonl(sm: SessionManager, leaf_id: str | None = None) -> bytes:
    """The root -> leaf path as the bytes of a new session file (v3, new id)."""
    entries = branch_entries(sm, leaf_id)
    source = sm.get_header() or {}
    source_kind = source.get("titleSource")
    header = new_header(
        source.get("cwd", sm.get_cwd()),
        sm.get_session_file() or sm.get_session_id(),
        title=sm.get_session_name() or None,
        title_source=source_kind if isinstance(source_kind, str) else None,
    )
    lines = [serialize_entry_bytes(header), *(serialize_entry_bytes(e) for e in entries)]
    return b"\n".join(lines) + b"\n"
