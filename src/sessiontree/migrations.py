"""Migrations of old session files to the current version.

An ordered list of pure steps over the raw entry list (header first), each
mutating in place. Steps are never reordered or deleted: old files in the wild
depend on each running exactly as it did.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from .entries import CURRENT_SESSION_VERSION, Entry

__all__ = ["migrate_session_entries", "session_version"]


def _v1_to_v2(entries: list[Entry]) -> None:
    """v1 had no tree: give each entry an id and chain them in file order.

    `firstKeptEntryIndex` counted positions in the raw entry list *including the
    header at index 0*; only an entry that already received its id (one before
    the compaction) can be named, as in the reference implementation.
    """
    ids: set[str] = set()
    prev_id: str | None = None
    # Ids derive from the session id, so reading the same v1 file twice (say, in a
    # read-only inspection) names its entries the same way both times.
    header_id = next((e.get("id") for e in entries if e.get("type") == "session"), None)
    rng = random.Random(f"v1:{header_id}")
    for entry in entries:
        if entry.get("type") == "session":
            entry["version"] = 2
            continue
        entry_id = f"{rng.getrandbits(32):08x}"
        while entry_id in ids:
            entry_id = f"{rng.getrandbits(32):08x}"
        ids.add(entry_id)
        entry["id"] = entry_id
        entry["parentId"] = prev_id
        prev_id = entry_id
        if entry.get("type") == "compaction" and "firstKeptEntryIndex" in entry:
            index = entry["firstKeptEntryIndex"]
            if isinstance(index, int) and not isinstance(index, bool) and 0 <= index < len(entries):
                target = entries[index]
                target_id = target.get("id")
                if target.get("type") != "session" and isinstance(target_id, str):
                    entry["firstKeptEntryId"] = target_id
            del entry["firstKeptEntryIndex"]


def _v2_to_v3(entries: list[Entry]) -> None:
    """v3 renamed the legacy message role `hookMessage` to `custom`."""
    for entry in entries:
        if entry.get("type") == "session":
            entry["version"] = 3
            continue
        if entry.get("type") == "message":
            message = entry.get("message")
            if isinstance(message, dict) and message.get("role") == "hookMessage":
                message["role"] = "custom"


_STEPS: list[tuple[int, Callable[[list[Entry]], None]]] = [
    (2, _v1_to_v2),
    (3, _v2_to_v3),
]


def session_version(entries: list[Entry]) -> int:
    """The version of the session whose raw entries are given (missing means 1)."""
    for entry in entries:
        if entry.get("type") == "session":
            version = entry.get("version")
            if isinstance(version, (int, float)) and not isinstance(version, bool):
                return int(version)
            return 1
    return CURRENT_SESSION_VERSION


def migrate_session_entries(entries: list[Entry]) -> bool:
    """Bring raw entries (header included) to the current version, in place.

    Returns True when any step ran (the file then needs a rewrite).
    """
    version = session_version(entries)
    changed = False
    for target, step in _STEPS:
        if version < target:
            step(entries)
            changed = True
    return changed
