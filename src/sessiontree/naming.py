"""Deprecated alias of `sessiontree.format` (session names).

This path goes in the next release."""

import warnings

from sessiontree.format import (
    SessionHead,
    entry_name,
    head_kind,
    head_title,
    head_title_source,
    header_in,
    listing_title,
    new_header,
    ordered_header,
    session_file_name,
    session_name,
    session_path,
    title_slot_line,
)

__all__ = [
    "SessionHead",
    "entry_name",
    "head_kind",
    "head_title",
    "head_title_source",
    "header_in",
    "listing_title",
    "new_header",
    "ordered_header",
    "session_file_name",
    "session_name",
    "session_path",
    "title_slot_line",
]

warnings.warn(
    "sessiontree.naming is deprecated: import from sessiontree.format",
    DeprecationWarning,
    stacklevel=2,
)
