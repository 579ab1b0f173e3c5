"""`SessionChunks`: an index's session written as file bytes, in batches.

Lines never read, or read and unchanged, are copied from the file they were read
from (checked first to still hold their entry); the others are serialized. See the
class doc.
"""

from __future__ import annotations

import logging
from array import array
from collections.abc import Iterator
from functools import partial
from typing import Final, cast

from sessiontree.errors import SessionWriteConflictError
from sessiontree.format import Entry, allow_deep_nesting, loads_object
from sessiontree.layout import BlobCarry
from sessiontree.session._entry_records import CHANGED, SKIPPED, EntryRecords
from sessiontree.session._line_index import PREFIX_FORM, match_prefix
from sessiontree.session._line_source import LineSource
from sessiontree.session._persistence import entry_line, may_persist_otherwise, resolve_blob_refs
from sessiontree.storage import BlobStoreLike, PinnedFile

__all__ = ["SessionChunks"]

log = logging.getLogger("sessiontree")

_REF_MARK: Final = b"blob:sha256:"
_BATCH_BYTES: Final = 1 << 20


class SessionChunks:
    """A whole session file from an index: `head`, then each entry's line, in batches
    of about 1 MB; the lines of the source file whose entries were never read are
    copied as they are, after checking each still holds its entry, and so are those
    read and not edited since when `file_checked` (the writer compared the whole file
    with what was read just before); added and edited entries are serialized with the
    persistence transforms (as pi writes them in pi's store, `pi_form`). In the other
    stores a line copied that oh-my-pi would write otherwise (pi wrote it: inline
    images, transient keys, strings over the limit) is written as oh-my-pi writes it;
    every line a rewrite writes is then in its store's form. A copy into another blob store
    (`carry`) passes every line it writes, copied or serialized, through
    `BlobCarry.take`, so the blobs they refer to are in that store. The blobs are
    synced before the last chunk.

    A writer that wrote these chunks as the index's own file calls `commit(pinned)`:
    the lines are then read from there. `rescue=True` (a copy made because the file
    changed) leaves out, with a warning, lines that no longer hold their entry,
    instead of raising SessionWriteConflictError.
    """

    def __init__(
        self,
        index: EntryRecords,
        head: bytes,
        blobs: BlobStoreLike,
        rescue: bool,
        carry: BlobCarry | None = None,
        file_checked: bool = False,
        pi_form: bool = False,
    ) -> None:
        assert carry is None or carry.target is blobs
        self._index = index
        self._pi_form = pi_form
        self._file_checked = file_checked
        self._head = head
        self._blobs = blobs
        self._rescue = rescue
        self._carry = carry if carry is not None and carry.carries else None
        self._written: tuple[array[int], array[int], dict[int, bool]] | None = None
        self._serialized: dict[int, bool] = {}
        """Positions written anew -> whether their line is in the writers' form."""
        self.left_out = index._dropped_here
        """Lines of the file read from that were found not to be entries: not written."""

    def __iter__(self) -> Iterator[bytes]:
        index = self._index
        entries = index._entries
        source = index._source
        offsets, lengths = array("q"), array("q")
        at = len(self._head)
        yield self._head
        batch: list[bytes] = []
        size = 0
        p, n = 0, len(entries)
        flags = index._flags
        known = len(source.offsets) if source is not None else 0  # lines in the source file
        # An entry read and unchanged is copied as its line only where the writer checked
        # first that the file is the one read, byte for byte (a rewrite, a move); else
        # (a rescue, a fork) what memory holds is written.
        trusted = self._file_checked
        serialized: dict[int, bool] = {}
        self._serialized = serialized
        while p < n:
            entry = entries[p]
            if entry is SKIPPED:
                offsets.append(0)
                lengths.append(0)
                p += 1
                continue
            if entry is not None and (p >= known or not trusted or flags[p] & CHANGED):
                line = self._serialize(p)  # added in memory, or edited since it was read
                offsets.append(at)
                lengths.append(len(line) - 1)
                batch.append(line)
                size += len(line)
                at += len(line)
                p += 1
                if size >= _BATCH_BYTES:
                    yield b"".join(batch)
                    batch, size = [], 0
                continue
            q = p + 1
            while (
                q < known
                and entries[q] is not SKIPPED
                and (entries[q] is None or (trusted and not flags[q] & CHANGED))
            ):
                q += 1
            if batch:
                yield b"".join(batch)
                batch, size = [], 0
            # Lines unread, or read and unchanged, go out as the file holds them, a run
            # of adjacent ones at once.
            assert source is not None
            for chunk in self._copy(source, list(range(p, q)), offsets, lengths, at):
                at += len(chunk)
                yield chunk
            p = q
        if batch:
            yield b"".join(batch)
        self._blobs.sync()
        self._written = (offsets, lengths, serialized)

    def _copy(
        self,
        source: LineSource,
        positions: list[int],
        offsets: array[int],
        lengths: array[int],
        at: int,
    ) -> Iterator[bytes]:
        """The lines at `positions` (unread, or read and unchanged) as they are in the
        source file, each checked to still hold its entry; their new offsets are
        recorded from `at`."""
        for start, run in source.runs(positions):
            data = source.read(start, run)
            if self._carry is not None:
                self._carry.take(data)
            # In pi's form a line with a ref is written anew, its images as their data
            # (pi reads no refs); in the other stores' a line not in oh-my-pi's form (pi
            # wrote it: images inline, transient keys) is written as oh-my-pi writes it;
            # the others go out as they are.
            refs = self._pi_form and _REF_MARK in data
            other = not self._pi_form and may_persist_otherwise(data)
            if (
                not refs
                and not other
                and all(
                    self._holds(data, source.offsets[p] - start, source.lengths[p], p) for p in run
                )
            ):
                for p in run:
                    offsets.append(at + source.offsets[p] - start)
                    lengths.append(source.lengths[p])
                yield data
                yield b"\n"
                at += len(data) + 1
                continue
            entries = self._index._entries
            for p in run:
                lo = source.offsets[p] - start
                length = source.lengths[p]
                if self._holds(data, lo, length, p):
                    line = data[lo : lo + length] + b"\n"
                    if refs and _REF_MARK in line:
                        line = self._pi_line(line[:-1], source.blobs, p)
                    elif other and may_persist_otherwise(line):
                        line = self._agent_line(line[:-1], p)
                elif entries[p] is not None:
                    # Changed on disk, but held in memory: written from memory.
                    line = self._serialize(p)
                else:
                    self._changed(source.path, p)
                    offsets.append(0)
                    lengths.append(0)
                    continue
                offsets.append(at)
                lengths.append(len(line) - 1)
                yield line
                at += len(line)

    def _pi_line(self, raw: bytes, blobs: BlobStoreLike, p: int) -> bytes:
        """The line `raw` (holding refs into `blobs`) as pi writes it: images as data
        (a line damaged past its prefix, which no reader takes, goes out as it is)."""
        entry = loads_object(raw)
        if not isinstance(entry, dict):
            return raw + b"\n"
        try:
            resolved = resolve_blob_refs(entry, blobs)
        except RecursionError:
            resolved = allow_deep_nesting(partial(resolve_blob_refs, entry, blobs))
        line = entry_line(resolved, self._blobs, pi_form=True)
        if self._carry is not None:
            self._carry.take(line)
        self._serialized[p] = match_prefix(line, 0, len(line) - 1) is not None
        return line

    def _agent_line(self, raw: bytes, p: int) -> bytes:
        """The line `raw` as oh-my-pi writes its entry (unchanged when it already is)."""
        entry = loads_object(raw)
        if not isinstance(entry, dict):
            return raw + b"\n"
        line = entry_line(entry, self._blobs)
        if line[:-1] == raw:
            return line
        if self._carry is not None:
            self._carry.take(line)
        self._serialized[p] = match_prefix(line, 0, len(line) - 1) is not None
        return line

    def _serialize(self, p: int) -> bytes:
        """The line of the entry at `p` (held in memory), written anew."""
        entry = cast("Entry", self._index._entries[p])
        pi_form = self._pi_form
        carry = self._carry
        # In pi's form refs are written as the images they name; in a copy, refs held
        # in memory (from `put_blob`, snapcompact frames, a blob missing when read)
        # name blobs of the source's store.
        blobs = carry.source if pi_form and carry is not None else self._blobs
        line = entry_line(entry, blobs, pi_form=pi_form)
        if carry is not None:
            carry.take(line)
        self._serialized[p] = match_prefix(line, 0, len(line) - 1) is not None
        return line

    def _changed(self, path: str, p: int) -> None:
        """The line of the entry at `p` no longer holds it: refuse, or (rescuing) leave
        it out with an error logged."""
        entry_id = self._index._ids[p]
        if not self._rescue:
            raise SessionWriteConflictError(
                path,
                f"{path}: the line of entry {entry_id} was changed on disk behind this session",
            )
        log.error(
            "%s: the line of entry %s was changed on disk; the copy leaves it out", path, entry_id
        )

    def _holds(self, data: bytes, lo: int, length: int, p: int) -> bool:
        """Whether `data[lo:lo+length]` still is the line of the entry at `p`."""
        index = self._index
        if lo + length > len(data) or (lo and data[lo - 1] != 0x0A):  # cut short, or joined
            return False
        if index._flags[p] & PREFIX_FORM:
            m = match_prefix(data, lo, lo + length)
            return m is not None and m.group(2) == str(index._ids[p]).encode("ascii")
        value = loads_object(data[lo : lo + length])
        return value is not None and value.get("id") == index._ids[p]

    def commit(self, pinned: PinnedFile) -> None:
        """These chunks were written whole as the index's file, readable by `pinned`."""
        if self._written is None:
            pinned.close()
            return
        self._index._rebase(pinned, *self._written)
