"""Where an archive's files are: a dir's files or a PostgreSQL database's rows, both
through the session storage (`FileSessionStorage`, `PostgresSessionStorage`), marked as
an archive, and locked for one run at a time by the storage's writer lock (`FileLock`
on a dir, an advisory lock in a database)."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from functools import partial

from sessiontree._util.fs import open_regular
from sessiontree.archive._model import ArchiveBusyError, ArchiveError, ArchiveSource
from sessiontree.archive._sources import listdir
from sessiontree.errors import SessionLockError, SessionTreeError
from sessiontree.storage import (
    ChunkedReads,
    DeferredSync,
    FileSessionStorage,
    HostFilesystem,
    SessionStorage,
    WriterLock,
    acquire_session_lock,
    directory_tree,
    read_chunks,
    write_whole,
)

ARCHIVE_VERSION = 1
MARK = "ARCHIVE"


def inside(path: str, directory: str) -> bool:
    path, directory = os.path.realpath(path), os.path.realpath(directory)
    return path == directory or path.startswith(os.path.join(directory, ""))


_PG_ROOT = "/sessiontree-archive"
"""The root an archive in PostgreSQL keeps its files under (the keys are relative to it:
`ARCHIVE`, `chunks/...`, `files/...`)."""


class ArchiveStorage:
    """An archive's files in a session storage, under one root: `rel` paths are relative
    to it (`chunks/ab/<sha256>.zst`). In a database each write is its own transaction."""

    def __init__(self, storage: SessionStorage, root: str, label: str) -> None:
        self.storage = storage
        self.root = root
        self.label = label
        self.local = storage.host_path(root) if isinstance(storage, HostFilesystem) else None
        """The dir, for an archive of this host's files."""
        self.sound: set[str] = set()
        """Chunks written or read back whole by this run (not read back again)."""
        self._unsynced: list[str] = []
        # the capabilities asked once, not at each of a run's thousands of reads and writes
        self._deferred = storage if isinstance(storage, DeferredSync) else None
        self._chunks: Callable[[str], Iterable[bytes]] = (
            storage.iter_chunks
            if isinstance(storage, ChunkedReads)
            else partial(read_chunks, storage)
        )

    def path(self, rel: str) -> str:
        return os.path.join(self.root, *rel.split("/"))

    def exists(self, rel: str) -> bool:
        return self.storage.exists(self.path(rel))

    def read(self, rel: str) -> bytes | None:
        """The file's bytes; None when it is not there."""
        try:
            return b"".join(self._chunks(self.path(rel)))
        except FileNotFoundError:
            return None

    def write(self, rel: str, data: bytes, *, durable: bool = True) -> None:
        """Atomically (all or nothing), durably (`durable=False`: where the storage can
        put that off, not until `sync`); ArchiveError on a full disk."""
        path = self.path(rel)
        try:
            self.storage.ensure_dir(os.path.dirname(path))
            if not durable and self._deferred is not None:
                self._deferred.write_atomic_unsynced(path, [data])
                self._unsynced.append(path)
            else:
                write_whole(self.storage, path, [data])
        except OSError as exc:
            full = self._full(exc, rel)
            if full is not None:
                raise full from exc
            raise

    def sync(self) -> None:
        """Make every write made with `durable=False` durable (before a manifest names
        what they wrote)."""
        unsynced, self._unsynced = self._unsynced, []
        if unsynced and self._deferred is not None:
            try:
                self._deferred.sync_files(unsynced)
            except OSError as exc:
                full = self._full(exc, "chunks")
                if full is not None:
                    raise full from exc
                raise

    def names(self, rel_dir: str, suffix: str) -> list[str]:
        found = self.storage.list_files(self.path(rel_dir), "*" + suffix)
        return sorted(os.path.basename(p) for p in found)

    def dirs(self, rel_dir: str) -> list[str]:
        tree = directory_tree(self.storage, "an archive")
        return sorted(os.path.basename(p) for p in tree.list_dirs(self.path(rel_dir)))

    def lock(self) -> Callable[[], None]:
        """Take the archive's lock, the storage's writer lock of its `ARCHIVE` file, and
        the lock the previous version took (`_previous_version_lock`); ArchiveBusyError
        when another run has either. The function that releases them."""
        held = self._writer_lock(MARK)
        try:
            previous = (
                _previous_version_lock(self.local)
                if self.local is not None
                else self._writer_lock(".lock").release
            )
        except BaseException:
            held.release()
            raise

        def release() -> None:
            previous()
            held.release()

        return release

    def _writer_lock(self, rel: str) -> WriterLock:
        try:
            held = acquire_session_lock(self.storage, self.path(rel))
        except SessionLockError as exc:
            holder = f"pid {exc.pid}" if exc.pid else str(exc)
            raise ArchiveBusyError(
                f"{self.label}: another archive run ({holder}) is writing it; this one exits "
                "(run it again when that one is done)"
            ) from None
        if held is None:
            raise ArchiveError(f"{self.label}: its storage has no lock; not archived")
        return held

    def stored_bytes(self) -> int:
        """The bytes of the archive's files (its view, a readable copy, aside)."""
        total = self._sizes("")
        for top in ("chunks", "files", "similar", "damaged"):
            total += self._sizes(top)
            for sub in self.dirs(top):
                total += self._sizes(f"{top}/{sub}")
        return total

    def _sizes(self, rel_dir: str) -> int:
        directory = self.path(rel_dir) if rel_dir else self.root
        total = 0
        for pattern in ("*", ".*"):  # "*" skips dotfiles
            for path in self.storage.list_files(directory, pattern):
                try:
                    total += self.storage.stat(path).size
                except FileNotFoundError:
                    pass
        return total

    def close(self) -> None:
        from sessiontree.storage import close_storage

        close_storage(self.storage)

    def is_archive(self) -> bool:
        return self.exists(MARK)

    def _full(self, exc: OSError, rel: str) -> ArchiveError | None:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT) or "No space left" in str(exc):
            return ArchiveError(
                f"{self.path(rel)}: the archive's disk is full; stopped (everything "
                "archived before is kept as it was)"
            )
        return None


def _previous_version_lock(directory: str) -> Callable[[], None]:
    """The lock a run of the previous version took, taken as well, so that a run of
    that version and one of this exclude each other: in a dir a `flock` on its `.lock`
    (in a database the writer lock of `.lock`, see `ArchiveStorage.lock`). The function
    that releases it; ArchiveBusyError when it is held."""
    path = os.path.join(directory, ".lock")
    try:
        # never through a symlink, never a FIFO: another user's plant is refused, untouched
        fd = open_regular(path, os.O_RDWR | os.O_CREAT)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EINVAL):
            raise ArchiveError(f"{path}: not a regular file; not archived") from None
        raise
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise ArchiveBusyError(
                f"{directory}: another archive run (of an earlier version) is writing it; "
                "this one exits (run it again when that one is done)"
            ) from None
        raise
    return partial(os.close, fd)


def is_url(archive: str) -> bool:
    return archive.startswith(("postgresql://", "postgres://"))


def _open(archive: str) -> ArchiveStorage:
    if not is_url(archive):
        directory = os.path.abspath(os.path.expanduser(archive))
        return ArchiveStorage(FileSessionStorage(), directory, directory)
    from sessiontree.storage import open_storage, redact_url

    label = redact_url(archive)
    try:
        storage = open_storage(archive, agent_dir=_PG_ROOT)
    except SessionTreeError as exc:
        raise ArchiveError(f"{label}: {exc}") from exc
    return ArchiveStorage(storage, _PG_ROOT, label)


def prepare(place: ArchiveStorage, sources: Iterable[ArchiveSource]) -> None:
    """Refuse an archive inside a store it archives (or a store inside it), and a
    non-empty dir that is no archive; mark a new one."""
    archive = place.local
    if archive is not None:
        for source in sources:
            for root in source.roots:
                full = os.path.join(source.home, root)
                if inside(archive, full) or inside(full, archive):
                    raise ArchiveError(
                        f"{archive}: the archive would be inside the {source.agent} store it "
                        f"archives ({full}), or hold it: choose another --to"
                    )
        mark = os.path.join(archive, MARK)
        if os.path.islink(archive):
            raise ArchiveError(f"{archive}: is a symlink; give the real directory")
        # a first run beside this one may be writing its mark (a temporary file, then
        # renamed): that dir is an archive being made, not someone's dir
        marking = re.compile(rf"\.{re.escape(MARK)}\.[0-9a-f]+\.tmp")
        held = [n for n in listdir(archive) if marking.fullmatch(n) is None]
        if os.path.isdir(archive) and held and not os.path.isfile(mark):
            raise ArchiveError(f"{archive}: not an archive (no {MARK} file) and not empty")
        place.storage.ensure_dir(archive)
    if not place.is_archive():
        body = {"format": "sessiontree-archive", "version": ARCHIVE_VERSION}
        place.write(MARK, json.dumps(body).encode())


def is_archive(path: str) -> bool:
    """Whether `path` is an archive dir (its `ARCHIVE` file); a PostgreSQL URL is not
    asked here (it would connect)."""
    return not is_url(path) and os.path.isfile(os.path.join(path, MARK))


@contextmanager
def opened(archive: str) -> Iterator[ArchiveStorage]:
    place = _open(archive)
    try:
        yield place
    finally:
        place.close()
