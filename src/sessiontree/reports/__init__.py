"""Usage reports (each reply once, estimates marked), prices, store statistics."""

from __future__ import annotations

from sessiontree.reports._pricing import price_table
from sessiontree.reports._stats import StoreStats, UsageTotals, store_stats, summarize_session
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
