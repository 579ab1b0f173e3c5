"""The prompt history: a small SQLite FTS5 store of past prompts."""

from __future__ import annotations

from sessiontree.history._history import (
    MAX_LIMIT,
    MAX_QUERY_WORDS,
    SCHEMA_VERSION,
    HistoryEntry,
    HistoryStorage,
    read_history,
)

__all__ = [
    "MAX_LIMIT",
    "MAX_QUERY_WORDS",
    "SCHEMA_VERSION",
    "HistoryEntry",
    "HistoryStorage",
    "read_history",
]
