"""The usage rows: what the usage report reads, kept in the content index's file.

The content index reads every line of a session to index its text; the same read
keeps, per session file, a row for each assistant reply's usage (and each other entry
pi counts, `format.usage_record`) in the table ``usage``, and a row for each
`foreign_session_import` marker (`format.import_marker`) in ``imports``. They are
written and forgotten with the file's entries (same file id, same offsets: a file that
only grew loses the rows of its unterminated last line and gains the new ones), and
`sessiontree.reports._usage` reads them instead of the files. The table names are the
ones older index files hold: renaming them would rebuild every index.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from typing import Final

from sessiontree.format import ImportMarker, UsageRecord, loads_line, serialize_entry_bytes

__all__ = [
    "USAGE_SCHEMA",
    "USAGE_TABLES",
    "import_markers",
    "usage_records",
    "write_usage_rows",
]

USAGE_SCHEMA: Final = (
    """CREATE TABLE usage (
        file INTEGER NOT NULL,
        line INTEGER NOT NULL,
        offset INTEGER NOT NULL,
        entry_id TEXT,
        ts INTEGER,
        provider TEXT NOT NULL,
        model TEXT NOT NULL,
        response_id TEXT,
        input INTEGER NOT NULL,
        output INTEGER NOT NULL,
        cache_read INTEGER NOT NULL,
        cache_write INTEGER NOT NULL,
        cost REAL
    )""",
    "CREATE INDEX usage_file ON usage (file, offset)",
    """CREATE TABLE imports (
        file INTEGER NOT NULL,
        line INTEGER NOT NULL,
        offset INTEGER NOT NULL,
        source TEXT NOT NULL,
        source_id TEXT NOT NULL,
        version INTEGER NOT NULL,
        extra TEXT NOT NULL
    )""",
    "CREATE INDEX imports_file ON imports (file, offset)",
)
"""The statements that make the usage rows' tables (part of the index's family)."""
USAGE_TABLES: Final = ("usage", "imports")


def write_usage_rows(
    conn: sqlite3.Connection,
    file_id: int,
    usage: Sequence[tuple[int, int, UsageRecord]],
    imports: Sequence[tuple[int, int, ImportMarker]],
) -> None:
    """Keep the usage records and import markers read from a file, each with its line
    number and byte offset."""
    conn.executemany(
        "INSERT INTO usage (file, line, offset, entry_id, ts, provider, model, response_id, "
        "input, output, cache_read, cache_write, cost) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                file_id,
                line,
                offset,
                r.entry_id,
                r.timestamp,
                r.provider,
                r.model,
                r.response_id,
                r.input,
                r.output,
                r.cache_read,
                r.cache_write,
                r.cost,
            )
            for line, offset, r in usage
        ],
    )
    conn.executemany(
        "INSERT INTO imports (file, line, offset, source, source_id, version, extra) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        [
            (
                file_id,
                line,
                offset,
                m.source,
                m.source_id,
                m.version,
                serialize_entry_bytes(list(m.extra_ids)).decode("utf-8", "replace"),
            )
            for line, offset, m in imports
        ],
    )


def usage_records(
    conn: sqlite3.Connection, file_ids: Iterable[int]
) -> dict[int, list[UsageRecord]]:
    """Assistant messages' usage per file, in file order."""
    ids = set(file_ids)
    out: dict[int, list[UsageRecord]] = {i: [] for i in ids}
    make = UsageRecord._make
    current = -1
    records: list[UsageRecord] | None = None
    for row in conn.execute(
        "SELECT file, entry_id, line, ts, provider, model, response_id, input, output, "
        "cache_read, cache_write, cost FROM usage ORDER BY file, line"
    ):
        if row[0] != current:
            current = row[0]
            records = out.get(current)
        if records is not None:
            records.append(make(row[1:]))
    return out


def import_markers(
    conn: sqlite3.Connection, file_ids: Iterable[int]
) -> dict[int, list[ImportMarker]]:
    """`foreign_session_import` markers per file, in file order."""
    ids = set(file_ids)
    out: dict[int, list[ImportMarker]] = {}
    for file_id, line, source, source_id, version, extra in conn.execute(
        "SELECT file, line, source, source_id, version, extra FROM imports ORDER BY file, line"
    ):
        if file_id in ids:
            values = loads_line(extra)
            out.setdefault(file_id, []).append(
                ImportMarker(line, source, source_id, version, tuple(values))
            )
    return out
