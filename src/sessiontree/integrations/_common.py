"""What the adapters share: a store location as the CLI's `--store` takes it, names that
are safe as path components, the error for a missing framework."""

from __future__ import annotations

import os
import time

from sessiontree._util.fs import name_problem
from sessiontree.errors import SessionLockError
from sessiontree.storage import (
    FileSessionStorage,
    SessionStorage,
    WriterLock,
    acquire_session_lock,
    file_store_dir,
)
from sessiontree.store import Store

__all__ = ["check_name", "missing_extra", "open_location", "wait_for_lock"]

LOCK_PATIENCE_S = 30.0


def wait_for_lock(
    storage: SessionStorage, path: str, patience: float = LOCK_PATIENCE_S
) -> WriterLock | None:
    """The session's writer lock, waiting (up to `patience` seconds) while another
    writer holds it; None for a storage without locks. SessionLockError after that."""
    deadline = time.monotonic() + patience
    delay = 0.001
    while True:
        try:
            return acquire_session_lock(storage, path)
        except SessionLockError:
            if time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.05)


def open_location(location: str | os.PathLike[str] | None) -> Store:
    """The writable store `location` names, as `sessiontree --store` reads it: an agent
    dir (a path or `file:` URL), a `postgresql://` URL, or None for the default store.

    A path is always a directory of our own files, even when it already looks like
    another agent's store (a Claude Code layout is what the Claude adapter writes).
    """
    if location is None:
        return Store()
    given = os.fspath(location)
    directory = file_store_dir(given)
    if directory is None:
        return Store(given)
    return Store(directory, storage=FileSessionStorage())


def check_name(value: object, what: str, *, suffix: str = "") -> str:
    """`value` when it is safe as one path component (with `suffix` appended), else
    ValueError before anything touches a path: not a string, empty, `.`/`..`, a `/`,
    `\\` or NUL, a leading `.` (the lock files' names), longer than a file name can be."""
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string, not {type(value).__name__}")
    problem = name_problem(value + suffix) if value else "it is empty"
    if problem is None and value.startswith("."):
        problem = "it starts with '.'"
    if problem is not None:
        raise ValueError(f"unsafe {what} {value[:80]!r}: {problem}")
    return value


def missing_extra(module: str, extra: str, package: str) -> ImportError:
    """The ImportError for an adapter whose framework is not installed."""
    return ImportError(
        f"{module} needs {package}, which is not installed: pip install 'sessiontree[{extra}]'",
        name=module,
    )
