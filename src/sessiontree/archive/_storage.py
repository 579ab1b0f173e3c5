"""Where an archive's files are: a dir or a PostgreSQL database, opened, marked as
an archive, and locked for one run at a time."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from sessiontree._util.fs import (
    O_CLOEXEC,
    O_NOFOLLOW,
    atomic_write,
    ensure_private_dir,
    fsync_directory,
)
from sessiontree.archive._model import ArchiveBusyError, ArchiveError, ArchiveSource
from sessiontree.archive._sources import listdir
from sessiontree.errors import SessionTreeError

ARCHIVE_VERSION = 1
MARK = "ARCHIVE"


def inside(path: str, directory: str) -> bool:
    path, directory = os.path.realpath(path), os.path.realpath(directory)
    return path == directory or path.startswith(os.path.join(directory, ""))


_PG_ROOT = "/sessiontree-archive"
"""The root an archive in PostgreSQL keeps its files under (the keys are relative to it:
`ARCHIVE`, `chunks/...`, `files/...`)."""


class ArchivePlace:
    """Where an archive's files are: a dir (`_FilePlace`) or a PostgreSQL database
    (`_PgPlace`); `rel` paths are relative to it (`chunks/ab/<sha256>.zst`)."""

    label: str
    local: str | None = None
    """The dir, for an archive of files."""
    sound: set[str]
    """Chunks written or read back whole by this run (not read back again)."""

    def path(self, rel: str) -> str:
        raise NotImplementedError

    def exists(self, rel: str) -> bool:
        raise NotImplementedError

    def read(self, rel: str) -> bytes | None:
        """The file's bytes; None when it is not there."""
        raise NotImplementedError

    def write(self, rel: str, data: bytes, *, durable: bool = True) -> None:
        """Atomically (all or nothing), durably (`durable=False`: not yet, until
        `sync`); ArchiveError on a full disk."""
        raise NotImplementedError

    def sync(self) -> None:
        """Make every write made with `durable=False` durable (before a manifest names
        what they wrote)."""

    def names(self, rel_dir: str, suffix: str) -> list[str]:
        raise NotImplementedError

    def dirs(self, rel_dir: str) -> list[str]:
        raise NotImplementedError

    def lock(self) -> Callable[[], None]:
        """Take the archive's lock (ArchiveBusyError when another run has it); the
        function that releases it."""
        raise NotImplementedError

    def stored_bytes(self) -> int:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def is_archive(self) -> bool:
        return self.exists(MARK)

    def _full(self, exc: OSError, rel: str) -> ArchiveError | None:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT) or "No space left" in str(exc):
            return ArchiveError(
                f"{self.path(rel)}: the archive's disk is full; stopped (everything "
                "archived before is kept as it was)"
            )
        return None


class _FilePlace(ArchivePlace):
    def __init__(self, directory: str) -> None:
        self.local = os.path.abspath(os.path.expanduser(directory))
        self.label = self.local
        self.sound = set()
        self._pending: list[str] = []

    def path(self, rel: str) -> str:
        assert self.local is not None
        return os.path.join(self.local, *rel.split("/"))

    def exists(self, rel: str) -> bool:
        return os.path.exists(self.path(rel))

    def read(self, rel: str) -> bytes | None:
        try:
            with open(self.path(rel), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def write(self, rel: str, data: bytes, *, durable: bool = True) -> None:
        path = self.path(rel)
        try:
            ensure_private_dir(os.path.dirname(path))
            atomic_write(path, [data], durable=durable)
        except OSError as exc:
            full = self._full(exc, rel)
            if full is not None:
                raise full from exc
            raise
        if not durable:
            self._pending.append(path)

    def sync(self) -> None:
        """fsync each file written since, then each of their dirs once."""
        pending, self._pending = self._pending, []
        try:
            for path in pending:
                fd = os.open(path, os.O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            for directory in sorted({os.path.dirname(p) for p in pending}):
                fsync_directory(directory)
        except OSError as exc:
            full = self._full(exc, "chunks")
            if full is not None:
                raise full from exc
            raise

    def names(self, rel_dir: str, suffix: str) -> list[str]:
        return sorted(n for n in listdir(self.path(rel_dir)) if n.endswith(suffix))

    def dirs(self, rel_dir: str) -> list[str]:
        base = self.path(rel_dir)
        return sorted(n for n in listdir(base) if os.path.isdir(os.path.join(base, n)))

    def lock(self) -> Callable[[], None]:
        fd = _lock(self.label)
        return lambda: os.close(fd)

    def stored_bytes(self) -> int:
        assert self.local is not None
        stored = 0
        for directory, dirs, names in os.walk(self.local):
            if directory == self.local and "view" in dirs:
                dirs.remove("view")  # a readable copy, not the archive (see `archive_view`)
            for name in names:
                try:
                    stored += os.lstat(os.path.join(directory, name)).st_size
                except OSError:
                    pass
        return stored


class _PgPlace(ArchivePlace):
    """An archive in a PostgreSQL database, through its session storage (each file a
    row, written in one transaction; the lock an advisory lock)."""

    def __init__(self, url: str) -> None:
        from sessiontree.maintenance import open_store, redact_url

        self.label = redact_url(url)
        self.sound = set()
        try:
            self._storage: Any = open_store(url, agent_dir=_PG_ROOT)
        except SessionTreeError as exc:
            raise ArchiveError(f"{self.label}: {exc}") from exc

    def path(self, rel: str) -> str:
        return f"{_PG_ROOT}/{rel}"

    def exists(self, rel: str) -> bool:
        return bool(self._storage.exists(self.path(rel)))

    def read(self, rel: str) -> bytes | None:
        try:
            return b"".join(self._storage.iter_chunks(self.path(rel)))
        except FileNotFoundError:
            return None

    def write(self, rel: str, data: bytes, *, durable: bool = True) -> None:
        path = self.path(rel)  # every write commits: durable as it is made
        try:
            self._storage.ensure_dir(os.path.dirname(path))
            self._storage.write_atomic(path, [data])
        except OSError as exc:
            full = self._full(exc, rel)
            if full is not None:
                raise full from exc
            raise

    def names(self, rel_dir: str, suffix: str) -> list[str]:
        found = self._storage.list_files(self.path(rel_dir), "*" + suffix)
        return sorted(os.path.basename(p) for p in found)

    def dirs(self, rel_dir: str) -> list[str]:
        return sorted(os.path.basename(p) for p in self._storage.list_dirs(self.path(rel_dir)))

    def lock(self) -> Callable[[], None]:
        from sessiontree.errors import SessionLockError

        try:
            held = self._storage.acquire_lock(self.path(".lock"))
        except SessionLockError as exc:
            raise ArchiveBusyError(
                f"{self.label}: another archive run ({exc}) is writing it; this one exits "
                "(run it again when that one is done)"
            ) from None
        return held.release  # type: ignore[no-any-return]

    def stored_bytes(self) -> int:
        total = 0
        for top in ("chunks", "files", "similar"):
            for sub in self.dirs(top):
                for path in self._storage.list_files(self.path(f"{top}/{sub}"), "*"):
                    total += int(self._storage.stat(path).size)
        mark = self.path(MARK)
        if self._storage.exists(mark):
            total += int(self._storage.stat(mark).size)
        return total

    def close(self) -> None:
        from sessiontree.maintenance import close_store

        close_store(self._storage)


def is_url(archive: str) -> bool:
    return archive.startswith(("postgresql://", "postgres://"))


def _open(archive: str) -> ArchivePlace:
    return _PgPlace(archive) if is_url(archive) else _FilePlace(archive)


def prepare(place: ArchivePlace, sources: Iterable[ArchiveSource]) -> None:
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
        ensure_private_dir(archive)
    if not place.is_archive():
        body = {"format": "sessiontree-archive", "version": ARCHIVE_VERSION}
        place.write(MARK, json.dumps(body).encode())


def _lock(archive: str) -> int:
    path = os.path.join(archive, ".lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "?"
        os.close(fd)
        raise ArchiveBusyError(
            f"{archive}: another archive run (pid {holder}) is writing it; this one exits "
            "(run it again when that one is done)"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


def is_archive(path: str) -> bool:
    """Whether `path` is an archive dir (its `ARCHIVE` file); a PostgreSQL URL is not
    asked here (it would connect)."""
    return not is_url(path) and os.path.isfile(os.path.join(path, MARK))


@contextmanager
def opened(archive: str) -> Iterator[ArchivePlace]:
    place = _open(archive)
    try:
        yield place
    finally:
        place.close()
