"""Waiting for a change in the stores `archive --watch` follows: inotify where the
platform has it (Linux, through libc: no dependency), else a plain sleep (polling).

`Waiter.wait(dirs, timeout)` returns as soon as something changes under one of `dirs`
(a file written, created, moved or deleted: every dir below them is watched, new
ones as they appear on the next call) or when `timeout` seconds have passed; the
caller then runs a round, which stats what is there. A change missed between two
calls is seen by that round anyway: the wait only makes it sooner.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import select
import time
from collections.abc import Iterable

__all__ = ["Waiter"]

_IN_MODIFY = 0x002
_IN_CLOSE_WRITE = 0x008
_IN_MOVED_FROM = 0x040
_IN_MOVED_TO = 0x080
_IN_CREATE = 0x100
_IN_DELETE = 0x200
_MASK = _IN_MODIFY | _IN_CLOSE_WRITE | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE
_IN_NONBLOCK = 0o4000
_IN_CLOEXEC = 0o2000000
_MAX_WATCHES = 8192


class Waiter:
    """inotify when it can be had (`.mode` says "inotify" or "polling")."""

    def __init__(self) -> None:
        self._fd = -1
        self._libc: ctypes.CDLL | None = None
        self._watched: set[str] = set()
        name = ctypes.util.find_library("c")
        try:
            libc = ctypes.CDLL(name, use_errno=True) if name else None
            fd = libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC) if libc is not None else -1
        except (OSError, AttributeError):
            libc, fd = None, -1
        if libc is not None and fd >= 0:
            self._libc, self._fd = libc, fd

    @property
    def mode(self) -> str:
        return "inotify" if self._fd >= 0 else "polling"

    def _watch(self, dirs: Iterable[str]) -> None:
        assert self._libc is not None
        for top in dirs:
            for directory, subdirs, _ in os.walk(top):
                subdirs[:] = [d for d in subdirs if not os.path.islink(os.path.join(directory, d))]
                if directory in self._watched or len(self._watched) >= _MAX_WATCHES:
                    continue
                wd = self._libc.inotify_add_watch(self._fd, os.fsencode(directory), _MASK)
                if wd >= 0:
                    self._watched.add(directory)

    def wait(self, dirs: Iterable[str], timeout: float) -> bool:
        """Wait for a change under `dirs` or `timeout` seconds; whether one came."""
        if self._fd < 0:
            time.sleep(timeout)
            return False
        self._watch(dirs)
        ready, _, _ = select.select([self._fd], [], [], timeout)
        if not ready:
            return False
        time.sleep(0.05)  # let a burst of writes land in one round
        try:
            while os.read(self._fd, 65536):
                pass
        except BlockingIOError:
            pass
        return True

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
