"""One session: `SessionManager`, its file (lock, guard, rescue), the entry index, the
index-first pass, reading a file, persistence transforms."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sessiontree._util.lazy import lazy_exports, lazy_table

if TYPE_CHECKING:  # what mypy sees; at run time each name is imported on first use
    from sessiontree.session._file import (
        LINK_CHECK_SECONDS,
        LOCK_CHECK_SECONDS,
        SessionFile,
        backup_path,
        rescue_dir,
    )
    from sessiontree.session._index import EntryIndex
    from sessiontree.session._loader import (
        LAZY_LOAD_BYTES,
        load_entries_from_file,
        read_head,
        read_session,
    )
    from sessiontree.session._manager import SessionManager, UsageStatistics
    from sessiontree.session._persistence import (
        BLOB_EXTERNALIZE_THRESHOLD,
        MAX_PERSIST_CHARS,
        TRUNCATION_NOTICE,
        b64decode_lenient,
        entry_line,
        js_len,
        prepare_for_persist,
        resolve_blob_refs,
        truncate_for_persist,
    )
    from sessiontree.session._shape import TreeShape
    from sessiontree.session._summary import (
        file_size,
        message_count,
        session_shown_title,
        title_parts,
    )

_WHERE = lazy_table(
    {
        "_file": "LINK_CHECK_SECONDS LOCK_CHECK_SECONDS SessionFile backup_path rescue_dir",
        "_index": "EntryIndex",
        "_loader": "LAZY_LOAD_BYTES load_entries_from_file read_head read_session",
        "_manager": "SessionManager UsageStatistics",
        "_persistence": (
            "BLOB_EXTERNALIZE_THRESHOLD MAX_PERSIST_CHARS TRUNCATION_NOTICE b64decode_lenient "
            "entry_line js_len prepare_for_persist resolve_blob_refs truncate_for_persist"
        ),
        "_shape": "TreeShape",
        "_summary": "file_size message_count session_shown_title title_parts",
    }
)
"""Each name and the module (of this package, by its short name) it is imported from."""

if not TYPE_CHECKING:  # a module `__getattr__` would make type checkers accept any name
    __getattr__ = lazy_exports(__name__, _WHERE)

__all__ = [
    "BLOB_EXTERNALIZE_THRESHOLD",
    "LAZY_LOAD_BYTES",
    "LINK_CHECK_SECONDS",
    "LOCK_CHECK_SECONDS",
    "MAX_PERSIST_CHARS",
    "TRUNCATION_NOTICE",
    "EntryIndex",
    "SessionFile",
    "SessionManager",
    "TreeShape",
    "UsageStatistics",
    "b64decode_lenient",
    "backup_path",
    "entry_line",
    "file_size",
    "js_len",
    "load_entries_from_file",
    "message_count",
    "prepare_for_persist",
    "read_head",
    "read_session",
    "rescue_dir",
    "resolve_blob_refs",
    "session_shown_title",
    "title_parts",
    "truncate_for_persist",
]
