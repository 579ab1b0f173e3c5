"""`LineSource`: where an index reads back the lines it holds by position only."""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator
from typing import Final

from sessiontree.storage import BlobStoreLike, PinnedFile

__all__ = ["LineSource"]

_READ_BYTES: Final = 8 << 20
"""The most one read of adjacent lines fetches at once."""


class LineSource:
    """Where an index reads the lines it holds by position: a pinned file, and where
    each line is in it (positions past `len(offsets)` are never read: they were
    added in memory)."""

    __slots__ = ("blobs", "lengths", "offsets", "path", "pinned")

    def __init__(
        self,
        pinned: PinnedFile,
        offsets: array[int],
        lengths: array[int],
        blobs: BlobStoreLike,
        path: str,
    ) -> None:
        self.pinned = pinned
        self.offsets = offsets
        self.lengths = lengths
        self.blobs = blobs
        self.path = path

    def runs(self, positions: Iterable[int]) -> Iterator[tuple[int, list[int]]]:
        """Sorted positions grouped into runs of lines adjacent in the file, each at
        most `_READ_BYTES` (one line may be longer): (start offset, positions)."""
        offsets, lengths = self.offsets, self.lengths
        run: list[int] = []
        start = end = 0
        for p in sorted(positions):
            off = offsets[p]
            if run and off == end + 1 and off + lengths[p] - start <= _READ_BYTES:
                run.append(p)
                end = off + lengths[p]
                continue
            if run:
                yield start, run
            run, start, end = [p], off, off + lengths[p]
        if run:
            yield start, run

    def read(self, start: int, run: list[int]) -> bytes:
        last = run[-1]
        return self.pinned.pread(start, self.offsets[last] + self.lengths[last] - start)
