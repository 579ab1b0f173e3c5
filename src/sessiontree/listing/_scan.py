"""Scanning session files into listing records: one file (from the start, or from where
the last scan stopped when the file only grew), or many at once in worker processes.

A scan runs the metadata fold (`sessiontree.format.MetaFold`) over the file's lines and
returns a `Record`: the fold at the last complete line (where a resumed scan starts),
the fold after an unterminated last line (what the listing shows), and the file's
identity and `FileMark` digests (`_marks`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from sessiontree._util.forked import can_fork, map_forked
from sessiontree.format import (
    AWAITING_HEADER,
    NOT_A_SESSION,
    SESSION,
    MetaFold,
    loads_line,
    parse_iso_ms,
    serialize_entry_bytes,
)
from sessiontree.listing._changes import grown_from
from sessiontree.listing._marks import (
    HEAD_CHECK,
    HEAD_MAX,
    TAIL_CHECK,
    UNTRUSTED,
    Stat,
    digest,
)
from sessiontree.storage import (
    FileSessionStorage,
    SessionStorage,
    read_chunks,
    read_range,
    read_range_chunks,
)

_CHUNK = 1 << 20

PARALLEL_MIN_FILES = 64
"""Scan in worker processes from this many files to (re)scan on..."""
PARALLEL_MIN_BYTES = 16 << 20
"""...holding at least this many bytes (below that, starting workers costs more)."""
MAX_WORKERS = 4


class ListingFold(MetaFold):
    """The fold a listing runs: it shows no last activity, so it reads no message times."""

    __slots__ = ()
    tracks_activity = False


def dump_fold(fold: MetaFold) -> bytes:
    # serialize_entry_bytes, not orjson.dumps: texts may hold lone surrogates.
    return serialize_entry_bytes(fold.values())


def load_fold(blob: bytes) -> MetaFold:
    """A fold `dump_fold` saved; ValueError for anything else."""
    return ListingFold.from_values(loads_line(blob))


# ---------------------------------------------------------------------------- records


@dataclass(slots=True, eq=False)
class Record:
    """A cached scan of one file at one identity (size, mtime_ns, ino, ctime_ns)."""

    size: int
    mtime_ns: int
    ino: int
    ctime_ns: int
    offset: int
    head_len: int
    head: bytes
    tail: bytes
    final: MetaFold
    created_ms: int | None
    """The header's time, parsed once (a fresh process builds thousands of listings)."""
    state_blob: bytes | None  # the fold at `offset`, when it differs from `final`
    state: MetaFold | None = None
    info: object = None
    """The `SessionInfo` built from it (`_listing.session_info`; None: not a session),
    kept so that a repeated listing builds none. Typed `object`: the listing module
    that defines the class reads records, never the other way round."""
    built: bool = False

    def same_as(self, s: Stat) -> bool:
        """Whether the file listed as `s` is as this record read it (`same_identity`,
        field by field: a listing asks this of every file)."""
        return (
            s[4] != UNTRUSTED
            and self.ctime_ns == s[4]
            and self.mtime_ns == s[2]
            and self.size == s[1]
            and self.ino == s[3]
        )

    def committed(self) -> MetaFold:
        """The fold at `offset` (where a scan of the grown file resumes)."""
        if self.state is None:
            self.state = self.final if self.state_blob is None else load_fold(self.state_blob)
        return self.state


@dataclass(slots=True)
class _Scanned:
    """The outcome of scanning a file up to a known size."""

    offset: int  # end of the last complete line (where a resumed scan starts)
    state: MetaFold  # the fold at `offset`
    final: MetaFold  # after an unterminated last line (may be `state` itself)
    head_len: int
    head: bytes
    tail: bytes


def scan_chunks(
    chunks: Iterable[bytes],
    size: int,
    offset: int,
    fold: MetaFold | None,
    texts: list[str] | None,
) -> tuple[int, MetaFold, MetaFold, int, bytes, bytes]:
    """Scan `size - offset` bytes of chunks starting at file offset `offset`.

    Returns (committed offset, committed fold, final fold, head length, head bytes,
    last bytes); head fields are only meaningful when `offset == 0`.
    """
    st = fold if fold is not None else ListingFold()
    remaining = size - offset
    base = offset  # file offset of `pending`'s first byte
    pending = b""
    head = b""
    tail = b""
    head_len = 0
    at_start = offset == 0
    first_line = at_start
    for chunk in chunks if st.state != NOT_A_SESSION else ():
        if remaining <= 0:
            break
        if len(chunk) > remaining:
            chunk = chunk[:remaining]
        remaining -= len(chunk)
        if at_start and len(head) < HEAD_MAX:
            head += chunk[: HEAD_MAX - len(head)]
        tail = (tail + chunk)[-TAIL_CHECK:] if len(chunk) < TAIL_CHECK else chunk[-TAIL_CHECK:]
        data = pending + chunk if pending else chunk
        lines = data.split(b"\n")
        pending = lines.pop()
        rest: list[bytes] = lines
        if st.state == AWAITING_HEADER:
            pos = base
            i = 0
            for line in lines:
                i += 1
                st.fold_line(line, first_line)
                first_line = False
                pos += len(line) + 1
                if st.state != AWAITING_HEADER:
                    head_len = min(max(pos, HEAD_CHECK), HEAD_MAX)
                    break
            rest = lines[i:]
        if st.state == NOT_A_SESSION:
            break
        if st.state == SESSION:
            st.fold_entries(rest, texts)
        base += len(data) - len(pending)
    if st.state == NOT_A_SESSION:
        return size, st, st, head_len, head, tail
    final = st
    if pending and not pending.isspace():
        final = st.copy()
        text = final.fold_line(pending, first_line)
        if text is not None and texts is not None:
            texts.append(text)
    if st.state == AWAITING_HEADER:
        # Nothing decided yet: a resumed scan must start over at line 1.
        if final.state != AWAITING_HEADER:
            head_len = min(size, HEAD_MAX)
        return 0, ListingFold(), final, head_len, head, tail
    return base, st, final, head_len, head, tail


def scan_file(
    storage: SessionStorage,
    path: str,
    size: int,
    resume: Record | None,
    texts: list[str] | None = None,
) -> _Scanned:
    """Scan `path` up to `size` bytes, from scratch or from a cached record."""
    if resume is not None and resume.offset > 0:
        st = resume.committed().copy()
        offset = resume.offset
        chunks: Iterable[bytes] = (
            read_range_chunks(storage, path, offset, None, _CHUNK)
            if st.state != NOT_A_SESSION
            else ()
        )
    else:
        resume = None
        st = ListingFold()
        offset = 0
        chunks = read_chunks(storage, path, _CHUNK)
    try:
        committed, state, final, head_len, head, tail = scan_chunks(chunks, size, offset, st, texts)
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
    want = min(TAIL_CHECK, size)
    if len(tail) < want:
        tail = read_range(storage, path, size - want, want)
    if resume is not None:
        head_len, head_digest = resume.head_len, resume.head
    else:
        head_len = min(head_len, len(head))  # a file shorter than the window
        head_digest = digest(head[:head_len])
    return _Scanned(committed, state, final, head_len, head_digest, digest(tail[-want:]))


def _record(scan: _Scanned, s: Stat) -> Record:
    final = scan.final
    return Record(
        size=s[1],
        mtime_ns=s[2],
        ino=s[3],
        ctime_ns=s[4],
        offset=scan.offset,
        head_len=scan.head_len,
        head=scan.head,
        tail=scan.tail,
        final=final,
        created_ms=parse_iso_ms(final.created) if final.state == SESSION else None,
        state_blob=None if scan.state is final else dump_fold(scan.state),
        state=scan.state,
    )


def rescan(storage: SessionStorage, s: Stat, old: Record | None) -> Record | None:
    """A fresh record for the file listed as `s` (incremental when it only grew); None
    if it vanished or cannot be read."""
    try:
        grew = grown_from(storage, s, old)
        return _record(scan_file(storage, s[0], s[1], old if grew else None), s)
    except OSError:
        return None


# ---------------------------------------------------------------------------- many files

Job = tuple[Stat, "Record | None"]


def _scan_batch(jobs: list[Job]) -> list[Record | None]:
    storage = FileSessionStorage()
    return [rescan(storage, s, old) for s, old in jobs]


def _workers_for(jobs: list[Job], storage: SessionStorage) -> int:
    """How many processes to scan with (1: in this process).

    orjson holds the GIL, so threads gain nothing (measured: 2 threads took as
    long as 1); forked processes do (2 workers: 1.4x on 2 busy cores). Forking
    is only safe while this process runs no other thread, and only worth it for
    a large cold scan of real files.
    """
    if type(storage) is not FileSessionStorage or not can_fork():
        return 1
    if len(jobs) < PARALLEL_MIN_FILES:
        return 1
    pending = sum(s[1] - (old.offset if old is not None else 0) for s, old in jobs)
    if pending < PARALLEL_MIN_BYTES:
        return 1
    return max(1, min(MAX_WORKERS, os.cpu_count() or 1, len(jobs) // 16))


def scan_jobs(jobs: list[Job], storage: SessionStorage) -> list[Record | None]:
    """A record for each (file, old record) job, in order; in worker processes when
    that pays (`_workers_for`)."""
    workers = _workers_for(jobs, storage)
    if workers > 1:
        try:
            return map_forked(_scan_batch, jobs, lambda job: job[0][1], workers)
        except Exception:  # a broken pool, no fork, no /dev/shm: scan here instead
            pass
    return [rescan(storage, s, old) for s, old in jobs]
