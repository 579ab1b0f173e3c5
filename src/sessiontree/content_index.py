"""Deprecated alias of `sessiontree.search` (the content index).

This path goes in the next release."""

import warnings

from sessiontree.search import (
    ContentIndex,
    IndexedFile,
    SessionSource,
    index_text,
    query_trigrams,
    read_source,
)

__all__ = [
    "ContentIndex",
    "IndexedFile",
    "SessionSource",
    "index_text",
    "query_trigrams",
    "read_source",
]

warnings.warn(
    "sessiontree.content_index is deprecated: import from sessiontree.search",
    DeprecationWarning,
    stacklevel=2,
)
