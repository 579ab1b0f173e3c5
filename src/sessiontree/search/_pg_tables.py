"""The search index's tables in a PostgreSQL store's schema, made on first use.

The index is derived data, like the file store's content index: its tables are not
among the schema's migrations (`storage.postgres._schema`), whose version an older
sessiontree on another host would refuse to open. They carry their own version
(``search_index``): missing, they are made; made by an older sessiontree, they are
dropped and made again (the next refresh reads every session); made by a newer one,
they are left alone and the search reads the sessions. A store created before the
index gets it at its first search or report.

Tables: ``search_files`` (per session file, by its node id: the node's size and mtime
when it was read, where reading stopped and the state there, the header),
``search_entries`` (one row per entry with text: its line's place, id, role, time and
casefolded text, under a pg_trgm GIN index and an index on the time),
``search_usage`` (each reply's usage) and ``search_imports`` (import markers). No
foreign key to ``nodes``: a writer's unlink or rewrite never touches these tables (nor
waits on a refresh); rows of a node gone are never asked for, and go at the next
refresh. Where pg_trgm cannot be created (not installed, no privilege) the text has no
trigram index and a search reads the text column in the server: still no session.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from collections.abc import Callable

    from psycopg import Connection, sql

__all__ = ["INDEX_VERSION", "IndexUnavailable", "ensure_tables"]

INDEX_VERSION: Final = 3
"""The layout of the tables this sessiontree keeps (2: ``search_usage.cache_write_1h``;
3: no negative count in ``search_usage``, which an older one kept: its rows read again)."""

_TABLES: Final = """
    CREATE TABLE {s}.search_index (version integer NOT NULL);
    CREATE TABLE {s}.search_files (
        file_id bigint PRIMARY KEY,
        size bigint NOT NULL,
        mtime_ns bigint NOT NULL,
        scan_offset bigint NOT NULL,
        tail_off bigint,
        tail_md5 text,
        line bigint NOT NULL,
        phase smallint NOT NULL,
        entries bigint NOT NULL,
        text_bytes bigint NOT NULL,
        final_phase smallint NOT NULL,
        session_id text,
        cwd text,
        parent text,
        created bigint,
        final_entries bigint NOT NULL
    );
    CREATE TABLE {s}.search_entries (
        file_id bigint NOT NULL REFERENCES {s}.search_files ON DELETE CASCADE,
        off bigint NOT NULL,
        line bigint NOT NULL,
        len bigint NOT NULL,
        entry_id text,
        role text NOT NULL,
        ts bigint,
        text text NOT NULL,
        PRIMARY KEY (file_id, off)
    );
    -- Newest first: a common word's first hits without sorting every entry holding it.
    CREATE INDEX search_entries_time ON {s}.search_entries ((coalesce(ts, -1)) DESC);
    CREATE TABLE {s}.search_usage (
        file_id bigint NOT NULL REFERENCES {s}.search_files ON DELETE CASCADE,
        off bigint NOT NULL,
        line bigint NOT NULL,
        entry_id text,
        ts bigint,
        provider text NOT NULL,
        model text NOT NULL,
        response_id text,
        input bigint NOT NULL,
        output bigint NOT NULL,
        cache_read bigint NOT NULL,
        cache_write bigint NOT NULL,
        cost double precision,
        cache_write_1h bigint NOT NULL,
        PRIMARY KEY (file_id, off)
    );
    CREATE TABLE {s}.search_imports (
        file_id bigint NOT NULL REFERENCES {s}.search_files ON DELETE CASCADE,
        off bigint NOT NULL,
        line bigint NOT NULL,
        source text NOT NULL,
        source_id text NOT NULL,
        version integer NOT NULL,
        extra_ids text[] NOT NULL,
        PRIMARY KEY (file_id, off)
    );
    DO $$
    DECLARE
        home text;
    BEGIN
        -- One database, many schemas migrating at once: one creates the extension.
        PERFORM pg_advisory_xact_lock(5456446835136787507);
        BEGIN
            CREATE EXTENSION IF NOT EXISTS pg_trgm;
        EXCEPTION WHEN OTHERS THEN
            NULL;  -- not installed, or not ours to create: no trigram index
        END;
        SELECT extnamespace::regnamespace::text INTO home
            FROM pg_extension WHERE extname = 'pg_trgm';
        IF home IS NOT NULL THEN
            EXECUTE format('CREATE INDEX search_entries_text ON {s}.search_entries '
                'USING gin (text %s.gin_trgm_ops)', home);
        END IF;
    END $$;
"""
_DROP: Final = (
    "DROP TABLE IF EXISTS {s}.search_imports, {s}.search_usage, {s}.search_entries, "
    "{s}.search_files, {s}.search_index"
)
_LOCK: Final = (
    "SELECT pg_advisory_xact_lock(hashtextextended('sessiontree search tables ' || %s, 0))"
)
_VERSION: Final = "SELECT max(version) FROM {s}.search_index"
_RECORD: Final = "INSERT INTO {s}.search_index (version) VALUES (%s)"


class IndexUnavailable(OSError):
    """The store's search index cannot be used here (a newer sessiontree's tables): an
    OSError, as every failure of the database is, which the search meets by reading
    the sessions."""


def ensure_tables(conn: Connection[Any], schema: str, q: Callable[[str], sql.Composed]) -> None:
    """Make the tables if they are missing or an older sessiontree's (see the module
    docstring); IndexUnavailable when they are a newer one's."""
    if _version(conn, schema, q) == INDEX_VERSION:
        return
    with conn.transaction():
        conn.execute(_LOCK, (schema,))
        version = _version(conn, schema, q)  # another process may have made them meanwhile
        if version == INDEX_VERSION:
            return
        if version is not None and version > INDEX_VERSION:
            raise IndexUnavailable(
                f"its tables are of a newer sessiontree (version {version}; "
                f"this one keeps version {INDEX_VERSION})"
            )
        conn.execute(q(_DROP))
        conn.execute(q(_TABLES))
        conn.execute(q(_RECORD), (INDEX_VERSION,))


def _version(conn: Connection[Any], schema: str, q: Callable[[str], sql.Composed]) -> int | None:
    row = conn.execute("SELECT to_regclass(%s)", (f'"{schema}".search_index',)).fetchone()
    if row is None or row[0] is None:
        return None
    found = conn.execute(q(_VERSION)).fetchone()
    return int(found[0]) if found and found[0] is not None else 0
