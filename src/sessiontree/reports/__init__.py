"""Usage reports (each reply once, estimates marked), prices, store statistics."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sessiontree._util.lazy import lazy_exports, lazy_table

if TYPE_CHECKING:  # what mypy sees; at run time each name is imported on first use
    from sessiontree.reports._pricing import price_table
    from sessiontree.reports._stats import (
        StoreStats,
        UsageTotals,
        store_stats,
        summarize_session,
    )
    from sessiontree.reports._usage import (
        BLOCK_HOURS,
        Block,
        Duplicates,
        Reply,
        Report,
        ReportKind,
        Totals,
        blocks,
        count_once,
        counted_once,
        load_usage,
        parse_time,
        price,
        price_record,
        priced,
        report,
        time_zone,
    )

_WHERE = lazy_table(
    {
        "_pricing": "price_table",
        # The statistics open sessions (the session manager, the loader): a usage report
        # does not.
        "_stats": "StoreStats UsageTotals store_stats summarize_session",
        "_usage": (
            "BLOCK_HOURS Block Duplicates Reply Report ReportKind Totals blocks count_once "
            "counted_once load_usage parse_time price price_record priced report time_zone"
        ),
    }
)
"""Each name and the module (of this package, by its short name) it is imported from."""

if not TYPE_CHECKING:  # a module `__getattr__` would make type checkers accept any name
    __getattr__ = lazy_exports(__name__, _WHERE)

__all__ = [
    "BLOCK_HOURS",
    "Block",
    "Duplicates",
    "Reply",
    "Report",
    "ReportKind",
    "StoreStats",
    "Totals",
    "UsageTotals",
    "blocks",
    "count_once",
    "counted_once",
    "load_usage",
    "parse_time",
    "price",
    "price_record",
    "price_table",
    "priced",
    "report",
    "store_stats",
    "summarize_session",
    "time_zone",
]
