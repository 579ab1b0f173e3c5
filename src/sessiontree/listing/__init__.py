"""Finding sessions: listings (with the persistent listing cache), the most recent session,
resume-argument matching."""

from __future__ import annotations

from sessiontree.listing._discovery import (
    CACHE_DB_NAME,
    FileMark,
    RecentSessionInfo,
    ResolvedSessionMatch,
    SessionInfo,
    add_ctime_column,
    clear_listing_cache,
    find_most_recent_session,
    get_recent_sessions,
    list_all_sessions,
    list_sessions,
    mark_file,
    only_appended,
    resolve_resumable_session,
    same_identity,
    stat_identity,
)

__all__ = [
    "CACHE_DB_NAME",
    "FileMark",
    "RecentSessionInfo",
    "ResolvedSessionMatch",
    "SessionInfo",
    "add_ctime_column",
    "clear_listing_cache",
    "find_most_recent_session",
    "get_recent_sessions",
    "list_all_sessions",
    "list_sessions",
    "mark_file",
    "only_appended",
    "resolve_resumable_session",
    "same_identity",
    "stat_identity",
]
