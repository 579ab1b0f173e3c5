"""The archive: a copy of every session of every agent store, kept whatever the agents
prune, byte for byte, deduplicated and compressed (`archive_stores`, `restore_session`,
`verify_archive`, `archive_stats`, `archived_files`)."""

from __future__ import annotations

from sessiontree.archive._archive import (
    ARCHIVE_VERSION,
    ArchiveBusyError,
    ArchivedFile,
    ArchivedVersion,
    ArchiveError,
    ArchiveReport,
    ArchiveSource,
    ArchiveStats,
    ArchiveView,
    RestoreReport,
    archive_stats,
    archive_stores,
    archive_view,
    archived_files,
    archived_versions,
    is_archive,
    restore_files,
    restore_session,
    verify_archive,
)
from sessiontree.archive._watch import Waiter

__all__ = [
    "ARCHIVE_VERSION",
    "ArchiveBusyError",
    "ArchiveError",
    "ArchiveReport",
    "ArchiveSource",
    "ArchiveStats",
    "ArchiveView",
    "ArchivedFile",
    "ArchivedVersion",
    "RestoreReport",
    "Waiter",
    "archive_stats",
    "archive_stores",
    "archive_view",
    "archived_files",
    "archived_versions",
    "is_archive",
    "restore_files",
    "restore_session",
    "verify_archive",
]
