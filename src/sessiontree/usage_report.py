"""Deprecated alias of `sessiontree.reports` (usage reports).

This path goes in the next release."""

import warnings

from sessiontree.reports import (
    BLOCK_HOURS,
    Block,
    Duplicates,
    Reply,
    Report,
    ReportKind,
    Totals,
    blocks,
    count_once,
    load_usage,
    parse_time,
    price,
    report,
    time_zone,
)

__all__ = [
    "BLOCK_HOURS",
    "Block",
    "Duplicates",
    "Reply",
    "Report",
    "ReportKind",
    "Totals",
    "blocks",
    "count_once",
    "load_usage",
    "parse_time",
    "price",
    "report",
    "time_zone",
]

warnings.warn(
    "sessiontree.usage_report is deprecated: import from sessiontree.reports",
    DeprecationWarning,
    stacklevel=2,
)
