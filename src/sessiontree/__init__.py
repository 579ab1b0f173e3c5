"""sessiontree: append-only JSONL session trees for coding agents.

Sessions are files the TypeScript agents (xcsh, oh-my-pi, pi) read and write
too: one `JSON.stringify`-identical line per entry, linked by `id`/`parentId`.
"""

from __future__ import annotations

from sessiontree._util.unset import UNSET
from sessiontree._version import __version__ as __version__
from sessiontree.errors import (
    AmbiguousSessionError,
    EntryNotFoundError,
    EntryNotSerializableError,
    InheritedHandleError,
    InvalidBlobRefError,
    InvalidSessionFileError,
    MissingBlobError,
    SessionClosedError,
    SessionLockError,
    SessionPersistenceError,
    SessionTreeError,
    SessionWriteConflictError,
)
from sessiontree.format import (
    CURRENT_SESSION_VERSION,
    SessionContext,
    SessionTreeNode,
    build_session_context,
    convert_to_llm,
    create_branch_summary_message,
    create_compaction_summary_message,
    create_custom_message,
    migrate_session_entries,
    parse_jsonl_lenient,
    serialize_entry,
)
from sessiontree.history import HistoryEntry, HistoryStorage
from sessiontree.layout import encode_session_dir_name, get_agent_dir, get_default_session_dir
from sessiontree.listing import (
    RecentSessionInfo,
    ResolvedSessionMatch,
    SessionInfo,
    find_most_recent_session,
    get_recent_sessions,
    resolve_resumable_session,
)
from sessiontree.session import (
    BLOB_EXTERNALIZE_THRESHOLD,
    MAX_PERSIST_CHARS,
    TRUNCATION_NOTICE,
    SessionManager,
    UsageStatistics,
    load_entries_from_file,
)
from sessiontree.storage import (
    BlobPutResult,
    BlobStore,
    FileSessionStorage,
    MemorySessionStorage,
    MissingCapabilityError,
    SessionStorage,
    SessionStorageWriter,
    StorageStat,
    is_blob_ref,
    parse_blob_ref,
)

__all__ = [
    "BLOB_EXTERNALIZE_THRESHOLD",
    "CURRENT_SESSION_VERSION",
    "MAX_PERSIST_CHARS",
    "TRUNCATION_NOTICE",
    "UNSET",
    "AmbiguousSessionError",
    "BlobPutResult",
    "BlobStore",
    "EntryNotFoundError",
    "EntryNotSerializableError",
    "FileSessionStorage",
    "HistoryEntry",
    "HistoryStorage",
    "InheritedHandleError",
    "InvalidBlobRefError",
    "InvalidSessionFileError",
    "MemorySessionStorage",
    "MissingBlobError",
    "MissingCapabilityError",
    "RecentSessionInfo",
    "ResolvedSessionMatch",
    "SessionClosedError",
    "SessionContext",
    "SessionInfo",
    "SessionLockError",
    "SessionManager",
    "SessionPersistenceError",
    "SessionStorage",
    "SessionStorageWriter",
    "SessionTreeError",
    "SessionTreeNode",
    "SessionWriteConflictError",
    "StorageStat",
    "UsageStatistics",
    "build_session_context",
    "convert_to_llm",
    "create_branch_summary_message",
    "create_compaction_summary_message",
    "create_custom_message",
    "encode_session_dir_name",
    "find_most_recent_session",
    "get_agent_dir",
    "get_default_session_dir",
    "get_recent_sessions",
    "is_blob_ref",
    "load_entries_from_file",
    "migrate_session_entries",
    "parse_blob_ref",
    "parse_jsonl_lenient",
    "resolve_resumable_session",
    "serialize_entry",
]


def _publish() -> None:
    """Public names say they are `sessiontree.X` (in reprs, docs and tracebacks), so
    the private modules behind them can move without breaking anyone; pickles refer
    to `sessiontree.X`, which stays."""
    for name in __all__:
        obj = globals()[name]
        if (isinstance(obj, type) or callable(obj)) and getattr(obj, "__module__", "").startswith(
            "sessiontree."
        ):
            try:
                obj.__module__ = __name__
            except (AttributeError, TypeError):  # a builtin-backed callable
                pass


_publish()
