"""Search over sessions (index first, scan fallback) and the SQLite FTS5 content index.

Modules by job: `_search` (`search`: the index asked, its candidates verified, the rest
scanned), `_scan` (the scan: one loop, one rule for files it cannot read), `_query`
(matchers, literals, the raw-line prefilter, regex time limits), `_hits` (hits,
snippets, filters); the content index: `_content_index` (refresh and queries),
`_index_db` (tables, opening, keys), `_index_rows` (reading a session into rows),
`_usage_rows` (the rows the usage report reads); a PostgreSQL store's index in its own
database: `_pg_index`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sessiontree._util.lazy import lazy_exports, lazy_table

if TYPE_CHECKING:  # what mypy sees; at run time each name is imported on first use
    from sessiontree.search._content_index import ContentIndex
    from sessiontree.search._hits import SearchHit, merge_store_hits, title_hits, title_test
    from sessiontree.search._index_db import INDEX_DB_NAME
    from sessiontree.search._index_rows import (
        IndexedFile,
        SessionSource,
        index_text,
        query_trigrams,
        read_source,
    )
    from sessiontree.search._pg_index import PostgresIndex, postgres_index
    from sessiontree.search._query import (
        RegexTimeoutError,
        nested_repeat,
        regex_literals,
        regex_time_limit,
    )
    from sessiontree.search._scan import search_sessions
    from sessiontree.search._search import SearchResult, search

_WHERE = lazy_table(
    {
        "_content_index": "ContentIndex",
        # A usage report reads the index's rows: it loads neither the search (hits,
        # queries, the scan) nor, for a file store, the PostgreSQL index.
        "_hits": "SearchHit merge_store_hits title_hits title_test",
        "_index_db": "INDEX_DB_NAME",
        "_index_rows": "IndexedFile SessionSource index_text query_trigrams read_source",
        "_pg_index": "PostgresIndex postgres_index",
        "_query": "RegexTimeoutError nested_repeat regex_literals regex_time_limit",
        "_scan": "search_sessions",
        "_search": "SearchResult search",
    }
)
"""Each name and the module (of this package, by its short name) it is imported from."""

if not TYPE_CHECKING:  # a module `__getattr__` would make type checkers accept any name
    __getattr__ = lazy_exports(__name__, _WHERE)

__all__ = [
    "INDEX_DB_NAME",
    "ContentIndex",
    "IndexedFile",
    "PostgresIndex",
    "RegexTimeoutError",
    "SearchHit",
    "SearchResult",
    "SessionSource",
    "index_text",
    "merge_store_hits",
    "nested_repeat",
    "postgres_index",
    "query_trigrams",
    "read_source",
    "regex_literals",
    "regex_time_limit",
    "search",
    "search_sessions",
    "title_hits",
    "title_test",
]
