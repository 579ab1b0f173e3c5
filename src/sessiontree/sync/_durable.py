"""One durability barrier for many writes: a round writes hundreds of files (hub logs,
new local sessions) without an fsync each, then makes them durable together before its
state says they were written.

On Linux a barrier is one `syncfs` per file system written (through libc: no
dependency), which costs about what one fsync does; elsewhere each file and its dir
are fsync'ed (`DeferredSync.sync_files`). A database's writes are durable when they
return (each is a transaction): nothing to do.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from functools import cache

from sessiontree.storage import DeferredSync, HostFilesystem, SessionStorage

__all__ = ["Barrier"]


@cache
def _syncfs() -> ctypes._NamedFuncPointer | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name, use_errno=True) if name else None
        return libc.syncfs if libc is not None else None
    except (OSError, AttributeError):
        return None


def _sync_file_systems(dirs: set[str]) -> bool:
    """`syncfs` each file system holding one of `dirs`; False if it cannot be had."""
    syncfs = _syncfs()
    if syncfs is None:
        return False
    done: set[int] = set()
    for directory in sorted(dirs):
        try:
            fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            continue
        try:
            device = os.fstat(fd).st_dev
            if device in done:
                continue
            if syncfs(fd) != 0:
                err = ctypes.get_errno()
                raise OSError(err, os.strerror(err), directory)
            done.add(device)
        finally:
            os.close(fd)
    return True


class Barrier:
    """Paths written without an fsync, made durable by `flush`."""

    def __init__(self) -> None:
        self._pending: dict[int, tuple[SessionStorage, set[str]]] = {}

    def add(self, storage: SessionStorage, path: str) -> None:
        if isinstance(storage, (HostFilesystem, DeferredSync)):
            self._pending.setdefault(id(storage), (storage, set()))[1].add(path)

    def flush(self) -> None:
        """Make every path added durable (OSError if the disk says no)."""
        pending, self._pending = self._pending, {}
        for storage, paths in pending.values():
            if isinstance(storage, HostFilesystem):
                dirs = {os.path.dirname(storage.host_path(p)) for p in paths}
                if _sync_file_systems(dirs):
                    continue
            if isinstance(storage, DeferredSync):
                storage.sync_files(sorted(paths))
