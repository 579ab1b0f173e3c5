"""sessiontree: append-only JSONL session trees for coding agents.

Sessions are files the TypeScript agents (xcsh, oh-my-pi, pi) read and write
too: one `JSON.stringify`-identical line per entry, linked by `id`/`parentId`.

`import sessiontree` loads nothing but the errors and this table: each other public
name is imported from its package the first time it is used (PEP 562), so a program
that needs one part does not pay for the others.
"""

from __future__ import annotations

import importlib

from sessiontree._version import __version__ as __version__
from sessiontree.errors import (
    AmbiguousSessionError,
    EntryNotFoundError,
    EntryNotSerializableError,
    InheritedHandleError,
    InvalidBlobRefError,
    InvalidSessionFileError,
    InvalidStoreError,
    MissingBlobError,
    ReadOnlyStoreError,
    SessionClosedError,
    SessionLockError,
    SessionNotFoundError,
    SessionPersistenceError,
    SessionTreeError,
    SessionWriteConflictError,
    StoreClosedError,
)

TYPE_CHECKING = False
"""True for type checkers (mypy and IDEs read this name as `typing.TYPE_CHECKING`),
False at run time, without importing `typing`."""
if TYPE_CHECKING:  # what mypy and IDEs see: every name, from where it lives
    from typing import Any

    from sessiontree._util.unset import UNSET
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
    from sessiontree.history import (
        HistoryEntry,
        HistoryStorage,
    )
    from sessiontree.layout import (
        encode_session_dir_name,
        get_agent_dir,
        get_default_session_dir,
    )
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
        TreeShape,
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
    from sessiontree.store import Store

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
    "InvalidStoreError",
    "MemorySessionStorage",
    "MissingBlobError",
    "MissingCapabilityError",
    "ReadOnlyStoreError",
    "RecentSessionInfo",
    "ResolvedSessionMatch",
    "SessionClosedError",
    "SessionContext",
    "SessionInfo",
    "SessionLockError",
    "SessionManager",
    "SessionNotFoundError",
    "SessionPersistenceError",
    "SessionStorage",
    "SessionStorageWriter",
    "SessionTreeError",
    "SessionTreeNode",
    "SessionWriteConflictError",
    "StorageStat",
    "Store",
    "StoreClosedError",
    "TreeShape",
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

_WHERE: dict[str, str] = {
    "BLOB_EXTERNALIZE_THRESHOLD": "sessiontree.session",
    "CURRENT_SESSION_VERSION": "sessiontree.format",
    "MAX_PERSIST_CHARS": "sessiontree.session",
    "TRUNCATION_NOTICE": "sessiontree.session",
    "UNSET": "sessiontree._util.unset",
    "BlobPutResult": "sessiontree.storage",
    "BlobStore": "sessiontree.storage",
    "FileSessionStorage": "sessiontree.storage",
    "HistoryEntry": "sessiontree.history",
    "HistoryStorage": "sessiontree.history",
    "MemorySessionStorage": "sessiontree.storage",
    "MissingCapabilityError": "sessiontree.storage",
    "RecentSessionInfo": "sessiontree.listing",
    "ResolvedSessionMatch": "sessiontree.listing",
    "SessionContext": "sessiontree.format",
    "SessionInfo": "sessiontree.listing",
    "SessionManager": "sessiontree.session",
    "TreeShape": "sessiontree.session",
    "SessionStorage": "sessiontree.storage",
    "SessionStorageWriter": "sessiontree.storage",
    "SessionTreeNode": "sessiontree.format",
    "StorageStat": "sessiontree.storage",
    "Store": "sessiontree.store",
    "UsageStatistics": "sessiontree.session",
    "build_session_context": "sessiontree.format",
    "convert_to_llm": "sessiontree.format",
    "create_branch_summary_message": "sessiontree.format",
    "create_compaction_summary_message": "sessiontree.format",
    "create_custom_message": "sessiontree.format",
    "encode_session_dir_name": "sessiontree.layout",
    "find_most_recent_session": "sessiontree.listing",
    "get_agent_dir": "sessiontree.layout",
    "get_default_session_dir": "sessiontree.layout",
    "get_recent_sessions": "sessiontree.listing",
    "is_blob_ref": "sessiontree.storage",
    "load_entries_from_file": "sessiontree.session",
    "migrate_session_entries": "sessiontree.format",
    "parse_blob_ref": "sessiontree.storage",
    "parse_jsonl_lenient": "sessiontree.format",
    "resolve_resumable_session": "sessiontree.listing",
    "serialize_entry": "sessiontree.format",
}
"""Each public name imported on first use, and the package (its public face) it is
imported from; the errors (no imports of their own) are here from the start."""


if not TYPE_CHECKING:  # a module `__getattr__` would make type checkers accept any name

    def __getattr__(name: str) -> Any:
        module = _WHERE.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        _publish(value)
        globals()[name] = value  # later lookups find it without this function
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


def _publish(obj: object) -> None:
    """Public names say they are `sessiontree.X` (in reprs, docs and tracebacks), so
    the private modules behind them can move without breaking anyone; pickles refer
    to `sessiontree.X`, which stays."""
    if (isinstance(obj, type) or callable(obj)) and getattr(obj, "__module__", "").startswith(
        "sessiontree."
    ):
        try:
            obj.__module__ = __name__
        except (AttributeError, TypeError):  # a builtin-backed callable
            pass


for _error in (
    AmbiguousSessionError,
    EntryNotFoundError,
    EntryNotSerializableError,
    InheritedHandleError,
    InvalidBlobRefError,
    InvalidSessionFileError,
    InvalidStoreError,
    MissingBlobError,
    ReadOnlyStoreError,
    SessionClosedError,
    SessionLockError,
    SessionNotFoundError,
    SessionPersistenceError,
    SessionTreeError,
    SessionWriteConflictError,
    StoreClosedError,
):
    _publish(_error)
del _error
