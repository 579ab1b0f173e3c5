"""What the archive's functions take and give back: the stores to archive, the
reports of a run and of a restore, the archived files and their versions, the errors."""

from __future__ import annotations

from dataclasses import dataclass, field

from sessiontree.errors import SessionTreeError


class ArchiveError(SessionTreeError):
    """The archive cannot do what was asked (the message says why)."""


class ArchiveBusyError(ArchiveError):
    """Another archive run holds the archive's lock."""


@dataclass(frozen=True, slots=True)
class ArchiveSource:
    """A store to archive: its agent, its home and the dirs under it that hold its
    sessions (with their images and subagent files), relative to the home."""

    agent: str
    home: str
    roots: tuple[str, ...]


@dataclass(slots=True)
class ArchiveReport:
    files_seen: int = 0
    files_new: int = 0
    files_grown: int = 0
    files_rewritten: int = 0
    files_deleted: int = 0
    bytes_read: int = 0
    bytes_stored: int = 0
    skipped: list[str] = field(default_factory=list)
    """Files passed over this run, each with why (a symlink, changed while read)."""
    seconds: float = 0.0
    bytes_checked: int = 0
    """Bytes read again to check that a file that grew, or may have changed unseen,
    still holds what was archived of it (every byte before its old end)."""
    clobbered: list[str] = field(default_factory=list)
    """Files this run found rewritten to a header or without most of their lines, each
    with the earlier version that is kept (see `archived_versions`)."""


@dataclass(slots=True)
class ArchiveStats:
    sessions: int
    files: int
    deleted: int
    original_bytes: int
    stored_bytes: int
    clobbered: list[str] = field(default_factory=list)
    """Files whose newest version is a clobber (see `ArchivedVersion.clobber`), each
    with the version that holds the most lines."""


@dataclass(frozen=True, slots=True)
class ArchivedFile:
    agent: str
    home: str
    rel: str
    size: int
    mtime_ns: int
    deleted_ms: int | None
    is_session: bool
    manifest: str
    """Where its manifest is (a path; in a database, the path of its row)."""
    key: str = ""
    """The manifest's path inside the archive (`files/<agent>/<sha256>.json`)."""
    version: int | None = None
    """Which version a restore writes (see `archived_versions`); None: the newest."""


@dataclass(frozen=True, slots=True)
class ArchivedVersion:
    """One version of an archived file: 1 is the oldest kept, the last the newest (the
    file as the archive last saw it)."""

    number: int
    size: int
    lines: int | None
    """Its lines (entries); None when its chunks cannot be read."""
    mtime_ns: int
    replaced_ms: int | None
    """When an archive run found it replaced by the next version; None: the newest."""
    clobber: bool
    """It holds one line or less, or fewer than half the lines, of a version before it
    (an agent truncated the file to a fresh header, or dropped most of it)."""


@dataclass(slots=True)
class RestoreReport:
    written: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    """With `keep_going`: files not restored, each with why (there with other bytes,
    a damaged chunk, a dir of its path taken)."""
    notes: list[str] = field(default_factory=list)
    """What the user should know: the newest version restored is a clobber, and which
    earlier version holds the transcript."""
