"""`MemorySessionStorage`: a dict-backed filesystem for tests and non-persistent sessions.

It mirrors `FileSessionStorage` closely enough for one conformance suite to cover
both: parent directories must exist, errors are the same OSError subclasses, and
files behave like inodes (a writer keeps appending to the file it opened even
after a rename, and `write_atomic` swaps in a new inode).
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta

from sessiontree._util.closing import process_id
from sessiontree._util.fs import glob_match_name, utf8_prefix_text
from sessiontree.storage._base import StorageStat, WriterLock, WriterState
from sessiontree.storage._blobs import MemoryBlobStore
from sessiontree.storage._locks import MemoryLockTable

__all__ = ["MemorySessionStorage", "MemorySessionWriter"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class _Node:
    """One file's content and metadata (the in-memory inode)."""

    __slots__ = ("data", "ino", "mtime_ns")

    def __init__(self, ino: int, mtime_ns: int) -> None:
        self.data = bytearray()
        self.ino = ino
        self.mtime_ns = mtime_ns


def _oserror(cls: type[OSError], code: int, path: str) -> OSError:
    return cls(code, os.strerror(code), path)


class MemorySessionWriter(WriterState):
    """Appends to an in-memory file in O(1) per line (bytearray extend)."""

    __slots__ = ("_closed", "_error", "_node", "_owner", "_storage", "path")

    def __init__(self, storage: MemorySessionStorage, node: _Node, path: str) -> None:
        self._storage = storage
        self._node = node
        self._error: BaseException | None = None
        self._closed = False
        self._owner = process_id()
        self.path = path

    def write_bytes(self, data: bytes) -> None:
        """Append pre-encoded bytes."""
        self._check()
        injected = self._storage._write_error
        if injected is not None:
            self._error = injected
            raise injected
        self._node.data += data
        self._node.mtime_ns = self._storage._tick()

    def write_line(self, line: str) -> None:
        """Append `line` (already newline-terminated), UTF-8 encoded."""
        self.write_bytes(line.encode("utf-8"))

    def flush(self) -> None:
        """Nothing is buffered; re-raises a stored error."""
        self._check()

    def fsync(self) -> None:
        """Nothing to make durable; re-raises a stored error."""
        self._check()

    def close(self) -> None:
        """Release the writer; raises the stored error, if any."""
        if self._close_state():
            self._raise_stored()


class MemorySessionStorage:
    """`SessionStorage` kept in dicts; paths are normalised to absolute paths.

    Not thread-safe: like a session manager, use one from one thread at a time.
    """

    def __init__(self) -> None:
        self._last_ns = 0
        self._next_ino = 1
        self._files: dict[str, _Node] = {}
        # directory -> (mtime_ns, names of its direct children)
        self._dirs: dict[str, tuple[int, set[str]]] = {}
        self._write_error: BaseException | None = None
        self._locks = MemoryLockTable()
        self._blobs: MemoryBlobStore | None = None
        root = os.path.abspath(os.sep)
        self._dirs[root] = (self._tick(), set())

    # -- helpers ---------------------------------------------------------------------------

    def _tick(self) -> int:
        # Strictly increasing, so every write visibly advances mtime.
        now = time.time_ns()
        self._last_ns = now if now > self._last_ns else self._last_ns + 1
        return self._last_ns

    def _new_node(self) -> _Node:
        node = _Node(self._next_ino, self._tick())
        self._next_ino += 1
        return node

    @staticmethod
    def _norm(path: str) -> str:
        return os.path.abspath(os.fspath(path))

    def _parent_dir(self, p: str, original: str) -> str:
        parent = os.path.dirname(p)
        if parent not in self._dirs:
            if parent in self._files:
                raise _oserror(NotADirectoryError, errno.ENOTDIR, original)
            raise _oserror(FileNotFoundError, errno.ENOENT, original)
        return parent

    def _add_child(self, p: str) -> None:
        parent = os.path.dirname(p)
        _, names = self._dirs[parent]
        names.add(os.path.basename(p))
        self._dirs[parent] = (self._tick(), names)

    def _remove_child(self, p: str) -> None:
        parent = os.path.dirname(p)
        entry = self._dirs.get(parent)
        if entry is not None:
            entry[1].discard(os.path.basename(p))
            self._dirs[parent] = (self._tick(), entry[1])

    def _file(self, path: str) -> _Node:
        p = self._norm(path)
        node = self._files.get(p)
        if node is None:
            if p in self._dirs:
                raise _oserror(IsADirectoryError, errno.EISDIR, path)
            raise _oserror(FileNotFoundError, errno.ENOENT, path)
        return node

    def _put_node(self, path: str, node: _Node) -> None:
        p = self._norm(path)
        self._parent_dir(p, path)
        if p in self._dirs:
            raise _oserror(IsADirectoryError, errno.EISDIR, path)
        self._files[p] = node
        self._add_child(p)

    def fail_writes(self, error: BaseException | None) -> None:
        """Make every later write (writers, `write_text`, `write_atomic`) raise `error`.

        For testing failure handling; pass None to make writes succeed again.
        """
        self._write_error = error

    # -- SessionStorage ------------------------------------------------------------------------

    def ensure_dir(self, path: str) -> None:
        """Create `path` and its parents if missing."""
        p = self._norm(path)
        missing: list[str] = []
        while p not in self._dirs:
            if p in self._files:
                raise _oserror(FileExistsError, errno.EEXIST, path)
            missing.append(p)
            p = os.path.dirname(p)
        for d in reversed(missing):
            self._dirs[d] = (self._tick(), set())
            self._add_child(d)

    def exists(self, path: str) -> bool:
        """Whether a file or directory exists at `path`."""
        p = self._norm(path)
        return p in self._files or p in self._dirs

    def write_text(self, path: str, content: str) -> None:
        """Atomically replace `path` with `content` (UTF-8)."""
        self.write_atomic(path, (content.encode("utf-8"),))

    def stat(self, path: str) -> StorageStat:
        """Size and mtime; FileNotFoundError when missing (directories have size 0)."""
        p = self._norm(path)
        node = self._files.get(p)
        if node is not None:
            size, ns, ino = len(node.data), node.mtime_ns, node.ino
        elif p in self._dirs:
            size, ns, ino = 0, self._dirs[p][0], 0
        else:
            raise _oserror(FileNotFoundError, errno.ENOENT, path)
        return StorageStat(
            size=size,
            mtime=_EPOCH + timedelta(microseconds=ns // 1000),
            mtime_ms=ns / 1e6,
            mtime_ns=ns,
            ino=ino,
        )

    def list_files(self, dir: str, pattern: str) -> list[str]:
        """Full paths of the files directly in `dir` matching `pattern`, sorted."""
        d = self._norm(dir)
        entry = self._dirs.get(d)
        if entry is None:
            return []
        names = sorted(
            n for n in entry[1] if os.path.join(d, n) in self._files and glob_match_name(n, pattern)
        )
        return [os.path.join(dir, n) for n in names]

    def read_text(self, path: str) -> str:
        """The whole file as text (invalid UTF-8 becomes U+FFFD)."""
        return self._file(path).data.decode("utf-8", "replace")

    def read_text_prefix(self, path: str, max_bytes: int) -> str:
        """At most `max_bytes` from the start; a cut multibyte character is dropped."""
        data = self._file(path).data
        return utf8_prefix_text(bytes(data[: max(0, max_bytes)]))

    def rename(self, path: str, new_path: str) -> None:
        """Move a file or directory, replacing an existing file at `new_path`."""
        src, dst = self._norm(path), self._norm(new_path)
        if src not in self._files and src not in self._dirs:
            raise _oserror(FileNotFoundError, errno.ENOENT, path)
        self._parent_dir(dst, new_path)
        if src == dst:
            return
        node = self._files.get(src)
        if node is not None:
            if dst in self._dirs:
                raise _oserror(IsADirectoryError, errno.EISDIR, new_path)
            del self._files[src]
            self._remove_child(src)
            self._files[dst] = node
            self._add_child(dst)
            return
        # Directory rename: the target may only be missing or an empty directory.
        if dst in self._files:
            raise _oserror(NotADirectoryError, errno.ENOTDIR, new_path)
        if dst.startswith(src + os.sep):
            raise _oserror(OSError, errno.EINVAL, new_path)
        if dst in self._dirs:
            if self._dirs[dst][1]:
                raise _oserror(OSError, errno.ENOTEMPTY, new_path)
            del self._dirs[dst]
            self._remove_child(dst)
        prefix = src + os.sep
        for old in [k for k in self._dirs if k == src or k.startswith(prefix)]:
            self._dirs[dst + old[len(src) :]] = self._dirs.pop(old)
        for old in [k for k in self._files if k.startswith(prefix)]:
            self._files[dst + old[len(src) :]] = self._files.pop(old)
        self._remove_child(src)
        self._add_child(dst)

    def unlink(self, path: str) -> None:
        """Remove a file; FileNotFoundError when missing, IsADirectoryError for a directory."""
        p = self._norm(path)
        self._file(path)
        del self._files[p]
        self._remove_child(p)

    def open_writer(self, path: str, flags: str = "a") -> MemorySessionWriter:
        """An appending (`"a"`) or truncating (`"w"`) writer; creates the file if missing."""
        if flags not in ("a", "w"):
            raise ValueError(f"unsupported writer flags {flags!r} (use 'a' or 'w')")
        p = self._norm(path)
        node = self._files.get(p)
        if node is None:
            node = self._new_node()
            self._put_node(path, node)
        elif flags == "w":
            node.data.clear()
            node.mtime_ns = self._tick()
        return MemorySessionWriter(self, node, path)

    # -- capabilities ----------------------------------------------------------------------------

    def iter_chunks(self, path: str, chunk_size: int = 1 << 20) -> Iterator[bytes]:
        """The file's bytes in chunks; FileNotFoundError is raised by this call."""
        if chunk_size <= 0:
            raise ValueError("chunk_size must be positive")
        node = self._file(path)

        def chunks() -> Iterator[bytes]:
            pos = 0
            while pos < len(node.data):
                chunk = bytes(node.data[pos : pos + chunk_size])
                pos += len(chunk)
                yield chunk

        return chunks()

    def read_bytes_range(self, path: str, offset: int, length: int) -> bytes:
        """Up to `length` bytes from `offset` (negative: from the end, clamped to 0)."""
        data = self._file(path).data
        if offset < 0:
            offset = max(0, len(data) + offset)
        return bytes(data[offset : offset + max(0, length)])

    def write_atomic(self, path: str, chunks: Iterable[bytes]) -> None:
        """Replace `path` with the concatenated chunks, all or nothing (a new inode)."""
        p = self._norm(path)
        self._parent_dir(p, path)
        if p in self._dirs:
            raise _oserror(IsADirectoryError, errno.EISDIR, path)
        node = self._new_node()
        for chunk in chunks:
            node.data += chunk
        if self._write_error is not None:
            raise self._write_error
        node.mtime_ns = self._tick()
        self._put_node(path, node)

    def fsync_dir(self, path: str) -> None:
        """Nothing to make durable; FileNotFoundError if the directory is missing."""
        if self._norm(path) not in self._dirs:
            raise _oserror(FileNotFoundError, errno.ENOENT, path)

    def list_dirs(self, dir: str) -> list[str]:
        """Full paths of the directories directly in `dir`, sorted ([] if missing)."""
        d = self._norm(dir)
        entry = self._dirs.get(d)
        if entry is None:
            return []
        names = sorted(n for n in entry[1] if os.path.join(d, n) in self._dirs)
        return [os.path.join(dir, n) for n in names]

    def remove_tree(self, path: str) -> None:
        """Remove a directory and everything below it; missing is fine."""
        p = self._norm(path)
        if p in self._files:
            raise _oserror(NotADirectoryError, errno.ENOTDIR, path)
        if p not in self._dirs:
            return
        prefix = p + os.sep if not p.endswith(os.sep) else p
        for k in [k for k in self._files if k.startswith(prefix)]:
            del self._files[k]
        for k in [k for k in self._dirs if k.startswith(prefix)]:
            del self._dirs[k]
        if os.path.dirname(p) != p:
            del self._dirs[p]
            self._remove_child(p)
        else:
            # Removing the root empties the store but keeps the root itself.
            self._dirs[p] = (self._tick(), set())

    def acquire_lock(self, path: str) -> WriterLock:
        """The session's writer lock, held in this storage (one writer per path)."""
        return self._locks.acquire(path)

    def blob_store(self) -> MemoryBlobStore:
        """The blobs of this storage: every session manager on it shares them."""
        if self._blobs is None:
            self._blobs = MemoryBlobStore()
        return self._blobs
