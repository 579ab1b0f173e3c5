"""The file-identity index: what changed in a store since a cache read it.

Every cache of what session files say (the listing cache, `_cache`; the content index,
`sessiontree.search`; the foreign listings and import records, `sessiontree.foreign`)
keeps one row per file with the `stat_identity` the file had when it was read. Each
brings itself up to date the same way, in two steps:

1. **Plan** (`plan_changes`, no file is read): the files of the store, stat'ed, against
   the cached rows: a file whose identity is the row's (`same_identity`) is
   *unchanged* and not read; a file without a row, or whose identity differs, is *to
   read*; a row of no file listed is *gone*.
2. **Apply**, file by file, by the cache: a file to read whose row kept a `FileMark`
   (where reading stopped) may only have grown (`grown_from`: same inode, larger, the
   head and the bytes before the old end as they were): then it is read from the old
   end on; otherwise from the start. This step reads two windows of the file only for
   a file whose identity changed; an unchanged store reads no file.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from sessiontree.listing._marks import UNTRUSTED, FileMarkLike, Stat, only_appended
from sessiontree.storage import SessionStorage

__all__ = ["Identity", "IdentityRow", "Known", "Plan", "grown_from", "plan_changes"]

Identity = tuple[int, int, int, int]
"""`stat_identity`: size, mtime_ns, inode, ctime_ns (`UNTRUSTED`: read within its tick)."""


class IdentityRow(Protocol):
    """A cached row: it tells whether the file listed as a `Stat` is as it was read."""

    def same_as(self, s: Stat, /) -> bool: ...


R = TypeVar("R", bound=IdentityRow)
V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class Known(Generic[V]):
    """A cached row as an identity and what the cache keeps with it (`value`)."""

    identity: Identity
    value: V

    def same_as(self, s: Stat, /) -> bool:
        """`same_identity`: the file listed as `s` is as this row's read saw it."""
        return s[4] != UNTRUSTED and self.identity == s[1:]


@dataclass(slots=True)
class Plan(Generic[R]):
    """What a cache does to catch up with a store (see the module docstring)."""

    unchanged: list[tuple[Stat, R]] = field(default_factory=list)
    """Files as their row says: not read."""
    to_read: list[tuple[Stat, R | None]] = field(default_factory=list)
    """New files (no row) and changed ones (with their old row: `grown_from` tells
    whether reading may resume at its end)."""
    gone: list[str] = field(default_factory=list)
    """Paths of rows whose file was not listed."""


def plan_changes(
    files: Iterable[Stat], rows: Mapping[str, R], listed: Collection[str] | None = None
) -> Plan[R]:
    """Sort `files` (a path and its identity each) by their cached `rows` (path -> row).

    `listed`: the paths of the store whose rows are not gone (default: `files`'
    paths), for a caller that plans a part of what it listed.
    """
    plan: Plan[R] = Plan()
    unchanged = plan.unchanged.append
    to_read = plan.to_read.append
    seen: set[str] = set()
    for s in files:
        seen.add(s[0])
        row = rows.get(s[0])
        if row is not None and row.same_as(s):
            unchanged((s, row))
        else:
            to_read((s, row))
    keep = seen if listed is None else listed
    if len(rows) > len(plan.unchanged):  # else every row matched a file listed
        plan.gone = [p for p in rows if p not in keep]
    return plan


def grown_from(storage: SessionStorage, s: Stat, old: FileMarkLike | None) -> bool:
    """Whether the file listed as `s` only had bytes appended since `old` was taken
    (reads the head and the bytes before the old end): read it from `old.offset` on."""
    return old is not None and only_appended(storage, s[0], old, s[1], s[3])
