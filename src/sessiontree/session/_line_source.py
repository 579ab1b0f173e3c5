"""`LineSource`: where an index reads back the lines it holds by position only."""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Iterable, Iterator
from typing import Final

from sessiontree.storage import BlobStoreLike, PinnedFile

__all__ = ["LineSource"]

_READ_BYTES: Final = 1 << 20
"""The most one read of adjacent lines fetches at once (more saves few calls and
adds to the peak of a load: the bytes are held beside what they parse into)."""


class LineSource:
    """Where an index reads the lines it holds by position: a pinned file, and where
    each line is in it (positions past `len(offsets)` are never read: they were
    added in memory)."""

    __slots__ = ("blobs", "lengths", "marks", "offsets", "path", "pinned")

    def __init__(
        self,
        pinned: PinnedFile,
        offsets: array[int],
        lengths: array[int],
        blobs: BlobStoreLike,
        path: str,
        marks: array[int] | None = None,
    ) -> None:
        self.pinned = pinned
        self.offsets = offsets
        self.lengths = lengths
        self.blobs = blobs
        self.path = path
        self.marks = marks
        """Where each blob ref's prefix starts in the file, in order, as the pass that
        indexed it found them (None: not known, the read bytes are searched)."""

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

    def run_bytes(self, start: int, run: list[int]) -> int:
        """How many bytes the run starting at `start` spans."""
        last = run[-1]
        return self.offsets[last] + self.lengths[last] - start

    def read_into(self, buffer: memoryview, start: int, run: list[int]) -> int:
        """Read the run into the front of `buffer` (at least `run_bytes` long); the
        count read (fewer only where the file ends sooner)."""
        want = self.run_bytes(start, run)
        got = 0
        while got < want:
            n = self.pinned.readinto(buffer[got:want], start + got)
            if not n:
                break
            got += n
        return got

    def marks_in(self, start: int, filled: int) -> list[int] | None:
        """Where a blob ref's prefix starts in the `filled` bytes read from `start`,
        relative to `start`, in order (None: not known)."""
        marks = self.marks
        if marks is None:
            return None
        lo = bisect_left(marks, start)
        hi = bisect_left(marks, start + filled, lo)
        return [at - start for at in marks[lo:hi]]

    def read(self, start: int, run: list[int]) -> bytes:
        last = run[-1]
        return self.pinned.pread(start, self.offsets[last] + self.lengths[last] - start)
