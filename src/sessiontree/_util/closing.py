"""Small shared bases: a context manager that closes, and the process that owns a handle.

A forked child inherits its parent's objects (managers, writers, locks, database
connections) but none of the parent's rights to them: what a child closes, unlocks or
writes through them, it does to the parent. Every such object records the process that
made it (`process_id()`) and, in another process, refuses to write and closes nothing
of the parent's (`errors.InheritedHandleError`).
"""

from __future__ import annotations

import os
from types import TracebackType
from typing import Self

_pid = os.getpid()


def _forked() -> None:
    global _pid
    _pid = os.getpid()


# Registered at import, before any other module's fork hook, so theirs see the new id.
os.register_at_fork(after_in_child=_forked)


def process_id() -> int:
    """This process's id without a system call (a hot-path check): kept current in
    children that `os.fork` (and so `multiprocessing`) made."""
    return _pid


_kept: list[object] = []


def keep_forever(obj: object) -> None:
    """Never free `obj` in this process, not even at interpreter exit.

    For a forked child's copies of its parent's database connections (and pools): freeing
    one closes it, and a close is a use. SQLite rolls back the transaction the parent
    may be in the middle of (in the wal-index both share), a psycopg pool stops threads
    that do not exist here. The memory goes with the process.
    """
    try:
        import ctypes

        ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))
    except (ImportError, AttributeError):  # not CPython: kept until the interpreter's teardown
        _kept.append(obj)


class ClosesOnExit:
    """`with obj:` closes `obj` on exit (subclasses define `close`)."""

    __slots__ = ()

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
