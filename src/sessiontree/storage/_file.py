"""`FileSessionStorage`: the storage Protocol on the real filesystem.

Sessions hold secrets (prompts, tool output, keys pasted by users), so every
directory this backend creates is 0700 and every file 0600.
"""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta

from sessiontree._util.closing import process_id
from sessiontree._util.fs import (
    DIR_MODE,
    FILE_MODE,
    atomic_write,
    ensure_private_dir,
    fsync_directory,
    glob_match_name,
    open_read,
    open_regular,
    read_fd,
    refuse_non_regular,
    utf8_prefix_text,
)
from sessiontree.storage._base import SessionStorage, StorageStat, WriterState
from sessiontree.storage._locks import FileLock

__all__ = [
    "DIR_MODE",
    "FILE_MODE",
    "FilePin",
    "FileSessionStorage",
    "FileSessionWriter",
    "default_storage",
    "ensure_private_dir",
    "fsync_directory",
    "glob_match_name",
    "utf8_prefix_text",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _stat_result(st: os.stat_result) -> StorageStat:
    ns = st.st_mtime_ns
    return StorageStat(
        size=st.st_size,
        mtime=_EPOCH + timedelta(microseconds=ns // 1000),
        mtime_ms=ns / 1e6,
        mtime_ns=ns,
        ino=st.st_ino,
        nlink=st.st_nlink,
    )


class FileSessionWriter(WriterState):
    """Appends lines to one file through a single O_APPEND descriptor.

    Nothing is buffered in Python: every `write_line` is handed to the kernel at
    once, so `flush` has nothing to do and `fsync` is the only durability barrier.
    A failed write is rolled back (the partial bytes are truncated away) so the
    file never ends in half a line, and the error is stored and re-raised.
    """

    __slots__ = ("_closed", "_error", "_fd", "_owner", "end", "path", "probe")

    def __init__(self, path: str, flags: str = "a") -> None:
        if flags not in ("a", "w"):
            raise ValueError(f"unsupported writer flags {flags!r} (use 'a' or 'w')")
        # Never through a symlink: a link planted under a session's name must not
        # make us append to (or truncate) whatever it points at.
        # Never a FIFO or device either: a FIFO put where the session was (between a
        # listing and this open) would block the open until a reader came, forever;
        # `open_regular` refuses it by name, before any byte is written or truncated.
        mode = os.O_WRONLY | os.O_APPEND | os.O_CREAT
        self.path = path
        self._error: BaseException | None = None
        self._owner = process_id()
        self._fd = open_regular(path, mode, FILE_MODE)
        if flags == "w":
            try:  # truncated once checked (an O_TRUNC open truncates before fstat looks)
                os.ftruncate(self._fd, 0)
            except BaseException:
                os.close(self._fd)
                raise
        # For the checks before appends: the open file's size (lseek) and its fstat
        # (`st_nlink == 0` once it was deleted or replaced). One system call each, no
        # Python frame.
        self.end = functools.partial(os.lseek, self._fd, 0, os.SEEK_END)
        self.probe = functools.partial(os.fstat, self._fd)
        self._closed = False  # set last: __del__ only closes a descriptor we own

    def stat(self) -> StorageStat:
        """The open file's stat (fstat): `nlink == 0` once it was deleted or replaced."""
        self._check()
        return _stat_result(os.fstat(self._fd))

    def write_bytes(self, data: bytes) -> None:
        """Append pre-encoded bytes (one or more complete lines)."""
        self._check()
        total = len(data)
        written = 0
        try:
            written = os.write(self._fd, data)
            if written < total:  # a short write: the rest, without copies
                view = memoryview(data)
                while written < total:
                    written += os.write(self._fd, view[written:])
        except BaseException as exc:
            if written:
                self._rollback(written)
            # An interrupt (KeyboardInterrupt) is not a broken writer; an I/O error is.
            if isinstance(exc, Exception):
                self._error = exc
            raise

    def write_line(self, line: str) -> None:
        """Append `line` (already newline-terminated), UTF-8 encoded."""
        self.write_bytes(line.encode("utf-8"))

    def _rollback(self, written: int) -> None:
        # Our partial bytes are the last `written` bytes of the file (one writer per
        # session); cutting them keeps the next successful write on a line boundary.
        try:
            size = os.fstat(self._fd).st_size
            os.ftruncate(self._fd, max(0, size - written))
        except OSError:
            pass

    def flush(self) -> None:
        """No-op beyond error reporting: nothing is buffered in user space."""
        self._check()

    def fsync(self) -> None:
        """Make everything written so far durable (real fsync)."""
        self._check()
        try:
            os.fsync(self._fd)
        except Exception as exc:
            self._error = exc
            raise

    def close(self) -> None:
        """Release the descriptor; raises the stored or closing error, if any."""
        if self._closed:
            return
        self._closed = True
        try:
            os.close(self._fd)
        except OSError as exc:
            if self._error is None:
                self._error = exc
        if self._error is not None:
            raise self._error

    def __del__(self) -> None:
        # Leaked writers must not leak descriptors; raw fds raise no ResourceWarning.
        if not getattr(self, "_closed", True):
            self._closed = True
            try:
                os.close(self._fd)
            except OSError:
                pass


class _ChunkReader:
    """Iterator over a file's bytes; the file is opened eagerly so a missing file raises at once."""

    __slots__ = ("_chunk_size", "_fd")

    def __init__(self, path: str, chunk_size: int) -> None:
        if chunk_size <= 0:
            raise ValueError("chunk_size must be positive")
        self._chunk_size = chunk_size
        self._fd: int | None = read_fd(path)

    def __iter__(self) -> _ChunkReader:
        return self

    def __next__(self) -> bytes:
        if self._fd is None:
            raise StopIteration
        try:
            chunk = os.read(self._fd, self._chunk_size)
        except BaseException:
            self.close()
            raise
        if not chunk:
            self.close()
            raise StopIteration
        return chunk

    def close(self) -> None:
        """Release the descriptor early."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def __del__(self) -> None:
        if getattr(self, "_fd", None) is not None:
            self.close()


class FilePin:
    """A read-only descriptor on one inode (`PinnedFile`): a session loaded index first
    reads its lines from it, so a file replaced or deleted behind the reader still
    gives the bytes that were indexed. Reads are positional (`pread`): no shared
    offset, safe from any thread."""

    __slots__ = ("_fd", "ino")

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd
        self.ino = os.fstat(fd).st_ino

    @classmethod
    def open(cls, path: str) -> FilePin:
        fd = read_fd(path)
        try:
            return cls(fd)
        except BaseException:
            os.close(fd)
            raise

    def _descriptor(self) -> int:
        if self._fd is None:
            raise ValueError("read from a closed FilePin")
        return self._fd

    def size(self) -> int:
        return os.fstat(self._descriptor()).st_size

    def pread(self, offset: int, length: int) -> bytes:
        fd = self._descriptor()
        data = os.pread(fd, length, offset)
        if len(data) == length or not data:
            return data
        parts = [data]
        got = len(data)
        while got < length:
            more = os.pread(fd, length - got, offset + got)
            if not more:
                break
            parts.append(more)
            got += len(more)
        return b"".join(parts)

    def readinto(self, buffer: memoryview, offset: int) -> int:
        return os.preadv(self._descriptor(), [buffer], offset)

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __del__(self) -> None:
        if getattr(self, "_fd", None) is not None:
            self.close()


class FileSessionStorage:
    """`SessionStorage` on the local filesystem (paths are plain strings).

    It has every optional capability of `sessiontree.storage._base`.
    """

    def host_path(self, path: str) -> str:
        """Paths are this host's files."""
        return path

    def ensure_dir(self, path: str) -> None:
        """Create `path` and its parents (0700) if missing."""
        ensure_private_dir(path)

    def exists(self, path: str) -> bool:
        """Whether a file or directory exists at `path`."""
        return os.path.exists(path)

    def write_text(self, path: str, content: str) -> None:
        """Atomically replace `path` with `content` (UTF-8)."""
        self.write_atomic(path, (content.encode("utf-8"),))

    def stat(self, path: str) -> StorageStat:
        """Size and mtime; FileNotFoundError when missing."""
        return _stat_result(os.stat(path))

    def list_files(self, dir: str, pattern: str) -> list[str]:
        """Full paths of the regular files directly in `dir` matching `pattern`, sorted."""
        try:
            with os.scandir(dir) as it:
                names = [e.name for e in it if glob_match_name(e.name, pattern) and e.is_file()]
        except (FileNotFoundError, NotADirectoryError):
            return []
        return [os.path.join(dir, name) for name in sorted(names)]

    def read_text(self, path: str) -> str:
        """The whole file as text (invalid UTF-8 becomes U+FFFD, like Node)."""
        with open_read(path) as f:
            return f.read().decode("utf-8", "replace")

    def read_text_prefix(self, path: str, max_bytes: int) -> str:
        """At most `max_bytes` from the start; a multibyte character cut at the end is dropped."""
        with open_read(path) as f:
            data = f.read(max_bytes) if max_bytes > 0 else b""
        return utf8_prefix_text(data)

    def rename(self, path: str, new_path: str) -> None:
        """Move `path` to `new_path`, atomically replacing an existing file."""
        os.replace(path, new_path)

    def unlink(self, path: str) -> None:
        """Remove a file; FileNotFoundError when missing."""
        os.unlink(path)

    def open_writer(self, path: str, flags: str = "a") -> FileSessionWriter:
        """An appending (`"a"`) or truncating (`"w"`) line writer; the file is created 0600."""
        return FileSessionWriter(path, flags)

    def iter_chunks(self, path: str, chunk_size: int = 1 << 20) -> Iterator[bytes]:
        """The file's bytes in chunks; FileNotFoundError is raised by this call."""
        return _ChunkReader(path, chunk_size)

    def read_bytes_range(self, path: str, offset: int, length: int) -> bytes:
        """Up to `length` bytes from `offset` (negative: from the end, clamped to 0)."""
        fd = read_fd(path)
        try:
            if offset < 0:
                offset = max(0, os.fstat(fd).st_size + offset)
            parts: list[bytes] = []
            remaining = length
            while remaining > 0:
                chunk = os.pread(fd, remaining, offset)
                if not chunk:
                    break
                parts.append(chunk)
                offset += len(chunk)
                remaining -= len(chunk)
            return b"".join(parts)
        finally:
            os.close(fd)

    def write_atomic(self, path: str, chunks: Iterable[bytes]) -> StorageStat:
        """Temp file (same dir, 0600) + fsync + rename + directory fsync.

        On any failure before the rename the temp file is removed and the target
        is left exactly as it was. Returns the stat of the file written.
        """
        refuse_non_regular(path)
        return _stat_result(atomic_write(path, chunks))

    def write_atomic_unsynced(self, path: str, chunks: Iterable[bytes]) -> None:
        """As `write_atomic`, without its fsyncs (`DeferredSync`): `sync_files` makes it
        durable."""
        refuse_non_regular(path)
        atomic_write(path, chunks, durable=False)

    def sync_files(self, paths: Iterable[str]) -> None:
        """fsync each file (never through a symlink), then each of their dirs once."""
        paths = list(paths)
        for path in paths:
            fd = open_regular(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        for directory in sorted({os.path.dirname(p) for p in paths}):
            fsync_directory(directory)

    def open_pinned(self, path: str) -> FilePin:
        """A descriptor on `path`'s inode for index-first loads (`PinnedReads`)."""
        return FilePin.open(path)

    def fsync_dir(self, path: str) -> None:
        """Make a directory's entries durable (no-op where unsupported)."""
        fsync_directory(path)

    def list_dirs(self, dir: str) -> list[str]:
        """Full paths of the directories directly in `dir`, sorted ([] if missing)."""
        try:
            with os.scandir(dir) as it:
                names = [e.name for e in it if e.is_dir()]
        except (FileNotFoundError, NotADirectoryError):
            return []
        return [os.path.join(dir, name) for name in sorted(names)]

    def remove_tree(self, path: str) -> None:
        """Remove a directory and everything below it; missing is fine."""
        try:
            shutil.rmtree(path)
        except FileNotFoundError:
            pass

    def acquire_lock(self, path: str) -> FileLock:
        """The session's writer lock: `flock` on a sidecar (see `sessiontree.storage._locks`)."""
        return FileLock(path)


def default_storage(storage: SessionStorage | None) -> SessionStorage:
    """`storage` when given, else the agent dir's files: what a library function given
    no storage works on (the one place that default is chosen)."""
    return storage if storage is not None else FileSessionStorage()
