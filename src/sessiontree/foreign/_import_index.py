"""The store's import lock, and the import records an importer asks again under it.

Asking whether a source was imported and writing its copy are one step under the
store's import lock: the storage's writer lock of `<sessions dir>/.import` (a `flock`
on a sidecar for files, which the kernel drops when its holder dies; an advisory lock on
a connection of its own in PostgreSQL, which the server drops with the connection). An
import waits for another's while it holds it (one session's import), up to
`LOCK_WAIT`; a lock file that is not a regular file (a symlink, a FIFO) or that cannot
be made (a read-only store) is an `ImportLockError` at once.

Asking again under the lock must stay cheap over an `import --all` of hundreds of
sources: `ImportIndex` keeps, in this process, the import records of the store's
sessions with each file's identity, and each time reads only what changed since:

* files: a project dir whose mtime and inode are those noted is not listed again (every
  import writes a new file, or renames one in, which changes its dir). A dir changed
  within `RACY_NS` of the moment it was noted may change again under the same mtime
  (timestamps are as coarse as the kernel's clock tick), so it is listed the next time
  too; in a listed dir only new names are read (an import writes a new name). Where
  the dir's times come from another machine's clock (NFS) running well behind this
  one's, a change made in the same tick as the look can go unseen: the worst it does
  is a second copy of a source, never a lost one;
* a storage that lists its sessions' metadata (PostgreSQL): one query per project dir,
  and only files of a new identity (a new row id after every rewrite) are read;
* any other storage: every file's identity is asked for, new ones read.
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
import stat
import threading
import time
import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final

from sessiontree.errors import SessionLockError, SessionTreeError
from sessiontree.layout import StoreParts
from sessiontree.listing import import_records
from sessiontree.listing._changes import Identity
from sessiontree.listing._marks import stat_identity
from sessiontree.storage import (
    FileSessionStorage,
    HostFilesystem,
    SessionIndexStorage,
    acquire_session_lock,
    directory_tree,
    lock_path_for,
)

__all__ = [
    "IMPORT_LOCK",
    "EarlierImport",
    "ImportIndex",
    "ImportLockError",
    "earlier_imports",
    "import_index",
    "import_lock",
]

IMPORT_LOCK: Final = ".import"
"""The store's import lock: the writer lock of this name in its sessions dir."""
LOCK_WAIT = 600.0
"""How long an import waits for another's lock (seconds): that one holds it for one
session's import, so only a stopped or hung holder makes it wait this long."""
LOCK_POLL = 0.02
NOTICE_AFTER = 2.0
"""After this long waiting (seconds), the wait is said, once."""
RACY_NS: Final = 100_000_000
"""A dir whose mtime is this close to the moment it was looked at is listed again: well
over a kernel clock tick (file times are taken from the coarse clock, up to 10 ms)."""
RACY_WHOLE_NS: Final = 2_000_000_000
"""The same on a filesystem that keeps whole seconds (or two, as FAT does)."""
_log = logging.getLogger(__name__)
_CACHED_READ_FROM = 16
"""Reading more changed files than this goes through the listing cache's import records
(a first look at a store): a few new ones are read directly."""


@dataclass(frozen=True, slots=True)
class EarlierImport:
    """A `foreign_session_import` record found in a session of this store."""

    path: str
    source: str
    source_id: str
    source_path: str
    source_bytes: int | None


def earlier_imports(path: str, records: Iterable[dict[str, Any]]) -> list[EarlierImport]:
    """The imports recorded in the session at `path` (records that name no source or id
    are passed over)."""
    result: list[EarlierImport] = []
    for data in records:
        source, source_id = data.get("source"), data.get("sourceId")
        if not isinstance(source, str) or not isinstance(source_id, str):
            continue
        size = data.get("sourceBytes")
        source_path = data.get("sourcePath")
        result.append(
            EarlierImport(
                path,
                source,
                source_id,
                source_path if isinstance(source_path, str) else "",
                size if isinstance(size, int) and not isinstance(size, bool) else None,
            )
        )
    return result


class ImportLockError(SessionTreeError):
    """The store's import lock cannot be had: another import holds it past the wait, or
    its lock file cannot be used. Every import into the store would fail alike."""


@contextmanager
def import_lock(parts: StoreParts) -> Iterator[None]:
    """Hold the store's import lock (see the module doc); a storage without locks is not
    locked."""
    storage = parts.storage
    path = os.path.join(parts.sessions_dir, IMPORT_LOCK)
    try:
        storage.ensure_dir(parts.sessions_dir)
    except OSError as exc:
        raise ImportLockError(f"{parts.sessions_dir}: cannot make the sessions dir: {exc}") from exc
    where = lock_path_for(path) if isinstance(storage, HostFilesystem) else path
    start = time.monotonic()
    told = False
    while True:
        try:
            held = acquire_session_lock(storage, path)
            break
        except SessionLockError as exc:
            if _not_a_lock_file(storage, path):
                raise ImportLockError(str(exc)) from exc
            who = f"process {exc.pid}" if exc.pid else "another process"
            waited = time.monotonic() - start
            if waited > LOCK_WAIT:
                raise ImportLockError(
                    f"{where}: the store's import lock is still held by {who} after "
                    f"{waited:.0f} s (another import, stopped or hung?); nothing was "
                    "imported by this one"
                ) from exc
            if not told and waited > NOTICE_AFTER:
                _log.warning("%s: waiting for the store's import lock, held by %s", where, who)
                told = True
            time.sleep(LOCK_POLL)
        except OSError as exc:
            what = "read-only store" if exc.errno in (errno.EROFS, errno.EACCES) else "error"
            raise ImportLockError(
                f"{where}: cannot take the store's import lock ({what}: "
                f"{exc.strerror or exc}); nothing was imported by it"
            ) from exc
    try:
        yield
    finally:
        if held is not None:
            held.release()


def _not_a_lock_file(storage: object, path: str) -> bool:
    """Whether a host lock file is there and is not a regular file (waiting would not
    change it)."""
    if not isinstance(storage, HostFilesystem):
        return False
    try:
        return not stat.S_ISREG(os.lstat(lock_path_for(path)).st_mode)
    except OSError:
        return False


Stamp = tuple[int, int]
"""A dir's (mtime_ns, inode) as noted."""


class ImportIndex:
    """The import records of one store's sessions (artifacts dirs not included) as this
    process last saw them: `records(parts)` brings them up to date (see the module doc).
    Called under the store's import lock; the lock also keeps two threads apart."""

    def __init__(self) -> None:
        self._root: Stamp | None = None
        self._dirs_listed: list[str] = []
        self._dirs: dict[str, tuple[Stamp | None, dict[str, Identity]]] = {}
        self._records: dict[str, list[EarlierImport]] = {}

    def imports(self, parts: StoreParts) -> list[EarlierImport]:
        """Every import recorded in the store's sessions, as `find_imports` finds them:
        only files new since the last call are read."""
        if isinstance(parts.storage, HostFilesystem):
            listed = self._host_files(parts.sessions_dir)
        else:
            listed = _stored_files(parts)
        changed: list[str] = []
        gone: list[str] = []
        for directory, entry in listed.items():
            before = self._dirs.get(directory)
            if before is entry:
                continue  # not listed again
            known = before[1] if before is not None else {}
            files = entry[1]
            changed.extend(
                p
                for p, identity in files.items()
                if known.get(p) != identity or p not in self._records
            )
            gone.extend(p for p in known if p not in files)
        gone.extend(p for d, (_, files) in self._dirs.items() if d not in listed for p in files)
        self._dirs = listed
        for path in gone:
            self._records.pop(path, None)
        cache = isinstance(parts.storage, FileSessionStorage) and len(changed) > _CACHED_READ_FROM
        found = import_records(changed, parts, cache=cache) if changed else {}
        for path in changed:
            self._records[path] = earlier_imports(path, (d for _, d in found.get(path, ())))
        return list(itertools.chain.from_iterable(self._records.values()))

    def wrote(self, path: str, record: dict[str, Any], parts: StoreParts) -> None:
        """An import of this process wrote `path` under the lock: its record is known
        without a read (the next look lists its dir, which it changed)."""
        storage = parts.storage
        try:
            if isinstance(storage, HostFilesystem):
                identity = stat_identity(os.stat(path))
            else:
                s = storage.stat(path)
                identity = (s.size, s.mtime_ns or int(s.mtime_ms * 1e6), s.ino, 0)
        except OSError:
            return
        directory = os.path.dirname(path)
        _, files = self._dirs.setdefault(directory, (None, {}))
        files[path] = identity
        self._records[path] = earlier_imports(path, [record])

    def _host_files(self, root: str) -> dict[str, tuple[Stamp | None, dict[str, Identity]]]:
        """The sessions of each project dir under `root`: those of a dir unchanged since
        the last look as they were (see the module doc)."""
        now = time.time_ns()
        try:
            st = os.stat(root)
        except OSError:
            self._root, self._dirs_listed = None, []
            return {}
        root_stamp = _stamp(st, now)
        if root_stamp is None or root_stamp != self._root:
            with os.scandir(root) as entries:
                # As `session_files` walks: dot dirs and symlinked dirs are not descended.
                self._dirs_listed = sorted(
                    e.path
                    for e in entries
                    if not e.name.startswith(".") and e.is_dir(follow_symlinks=False)
                )
        self._root = root_stamp
        listed: dict[str, tuple[Stamp | None, dict[str, Identity]]] = {}
        for directory in (root, *self._dirs_listed):  # sessions in the root are listed too
            try:
                dir_stamp = _stamp(os.stat(directory), now)
            except OSError:
                continue
            old = self._dirs.get(directory)
            if dir_stamp is not None and old is not None and old[0] == dir_stamp:
                listed[directory] = old
            else:
                known = old[1] if old is not None else {}
                listed[directory] = (dir_stamp, _host_sessions(directory, known))
        return listed


def _stored_files(parts: StoreParts) -> dict[str, tuple[Stamp | None, dict[str, Identity]]]:
    """The sessions of each project dir of a storage other than the host's files (every
    dir listed: no stamp)."""
    storage, root = parts.storage, parts.sessions_dir
    if not storage.exists(root):
        return {}
    listed: dict[str, tuple[Stamp | None, dict[str, Identity]]] = {}
    dirs = directory_tree(storage, "finding imports").list_dirs(root)
    for directory in (root, *dirs):  # sessions in the root are listed too
        if directory != root and os.path.basename(directory).startswith("."):
            continue
        files: dict[str, Identity] = {}
        if isinstance(storage, SessionIndexStorage):
            for meta in storage.list_session_meta(directory):
                if not os.path.basename(meta.path).startswith("."):
                    files[meta.path] = (meta.size, meta.mtime_ns, meta.ino, 0)
        else:
            for path in storage.list_files(directory, "*.jsonl"):
                if os.path.basename(path).startswith("."):
                    continue
                try:
                    s = storage.stat(path)
                except OSError:
                    continue
                files[path] = (s.size, s.mtime_ns or int(s.mtime_ms * 1e6), s.ino, 0)
        listed[directory] = (None, files)
    return listed


def _stamp(st: os.stat_result, now_ns: int) -> Stamp | None:
    """A dir's stamp, None when it changed too lately to be trusted (see the module doc)."""
    coarse = st.st_mtime_ns % 1_000_000_000 == 0
    if st.st_mtime_ns >= now_ns - (RACY_WHOLE_NS if coarse else RACY_NS):
        return None
    return (st.st_mtime_ns, st.st_ino)


def _host_sessions(directory: str, known: dict[str, Identity]) -> dict[str, Identity]:
    """The `*.jsonl` regular files of a project dir (dot files and FIFOs left out, as
    `session_files` leaves them), by identity: a name in `known` keeps the identity it
    has there, unlooked at (an import makes a new name; a file rewritten in place of an
    old name keeps the records it had)."""
    files: dict[str, Identity] = {}
    try:
        with os.scandir(directory) as entries:
            for e in entries:
                if e.name.startswith(".") or not e.name.endswith(".jsonl"):
                    continue
                identity = known.get(e.path)
                if identity is None:
                    try:
                        st = os.stat(e.path)
                    except OSError:
                        continue
                    if not stat.S_ISREG(st.st_mode):
                        continue
                    identity = stat_identity(st)
                files[e.path] = identity
    except OSError:
        pass
    return files


_indexes: weakref.WeakKeyDictionary[object, dict[str, ImportIndex]] = weakref.WeakKeyDictionary()
_host_indexes: dict[str, ImportIndex] = {}
_mutex = threading.Lock()


def import_index(parts: StoreParts) -> ImportIndex:
    """This process's index of the store `parts` names (host files: by sessions dir, as
    any storage object of them sees the same files)."""
    storage, root = parts.storage, os.path.abspath(parts.sessions_dir)
    with _mutex:
        if isinstance(storage, HostFilesystem):
            return _host_indexes.setdefault(root, ImportIndex())
        try:
            per_storage = _indexes.setdefault(storage, {})
        except TypeError:  # a storage that cannot be referred to weakly: no index kept
            return ImportIndex()
        return per_storage.setdefault(root, ImportIndex())
