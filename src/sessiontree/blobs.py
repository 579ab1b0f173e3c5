"""Content-addressed blob store for images externalized from session files.

Blobs live at `<dir>/<sha256 hex of the raw bytes>`, exactly where omp puts them,
and are referenced from entries as `blob:sha256:<hex>`. Refs come from files that
may have been edited by anyone, so a hash is only ever accepted as 64 lowercase
hex characters: nothing else reaches a filesystem path.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Final, Protocol, runtime_checkable

from sessiontree.errors import InvalidBlobRefError
from sessiontree.storage.file import FILE_MODE, ensure_private_dir, fsync_directory

__all__ = [
    "BLOB_REF_PREFIX",
    "BlobInfo",
    "BlobPutResult",
    "BlobStore",
    "BlobStoreLike",
    "CollectableBlobStore",
    "MemoryBlobStore",
    "blob_extension_for_mime_type",
    "is_blob_ref",
    "parse_blob_ref",
]

BLOB_REF_PREFIX: Final = "blob:sha256:"
_HASH_RE: Final = re.compile(r"[0-9a-f]{64}")
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_PREFIX_LEN = len(BLOB_REF_PREFIX)
_REF_LEN = _PREFIX_LEN + 64

# omp's IMAGE_EXTENSION_BY_MIME; other image/* subtypes are sanitised below.
_EXTENSION_BY_MIME: Final = {
    "image/png": "png",
    "image/jpeg": "jpg",
    "image/jpg": "jpg",
    "image/gif": "gif",
    "image/webp": "webp",
    "image/svg+xml": "svg",
}
_EXTENSION_RE: Final = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9._-]*")


@dataclass(frozen=True, slots=True)
class BlobPutResult:
    """Where `put` stored a blob and the ref that points at it."""

    hash: str
    path: str
    ref: str
    display_path: str | None = None
    """The typed sidecar (`<hash>.<ext>`) when a MIME type was given."""


def is_blob_ref(s: object) -> bool:
    """True only for `blob:sha256:` followed by exactly 64 lowercase hex characters."""
    return parse_blob_ref(s) is not None


def parse_blob_ref(s: object) -> str | None:
    """The hash of a valid blob ref, or None for anything else (never a path)."""
    if type(s) is not str or len(s) != _REF_LEN or not s.startswith(BLOB_REF_PREFIX):
        return None
    digest = s[_PREFIX_LEN:]
    return digest if _HASH_RE.fullmatch(digest) else None


def _check_hash(digest: object) -> str:
    if type(digest) is not str or not _HASH_RE.fullmatch(digest):
        raise InvalidBlobRefError(f"invalid blob hash {digest!r}: expected 64 lowercase hex chars")
    return digest


def blob_extension_for_mime_type(mime_type: object) -> str | None:
    """The sidecar extension omp derives from an image MIME type (`image/png` -> `png`)."""
    if not isinstance(mime_type, str) or not mime_type:
        return None
    lower = mime_type.lower()
    known = _EXTENSION_BY_MIME.get(lower)
    if known is not None:
        return known
    if not lower.startswith("image/"):
        return None
    subtype = lower[len("image/") :].split(";")[0].split("+")[0]
    if not 0 < len(subtype) <= 32 or not _EXTENSION_RE.fullmatch(subtype):
        return None
    return subtype


class BlobStoreLike(Protocol):
    """What the persistence transforms need from a blob store."""

    def put(self, data: bytes, mime_type: str | None = None) -> BlobPutResult:
        """Store `data`; returns its hash, path and ref."""
        ...

    def get(self, hash: str) -> bytes | None:
        """The blob's bytes, or None when missing."""
        ...

    def has(self, hash: str) -> bool:
        """Whether the blob exists."""
        ...

    def sync(self) -> None:
        """Make the blobs written since the last sync durable."""
        ...


@dataclass(frozen=True, slots=True)
class BlobInfo:
    """One blob as `CollectableBlobStore.list_info` describes it."""

    hash: str
    size: int
    mtime: float
    """When the blob was last put (a re-put counts), epoch seconds on the store's clock."""
    exts: tuple[str, ...] = ()
    """Image extensions of its `<hash>.<ext>` sidecars."""


@runtime_checkable
class CollectableBlobStore(Protocol):
    """A blob store that `sessiontree.gc` can inventory and prune (beyond a blob directory).

    Like `BlobStore.put` touching a blob's file, a re-put refreshes a blob's mtime:
    `gc` never deletes a blob put within its minimum age.
    """

    def list_hashes(self) -> list[str]:
        """Every stored blob's hash, sorted."""
        ...

    def list_info(self) -> list[BlobInfo]:
        """Every stored blob with its size and mtime, sorted by hash."""
        ...

    def mtime(self, hash: str) -> float | None:
        """When the blob was last put (epoch seconds), None when missing."""
        ...

    def now(self) -> float:
        """The current time on the clock `mtime` uses (epoch seconds)."""
        ...

    def delete(self, hash: str, *, min_age_seconds: float = 0.0) -> bool:
        """Remove the blob unless it was put less than `min_age_seconds` ago (checked
        atomically with the removal); True when it was removed."""
        ...


class BlobStore:
    """Blobs on the real filesystem (directory 0700, files 0600), written atomically."""

    def __init__(self, dir: str) -> None:
        self.dir = os.fspath(dir)
        self._dir_ready = False
        self._lock = threading.Lock()
        # Blobs put since the last sync(), in order; a dict doubles as an ordered set.
        self._pending: dict[str, None] = {}

    def _path(self, digest: str) -> str:
        return os.path.join(self.dir, digest)

    def put(self, data: bytes, mime_type: str | None = None) -> BlobPutResult:
        """Store `data` under its sha256; identical content is stored once.

        The bytes go to a temp file that is renamed into place, so a blob file is
        never partial. With an image `mime_type`, a hard-linked `<hash>.<ext>`
        sidecar is created too (as omp does, for OS image viewers).
        """
        digest = hashlib.sha256(data).hexdigest()
        path = self._path(digest)
        if not self._dir_ready:
            ensure_private_dir(self.dir)
            self._dir_ready = True
        try:
            complete = os.stat(path).st_size == len(data)
        except FileNotFoundError:
            complete = False
        if not complete:
            # Missing, or left short by a crashed non-atomic writer: (re)write it.
            self._write_new(path, digest, data)
        else:
            # A re-put is a fresh use: `gc` never deletes a blob touched in the last
            # 10 minutes, so a writer about to reference an old blob keeps it alive.
            try:
                os.utime(path)
            except OSError:
                pass
        ext = blob_extension_for_mime_type(mime_type)
        display = f"{path}.{ext}" if ext else None
        if display is not None:
            self._link_sidecar(path, display, data)
        with self._lock:
            # Even a deduplicated blob is synced: another writer may not have fsynced it.
            self._pending[path] = None
        return BlobPutResult(digest, path, BLOB_REF_PREFIX + digest, display)

    def _write_new(self, path: str, digest: str, data: bytes) -> None:
        tmp = os.path.join(self.dir, f".{digest}.{secrets.token_hex(6)}.tmp")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_CLOEXEC
        try:
            fd = os.open(tmp, flags, FILE_MODE)
        except FileNotFoundError:
            # The blob directory was removed behind our back: recreate it once.
            ensure_private_dir(self.dir)
            fd = os.open(tmp, flags, FILE_MODE)
        try:
            try:
                view = memoryview(data)
                written = 0
                while written < len(view):
                    written += os.write(fd, view[written:])
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    def _link_sidecar(self, path: str, display: str, data: bytes) -> None:
        try:
            os.link(path, display)
        except FileExistsError:
            pass
        except OSError:
            # Filesystems without hard links get a copy, still written atomically.
            if not os.path.exists(display):
                self._write_new(display, os.path.basename(display), data)

    def get(self, hash: str) -> bytes | None:
        """The blob's bytes, or None when missing; InvalidBlobRefError for a bad hash."""
        path = self._path(_check_hash(hash))
        try:
            with open(path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def has(self, hash: str) -> bool:
        """Whether the blob exists; InvalidBlobRefError for a bad hash."""
        return os.path.isfile(self._path(_check_hash(hash)))

    def sync(self) -> None:
        """fsync the blobs written since the last sync, then the blob directory.

        Called before the session file is fsynced, so a durable line never
        points at a blob that could vanish in a crash.
        """
        with self._lock:
            pending = list(self._pending)
        if not pending:
            return
        for path in pending:
            try:
                fd = os.open(path, os.O_RDONLY | _O_CLOEXEC)
            except FileNotFoundError:
                continue  # deleted since: nothing left to make durable
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        try:
            fsync_directory(self.dir)
        except FileNotFoundError:
            pass  # the whole store was removed: nothing to make durable
        with self._lock:
            for path in pending:
                self._pending.pop(path, None)


class MemoryBlobStore:
    """A dict-backed blob store with `BlobStore`'s interface, for in-memory sessions."""

    def __init__(self, dir: str = "/memory/blobs") -> None:
        self.dir = dir
        self._blobs: dict[str, bytes] = {}
        self._mtimes: dict[str, float] = {}
        self._exts: dict[str, list[str]] = {}

    def put(self, data: bytes, mime_type: str | None = None) -> BlobPutResult:
        """Store `data` under its sha256; identical content is stored once (a re-put
        refreshes its mtime)."""
        digest = hashlib.sha256(data).hexdigest()
        self._blobs.setdefault(digest, bytes(data))
        self._mtimes[digest] = self.now()
        path = os.path.join(self.dir, digest)
        ext = blob_extension_for_mime_type(mime_type)
        if ext:
            exts = self._exts.setdefault(digest, [])
            if ext not in exts:
                exts.append(ext)
        return BlobPutResult(
            digest, path, BLOB_REF_PREFIX + digest, f"{path}.{ext}" if ext else None
        )

    def get(self, hash: str) -> bytes | None:
        """The blob's bytes, or None when missing; InvalidBlobRefError for a bad hash."""
        return self._blobs.get(_check_hash(hash))

    def has(self, hash: str) -> bool:
        """Whether the blob exists; InvalidBlobRefError for a bad hash."""
        return _check_hash(hash) in self._blobs

    def sync(self) -> None:
        """Nothing to make durable."""

    def list_hashes(self) -> list[str]:
        """Every stored blob's hash, sorted."""
        return sorted(self._blobs)

    def list_info(self) -> list[BlobInfo]:
        """Every stored blob with its size and mtime, sorted by hash."""
        return [
            BlobInfo(h, len(self._blobs[h]), self._mtimes[h], tuple(self._exts.get(h, ())))
            for h in sorted(self._blobs)
        ]

    def mtime(self, hash: str) -> float | None:
        """When the blob was last put, None when missing."""
        return self._mtimes.get(_check_hash(hash))

    def now(self) -> float:
        """This process's clock."""
        return time.time()

    def delete(self, hash: str, *, min_age_seconds: float = 0.0) -> bool:
        """Remove the blob unless it was put less than `min_age_seconds` ago."""
        digest = _check_hash(hash)
        mtime = self._mtimes.get(digest)
        if mtime is None or self.now() - mtime < min_age_seconds:
            return False
        del self._blobs[digest], self._mtimes[digest]
        self._exts.pop(digest, None)
        return True

    def __len__(self) -> int:
        return len(self._blobs)
