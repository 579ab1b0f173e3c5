"""Finding sessions: listings (with the persistent listing cache), the most recent session,
resume-argument matching, and the file identities the caches trust.

Modules by job: `_marks` (file identity, growth), `_changes` (the file-identity
index: what changed in a store since a cache read it, for every cache), `_scan`
(scanning files with the metadata fold, in worker processes for a large cold scan),
`_cache` (the in-process and on-disk listing caches), `_values` (tables of a JSON
value per file identity in the same file), `_imports` (the import records of a store's
sessions, for `find_imports` and the usage report), `_listing` (`list_sessions`,
`SessionInfo`), `_resume` (recent sessions, resume arguments).

Typical use::

    for info in list_sessions("/work/repo"):
        print(info.modified, info.title or info.first_message)
    match = resolve_resumable_session("01a2", cwd="/work/repo")
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sessiontree._util.lazy import lazy_exports, lazy_table

if TYPE_CHECKING:  # what mypy sees; at run time each name is imported on first use
    from sessiontree.listing._cache import CACHE_DB_NAME, META_DB_APP_ID, clear_listing_cache
    from sessiontree.listing._changes import (
        Identity,
        IdentityRow,
        Known,
        Plan,
        grown_from,
        plan_changes,
    )
    from sessiontree.listing._imports import (
        IMPORT_RECORDS,
        ImportRecord,
        import_markers,
        import_records,
    )
    from sessiontree.listing._listing import (
        ListingRows,
        RowHandle,
        SessionInfo,
        list_all_sessions,
        list_rows,
        list_sessions,
    )
    from sessiontree.listing._marks import (
        MARK_HEAD_BYTES,
        MARK_TAIL_BYTES,
        FileMark,
        mark_file,
        marked_as_read,
        only_appended,
        read_start_ns,
        same_identity,
        stat_identity,
    )
    from sessiontree.listing._resume import (
        RecentSessionInfo,
        ResolvedSessionMatch,
        find_most_recent_session,
        get_recent_sessions,
        resolve_resumable_session,
    )
    from sessiontree.listing._values import IdentityCache, identity_family

_WHERE = lazy_table(
    {
        "_cache": "CACHE_DB_NAME META_DB_APP_ID clear_listing_cache",
        "_changes": "Identity IdentityRow Known Plan grown_from plan_changes",
        "_imports": "IMPORT_RECORDS ImportRecord import_markers import_records",
        "_listing": "ListingRows RowHandle SessionInfo list_all_sessions list_rows list_sessions",
        "_marks": (
            "MARK_HEAD_BYTES MARK_TAIL_BYTES FileMark mark_file marked_as_read only_appended "
            "read_start_ns same_identity stat_identity"
        ),
        "_resume": (
            "RecentSessionInfo ResolvedSessionMatch find_most_recent_session "
            "get_recent_sessions resolve_resumable_session"
        ),
        "_values": "IdentityCache identity_family",
    }
)
"""Each name and the module (of this package, by its short name) it is imported from."""

if not TYPE_CHECKING:  # a module `__getattr__` would make type checkers accept any name
    __getattr__ = lazy_exports(__name__, _WHERE)

__all__ = [
    "CACHE_DB_NAME",
    "IMPORT_RECORDS",
    "MARK_HEAD_BYTES",
    "MARK_TAIL_BYTES",
    "META_DB_APP_ID",
    "FileMark",
    "Identity",
    "IdentityCache",
    "IdentityRow",
    "ImportRecord",
    "Known",
    "ListingRows",
    "Plan",
    "RecentSessionInfo",
    "ResolvedSessionMatch",
    "RowHandle",
    "SessionInfo",
    "clear_listing_cache",
    "find_most_recent_session",
    "get_recent_sessions",
    "grown_from",
    "identity_family",
    "import_markers",
    "import_records",
    "list_all_sessions",
    "list_rows",
    "list_sessions",
    "mark_file",
    "marked_as_read",
    "only_appended",
    "plan_changes",
    "read_start_ns",
    "resolve_resumable_session",
    "same_identity",
    "stat_identity",
]
