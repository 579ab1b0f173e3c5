"""Migrations of old session files to the current version.

An ordered list of pure steps over the raw entry list (header first), each
mutating in place. Steps are never reordered or deleted: old files in the wild
depend on each running exactly as it did.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

from sessiontree.format._entries import CURRENT_SESSION_VERSION, Entry

__all__ = ["header_needs_migration", "migrate_session_entries", "session_version"]


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


def _js_to_number(value: object) -> float:
    """JavaScript's `Number(value)` for the values JSON can hold."""
    if value is None:
        return 0.0
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, list):  # ToPrimitive joins the items with ","
        text = ",".join("" if v is None else str(_js_to_number(v)) for v in value)
        return _js_to_number(text) if len(value) <= 1 else math.nan
    if not isinstance(value, str):
        return math.nan  # an object: "[object Object]"
    text = value.strip()
    if not text:
        return 0.0
    try:
        if text[:2].lower() in ("0x", "0o", "0b"):
            return float(int(text, 0))
        if text.lstrip("+-") == "Infinity":
            return -math.inf if text.startswith("-") else math.inf
        if not text.lstrip("+-")[:1].isdigit() and not text.lstrip("+-").startswith("."):
            return math.nan  # "nan", "inf" are not JavaScript numbers
        return float(text)
    except ValueError:
        return math.nan


def _header_version(entries: list[Entry]) -> float:
    """The header's `version ?? 1` as JavaScript compares it (a string "3" is 3)."""
    for entry in entries:
        if entry.get("type") == "session":
            version = entry.get("version")
            return 1.0 if version is None else _js_to_number(version)
    return float(CURRENT_SESSION_VERSION)


def _has_tree(entries: list[Entry]) -> bool:
    """Every entry already carries a string id and a parentId: not a v1 file, whatever
    its header says (re-chaining it would flatten its branches and orphan its labels)."""
    body = [e for e in entries if e.get("type") != "session"]
    return bool(body) and all(
        isinstance(e.get("id"), str)
        and "parentId" in e
        and (e["parentId"] is None or isinstance(e["parentId"], str))
        for e in body
    )


def session_version(entries: list[Entry]) -> int:
    """The version of the session whose raw entries are given (missing means 1).

    Compared as the TypeScript agents compare it; a version that is no number at
    all (NaN there, which no migration step matches) counts as current.
    """
    version = _header_version(entries)
    if math.isnan(version):
        return CURRENT_SESSION_VERSION
    if math.isinf(version):
        return CURRENT_SESSION_VERSION if version > 0 else 0
    return math.floor(version)


def header_needs_migration(header: Entry) -> bool:
    """Whether a file with this header gets migrated on load (its version is older)."""
    return _header_version([header]) < CURRENT_SESSION_VERSION


def migrate_session_entries(entries: list[Entry]) -> bool:
    """Bring raw entries (header included) to the current version, in place.

    Returns True when any step ran (the file then needs a rewrite).
    """
    version = _header_version(entries)
    if not version < CURRENT_SESSION_VERSION:  # NaN too: no step would run
        return False
    changed = False
    for target, step in _STEPS:
        if version < target:
            if step is _v1_to_v2 and _has_tree(entries):
                continue
            step(entries)
            changed = True
    return changed
