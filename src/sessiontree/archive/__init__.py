"""The archive (`archive_stores`, `restore_session`, `verify_archive`, `archive_stats`,
`archived_files`): a copy of every session file of every agent store, kept whatever the
agents prune (Claude Code's `cleanupPeriodDays`, Codex's and others' cleanups).

Layout of an archive dir (default `<agent dir>/archive`):

* `ARCHIVE`: what the dir is (`{"format": "sessiontree-archive", "version": 1}`);
* `chunks/<2 hex>/<sha256>.zst`: the files' bytes, cut in chunks at line ends chosen by
  the lines themselves (a chunk ends after a line whose xxh64 is 0 mod 16, or at
  4 MiB): a fork or a resumed copy that repeats another file's lines repeats its chunks,
  which are stored once; each chunk is compressed with zstd on its own (a file is read
  from any chunk on: seekable);
* `files/<agent>/<sha256 of the source path>.json`: one manifest per archived file: the
  agent, its home and the file's path relative to it, size, mtime, inode, the chunk list
  (hash and length of each), the file's hash (sha256 over the chunk list, what `verify`
  checks every chunk against), its xxh3 (of its bytes) and lines, earlier versions (a
  file rewritten, not appended to: its old chunk list is kept; see `archived_versions`)
  and `deletedMs` once the source is gone (it stays).

Nothing is followed out of a store: symlinks under its roots are skipped (counted),
and `restore` writes only under the target it names, never through a symlink, never
over an existing file.
"""

from __future__ import annotations

from sessiontree.archive._archiving import archive_stores
from sessiontree.archive._contents import archive_stats, archived_files, verify_archive
from sessiontree.archive._model import (
    ArchiveBusyError,
    ArchivedFile,
    ArchivedVersion,
    ArchiveError,
    ArchiveReport,
    ArchiveSource,
    ArchiveStats,
    RestoreReport,
)
from sessiontree.archive._opencode import VirtualFile, export_as_storage, opencode_sessions
from sessiontree.archive._restore import archived_versions, restore_files, restore_session
from sessiontree.archive._sources import read_span, walk_files
from sessiontree.archive._storage import ARCHIVE_VERSION, is_archive
from sessiontree.archive._view import ArchiveView, archive_view
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
    "VirtualFile",
    "Waiter",
    "archive_stats",
    "archive_stores",
    "archive_view",
    "archived_files",
    "archived_versions",
    "export_as_storage",
    "is_archive",
    "opencode_sessions",
    "read_span",
    "restore_files",
    "restore_session",
    "verify_archive",
    "walk_files",
]
