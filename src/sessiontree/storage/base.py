"""The storage Protocols every backend implements.

`SessionStorage` holds every filesystem-like operation the session manager uses;
paths are strings. Beyond the API contract's methods, backends provide a few
capabilities the manager needs to be fast and crash safe (`iter_chunks`,
`read_bytes_range`, `write_atomic`, `fsync_dir`, `remove_tree`, `list_dirs`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class StorageStat:
    """Size and modification time of a stored file."""

    size: int
    mtime: datetime
    mtime_ms: float
    mtime_ns: int = 0
    ino: int = 0


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

    # -- capabilities beyond the API contract -------------------------------------------

    def iter_chunks(self, path: str, chunk_size: int = 1 << 20) -> Iterator[bytes]:
        """The file's bytes in chunks, for streaming loads."""

    def read_bytes_range(self, path: str, offset: int, length: int) -> bytes:
        """Up to `length` bytes starting at `offset` (negative offset: from the end)."""

    def write_atomic(self, path: str, chunks: Iterable[bytes]) -> None:
        """Write a new file via temp file + fsync + rename + directory fsync."""

    def fsync_dir(self, path: str) -> None:
        """Make a directory's entries (creations, renames) durable."""

    def list_dirs(self, dir: str) -> list[str]:
        """Full paths of the directories directly in `dir` (empty if `dir` is missing)."""

    def remove_tree(self, path: str) -> None:
        """Remove a directory and everything below it (no error if missing)."""
