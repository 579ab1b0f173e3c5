"""`EntryRecords`: the records of a session's entries, the base of `EntryIndex`.

Every entry by position, in file order, with its id, parent, kind and flags beside
it, the id -> position map and the leaf; and, for a session loaded index first, the
file its unread lines are read back from (`LineSource`) and the reading: one entry,
runs of adjacent lines at once, a line peeked at without keeping it, every line. A
line found not to be an entry when read is dropped (`SKIPPED`); one found other
than its prefix said is indexed by what it holds; either way `_derive` (the
index's) rebuilds what is derived from the records. See `sessiontree.session._index`.
"""

from __future__ import annotations

import logging
from array import array
from collections.abc import Iterable, Iterator, Sequence
from functools import partial
from typing import Any, Final, cast

from sessiontree._util.gcpause import gc_paused
from sessiontree.format import USAGE_KINDS, Entry, allow_deep_nesting, counted_usage, loads_object
from sessiontree.session._line_index import ASSISTANT, PREFIX_FORM, ref_marks, refs_in
from sessiontree.session._line_source import LineSource
from sessiontree.session._persistence import resolve_blob_refs
from sessiontree.storage import BlobStoreLike, PinnedFile

__all__ = ["CHANGED", "SKIPPED", "EntryRecords"]

log = logging.getLogger("sessiontree")

CHANGED: Final = 4
"""Flag: an entry read from the file that was edited in place since (`rewrite_entries`)
or found other than its prefix said: a rewrite serializes it instead of copying its line."""
SKIPPED: Final[dict[str, Any]] = {}
"""Stands for a line found not to be an entry when it was read (dropped)."""


class EntryRecords:
    """The records and the reading of unread lines (see the module doc)."""

    __slots__ = (
        "_dropped",
        "_dropped_here",
        "_entries",
        "_file_refs",
        "_flags",
        "_ids",
        "_kinds",
        "_lazy",
        "_parents",
        "_pos",
        "_source",
        "leaf",
    )

    leaf: str | None
    _source: LineSource | None
    _file_refs: set[str] | None
    _entries: list[Entry | None]
    _ids: list[Any]
    _parents: list[Any]
    _kinds: list[Any]
    _flags: bytearray
    _lazy: int
    _dropped: int
    _dropped_here: int
    _pos: dict[str, int]

    def _derive(self) -> None:
        """Derive everything else from the records again (the index's)."""
        raise NotImplementedError

    @property
    def file_refs(self) -> set[str]:
        """Blobs named by refs that only the file, or the entries as refs, hold: every
        ref an index-first pass saw (its unread lines' images are only in the file), the
        refs entries kept as refs (snapcompact frames, a blob missing when read). What a
        writable manager pins (`SessionManager._hold_file_refs`); a copy inherits them.
        A read-only pass leaves them out; they are looked for in the file when asked."""
        refs = self._file_refs
        if refs is None:
            source = self._source
            refs = self._file_refs = refs_in(source.pinned) if source is not None else set()
        return refs

    @file_refs.setter
    def file_refs(self, refs: set[str]) -> None:
        self._file_refs = refs

    def _use_source(self, source: LineSource | None) -> None:
        old, self._source = self._source, source
        if old is not None and (source is None or source.pinned is not old.pinned):
            old.pinned.close()

    def _read_last(self) -> None:
        """Read the last line that holds an entry: the full loader's leaf is the last
        line that parses, and a line indexed by its prefix may not (a write cut short
        just after an inner `}`, or another writer's entry glued to it). Lines found
        not to parse are dropped, as the full loader drops them; the line found is
        most often on the context's path, which reads it anyway."""
        entries = self._entries
        end, batch = len(entries), 1
        while end > 0:
            # The last line first, then ever more before it: a file that ends in many
            # damaged lines is rebuilt (one `_derive` per batch) a few times, not per line.
            start = max(0, end - batch)
            self._read(range(start, end))  # each read, dropped, or indexed by what it holds
            if any(entries[p] is not SKIPPED for p in range(start, end)):
                return
            end, batch = start, batch * 2

    def _leaf_at_end(self) -> None:
        """The leaf is the last entry (none when its id is not a string)."""
        entries = self._entries
        p = len(entries) - 1
        while p >= 0 and entries[p] is SKIPPED:
            p -= 1
        last_id = self._ids[p] if p >= 0 else None
        self.leaf = last_id if isinstance(last_id, str) else None

    # ------------------------------------------------------------------ reading lines

    def _entry(self, p: int) -> Entry | None:
        entry = self._entries[p]
        if entry is None and self._read((p,)):
            return None  # the line was dropped or re-indexed: look it up again
        return self._entries[p]

    def _read(self, positions: Iterable[int]) -> bool:
        """Read the lazy entries at `positions`; True when any record changed (a line
        dropped or re-indexed), which rebuilds the derived state."""
        source = self._source
        entries = self._entries
        wanted = [p for p in positions if entries[p] is None]
        if not wanted or source is None:
            return False
        if len(wanted) == 1:
            return self._read_lines(source, wanted)
        with gc_paused():
            return self._read_lines(source, wanted)

    def _read_lines(self, source: LineSource, wanted: list[int]) -> bool:
        entries = self._entries
        changed = False
        lengths, offsets = source.lengths, source.offsets
        buffer = bytearray()
        for start, run in source.runs(wanted):
            if len(buffer) < source.run_bytes(start, run):
                buffer = bytearray(source.run_bytes(start, run))
            view = memoryview(buffer)
            filled = source.read_into(view, start, run)
            # Where the run's bytes name a blob: a line without one skips the walk
            # that resolves refs. The indexing pass found them already; else one
            # search of the bytes (a fifth of the walk's cost).
            marks = source.marks_in(start, filled)
            if marks is None:
                marks = ref_marks(buffer, filled)
            marks.reverse()  # popped from the end: the first in the run first
            mark = marks.pop() if marks else -1
            for p in run:
                lo = offsets[p] - start
                hi = lo + lengths[p]
                value = loads_object(view[lo:hi]) if hi <= filled else None
                if value is None:
                    log.warning(
                        "%s: the line of entry %s does not parse; it is left out",
                        source.path,
                        self._ids[p],
                    )
                    self._drop(p)
                    changed = True
                    continue
                while 0 <= mark < lo:
                    mark = marks.pop() if marks else -1
                if lo <= mark < hi:
                    try:
                        value = resolve_blob_refs(value, source.blobs)
                    except RecursionError:
                        value = allow_deep_nesting(partial(resolve_blob_refs, value, source.blobs))
                entries[p] = value
                self._lazy -= 1
                if (
                    value.get("id") != self._ids[p]
                    or value.get("parentId") != self._parents[p]
                    or value.get("type") != self._kinds[p]
                ):
                    self._ids[p] = value.get("id")
                    self._parents[p] = value.get("parentId")
                    self._kinds[p] = value.get("type")
                    self._flags[p] |= CHANGED  # its line no longer says what it holds
                    changed = True
        if changed:
            leaf = self.leaf
            self._derive()
            self.leaf = leaf if leaf in self._pos else None
        return changed

    def _drop(self, p: int) -> None:
        """A line that turned out not to be an entry: no id, no parent, no kind."""
        self._entries[p] = SKIPPED
        self._ids[p] = self._parents[p] = self._kinds[p] = None
        self._flags[p] = 0
        self._lazy -= 1
        self._dropped += 1
        self._dropped_here += 1

    def _peek(self, p: int) -> Entry | None:
        """The entry at `p` without keeping it read (for sums over big sessions)."""
        entry = self._entries[p]
        if entry is not None or self._source is None:
            return entry if entry is not SKIPPED else None
        source = self._source
        raw = source.pinned.pread(source.offsets[p], source.lengths[p])
        return loads_object(raw)

    def _read_all(self) -> list[Entry]:
        while self._lazy and self._read(range(len(self._entries))):
            pass
        return [e for e in self._entries if e is not SKIPPED]  # type: ignore[misc]

    @property
    def entries(self) -> list[Entry]:
        """Every entry, insertion order (reads a lazily loaded session whole)."""
        if self._lazy or self._dropped:
            return self._read_all()
        return cast("list[Entry]", self._entries)

    def read_so_far(self) -> list[tuple[Any, Entry | None]]:
        """(id, entry) of every entry in order, the entry None where it was not read
        yet (reads nothing: for checks that must not change what is read)."""
        return [
            (entry_id, entry)
            for entry_id, entry in zip(self._ids, self._entries, strict=True)
            if entry is not SKIPPED
        ]

    def is_read(self, entry_id: str) -> bool:
        """Whether the entry is held as a dict (added in memory, kept, or read)."""
        p = self._pos.get(entry_id)
        return p is not None and self._entries[p] is not None

    @property
    def pinned(self) -> PinnedFile | None:
        """The handle unread lines are read from (None: every entry is in memory)."""
        return self._source.pinned if self._source is not None and self._lazy else None

    def __len__(self) -> int:
        return len(self._entries) - self._dropped

    def __contains__(self, entry_id: object) -> bool:
        return entry_id in self._pos

    def read_at(self, positions: Sequence[int]) -> list[Entry | None]:
        """The entries at `positions`, read if they were not; None for a line found
        not to be an entry (now or before)."""
        wanted = [p for p in positions if 0 <= p < len(self._entries)]
        while self._read(wanted):
            pass  # a line dropped or re-indexed: the others are read on the next pass
        entries = self._entries
        out: list[Entry | None] = []
        for p in positions:
            entry = entries[p] if 0 <= p < len(entries) else None
            out.append(entry if entry is not None and entry is not SKIPPED else None)
        return out

    def timestamps_at(self, positions: Sequence[int]) -> list[Any]:
        """The `timestamp` of the entries at `positions` (None for a line found not to
        be an entry), without keeping the unread ones read: the siblings a shape orders
        may be most of a session. A line found damaged, or other than its prefix said,
        is read as `read_at` reads it (which changes the index)."""
        entries, source = self._entries, self._source
        stamps: dict[int, Any] = {}
        odd: list[int] = []
        unread = [p for p in positions if 0 <= p < len(entries) and entries[p] is None]
        if unread and source is not None:
            offsets, lengths = source.offsets, source.lengths
            ids, parents, kinds = self._ids, self._parents, self._kinds
            for start, run in source.runs(unread):
                data = source.read(start, run)
                view = memoryview(data)
                for p in run:
                    lo = offsets[p] - start
                    hi = lo + lengths[p]
                    value = loads_object(view[lo:hi]) if hi <= len(data) else None
                    if (
                        value is None
                        or value.get("id") != ids[p]
                        or value.get("parentId") != parents[p]
                        or value.get("type") != kinds[p]
                    ):
                        odd.append(p)
                    else:
                        stamps[p] = value.get("timestamp")
                del view
        if odd:
            self.read_at(odd)
        out: list[Any] = []
        for p in positions:
            if p in stamps:
                out.append(stamps[p])
                continue
            entry = entries[p] if 0 <= p < len(entries) else None
            ok = entry is not None and entry is not SKIPPED
            out.append(entry.get("timestamp") if ok else None)  # type: ignore[union-attr]
        return out

    def counted_usages(self) -> Iterator[tuple[bool, object]]:
        """`counted_usage` of every entry that pi's totals may count, in order, without
        keeping unread ones: assistant messages, tool results holding a `usage`, and
        the `usage`, compaction and branch summary entries."""
        flags, kinds, entries = self._flags, self._kinds, self._entries
        source = self._source
        for p in range(len(entries)):
            kind = kinds[p]
            if kind == "message" and not flags[p] & ASSISTANT and entries[p] is None:
                # most messages are not tool results with a usage: looked at as bytes first
                if source is None:
                    continue
                raw = source.pinned.pread(source.offsets[p], source.lengths[p])
                if b'"toolResult"' not in raw or b'"usage"' not in raw:
                    continue
                entry = loads_object(raw)
            elif kind == "message" or kind in USAGE_KINDS:
                entry = self._peek(p)
            else:
                continue
            if entry is not None:
                counted = counted_usage(entry)
                if counted[0]:
                    yield counted

    def use_blobs(self, blobs: BlobStoreLike) -> None:
        """Unread lines' images are now in `blobs` (the session is a copy in that store,
        or moved there)."""
        if self._source is not None:
            self._source.blobs = blobs

    def _rebase(
        self,
        pinned: PinnedFile,
        offsets: array[int],
        lengths: array[int],
        serialized: dict[int, bool],
    ) -> None:
        """The file written from `file_chunks` is now where the lines are read from
        (`serialized`: the positions whose line was written anew -> in the writers' form)."""
        source = self._source
        blobs = source.blobs if source is not None else None
        if blobs is None or len(offsets) != len(self._entries):
            pinned.close()
            return
        flags = self._flags
        for p, formed in serialized.items():
            flags[p] = (flags[p] & ASSISTANT) | (PREFIX_FORM if formed else 0)
        self._use_source(LineSource(pinned, offsets, lengths, blobs, source.path if source else ""))
        self._dropped_here = 0
