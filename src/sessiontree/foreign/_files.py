"""Where a foreign store's files are read: this host's (`HOST_FILES`), or a
`SessionStorage`'s (`StorageFiles`: a PostgreSQL database's, under its root, where the
Claude Agent SDK adapter keeps Claude Code's layout).

The readers (`read_transcript`, `read_claude_session`, the listing's windows) and
`ForeignStore` reach files only through a `Files`, so one reader serves both. A
storage's files are read through the storage alone, never as host paths: a name the
database holds that is no path component (`..`, `a/b`) is left out by its listings,
and a path outside its root, or with a NUL, is no file there.
"""

from __future__ import annotations

import errno
import io
import os
import stat as stat_module
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from sessiontree._util.fs import glob_escape, name_problem, open_read
from sessiontree.listing import stat_identity
from sessiontree.storage import SessionStorage, read_range

__all__ = ["HOST_FILES", "FileStat", "Files", "StorageFiles"]

Identity = tuple[int, int, int, int]
_WALK_DEPTH = 16
"""How deep a walk of a storage's directories goes (no agent nests deeper)."""


@dataclass(frozen=True, slots=True)
class FileStat:
    """A regular file: its size, mtime, inode (a database's row id) and the identity
    its listing is cached under (`listing.stat_identity`; ctime 0 in a database)."""

    size: int
    mtime_ns: int
    ino: int
    identity: Identity
    mtime: float
    """Seconds (`st_mtime`, as the readers have always rounded it)."""


class Files:
    """This host's files (the base: `StorageFiles` reads a storage's instead)."""

    on_host = True
    """Whether the paths are this host's files (the content index and the agents'
    own resume commands need them)."""

    def __repr__(self) -> str:
        return "HOST_FILES"

    def stat(self, path: str, *, listed: bool = False) -> FileStat | None:
        """The regular file at `path`, else None (`listed`: `entries` named it a file
        a moment ago, which a storage need not ask again)."""
        try:
            st = os.stat(path)
        except (OSError, ValueError):
            return None
        if not stat_module.S_ISREG(st.st_mode):
            return None
        return FileStat(st.st_size, st.st_mtime_ns, st.st_ino, stat_identity(st), st.st_mtime)

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path)

    def entries(self, directory: str) -> list[tuple[str, bool]]:
        """(name, is a directory) of what `directory` holds, by name ([]: none, or no
        such directory); symlinks followed, as a walk of the agent's dir does."""
        found: list[tuple[str, bool]] = []
        try:
            with os.scandir(directory) as scan:
                for entry in scan:
                    try:
                        if entry.is_dir():
                            found.append((entry.name, True))
                        elif entry.is_file():
                            found.append((entry.name, False))
                    except OSError:
                        continue
        except (OSError, ValueError):
            return []
        return sorted(found)

    def walk(self, root: str) -> Iterator[tuple[str, list[str], list[str]]]:
        """`os.walk(root)` (directories sorted in place by the caller)."""
        return os.walk(root)

    def open(self, path: str) -> BinaryIO:
        """The file for reading (OSError when it cannot be read)."""
        return open_read(path)

    def cache_key(self, path: str) -> str:
        """What the listing cache keeps the file's record under (a host path is its own)."""
        return path

    def close(self) -> None:
        """Release what the files are read through (nothing for this host's)."""


HOST_FILES = Files()


class StorageFiles(Files):
    """The files of a `SessionStorage` (read-only). `label` names the storage in the
    listing cache's keys (a database's URL without its password, and schema): a record
    of a database's file never answers for a host file of the same path, nor for the
    same path in another database. `owned`: `close()` closes the storage."""

    on_host = False

    def __init__(self, storage: SessionStorage, label: str, *, owned: bool = True) -> None:
        self.storage = storage
        self.label = label
        self.owned = owned

    def __repr__(self) -> str:
        return f"StorageFiles({self.storage!r})"

    def _is_file(self, path: str) -> bool:
        directory, name = os.path.split(path)
        if not name or name_problem(name) is not None:
            return False
        try:
            return path in self.storage.list_files(directory, glob_escape(name))
        except (OSError, ValueError):  # outside the root, a NUL: no file of the storage
            return False

    def stat(self, path: str, *, listed: bool = False) -> FileStat | None:
        try:
            st = self.storage.stat(path)
        except (OSError, ValueError):  # outside the root, a NUL: no file of the storage
            return None
        # A directory stats as 0 bytes: only then is the listing asked which it is.
        if st.size == 0 and not listed and not self._is_file(path):
            return None
        identity = (st.size, st.mtime_ns, st.ino, 0)
        return FileStat(st.size, st.mtime_ns, st.ino, identity, st.mtime_ns / 1e9)

    def is_dir(self, path: str) -> bool:
        try:
            return self.storage.exists(path) and not self._is_file(path)
        except (OSError, ValueError):
            return False

    def entries(self, directory: str) -> list[tuple[str, bool]]:
        list_dirs = getattr(self.storage, "list_dirs", None)
        try:
            files = [(os.path.basename(p), False) for p in self.storage.list_files(directory, "*")]
            dirs = [(os.path.basename(p), True) for p in list_dirs(directory)] if list_dirs else []
        except (OSError, ValueError):
            return []
        return sorted(files + dirs)

    def walk(self, root: str) -> Iterator[tuple[str, list[str], list[str]]]:
        yield from self._walk(root, _WALK_DEPTH)

    def _walk(self, directory: str, depth: int) -> Iterator[tuple[str, list[str], list[str]]]:
        try:
            if not self.storage.exists(directory):  # the usual case: one question
                return
        except (OSError, ValueError):
            return
        found = self.entries(directory)
        dirs = [n for n, is_dir in found if is_dir]
        yield directory, dirs, [n for n, is_dir in found if not is_dir]
        if depth > 0:
            for name in dirs:
                yield from self._walk(os.path.join(directory, name), depth - 1)

    def open(self, path: str) -> BinaryIO:
        # A directory or a missing file raises on the first read, as `open` would.
        return io.BufferedReader(_RangeReader(self.storage, path), 1 << 16)

    def cache_key(self, path: str) -> str:
        # Never an absolute path: no host file's record has this key.
        return f"{self.label}#{path}"

    def close(self) -> None:
        if self.owned:
            close = getattr(self.storage, "close", None)
            if callable(close):
                close()


class _RangeReader(io.RawIOBase):
    """A stored file read a range at a time (`read_range`), seekable."""

    def __init__(self, storage: SessionStorage, path: str) -> None:
        super().__init__()
        self._storage = storage
        self._path = path
        self._pos = 0
        self._end: int | None = None
        """Where a read came back short: the end (no question asked past it)."""

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._end = None
        if whence == io.SEEK_SET:
            self._pos = max(0, offset)
        elif whence == io.SEEK_CUR:
            self._pos = max(0, self._pos + offset)
        else:
            self._pos = max(0, self._storage.stat(self._path).size + offset)
        return self._pos

    def _read(self, length: int) -> bytes:
        if length <= 0 or (self._end is not None and self._pos >= self._end):
            return b""
        try:
            data = read_range(self._storage, self._path, self._pos, length)
        except ValueError:  # outside the root, a NUL: no file of the storage
            raise FileNotFoundError(errno.ENOENT, "No such file in the store", self._path) from None
        if len(data) < length:
            self._end = self._pos + len(data)
        self._pos += len(data)
        return data

    def readall(self) -> bytes:
        chunks = []
        while chunk := self._read(1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        data = self._read(len(buffer))
        buffer[: len(data)] = data
        return len(data)
