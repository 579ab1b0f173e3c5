"""Search over sessions (index first, scan fallback) and the SQLite FTS5 content index."""

from __future__ import annotations

from sessiontree.search._content_index import ContentIndex
from sessiontree.search._index_db import INDEX_DB_NAME
from sessiontree.search._index_rows import (
    IndexedFile,
    SessionSource,
    index_text,
    query_trigrams,
    read_source,
)
from sessiontree.search._search import (
    RegexTimeoutError,
    SearchHit,
    SearchResult,
    merge_store_hits,
    nested_repeat,
    regex_literals,
    regex_time_limit,
    search,
    search_sessions,
    title_hits,
)

__all__ = [
    "INDEX_DB_NAME",
    "ContentIndex",
    "IndexedFile",
    "RegexTimeoutError",
    "SearchHit",
    "SearchResult",
    "SessionSource",
    "index_text",
    "merge_store_hits",
    "nested_repeat",
    "query_trigrams",
    "read_source",
    "regex_literals",
    "regex_time_limit",
    "search",
    "search_sessions",
    "title_hits",
]
