"""`entries_without`: a session's entries with some removed, the tree kept whole.

What `SessionManager.remove_entries` writes: a child of a removed entry takes the
nearest kept ancestor as its parent (None: it becomes a root), a label of a removed
entry goes with it, a compaction whose first kept entry goes keeps from the next kept
entry of its path on, and the leaf moves up as a child does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sessiontree.format import Entry

__all__ = ["entries_without"]


def entries_without(
    entries: list[Entry], removing: set[str], replace: Mapping[str, Entry], leaf: str | None
) -> tuple[list[Entry], list[str], Any]:
    """(The entries kept, in order, with `replace`'s entries in place of those ids
    (their id and parent kept); the ids removed, in order; the new leaf). `removing`:
    ids the entries have; the labels of those entries go too."""
    wanted = set(removing)
    for entry in entries:
        if entry.get("type") == "label" and entry.get("targetId") in wanted:
            wanted.add(str(entry["id"]))
    parents = {str(e.get("id")): e.get("parentId") for e in entries}

    def kept_ancestor(entry_id: Any) -> Any:
        seen: set[str] = set()
        while entry_id in wanted and entry_id not in seen:
            seen.add(entry_id)
            entry_id = parents.get(entry_id)
        return None if entry_id in wanted else entry_id

    kept: list[Entry] = []
    removed: list[str] = []
    for entry in entries:
        entry_id: Any = entry.get("id")
        if entry_id in wanted:
            removed.append(str(entry_id))
            continue
        parent = entry.get("parentId")
        if entry_id in replace:
            entry = {**replace[entry_id], "id": entry_id, "parentId": parent}
        if parent in wanted:
            entry = {**entry, "parentId": kept_ancestor(parent)}
        first_kept = entry.get("firstKeptEntryId")
        if entry.get("type") == "compaction" and first_kept in wanted:
            # The context keeps from the next kept entry of its path on.
            path: list[Any] = []
            current, seen = parent, set()
            while isinstance(current, str) and current not in seen:
                if current == first_kept:
                    later = [i for i in path if i not in wanted]
                    if later:
                        entry = {**entry, "firstKeptEntryId": later[-1]}
                    break
                seen.add(current)
                path.append(current)
                current = parents.get(current)
        kept.append(entry)
    return kept, removed, kept_ancestor(leaf)
