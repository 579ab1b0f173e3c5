"""File identity: when a cached read of a file may be trusted, and whether it only grew.

A cache keeps, per file, what `stat_identity` said when it read it (size, mtime_ns,
inode, ctime_ns; the racy-read rule below) and a `FileMark` (where reading stopped,
digests of the head and of the bytes before the old end). The listing cache and the
content index (`sessiontree.search`) both decide by them: unchanged (`same_identity`)
means not read again, `only_appended` means read from the old end on.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from sessiontree.storage import (
    HostFilesystem,
    SessionIndexStorage,
    SessionStorage,
    read_range,
)

__all__ = [
    "MARK_HEAD_BYTES",
    "MARK_TAIL_BYTES",
    "UNTRUSTED",
    "FileMark",
    "FileMarkLike",
    "mark_file",
    "marked_as_read",
    "only_appended",
    "read_start_ns",
    "same_identity",
    "stat_dirs",
    "stat_identity",
]

# Before a read resumes where the last one stopped (the file only grew), the start of
# the file and the bytes before the old end must be as they were. Each window is at
# least 16 KB: a rewrite that keeps the size of the start and the end but changes the
# first entries (a peer's `writeFileSync` after an edit) is seen, and a file of up to
# 32 KB is compared whole. A big file rewritten in its middle alone is not.
HEAD_CHECK = 16 * 1024
HEAD_MAX = 64 * 1024  # the header line (title slot included) may be longer
TAIL_CHECK = 16 * 1024
MARK_HEAD_BYTES = HEAD_MAX
"""The most of a file's start a mark looks at (what `marked_as_read` needs of it)."""
MARK_TAIL_BYTES = TAIL_CHECK
"""The most of a file's end a mark looks at."""

UNTRUSTED: int = -1
"""The ctime a cache keeps for a file it read within the file's timestamp tick: equal
to no ctime, so the next look reads the file again."""
_TICK_NS = 20_000_000
"""Longest tick of the clock file timestamps come from (jiffies: 10 ms at HZ=100)."""
_COARSE_TICK_NS = 2_000_000_000
"""The tick of file systems that keep whole seconds (ext3, HFS+) or even ones (FAT)."""


def _now_ns() -> int:
    """The clock that file timestamps are taken from (tests move it; callers in other
    modules go through this module's attribute so that they see the move)."""
    return time.time_ns()


def read_start_ns() -> int:
    """The time a look at a store starts, before any file is read (`stat_identity`'s
    `now_ns`)."""
    return _now_ns()


_CTIME_MOVES = True
"""Whether a write moves the ctime past what a stat saw (tests play a kernel whose
ctime is no finer than its mtime, where only the racy-read rule catches a rewrite)."""


def _racy(mtime_ns: int, now_ns: int) -> bool:
    """Whether a file with this mtime, read at `now_ns`, may still change within the
    mtime's tick (then nothing a stat shows would tell)."""
    tick = _COARSE_TICK_NS if mtime_ns % 1_000_000_000 == 0 else _TICK_NS
    return -tick < now_ns - mtime_ns < tick


def stat_identity(st: os.stat_result, now_ns: int | None = None) -> tuple[int, int, int, int]:
    """What a cache compares to tell that a file is as it was read: (size, mtime_ns,
    ino, ctime_ns). `now_ns`: a time before the file is read (default: now).

    Size, mtime and inode alone miss a rewrite in place (a peer's `writeFileSync`)
    that keeps the size within one timestamp tick. Every write moves the ctime, and
    nothing can set it back (`utime` moves it too); but a kernel may stamp ctime as
    coarsely as mtime, so a file stat'ed within its mtime's tick may still change
    unseen: its ctime is `UNTRUSTED`, so the read made now is not trusted later
    (git's "racily clean" files). That costs one more read of a file written in the
    last few milliseconds (2 s on file systems with whole-second timestamps).
    """
    mtime_ns = st.st_mtime_ns
    if _racy(mtime_ns, _now_ns() if now_ns is None else now_ns):
        ctime_ns = UNTRUSTED
    else:
        ctime_ns = st.st_ctime_ns if _CTIME_MOVES else 0
    return st.st_size, mtime_ns, st.st_ino, ctime_ns


def same_identity(stored: tuple[int, ...], current: tuple[int, ...]) -> bool:
    """Whether a file whose `stat_identity` is `current` is unchanged since `stored`
    was taken (a read within a tick, `UNTRUSTED`, never is)."""
    return current[-1] != UNTRUSTED and stored == current


_SCANDIR_FD = os.scandir in os.supports_fd and hasattr(os, "O_DIRECTORY")

Stat = tuple[str, int, int, int, int]
"""A path and its `stat_identity` (ctime 0: a storage that keeps none)."""


_INDEXED, _HOST, _OTHER = range(3)


def _kind(storage: SessionStorage) -> int:
    """How `stat_dir` lists `storage`'s files."""
    if isinstance(storage, SessionIndexStorage):
        return _INDEXED
    return _HOST if isinstance(storage, HostFilesystem) else _OTHER


def stat_dir(directory: str, storage: SessionStorage, now_ns: int) -> list[Stat]:
    """`*.jsonl` files directly in `directory` with their identity (stat'ed at `now_ns`)."""
    return _stat_dir(directory, storage, now_ns, _kind(storage))


def stat_dirs(
    directories: Iterable[str], storage: SessionStorage, now_ns: int
) -> dict[str, list[Stat]]:
    """`stat_dir` of each of `directories`, the storage's kind told once: an isinstance
    of a runtime-checkable Protocol costs 5-15 µs, and a store of 500 project dirs
    asked two of them per directory."""
    kind = _kind(storage)
    return {d: _stat_dir(d, storage, now_ns, kind) for d in directories}


def _stat_dir(directory: str, storage: SessionStorage, now_ns: int, kind: int) -> list[Stat]:
    out: list[Stat] = []
    if kind == _INDEXED:  # [storage index] one query, no stat per file
        try:
            return [
                (m.path, m.size, m.mtime_ns, m.ino, 0)
                for m in storage.list_session_meta(directory)  # type: ignore[attr-defined]
            ]
        except OSError:
            return []
    if kind == _HOST:
        # One scandir instead of list_files + stat: the DirEntry carries the file type.
        # `stat_identity` inlined: a listing stats every file of the store.
        # Scanned through a descriptor of the directory where the platform can: each
        # stat then resolves the file's name in it, not its whole path again.
        # The loop's names are locals and its tests the cheapest that say the same
        # (a tenth of a repeated listing's CPU): a name is never empty; only an mtime
        # less than the coarsest tick before `now_ns` (or after it) may be racy. A file
        # written after `now_ns` (as the directory is read) may have been stat'ed within
        # its mtime's tick however long after `now_ns` that was: racy too.
        ctime_moves = _CTIME_MOVES
        prefix = directory if directory.endswith(os.sep) else directory + os.sep
        recent = now_ns - _COARSE_TICK_NS
        racy = _racy
        add = out.append
        fd = -1
        try:
            if _SCANDIR_FD:
                fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
            with os.scandir(fd if fd >= 0 else directory) as entries:
                for entry in entries:
                    name = entry.name
                    if name[-6:] != ".jsonl" or name[0] == ".":
                        continue
                    try:
                        if not entry.is_file():
                            continue
                        st = entry.stat()
                    except OSError:
                        continue
                    mtime_ns = st.st_mtime_ns
                    if mtime_ns > recent and (mtime_ns >= now_ns or racy(mtime_ns, now_ns)):
                        ctime_ns = UNTRUSTED
                    else:
                        ctime_ns = st.st_ctime_ns if ctime_moves else 0
                    add((prefix + name, st.st_size, mtime_ns, st.st_ino, ctime_ns))
        except OSError:
            return []
        finally:
            if fd >= 0:
                os.close(fd)
        return out
    try:
        files = storage.list_files(directory, "*.jsonl")
    except OSError:
        return []
    for path in files:
        try:
            s = storage.stat(path)
        except OSError:
            continue
        out.append((path, s.size, s.mtime_ns or int(s.mtime_ms * 1e6), s.ino, 0))
    return out


# ---------------------------------------------------------------------------- growth


def digest(data: bytes) -> bytes:
    import hashlib  # here: a warm listing digests nothing, and hashlib loads OpenSSL

    return hashlib.blake2b(data, digest_size=16).digest()


class FileMarkLike(Protocol):
    """What a reader of a growing file remembers about it (see `FileMark`)."""

    @property
    def size(self) -> int: ...
    @property
    def ino(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def head_len(self) -> int: ...
    @property
    def head(self) -> bytes: ...
    @property
    def tail(self) -> bytes: ...


@dataclass(frozen=True, slots=True)
class FileMark:
    """A file's identity when it was read, and where reading may resume.

    The listing cache keeps one per file and so does the content index
    (`sessiontree.search._content_index`): `only_appended` tells from it whether the file
    only grew since, so that only the bytes after `offset` need reading.
    """

    size: int
    mtime_ns: int
    ino: int
    offset: int
    """End of the last complete line read (where a resumed read starts)."""
    head_len: int
    """Bytes of the file start (title slot + header, at most 4 KB) whose digest is `head`."""
    head: bytes
    tail: bytes
    """Digest of the (at most 64) bytes before `size`."""


def mark_file(
    storage: SessionStorage,
    path: str,
    size: int,
    mtime_ns: int,
    ino: int,
    offset: int,
    head_len: int,
) -> FileMark:
    """A `FileMark` for `path` read up to `size` bytes (reads the head and the tail bytes)."""
    head_len = min(max(head_len, HEAD_CHECK), HEAD_MAX, size) if head_len else 0
    head = read_range(storage, path, 0, head_len) if head_len else b""
    want = min(TAIL_CHECK, size)
    tail = read_range(storage, path, size - want, want) if want else b""
    return FileMark(size, mtime_ns, ino, offset, head_len, digest(head), digest(tail))


def marked_as_read(mark: FileMarkLike, head: bytes | None, tail: bytes) -> bool:
    """Whether `mark`, taken after a read, holds what the read saw: `head`, the file's
    first bytes as read (None: the read began further on), and `tail`, the last bytes
    read (up to `mark.size`). False: the file was rewritten while it was read, and the
    mark would pass the mixed bytes read as a file later only appended to."""
    if head is not None and mark.head_len and len(head) >= mark.head_len:
        if digest(head[: mark.head_len]) != mark.head:
            return False
    want = min(TAIL_CHECK, mark.size)
    return not (want and len(tail) >= want and digest(tail[-want:]) != mark.tail)


def only_appended(
    storage: SessionStorage, path: str, old: FileMarkLike, size: int, ino: int
) -> bool:
    """Whether the file only had bytes appended since `old` was taken: same inode,
    larger, and the head and the bytes before the old end unchanged."""
    if ino != old.ino or size <= old.size or old.offset <= 0:
        return False
    try:
        if old.head_len:
            if digest(read_range(storage, path, 0, old.head_len)) != old.head:
                return False
        want = min(TAIL_CHECK, old.size)
        end = read_range(storage, path, old.size - want, want)
    except OSError:
        return False
    return digest(end) == old.tail
