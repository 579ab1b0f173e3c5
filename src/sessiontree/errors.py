"""Errors raised by sessiontree.

Every error derives from one root, so callers can catch the whole family::

    SessionTreeError
      SessionPersistenceError    # stored write failure, re-raised by later operations
      InvalidSessionFileError    # non-empty file without a valid header; .path, .line
      AmbiguousSessionError      # resume prefix matching several sessions; .candidates
      EntryNotFoundError         # unknown entry id (also a KeyError)
      InvalidBlobRefError        # untrusted blob ref refused before the filesystem
      SessionLockError           # another live writer holds the session; .pid
      SessionWriteConflictError  # the file changed on disk behind this writer's back
      SessionClosedError         # an operation on a closed manager (also a ValueError)
      InheritedHandleError       # a forked child wrote through what its parent opened
      EntryNotSerializableError  # an entry holds a value JSON cannot hold (also a TypeError)
      MissingBlobError           # a session would name a blob this manager put that is gone
      BackendUnavailableError    # an optional backend's packages are missing (also an ImportError)
      MissingCapabilityError     # a storage lacks what an operation needs (storage.base)
      InvalidStoreError          # a location or agent name naming no store (also a ValueError)
      ReadOnlyStoreError         # a write asked of another agent's store (only read here)
      StoreClosedError           # an operation on a closed Store (also a ValueError)
      SessionNotFoundError       # nothing in the store matches a path or prefix (a LookupError)
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing.TYPE_CHECKING` without importing typing: errors load first
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any


class SessionTreeError(Exception):
    """Root of every error this package raises."""


class SessionPersistenceError(SessionTreeError):
    """A write to the session store failed; stored and re-raised by later operations."""

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class InvalidSessionFileError(SessionTreeError):
    """A non-empty session file has no valid header; the file was left untouched."""

    def __init__(self, path: str, message: str | None = None, line: int | None = None) -> None:
        super().__init__(
            message
            or f"{path}: not a session file (first line is not a valid session header); "
            "the file was not modified"
        )
        self.path = path
        self.line = line


class AmbiguousSessionError(SessionTreeError):
    """A resume argument matched several sessions."""

    def __init__(self, arg: str, candidates: Sequence[Any]) -> None:
        self.arg = arg
        self.candidates = list(candidates)
        super().__init__(f"{arg!r} matches {len(self.candidates)} sessions; be more specific")


class EntryNotFoundError(SessionTreeError, KeyError):
    """An entry id is not part of the session."""

    def __init__(self, entry_id: object) -> None:
        self.entry_id = entry_id
        super().__init__(f"Entry {entry_id} not found")

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class InvalidBlobRefError(SessionTreeError, ValueError):
    """A blob reference or hash is not `blob:sha256:` + 64 lowercase hex characters."""


class SessionLockError(SessionTreeError):
    """Another live process holds the write lock of this session."""

    def __init__(
        self,
        path: str,
        pid: int | None = None,
        message: str | None = None,
        *,
        holder: str | None = None,
    ) -> None:
        # `holder`: who holds it when the backend can tell more than a pid (a database
        # names the connection); the hint to read meanwhile is the same for every backend.
        who = holder or (f"process {pid}" if pid else "another process")
        super().__init__(
            message
            or f"{path}: session is being written by {who}; to read it meanwhile, open it "
            "with read_only=True"
        )
        self.path = path
        self.pid = pid


class SessionWriteConflictError(SessionTreeError):
    """The session file changed on disk behind this writer's back."""

    def __init__(self, path: str, message: str | None = None, saved_to: str | None = None) -> None:
        text = message or f"{path}: file changed on disk since our last write"
        if saved_to:
            text += f"; in-memory session saved to {saved_to}"
        super().__init__(text)
        self.path = path
        self.saved_to = saved_to


class SessionClosedError(SessionTreeError, ValueError):
    """The session was closed: nothing more can be written or read from storage."""

    def __init__(self, path: str | None) -> None:
        super().__init__(f"{path or 'session'}: the session is closed")
        self.path = path


class InheritedHandleError(SessionTreeError):
    """A forked child used what its parent opened to write: a session (its file and
    writer lock), a storage writer, a database connection. Nothing was written.

    The parent keeps them: a child reads what an inherited manager holds, but writes,
    flushes and closes nothing of the parent's (closing it in the child only lets go of
    the child's copy). A child that writes opens its own.
    """

    def __init__(self, path: str, owner_pid: int, message: str | None = None) -> None:
        super().__init__(
            message
            or f"{path}: opened by process {owner_pid}, which forked this one; a forked "
            "child cannot write through (or flush, or close) what its parent opened: "
            "open your own in the child"
        )
        self.path = path
        self.owner_pid = owner_pid

    def __reduce__(self) -> tuple[type[InheritedHandleError], tuple[str, int, str]]:
        # multiprocessing sends a worker's error to its parent pickled.
        return (type(self), (self.path, self.owner_pid, str(self)))


class EntryNotSerializableError(SessionTreeError, TypeError):
    """An entry holds a value that JSON cannot hold; nothing was appended.

    `key_path` names the offending value (`message.content[1].data`).
    """

    def __init__(self, key_path: str, value: object) -> None:
        where = key_path or "the entry"
        super().__init__(
            f"cannot append: {where} is a {type(value).__name__}, which JSON cannot hold; "
            "nothing was appended"
        )
        self.key_path = key_path


class MissingBlobError(SessionTreeError):
    """A session would be written naming a blob that this manager put (or holds a ref
    to) and that is gone from its store; nothing was written.

    `hash` is the blob's, `path` the session file that was not written. Putting the
    same bytes again (`put_blob`) restores the blob under the same name.
    """

    def __init__(self, hash: str, path: str, store: str | None = None) -> None:
        where = f" from {store}" if store else ""
        super().__init__(
            f"{path}: not written: it names blob {hash}, which is gone{where}; "
            "put the image again (put_blob) to restore it"
        )
        self.hash = hash
        self.path = path


class BackendUnavailableError(SessionTreeError, ImportError):
    """An optional storage backend is missing its packages; the message says what to install."""


class InvalidStoreError(SessionTreeError, ValueError):
    """A store location or agent name that names no store (an unsupported URL scheme,
    an unknown agent, a location and an agent that disagree); nothing was opened."""


class ReadOnlyStoreError(SessionTreeError):
    """A write asked of a store sessiontree only reads (another agent's: Claude Code,
    Codex, OpenCode, Gemini CLI, Copilot CLI); nothing was written."""


class StoreClosedError(SessionTreeError, ValueError):
    """The `Store` was closed: open a new one."""

    def __init__(self, location: str) -> None:
        super().__init__(f"{location}: the store is closed")
        self.location = location


class SessionNotFoundError(SessionTreeError, LookupError):
    """No session of the store matches a path, a session-id prefix or a file-name prefix."""

    def __init__(self, arg: str, message: str | None = None) -> None:
        super().__init__(message or f"no session matches {arg!r}")
        self.arg = arg
