"""One writer per session: advisory locks that survive atomic renames.

Full rewrites replace the session file's inode, so the lock lives in a sidecar,
`.<file name>.writer-lock`, locked with `flock(LOCK_EX | LOCK_NB)`. The kernel
drops the lock when the holder dies, so a crashed agent never blocks the next.
Lock files are removed on release without racing a process that is taking the
lock: a taker verifies, after locking, that the path still names the inode it
locked, and retries otherwise.

A lock is its taker's: a forked child shares the parent's `flock` (one open file
description), so at the fork the child lets go of its copy of the descriptor
(which leaves the parent's lock alone), and a child never removes the lock file.
A child that outlives a crashed parent then keeps no one from the session.
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
import weakref

from sessiontree._util.closing import process_id
from sessiontree._util.fs import ensure_private_dir, open_regular, side_path
from sessiontree.errors import InheritedHandleError, SessionLockError
from sessiontree.storage._base import LockingStorage, VerifiableLock, WriterLock

__all__ = [
    "FileLock",
    "MemoryLockTable",
    "acquire_session_lock",
    "is_locked",
    "lock_path_for",
    "verify_lock",
]


def verify_lock(lock: WriterLock | None) -> None:
    """Raise SessionLockError when a held lock was lost (locks that can tell)."""
    if isinstance(lock, VerifiableLock):
        lock.verify()


def acquire_session_lock(storage: object, session_file: str) -> WriterLock | None:
    """Take the writer lock of a session (None: the storage has no locks).

    A storage declares the capability as `LockingStorage` (`acquire_lock(path)`);
    SessionLockError when another live writer holds it.
    """
    if isinstance(storage, LockingStorage):
        return storage.acquire_lock(session_file)
    return None


def is_locked(storage: object, session_file: str) -> bool:
    """Whether another live writer holds the session (probes by taking the lock, or by
    the storage's own `lock_held(path)` where it has a cheaper way to ask)."""
    probe = getattr(storage, "lock_held", None)
    if callable(probe):
        try:
            return bool(probe(session_file))
        except OSError:
            return False
    try:
        lock = acquire_session_lock(storage, session_file)
    except SessionLockError:
        return True
    except OSError:
        return False
    if lock is not None:
        lock.release()
    return False


def lock_path_for(session_file: str) -> str:
    """The sidecar lock file of a session file (`.<name>.writer-lock`, within NAME_MAX)."""
    return side_path(session_file, ".writer-lock", hidden=True)


def _read_pid(path: str) -> int | None:
    try:
        fd = open_regular(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        text = os.read(fd, 32).decode("ascii", "replace").strip()
    except OSError:
        return None
    finally:
        os.close(fd)
    return int(text) if text.isdigit() else None


_held: weakref.WeakSet[FileLock] = weakref.WeakSet()
"""Every `FileLock` of this process that holds its lock (for the fork hook)."""


def _forked() -> None:
    """In a forked child: close the child's copies of the parent's lock descriptors.

    The `flock` belongs to the open file description, which the parent's descriptor
    keeps; only a LOCK_UN or the last close would release it. Without this, a child that
    outlives its parent (a pool worker, a daemon) would keep the session locked.
    """
    for lock in list(_held):
        fd, lock._fd = lock._fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass
    _held.clear()


os.register_at_fork(after_in_child=_forked)


class FileLock:
    """An exclusive `flock` on a session's sidecar lock file (its taker's: see above)."""

    def __init__(self, session_file: str) -> None:
        self.session_file = session_file
        self.path = lock_path_for(session_file)
        self._fd: int | None = None
        self._owner = process_id()
        self._acquire()

    def _acquire(self) -> None:
        for _ in range(100):
            try:
                # Never through a symlink, never a FIFO or device: the lock file is
                # truncated below, and a planted link must not truncate its target.
                fd = open_regular(self.path, os.O_RDWR | os.O_CREAT)
            except FileNotFoundError:
                raise  # the session's directory does not exist
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.EINVAL):
                    raise SessionLockError(
                        self.session_file,
                        message=f"{self.path}: lock file is not a regular file (a symlink?); "
                        "refusing to use it",
                    ) from None
                raise
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise SessionLockError(self.session_file, _read_pid(self.path)) from None
                raise
            held = os.fstat(fd)
            try:
                same = held.st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if not same:
                # The previous holder removed the file between our open and flock.
                os.close(fd)
                continue
            if held.st_nlink == 1:
                # A lock file with another name (a planted hard link) is another file's
                # content: the flock locks, the holder's pid goes unsaid.
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            self._fd = fd
            _held.add(self)
            return
        raise SessionLockError(self.session_file, message=f"{self.path}: lock file keeps changing")

    @property
    def held(self) -> bool:
        return self._fd is not None

    def verify(self) -> None:
        """Raise SessionLockError unless we still hold the lock that guards the path.

        The flock cannot be taken from us, but the lock file can be deleted (and
        then another process may lock a new file under the same name). A lock file
        that merely vanished (its directory removed, say) is taken again at once
        when nobody else holds the name now.
        """
        if self._owner != process_id():
            raise InheritedHandleError(self.session_file, self._owner)
        fd = self._fd
        if fd is None:
            raise SessionLockError(self.session_file, message=f"{self.session_file}: not locked")
        try:
            same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
        except FileNotFoundError:
            self._retake(fd)
            return
        if not same:
            raise SessionLockError(
                self.session_file,
                _read_pid(self.path),
                f"{self.session_file}: writer lock lost (lock file {self.path} was replaced)",
            )

    def _retake(self, old_fd: int) -> None:
        self._fd = None
        os.close(old_fd)
        try:
            ensure_private_dir(os.path.dirname(self.path) or ".")
            self._acquire()
        except SessionLockError as exc:
            raise SessionLockError(
                self.session_file,
                exc.pid,
                f"{self.session_file}: writer lock lost (its lock file was removed and "
                "another process took it)",
            ) from None
        except OSError as exc:
            raise SessionLockError(
                self.session_file,
                message=f"{self.session_file}: writer lock lost (lock file removed: {exc})",
            ) from exc

    def release(self) -> None:
        """Remove the lock file (while still holding it) and unlock.

        In a forked child it only closes the child's descriptor (if the fork left one):
        the lock and its file are the parent's.
        """
        fd, self._fd = self._fd, None
        if fd is None:
            return
        _held.discard(self)
        if self._owner != process_id():
            os.close(fd)
            return
        try:
            # Only our own lock file: after a lost lock the name may be another's.
            if os.stat(self.path).st_ino == os.fstat(fd).st_ino:
                os.unlink(self.path)
        except OSError:
            pass  # already gone or unwritable dir: the flock still goes with the fd
        os.close(fd)

    def __del__(self) -> None:
        self.release()


class MemoryLockTable:
    """Writer locks for an in-process storage (same semantics, no files)."""

    def __init__(self) -> None:
        self._held: set[str] = set()
        self._mutex = threading.Lock()

    def acquire(self, session_file: str) -> WriterLock:
        with self._mutex:
            if session_file in self._held:
                raise SessionLockError(session_file, os.getpid())
            self._held.add(session_file)
        return _MemoryLock(self, session_file)

    def _release(self, session_file: str) -> None:
        with self._mutex:
            self._held.discard(session_file)


class _MemoryLock:
    def __init__(self, table: MemoryLockTable, path: str) -> None:
        self._table: MemoryLockTable | None = table
        self.session_file = path

    def verify(self) -> None:
        if self._table is None:
            raise SessionLockError(self.session_file, message=f"{self.session_file}: not locked")

    def release(self) -> None:
        table, self._table = self._table, None
        if table is not None:
            table._release(self.session_file)
