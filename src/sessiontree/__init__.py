"""sessiontree: append-only JSONL session trees for coding agents.

Sessions are files the TypeScript agents (xcsh, oh-my-pi, pi) read and write
too: one `JSON.stringify`-identical line per entry, linked by `id`/`parentId`.
"""

from __future__ import annotations

from ._unset import UNSET
from ._version import __version__ as __version__
from .blobs import BlobPutResult, BlobStore, is_blob_ref, parse_blob_ref
from .context import (
    SessionContext,
    build_session_context,
    convert_to_llm,
    create_branch_summary_message,
    create_compaction_summary_message,
    create_custom_message,
)
from .discovery import (
    RecentSessionInfo,
    ResolvedSessionMatch,
    SessionInfo,
    find_most_recent_session,
    get_recent_sessions,
    resolve_resumable_session,
)
from .entries import CURRENT_SESSION_VERSION
from .errors import (
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
from .history import HistoryEntry, HistoryStorage
from .jsonl import parse_jsonl_lenient, serialize_entry
from .loader import load_entries_from_file
from .manager import SessionManager, UsageStatistics
from .migrations import migrate_session_entries
from .paths import encode_session_dir_name, get_agent_dir, get_default_session_dir
from .persistence import BLOB_EXTERNALIZE_THRESHOLD, MAX_PERSIST_CHARS, TRUNCATION_NOTICE
from .storage import (
    FileSessionStorage,
    MemorySessionStorage,
    SessionStorage,
    SessionStorageWriter,
    StorageStat,
)
from .storage.base import MissingCapabilityError
from .tree import SessionTreeNode

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
