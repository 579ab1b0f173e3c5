"""Content-addressed blob store for images externalized from session files.

Blobs live at `<dir>/<sha256 hex of the raw bytes>`, exactly where omp puts them,
and are referenced from entries as `blob:sha256:<hex>`. Refs come from files that
may have been edited by anyone, so a hash is only ever accepted as 64 lowercase
hex characters: nothing else reaches a filesystem path.

A blob's name is its content's hash, and every store holds itself to it: `get`
hands out only bytes that hash to the name (a damaged blob reads as absent, with a
warning naming it, so a session keeps its ref instead of re-storing bad bytes
under a new hash), `put` replaces a damaged blob with the good bytes it was given,
and `verify` tells a missing blob from a damaged one.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import stat
import threading
import time
from dataclasses import dataclass
from typing import Final, Literal, Protocol, cast, runtime_checkable

import sessiontree.storage._pins as pins
from sessiontree._util.fs import (
    atomic_write,
    ensure_private_dir,
    fsync_directory,
    read_fd,
    temp_side_path,
)
from sessiontree.errors import InvalidBlobRefError

__all__ = [
    "BLOB_REF_PREFIX",
    "BlobInfo",
    "BlobPins",
    "BlobPutResult",
    "BlobStatus",
    "BlobStore",
    "BlobStoreLike",
    "CollectableBlobStore",
    "MemoryBlobStore",
    "PinningBlobStore",
    "VerifiableBlobStore",
    "blob_extension_for_mime_type",
    "check_hash",
    "find_blob_refs",
    "is_blob_extension",
    "is_blob_ref",
    "parse_blob_ref",
    "same_blob_store",
]

_log = logging.getLogger("sessiontree")

BlobStatus = Literal["ok", "missing", "damaged"]
"""What `verify` found: the blob is intact, absent, or holds bytes that do not hash to its name."""

BLOB_REF_PREFIX: Final = "blob:sha256:"
_HASH_RE: Final = re.compile(r"[0-9a-f]{64}")
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
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


_REF_BYTES: Final = re.compile(rb"blob:sha256:([0-9a-f]{64})")


def find_blob_refs(data: bytes) -> set[str]:
    """The hashes of every blob ref in `data` (a line, a file's bytes)."""
    return {m.decode("ascii") for m in _REF_BYTES.findall(data)}


def check_hash(digest: object) -> str:
    if type(digest) is not str or not _HASH_RE.fullmatch(digest):
        raise InvalidBlobRefError(f"invalid blob hash {digest!r}: expected 64 lowercase hex chars")
    return digest


def _sha256(data: bytes) -> str:
    import hashlib  # here: a command that reads no image never loads OpenSSL for it

    return hashlib.sha256(data).hexdigest()


def _intact(data: bytes, digest: str) -> bool:
    return _sha256(data) == digest


def _warn_damaged(where: str, size: int) -> None:
    _log.warning(
        "Blob %s is damaged (%d bytes that do not hash to its name); treating it as missing",
        where,
        size,
    )


def _warn_replaced(where: str) -> None:
    _log.warning("Replaced damaged blob %s with the bytes being stored", where)


def is_blob_extension(ext: object) -> bool:
    """Whether `ext` may name a blob's sidecar (`<hash>.<ext>`): 1-32 letters, digits,
    `.`, `_` and `-`, starting with a letter or digit (what omp derives from a MIME type)."""
    return isinstance(ext, str) and 0 < len(ext) <= 32 and bool(_EXTENSION_RE.fullmatch(ext))


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
    return subtype if is_blob_extension(subtype) else None


class BlobStoreLike(Protocol):
    """What the persistence transforms need from a blob store."""

    def put(self, data: bytes, mime_type: str | None = None) -> BlobPutResult:
        """Store `data`; returns its hash, path and ref."""
        ...

    def get(self, hash: str) -> bytes | None:
        """The blob's bytes, or None when missing or damaged."""
        ...

    def has(self, hash: str) -> bool:
        """Whether the blob exists."""
        ...

    def sync(self) -> None:
        """Make the blobs written since the last sync durable."""
        ...


@runtime_checkable
class VerifiableBlobStore(Protocol):
    """A blob store that holds itself to its hashes: its `get` never returns bytes that
    do not hash to the name asked for, and `verify` tells a damaged blob from a missing one
    (without the warning `get` logs)."""

    def verify(self, hash: str) -> BlobStatus:
        """`ok`, `missing`, or `damaged` (stored bytes that do not hash to `hash`)."""
        ...


@runtime_checkable
class PinningBlobStore(Protocol):
    """A blob store that keeps the blobs live holders pin from `gc`, whatever their age
    (see `sessiontree.storage._pins`)."""

    def pin(self, hash: str) -> None:
        """Hold the blob (a checked hash) until as many `unpin` calls."""
        ...

    def unpin(self, hash: str) -> None:
        """Let go of one hold of the blob."""
        ...


class BlobPins:
    """The pins one holder (a manager) has taken: each blob once, all let go together.

    In a forked child the pins are the parent's (its process holds them): they are
    forgotten, never let go from the child.
    """

    __slots__ = ("_held", "_pid")

    def __init__(self) -> None:
        self._pid = os.getpid()
        self._held: dict[tuple[int, str], tuple[PinningBlobStore, str]] = {}

    def _mine(self) -> dict[tuple[int, str], tuple[PinningBlobStore, str]]:
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._held = {}
        return self._held

    def add(self, store: BlobStoreLike, hash: str) -> None:
        """Pin `hash` in `store` (nothing when the store cannot pin)."""
        held = self._mine()
        key = (id(store), hash)
        if key in held:
            return
        # Not isinstance(store, PinningBlobStore): a runtime protocol check costs more
        # than the pin itself, on every put_blob.
        if callable(getattr(store, "pin", None)) and callable(getattr(store, "unpin", None)):
            cast("PinningBlobStore", store).pin(hash)
            held[key] = (cast("PinningBlobStore", store), hash)

    def __bool__(self) -> bool:
        return bool(self._held) and bool(self._mine())  # no getpid when nothing is held

    def hashes(self) -> set[str]:
        """Every hash pinned."""
        return {digest for _, digest in self._mine().values()}

    def missing(self) -> list[str]:
        """The pinned hashes whose blob is gone from the store it was pinned in."""
        return sorted({d for store, d in self._mine().values() if not _has(store, d)})

    def release(self) -> None:
        """Let go of every pin (idempotent)."""
        held = self._mine()
        self._held = {}
        for store, digest in held.values():
            try:
                store.unpin(digest)
            except OSError as exc:  # pragma: no cover - unpin logs its own failures
                _log.debug("could not unpin blob %s: %s", digest, exc)


def _has(store: PinningBlobStore, digest: str) -> bool:
    has = getattr(store, "has", None)
    return bool(has(digest)) if callable(has) else True


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
    """A blob store that gc (`sessiontree.maintenance`) can inventory and prune (beyond a
    blob directory).

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


def _read_file(path: str, limit: int = -1) -> bytes | None:
    """The bytes of the blob file at `path` (up to `limit`), None when there is none.

    What is not a regular file under a blob's name (a FIFO, a device) is no blob, as
    `has` says. The open never blocks (a FIFO opened for reading waits for a
    writer); a symlink is followed (the bytes are checked against the hash anyway).
    """
    try:
        fd = os.open(path, os.O_RDONLY | _O_CLOEXEC | _O_NONBLOCK)
    except FileNotFoundError:
        return None
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
        if regular:
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    if not regular:
        os.close(fd)
        return None
    with open(fd, "rb") as f:
        return f.read(limit)


def _holds(path: str, data: bytes) -> bool:
    """Whether the file holds exactly `data` (an unreadable or vanished file does not)."""
    try:
        return _read_file(path, len(data) + 1) == data
    except OSError:
        return False


def _sidecar_intact(path: str, display: str, data: bytes) -> bool:
    try:
        blob = os.stat(path)
        sidecar = os.stat(display, follow_symlinks=False)
    except OSError:
        return False
    if (blob.st_dev, blob.st_ino) == (sidecar.st_dev, sidecar.st_ino):
        return True
    return stat.S_ISREG(sidecar.st_mode) and _holds(display, data)


class BlobStore:
    """Blobs on the real filesystem (directory 0700, files 0600), written atomically."""

    def __init__(self, dir: str) -> None:
        self.dir = os.fspath(dir)
        self._abs_dir = os.path.abspath(self.dir)  # the key of its pins in this process
        self._dir_ready = False
        self._lock = threading.Lock()
        # Blobs put since the last sync(), in order; a dict doubles as an ordered set.
        self._pending: dict[str, None] = {}

    def _path(self, digest: str) -> str:
        return os.path.join(self.dir, digest)

    def put(self, data: bytes, mime_type: str | None = None) -> BlobPutResult:
        """Store `data` under its sha256; identical content is stored once.

        The bytes go to a temp file that is renamed into place, so a blob file is
        never partial. A blob already there is kept only if it holds exactly
        `data`; a damaged one (short, or same size with other bytes) is replaced
        the same atomic way, and its sidecars with it. With an image `mime_type`, a
        hard-linked `<hash>.<ext>` sidecar is created too (as omp does, for OS
        image viewers).
        """
        digest = _sha256(data)
        path = self._path(digest)
        if not self._dir_ready:
            ensure_private_dir(self.dir)
            self._dir_ready = True
        try:
            size: int | None = os.stat(path).st_size
        except FileNotFoundError:
            size = None
        if size == len(data) and _holds(path, data):
            # A re-put is a fresh use: `gc` never deletes a blob touched in the last
            # 10 minutes, so a writer about to reference an old blob keeps it alive.
            try:
                os.utime(path)
            except FileNotFoundError:
                self._write_new(path, data)  # taken by a gc since it was read: stored anew
            except OSError:
                pass
        else:
            damaged = size is not None and os.path.lexists(path)
            self._write_new(path, data)
            if damaged:
                # Left short by a crashed non-atomic writer, or damaged on disk: the
                # caller holds the true bytes, so they win.
                _warn_replaced(path)
                self._relink_sidecars(digest, path, data)
        ext = blob_extension_for_mime_type(mime_type)
        display = f"{path}.{ext}" if ext else None
        if display is not None:
            self._link_sidecar(path, display, data)
        with self._lock:
            # Even a deduplicated blob is synced: another writer may not have fsynced it.
            self._pending[path] = None
        return BlobPutResult(digest, path, BLOB_REF_PREFIX + digest, display)

    def _tmp_path(self, path: str) -> str:
        return temp_side_path(path)

    def _write_new(self, path: str, data: bytes) -> None:
        # Not fsynced here: `sync()` makes every blob put since the last one durable.
        try:
            atomic_write(path, (data,), durable=False)
        except FileNotFoundError:
            # The blob directory was removed behind our back: recreate it once.
            ensure_private_dir(self.dir)
            atomic_write(path, (data,), durable=False)

    def _link_sidecar(self, path: str, display: str, data: bytes) -> None:
        try:
            os.link(path, display)
            return
        except OSError:
            pass  # already there (checked below), or no hard links here
        if not _sidecar_intact(path, display, data):
            self._replace_sidecar(path, display, data)

    def _replace_sidecar(self, path: str, display: str, data: bytes) -> None:
        """Atomically make `display` a hard link to the blob (a copy without hard links)."""
        tmp = self._tmp_path(display)
        try:
            os.link(path, tmp)
        except OSError:
            self._write_new(display, data)
            return
        try:
            os.replace(tmp, display)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    def _relink_sidecars(self, digest: str, path: str, data: bytes) -> None:
        """After a repair: sidecars hard-linked to the damaged file are damaged too."""
        prefix = digest + "."
        try:
            names = [n for n in os.listdir(self.dir) if n.startswith(prefix)]
        except OSError:
            return
        for name in names:
            if not _EXTENSION_RE.fullmatch(name[len(prefix) :]):
                continue
            display = os.path.join(self.dir, name)
            if not _sidecar_intact(path, display, data):
                self._replace_sidecar(path, display, data)

    def _read(self, digest: str) -> bytes | None:
        return _read_file(self._path(digest))

    def get(self, hash: str) -> bytes | None:
        """The blob's bytes, or None when missing or damaged (a warning names the file);
        InvalidBlobRefError for a bad hash."""
        digest = check_hash(hash)
        data = self._read(digest)
        if data is not None and not _intact(data, digest):
            _warn_damaged(self._path(digest), len(data))
            return None
        return data

    def verify(self, hash: str) -> BlobStatus:
        """Whether the blob is there and holds bytes that hash to its name; reads it whole."""
        digest = check_hash(hash)
        data = self._read(digest)
        if data is None:
            return "missing"
        return "ok" if _intact(data, digest) else "damaged"

    def has(self, hash: str) -> bool:
        """Whether the blob exists; InvalidBlobRefError for a bad hash."""
        return os.path.isfile(self._path(check_hash(hash)))

    def pin(self, hash: str) -> None:
        """Keep the blob from `gc` while this process lives (`sessiontree.storage._pins`)."""
        pins.pin(self._abs_dir, check_hash(hash))

    def unpin(self, hash: str) -> None:
        """Let go of one `pin` of the blob."""
        pins.unpin(self._abs_dir, check_hash(hash))

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
                fd = read_fd(path)
            except FileNotFoundError:
                continue  # deleted since: nothing left to make durable
            except OSError as exc:
                # A FIFO (device) put in a blob's place since: never waited on, and no
                # blob of ours to make durable (`has` says it holds none).
                if exc.errno == errno.EINVAL:
                    continue
                raise
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
        self._pins: dict[str, int] = {}

    def put(self, data: bytes, mime_type: str | None = None) -> BlobPutResult:
        """Store `data` under its sha256; identical content is stored once (a re-put
        refreshes its mtime and replaces a damaged copy)."""
        digest = _sha256(data)
        held = self._blobs.get(digest)
        if held is None or held != data:
            if held is not None:
                _warn_replaced(os.path.join(self.dir, digest))
            self._blobs[digest] = bytes(data)
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
        """The blob's bytes, or None when missing or damaged (with a warning);
        InvalidBlobRefError for a bad hash."""
        digest = check_hash(hash)
        data = self._blobs.get(digest)
        if data is not None and not _intact(data, digest):
            _warn_damaged(os.path.join(self.dir, digest), len(data))
            return None
        return data

    def verify(self, hash: str) -> BlobStatus:
        """Whether the blob is there and holds bytes that hash to its name."""
        digest = check_hash(hash)
        data = self._blobs.get(digest)
        if data is None:
            return "missing"
        return "ok" if _intact(data, digest) else "damaged"

    def has(self, hash: str) -> bool:
        """Whether the blob exists; InvalidBlobRefError for a bad hash."""
        return check_hash(hash) in self._blobs

    def pin(self, hash: str) -> None:
        """Keep the blob from `delete` until as many `unpin` calls."""
        digest = check_hash(hash)
        self._pins[digest] = self._pins.get(digest, 0) + 1

    def unpin(self, hash: str) -> None:
        """Let go of one `pin` of the blob."""
        digest = check_hash(hash)
        held = self._pins.get(digest, 0)
        if held > 1:
            self._pins[digest] = held - 1
        else:
            self._pins.pop(digest, None)

    def pinned_hashes(self) -> set[str]:
        """The blobs pinned now (`gc` keeps them whatever their age)."""
        return set(self._pins)

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
        return self._mtimes.get(check_hash(hash))

    def now(self) -> float:
        """This process's clock."""
        return time.time()

    def delete(self, hash: str, *, min_age_seconds: float = 0.0) -> bool:
        """Remove the blob unless it was put less than `min_age_seconds` ago or is pinned."""
        digest = check_hash(hash)
        mtime = self._mtimes.get(digest)
        if mtime is None or self.now() - mtime < min_age_seconds or digest in self._pins:
            return False
        del self._blobs[digest], self._mtimes[digest]
        self._exts.pop(digest, None)
        return True

    def __len__(self) -> int:
        return len(self._blobs)


def same_blob_store(a: BlobStoreLike, b: BlobStoreLike) -> bool:
    """Whether `a` and `b` hold the same blobs: one object, or one directory on disk."""
    if a is b:
        return True
    return (
        isinstance(a, BlobStore)
        and isinstance(b, BlobStore)
        and os.path.realpath(a.dir) == os.path.realpath(b.dir)
    )
