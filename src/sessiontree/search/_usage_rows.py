"""The usage rows: what the usage report reads, kept in the content index's file.

The content index reads every line of a session to index its text; the same read
keeps, per session file, a row for each assistant reply's usage (and each other entry
pi counts, `format.usage_record`) in the table ``usage``. The rows are written and
forgotten with the file's entries (same file id, same offsets: a file that only grew
loses the rows of its unterminated last line and gains the new ones), and
`sessiontree.reports._usage` reads them instead of the files. The import markers the
report needs beside them are not here: they are kept once, for `find_imports` too, in
the listing cache (`listing.import_records`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from sessiontree.format import UsageRecord

__all__ = [
    "USAGE_SCHEMA",
    "USAGE_TABLES",
    "usage_records",
    "usage_records_of",
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
        cost REAL,
        cache_write_1h INTEGER NOT NULL
    )""",
    "CREATE INDEX usage_file ON usage (file, offset)",
)
"""The statements that make the usage rows' tables (part of the index's family)."""
USAGE_TABLES: Final = ("usage",)


def write_usage_rows(
    conn: sqlite3.Connection, file_id: int, usage: Sequence[tuple[int, int, UsageRecord]]
) -> None:
    """Keep the usage records read from a file, each with its line number and byte
    offset."""
    conn.executemany(
        "INSERT INTO usage (file, line, offset, entry_id, ts, provider, model, response_id, "
        "input, output, cache_read, cache_write, cost, cache_write_1h) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
                r.cache_write_1h,
            )
            for line, offset, r in usage
        ],
    )


_COLUMNS = (
    "file, entry_id, line, ts, provider, model, response_id, input, output, "
    "cache_read, cache_write, cost, cache_write_1h"
)
_IN_BATCH = 500
"""File ids per query of `usage_records_of` (well under SQLite's bound variables)."""


def usage_records_of(
    conn: sqlite3.Connection, files: Mapping[int, str]
) -> dict[int, list[UsageRecord]]:
    """`usage_records` of a few files (a report's batch: file id -> path), by the
    `usage_file` index (a file's offsets ascend with its lines). A file whose id no
    longer names that path (the index rebuilt since the ids were read) is left out."""
    out: dict[int, list[UsageRecord]] = {}
    make = UsageRecord._make
    ids = list(files)
    for start in range(0, len(ids), _IN_BATCH):
        batch = ids[start : start + _IN_BATCH]
        marks = ",".join("?" * len(batch))
        for file_id, path in conn.execute(
            f"SELECT id, path FROM files WHERE id IN ({marks})", batch
        ):
            if files[file_id] == path:
                out[file_id] = []
        for row in conn.execute(
            f"SELECT {_COLUMNS} FROM usage WHERE file IN ({marks}) ORDER BY file, offset",
            batch,
        ):
            records = out.get(row[0])
            if records is not None:
                records.append(make(row[1:]))
    return out


def usage_records(
    conn: sqlite3.Connection, file_ids: Iterable[int]
) -> dict[int, list[UsageRecord]]:
    """Assistant messages' usage per file, in file order."""
    ids = set(file_ids)
    out: dict[int, list[UsageRecord]] = {i: [] for i in ids}
    make = UsageRecord._make
    current = -1
    records: list[UsageRecord] | None = None
    for row in conn.execute(f"SELECT {_COLUMNS} FROM usage ORDER BY file, line"):
        if row[0] != current:
            current = row[0]
            records = out.get(current)
        if records is not None:
            records.append(make(row[1:]))
    return out
