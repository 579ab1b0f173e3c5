"""The storage Protocols: what every backend must do, and what it may do besides.

`SessionStorage` is the API contract's ten methods, and it is enough for every
operation on one session: create, open (with migration), append, flush, rewrite,
rename it, fork it, build its context, and list one directory. Beyond it, a
backend declares optional capabilities as their own Protocols; callers test for
them with `isinstance` (never with a backend's class) and fall back where they can
(`read_chunks`, `read_range`, `write_whole`, `sync_dir` below):

- `ChunkedReads` (`iter_chunks`, `read_bytes_range`): streaming loads and the
  guard's checks without reading a whole file into one string;
- `AtomicWrites` (`write_atomic`, `fsync_dir`): temp file + fsync + rename, so a
  crash leaves the old or the new file (without it, `write_text` is used);
- `DeferredSync` (`write_atomic_unsynced`, `sync_files`): many small files written
  atomically, then made durable together before anything names them (the archive's
  chunks; without it, each write is durable on its own);
- `DirectoryTree` (`list_dirs`, `remove_tree`): store-wide walks (`list_all`, gc,
  `rm` of an artifacts dir);
- `LockingStorage` (`acquire_lock`): one writer per session; **a storage without it
  has no writer lock**, and two processes may then write one session;
- `HostFilesystem` (`host_path`): paths are this host's files (terminal
  breadcrumbs, the outside-dir registry, symlink checks apply);
- `RootedStorage` (`root`): a database's paths are those of one agent dir, whose
  `sessions/` (and `blobs/`) store-wide tools find under it (`layout.StoreParts.root`);
- `BlobBackedStorage` (`blob_store`): images live beside the sessions;
- `SessionIndexStorage` (`list_session_meta`): listings without reading content;
- `PinnedReads` (`open_pinned`): a handle that keeps reading
  the bytes a file had when it was opened or written, so a big session is loaded
  index first and its lines are read only when asked for (without it, whole).

Store-wide operations that need a capability the storage lacks (`list_all`,
`rm`, gc) raise `MissingCapabilityError`, which names it (`directory_tree`).
Every file stat has an `ino`; 0 means the backend cannot tell files apart, and the
inode-based half of the conflict check is then skipped.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Protocol, TypeGuard, runtime_checkable

from sessiontree._util.closing import ClosesOnExit, process_id
from sessiontree._util.fs import create_new, glob_escape, temp_side_path
from sessiontree.errors import InheritedHandleError, SessionTreeError

if TYPE_CHECKING:
    from sessiontree.storage._blobs import BlobStoreLike
    from sessiontree.storage._handover import OldInode


@dataclass(frozen=True, slots=True)
class StorageStat:
    """Size and modification time of a stored file."""

    size: int
    mtime: datetime
    mtime_ms: float
    mtime_ns: int = 0
    ino: int = 0
    nlink: int = 1
    """Links to the file; 0 for an open file that was deleted or replaced since."""


@runtime_checkable
class SessionStorageWriter(Protocol):
    """An append-only line writer for one session file."""

    def write_line(self, line: str) -> None:
        """Append `line` (which carries its own trailing newline) in one write."""

    def flush(self) -> None:
        """Hand everything buffered to the OS (no durability barrier)."""

    def fsync(self) -> None:
        """Make everything written so far durable."""

    def close(self) -> None:
        """Flush and release the writer; best effort, raises the first error."""

    def get_error(self) -> BaseException | None:
        """The first error this writer hit, if any."""


class WriterState(ClosesOnExit):
    """The stored first error and closed flag every storage writer keeps.

    Subclasses declare the `_closed`, `_error`, `_owner` and `path` slots (or
    attributes), set `_owner = process_id()` and call `_close_state()` from their
    `close`. (No `__slots__` here: a slotted base could not assign attributes its
    subclasses declare.) A writer is its opener's: in a forked child every write
    raises (see `sessiontree._util.closing`).
    """

    _closed: bool
    _error: BaseException | None
    _owner: int
    """The process that opened it (`process_id()`); subclasses set it."""
    path: str

    def _check(self) -> None:
        """Raise the stored error, ValueError once closed, InheritedHandleError in a
        forked child (a writer is its opener's)."""
        if self._owner != process_id():
            raise InheritedHandleError(self.path, self._owner)
        if self._error is not None:
            raise self._error
        if self._closed:
            raise ValueError(f"writer for {self.path} is closed")

    def _close_state(self) -> bool:
        """Mark closed; False when it already was (close is idempotent)."""
        if self._closed:
            return False
        self._closed = True
        return True

    def _raise_stored(self) -> None:
        if self._error is not None:
            raise self._error

    def get_error(self) -> BaseException | None:
        """The first error this writer hit, if any."""
        return self._error

    @property
    def closed(self) -> bool:
        """Whether `close` was called."""
        return self._closed


@runtime_checkable
class SessionStorage(Protocol):
    """Filesystem operations used by the session manager."""

    def ensure_dir(self, path: str) -> None:
        """Create `path` and its parents (private to the user) if missing."""

    def exists(self, path: str) -> bool:
        """Whether a file or directory exists at `path`."""

    def write_text(self, path: str, content: str) -> None:
        """Write `content` to `path`, atomically replacing what was there."""

    def stat(self, path: str) -> StorageStat:
        """Size and mtime; FileNotFoundError when missing."""

    def list_files(self, dir: str, pattern: str) -> list[str]:
        """Full paths of the files directly in `dir` matching a `*.jsonl`-style pattern."""

    def read_text(self, path: str) -> str:
        """The whole file as text; FileNotFoundError when missing."""

    def read_text_prefix(self, path: str, max_bytes: int) -> str:
        """At most `max_bytes` from the start, decoded leniently (a cut character is dropped)."""

    def rename(self, path: str, new_path: str) -> None:
        """Move `path` to `new_path`, replacing it atomically."""

    def unlink(self, path: str) -> None:
        """Remove a file; FileNotFoundError when missing."""

    def open_writer(self, path: str, flags: str = "a") -> SessionStorageWriter:
        """An appending writer (`"a"`) or a truncating one (`"w"`)."""


@runtime_checkable
class ChunkedReads(Protocol):
    """A backend that streams a file's bytes and reads ranges of them."""

    def iter_chunks(self, path: str, chunk_size: int = 1 << 20) -> Iterator[bytes]:
        """The file's bytes in chunks, for streaming loads."""
        ...

    def read_bytes_range(self, path: str, offset: int, length: int) -> bytes:
        """Up to `length` bytes starting at `offset` (negative offset: from the end)."""
        ...


@runtime_checkable
class AtomicWrites(Protocol):
    """A backend that replaces a whole file atomically and durably."""

    def write_atomic(self, path: str, chunks: Iterable[bytes]) -> StorageStat | None:
        """Write a new file via temp file + fsync + rename + directory fsync.

        Returns the stat of the file written where the backend knows it (its `ino`
        is then the file now at `path`, with no window for another writer).
        """
        ...

    def fsync_dir(self, path: str) -> None:
        """Make a directory's entries (creations, renames) durable."""
        ...


@runtime_checkable
class DeferredSync(Protocol):
    """A backend whose atomic writes can leave their fsyncs for later: one barrier for
    many files instead of two fsyncs each."""

    def write_atomic_unsynced(self, path: str, chunks: Iterable[bytes]) -> None:
        """Replace `path` all or nothing (as `write_atomic`), not yet durably."""
        ...

    def sync_files(self, paths: Iterable[str]) -> None:
        """Make the files at `paths` durable, then their directories' entries."""
        ...


@runtime_checkable
class DirectoryTree(Protocol):
    """A backend that lists and removes directories."""

    def list_dirs(self, dir: str) -> list[str]:
        """Full paths of the directories directly in `dir` (empty if `dir` is missing)."""
        ...

    def remove_tree(self, path: str) -> None:
        """Remove a directory and everything below it (no error if missing)."""
        ...


@runtime_checkable
class HostFilesystem(Protocol):
    """A backend whose paths are this host's files."""

    def host_path(self, path: str) -> str:
        """`path` as an OS path of this host."""
        ...


@runtime_checkable
class PinnedFile(Protocol):
    """A read handle on the bytes of one stored file as they were when it was opened
    (or written): it keeps reading them after the path is replaced or deleted."""

    @property
    def ino(self) -> int:
        """The file it reads (as `StorageStat.ino`)."""
        ...

    def size(self) -> int:
        """Its size now."""
        ...

    def pread(self, offset: int, length: int) -> bytes:
        """Up to `length` bytes at `offset` (fewer only at the end of the file)."""
        ...

    def readinto(self, buffer: memoryview, offset: int) -> int:
        """Fill `buffer` from `offset`; the count read (0 at the end)."""
        ...

    def close(self) -> None:
        """Release the handle (idempotent)."""
        ...


@runtime_checkable
class PinnedReads(Protocol):
    """A backend that reads a file through a handle pinned to its bytes: what lets a
    session be loaded index first and its lines read only when asked for."""

    def open_pinned(self, path: str) -> PinnedFile:
        """A pinned handle on `path` (FileNotFoundError when missing)."""
        ...


@runtime_checkable
class RootedStorage(Protocol):
    """A backend whose paths lie under one agent dir (PostgreSQL's `root`)."""

    root: str


# -- optional capabilities -----------------------------------------------------------------


@runtime_checkable
class WriterLock(Protocol):
    """A held writer lock of one session; `release()` is idempotent.

    A lock that can tell whether it is still held also has `verify()` (`VerifiableLock`).
    """

    @property
    def session_file(self) -> str:
        """The session path the lock was taken for."""
        ...

    def release(self) -> None:
        """Give the lock up (also done by the backend when the holder dies)."""
        ...


@runtime_checkable
class VerifiableLock(Protocol):
    """A lock that can tell it was lost (its file replaced, its connection dropped)."""

    def verify(self) -> None:
        """Raise SessionLockError unless the lock is still held."""
        ...


@runtime_checkable
class LockingStorage(Protocol):
    """A backend that can lock a session against a second writer (on any host it serves)."""

    def acquire_lock(self, path: str) -> WriterLock:
        """Take the writer lock of `path` without waiting; SessionLockError if it is held."""
        ...


@runtime_checkable
class BlobBackedStorage(Protocol):
    """A backend that stores blobs itself (None: use the agent dir's blob files)."""

    def blob_store(self) -> BlobStoreLike | None:
        """The blob store that belongs to this storage."""
        ...


@dataclass(frozen=True, slots=True)
class SessionMeta:
    """What a listing needs to know about one stored session, without its content.

    The header fields are None when the file has no valid session header
    (`valid` is False then). Text fields are as stored, not whitespace-normalised.
    """

    path: str
    size: int
    line_count: int
    """Newline-terminated lines."""
    mtime: datetime
    mtime_ns: int
    valid: bool
    """The first JSON object (after an optional title slot) is a session header."""
    ino: int = 0
    """As `stat().ino`: a new value after every full rewrite."""
    id: str | None = None
    cwd: str | None = None
    title: str | None = None
    """The first non-blank of: the title slot's title (when the file has one, else the
    header `title`), the latest `session_info` name / `title_change` title, the
    latest compaction `shortSummary`."""
    title_source: str | None = None
    parent_session: str | None = None
    created: str | None = None
    """Header `timestamp` (ISO string, as written)."""
    message_count: int = 0
    """Entries of type `message` (any role)."""
    first_message: str | None = None
    """Text of the first user message with non-empty text."""
    last_activity_ms: int | None = None
    """Newest user/assistant message time: `message.timestamp`, else the entry's `timestamp`."""
    all_messages_text: str | None = None
    """Non-empty user/assistant message texts joined by a space, as the peers join them
    (`allMessages.join(" ")`); only when asked for."""


@runtime_checkable
class SessionIndexStorage(Protocol):
    """A backend that keeps session metadata up to date as it writes."""

    def list_session_meta(
        self, dir: str | None = None, *, with_text: bool = False
    ) -> list[SessionMeta]:
        """Metadata of the `*.jsonl` files directly in `dir`, sorted by path.

        `dir=None`: every `*.jsonl` file in every directory under `<root>/sessions`.
        `with_text=True` also fills `all_messages_text` (costs a read of the message texts).
        """
        ...


# -- capabilities, with fallbacks ----------------------------------------------------------


class MissingCapabilityError(SessionTreeError, NotImplementedError):
    """An operation needs a storage capability the storage does not have."""

    def __init__(self, storage: object, capability: str, operation: str) -> None:
        super().__init__(
            f"{operation} needs a storage with {capability}; "
            f"{type(storage).__name__} does not have it"
        )
        self.capability = capability
        self.operation = operation


def directory_tree(storage: object, operation: str) -> DirectoryTree:
    """`storage` as a `DirectoryTree`, or MissingCapabilityError naming the operation."""
    if not isinstance(storage, DirectoryTree):
        raise MissingCapabilityError(storage, "DirectoryTree (list_dirs, remove_tree)", operation)
    return storage


def is_stored_file(storage: SessionStorage, path: str) -> bool:
    """Whether `path` is a file of the storage: its directory's listing names it.
    ValueError for a path the storage cannot hold (outside a database's root)."""
    directory, name = os.path.split(path)
    return bool(name) and path in storage.list_files(directory, glob_escape(name))


_CHUNKED_CLASSES: set[type] = set()


def _chunked(storage: SessionStorage) -> TypeGuard[ChunkedReads]:
    """`isinstance(storage, ChunkedReads)`, remembered for a class that has the methods
    itself (a protocol check looks each one up: a content index build reads 30,000
    ranges and chunks)."""
    kind = type(storage)
    if kind in _CHUNKED_CLASSES:
        return True
    if not isinstance(storage, ChunkedReads):
        return False
    if all(callable(getattr(kind, name, None)) for name in ("iter_chunks", "read_bytes_range")):
        _CHUNKED_CLASSES.add(kind)
    return True


def read_chunks(storage: SessionStorage, path: str, chunk_size: int = 1 << 20) -> Iterator[bytes]:
    """The file's bytes in chunks (`iter_chunks`, else one `read_text`)."""
    if _chunked(storage):
        return storage.iter_chunks(path, chunk_size)
    return iter((storage.read_text(path).encode("utf-8", "surrogatepass"),))


def read_range(storage: SessionStorage, path: str, offset: int, length: int) -> bytes:
    """Up to `length` bytes at `offset` (`read_bytes_range`, else a whole read)."""
    if _chunked(storage):
        return storage.read_bytes_range(path, offset, length)
    data = storage.read_text(path).encode("utf-8", "surrogatepass")
    start = max(0, len(data) + offset) if offset < 0 else offset
    return data[start : start + length]


def read_range_chunks(
    storage: SessionStorage,
    path: str,
    offset: int,
    end: int | None = None,
    chunk_size: int = 1 << 20,
) -> Iterator[bytes]:
    """The bytes from `offset` to `end` (default: the end of the file), in chunks."""
    while end is None or offset < end:
        length = chunk_size if end is None else min(chunk_size, end - offset)
        chunk = read_range(storage, path, offset, length)
        if not chunk:
            return
        yield chunk
        offset += len(chunk)


def write_whole(storage: SessionStorage, path: str, chunks: Iterable[bytes]) -> StorageStat | None:
    """Replace `path` with the chunks: atomically where the backend can, else `write_text`."""
    if isinstance(storage, AtomicWrites):
        return storage.write_atomic(path, chunks)
    storage.write_text(path, b"".join(chunks).decode("utf-8", "surrogateescape"))
    return None


def write_new(storage: SessionStorage, names: Iterable[str], chunks: Iterable[bytes]) -> str:
    """Write `chunks` as a new file under the first of `names` (one directory) that
    does not exist, and return it; nothing is ever replaced (`_fs.create_new` on this
    host's files). FileExistsError when every name is taken.

    Elsewhere (a database) a name is taken when `exists` says so: one created by
    another host between that check and the write would be replaced.
    """
    if isinstance(storage, HostFilesystem):
        host = {storage.host_path(n): n for n in names}
        return host[create_new(host, chunks)]
    for name in names:
        if not storage.exists(name):
            write_whole(storage, name, chunks)
            return name
    raise FileExistsError(errno.EEXIST, "every name is taken")


def replace_checked(
    storage: SessionStorage,
    path: str,
    chunks: Iterable[bytes],
    check: Callable[[], None],
    checked_size: int,
    pending: list[OldInode] | None = None,
) -> StorageStat | None:
    """Write `chunks` beside `path`, call `check()` (it raises to stop; `checked_size`:
    the size of the file it accepts), then rename the new file over `path`; what
    `write_whole` returned for it.

    Every in-place rewrite of a session comes here. Writing a big file takes a while:
    a check made before it began cannot see another program's append meanwhile, which
    the rename would throw away; the check and the rename run under oh-my-pi's lock,
    and a line appended without it (pi's way) before the rename is carried into the
    new file (`_handover`), by `finish()` of the old file put in `pending` (the caller
    first lets go of its own handles on it), else at once. The file beside is removed
    whenever the new one does not take the path. Host files only: elsewhere (a
    database's one transaction) `write_whole` writes `path` and `check` runs first.
    """
    if not isinstance(storage, HostFilesystem):
        check()
        return write_whole(storage, path, chunks)
    # Here: the hand-over (its lock's socket, its conflict copies) is a rewrite's, and
    # reading commands never rewrite.
    from sessiontree.storage._handover import hand_over

    temp = temp_side_path(path)
    try:
        written = write_whole(storage, temp, chunks)
        if not isinstance(written, StorageStat):
            written = storage.stat(temp)
        host = storage.host_path(path)
        rename = partial(storage.rename, temp, path)
        old = hand_over(host, checked_size, check, rename, host, written.ino)
    except BaseException:
        try:
            if storage.exists(temp):
                storage.unlink(temp)
        except OSError:
            pass
        raise
    if old is not None:
        if pending is None:
            old.finish()
        else:
            pending.append(old)
    sync_dir(storage, os.path.dirname(path) or ".")
    return written


def sync_dir(storage: SessionStorage, path: str) -> None:
    """Make `path`'s entries durable where the backend can."""
    if isinstance(storage, AtomicWrites):
        storage.fsync_dir(path)
