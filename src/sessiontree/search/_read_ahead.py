"""New session files read for the content index in forked workers, ahead of the writer.

A refresh that has many new files to index (a first build over a big store) has them
read by `read_ahead` in worker processes (`_util.forked.stream_forked`): each reads a
batch of files (`read_file`) and cuts their text into the FTS table's words (`cut`),
and the refresh, in this process alone, writes what comes back into SQLite in the
order it would have read the files itself. Only new files of this host's disk are read
ahead (no loader, nothing indexed of them yet: a file that only grew is read here from
where the index stopped), and only those small enough to be held whole (a bigger one is
read here, its rows written as it is read); a file a worker could not read is read again
here, so its error is what it would have been without workers. Memory stays bounded: a
worker holds one batch, and waits while its pipe to this process is full. Workers are
forked only where cores are idle (`idle_cores`).
"""

from __future__ import annotations

import os
from collections.abc import Container, Iterator, Sequence
from typing import Any, Final

from sessiontree._util.forked import can_fork, stream_forked
from sessiontree.listing import FileMark
from sessiontree.search._index_rows import FileState, Read, Rows, SessionSource, read_file
from sessiontree.search._terms import cut_all
from sessiontree.storage import FileSessionStorage, SessionStorage

__all__ = ["ReadAhead", "idle_cores", "read_ahead"]

_MIN_FILES: Final = 64  # fewer new files than this: forking costs more than it gains
_MIN_BYTES: Final = 4 << 20
_MAX_FILE: Final = 4 << 20  # held whole by a worker (below `_index_rows._HELD_BYTES`)
_BATCH_BYTES: Final = 512 << 10  # of files a worker reads before it sends their rows
_BATCH_FILES: Final = 128
_MAX_WORKERS: Final = 4

Job = tuple[int, tuple[str, int, int, int, int]]
"""A file to read: its position in the refresh's list, and its path and stat identity."""
Sent = tuple[
    tuple[Any, ...],
    list[Any],
    list[str],
    list[int],
    list[Any],
    int,
    tuple[Any, ...],
    tuple[Any, ...],
]
"""A file's `Read` as a worker sends it: plain tuples and lists (the mark's fields, the
rows' entries, texts, times and usage, the committed offset, the two states' fields),
which cross a pipe at a fraction of the cost of dataclasses."""
Batch = tuple[list[Sent | None], set[bytes]]
"""What a worker sends for a batch: each file's read, its text already cut (None: read
it here), and the words of them all."""


class ReadAhead:
    """The reads of some of a refresh's files, taken in order by position (`take`)."""

    def __init__(self, jobs: list[list[Job]], stream: Iterator[Batch] | None) -> None:
        self._batches = iter(jobs)
        self._stream = stream
        self._ready: dict[int, Sent | None] = {}
        self._next: set[int] = set()  # positions still to come from the stream
        for batch in jobs:
            self._next.update(position for position, _ in batch)
        self.terms: set[bytes] = set()
        """The words of the reads taken so far (the writer adds them to its vocabulary)."""

    def take(self, position: int) -> Read | None:
        """The read of the file at `position`, text cut (`_write_rows` takes it so); None
        when it was not read ahead (or could not be): read it here."""
        if position not in self._next:
            return None
        while position not in self._ready and self._stream is not None:
            try:
                reads, terms = next(self._stream)
            except Exception:  # a worker died, or the stream ended: read the rest here
                self.close()
                break
            batch = next(self._batches)
            self._ready = dict(zip((p for p, _ in batch), reads, strict=True))
            self.terms |= terms
        self._next.discard(position)
        sent = self._ready.pop(position, None)
        if sent is None:
            return None
        mark, entries, texts, order, usage, committed, saved, final = sent
        rows = Rows(entries=entries, texts=texts, order=order, usage=usage)
        return FileMark(*mark), rows, committed, FileState(*saved), FileState(*final)

    def close(self) -> None:
        """Stop the workers (what they have not sent is read here, if asked for)."""
        stream, self._stream = self._stream, None
        close = getattr(stream, "close", None)
        if close is not None:
            close()


def read_ahead(
    todo: Sequence[tuple[SessionSource, tuple[str, int, int, int, int]]],
    indexed: Container[str],
    storage: SessionStorage,
) -> ReadAhead:
    """Which of `todo` (sources with their stat, in the order they are written) to read
    in workers, and the workers reading them (none when it would not pay, or this process
    cannot fork: `can_fork`). `indexed`: the paths the index holds rows of."""
    if type(storage) is not FileSessionStorage or len(todo) < _MIN_FILES or not can_fork():
        return ReadAhead([], None)
    jobs: list[Job] = [
        (position, listed_as)
        for position, (source, listed_as) in enumerate(todo)
        if source.load is None and listed_as[0] not in indexed and listed_as[1] <= _MAX_FILE
    ]
    total = sum(listed_as[1] for _, listed_as in jobs)
    if len(jobs) < _MIN_FILES or total < _MIN_BYTES:
        return ReadAhead([], None)
    batches: list[list[Job]] = [[]]
    held = 0
    for job in jobs:
        if held >= _BATCH_BYTES or len(batches[-1]) >= _BATCH_FILES:
            batches.append([])
            held = 0
        batches[-1].append(job)
        held += job[1][1]
    workers = min(_MAX_WORKERS, idle_cores(), len(batches))
    if workers < 1:
        return ReadAhead([], None)
    return ReadAhead(batches, stream_forked(_read_batch, batches, workers))


def idle_cores() -> int:
    """About how many of this process's cores nothing else uses (by the load average):
    workers only pay on an idle core. On a machine whose cores are all busy, each process
    (each session, under Linux's autogroup) gets its share of them however many workers
    it forks, and the workers only add the cost of sending the rows across (measured:
    a tenth more CPU time for a build of 10,000 sessions)."""
    cores = len(os.sched_getaffinity(0))
    try:
        busy = os.getloadavg()[0] - 1  # this process counts in it
    except OSError:
        return cores
    return max(0, min(cores, int(cores - busy + 0.5)))


def _read_batch(jobs: list[Job]) -> Batch:
    """In a worker: each file read whole (`read_file`) and its text cut."""
    storage = FileSessionStorage()
    reads: list[Sent | None] = []
    terms: set[bytes] = set()
    for _, listed_as in jobs:
        try:
            read = read_file(
                SessionSource(listed_as[0]),
                storage,
                listed_as,
                FileState(),
                0,
                None,
                listed_as[2] // 1_000_000,
                None,
            )
        except Exception:  # read again by the writer, which says what went wrong
            reads.append(None)
            continue
        mark, rows, committed, saved, final = read
        texts, words = cut_all(rows.texts)
        terms.update(words)
        reads.append(
            (
                (
                    mark.size,
                    mark.mtime_ns,
                    mark.ino,
                    mark.offset,
                    mark.head_len,
                    mark.head,
                    mark.tail,
                ),
                rows.entries,
                texts,
                rows.order,
                rows.usage,
                committed,
                _fields(saved),
                _fields(final),
            )
        )  # not the import markers (the index keeps none) nor what the read saw (checked)
    return reads, terms


def _fields(st: FileState) -> tuple[Any, ...]:
    return (
        st.line,
        st.phase,
        st.session_id,
        st.cwd,
        st.parent,
        st.created,
        st.entries,
        st.text_bytes,
    )
