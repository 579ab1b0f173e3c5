"""The schema: its name, the migrations that build its tables, and applying them.

Tables (in the schema, created and migrated on open)::

    nodes   one row per directory or file: the "inode". `id` is the inode number
            (`stat().ino`): a full rewrite creates a new row, so the manager's
            ino/size/tail conflict check works across hosts unchanged. Files also
            carry their session metadata, kept up to date by every write in the
            same statement or transaction (`_scan`, `_meta`).
    lines   the content: one row per appended line (per `write_bytes` call),
            keyed by (file id, byte offset). An append is one INSERT and one
            UPDATE of the file's row, O(1) in the session's size.
    blobs   content-addressed images (`PostgresBlobStore`).
    schema_migrations  the versions applied.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
from typing import Final

from sessiontree._util.fs import name_problem
from sessiontree.storage._blobs import is_blob_extension
from sessiontree.storage.postgres._errors import PostgresStoreError
from sessiontree.storage.postgres._keys import Keys
from sessiontree.storage.postgres._locks import lock_id
from sessiontree.storage.postgres._pool import Conn
from sessiontree.storage.postgres._sql import EXTS_OK, NODE_OK, NOW_NS, Statements, compose

_log = logging.getLogger(__name__)

_SCHEMA_RE: Final = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_REPORTED_ROWS: Final = 20  # rows a migration names one by one in its warning


def validate_schema_name(schema: str) -> str:
    """`schema` if it is a plain lowercase identifier (not `pg_*`), else PostgresStoreError."""
    if not isinstance(schema, str) or not _SCHEMA_RE.fullmatch(schema) or schema.startswith("pg_"):
        raise PostgresStoreError(
            f"invalid schema name {schema!r}: use lowercase letters, digits and _ "
            "(at most 63, not starting with a digit or pg_)"
        )
    return schema


def new_schema_name(prefix: str = "sessiontree") -> str:
    """A fresh, valid schema name (`<prefix>_<random hex>`), e.g. for tests."""
    return validate_schema_name(f"{prefix}_{secrets.token_hex(6)}")


# Ordered, never reordered or edited once released: a store records the versions it
# has applied, and each step runs in one transaction. `{s}` is the schema.
MIGRATIONS: Final[tuple[tuple[int, str, str], ...]] = (
    (
        1,
        "nodes, lines and blobs",
        # key/parent/name use the C collation: byte order sorts like Python's sorted()
        # and makes `key >= 'a/' AND key < 'a0'` an index range over a directory's subtree.
        # A NULL key is a file being written by write_atomic (invisible until renamed).
        f"""
        CREATE TABLE {{s}}.nodes (
            id bigserial PRIMARY KEY,
            key text COLLATE "C" UNIQUE,
            parent text COLLATE "C" REFERENCES {{s}}.nodes (key) ON DELETE CASCADE,
            name text COLLATE "C" NOT NULL,
            is_dir boolean NOT NULL,
            size bigint NOT NULL DEFAULT 0,
            line_count bigint NOT NULL DEFAULT 0,
            ends_with_newline boolean NOT NULL DEFAULT true,
            mtime_ns bigint NOT NULL,
            meta_state smallint NOT NULL DEFAULT 0,
            header_id text,
            cwd text,
            slot boolean NOT NULL DEFAULT false,
            slot_title text,
            header_title text,
            title_source text,
            session_name text,
            short_summary text,
            parent_session text,
            created text,
            message_count integer NOT NULL DEFAULT 0,
            first_message text,
            last_activity_ms bigint
        );
        CREATE INDEX nodes_parent_idx ON {{s}}.nodes (parent, name);
        INSERT INTO {{s}}.nodes (key, parent, name, is_dir, mtime_ns)
            VALUES ('', NULL, '', true, {NOW_NS});
        CREATE TABLE {{s}}.lines (
            file_id bigint NOT NULL REFERENCES {{s}}.nodes (id) ON DELETE CASCADE,
            off bigint NOT NULL,
            data bytea NOT NULL,
            msg_text text,
            PRIMARY KEY (file_id, off)
        );
        CREATE TABLE {{s}}.blobs (
            hash text PRIMARY KEY CHECK (hash ~ '^[0-9a-f]{{{{64}}}}$'),
            data bytea NOT NULL,
            size bigint NOT NULL,
            exts text[] NOT NULL DEFAULT ARRAY[]::text[],
            created_at timestamptz NOT NULL DEFAULT now()
        );
        """,
    ),
    (
        2,
        "names are single path components",
        # NOT VALID: rows already there are not checked (a store with a bad row still
        # opens; `_migrate` reports them and every reader skips them), new and changed
        # rows are.
        f"""
        ALTER TABLE {{s}}.nodes ADD CONSTRAINT nodes_name_is_a_component
            CHECK ({NODE_OK}) NOT VALID;
        ALTER TABLE {{s}}.blobs ADD CONSTRAINT blobs_exts_are_extensions
            CHECK ({EXTS_OK}) NOT VALID;
        """,
    ),
)
SCHEMA_VERSION: Final = MIGRATIONS[-1][0]


def migrate(conn: Conn, schema: str, s: Statements, keys: Keys) -> int:
    """Create `schema` (whose statements `s` are) and apply the pending migrations;
    returns the schema version.

    Hosts starting together queue on an advisory lock; each step is its own
    transaction. Rows from before migration 2's CHECK are reported (warnings).
    """
    lock = lock_id(schema, "migrate", "")
    conn.execute("SELECT pg_advisory_lock(%s)", (lock,))
    try:
        with conn.transaction():
            conn.execute(s.create_schema)
            conn.execute(s.migrations_table)
        row = conn.execute(s.current_version).fetchone()
        current = int(row[0]) if row else 0
        if current > SCHEMA_VERSION:
            raise PostgresStoreError(
                f"schema {schema!r} is at version {current}, newer than this "
                f"sessiontree understands ({SCHEMA_VERSION}): upgrade sessiontree"
            )
        checked_names = current >= 2
        for version, name, body in MIGRATIONS:
            if version <= current:
                continue
            with conn.transaction():
                conn.execute(compose(body, schema))
                conn.execute(s.record_version, (version, name))
            current = version
        if not checked_names:
            _report_invalid(invalid_names(conn, s, keys), schema)
        return current
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s)", (lock,))


def invalid_names(conn: Conn, s: Statements, keys: Keys) -> list[tuple[str, str]]:
    """(path, why) of every row that readers skip because its name cannot be a path
    (see `PostgresSessionStorage.invalid_names`)."""
    found = []
    for key, parent, name in conn.execute(s.bad_nodes).fetchall():
        where = os.path.join(keys.path_for(parent), name) if parent is not None else key
        problem = name_problem(name) if parent is not None else None
        if problem is None and parent is None:
            problem = "a row without a parent"
        elif problem is None:
            problem = f"its key {key!r} is not its directory's key and its name"
        found.append((str(where), f"a database row not used as a path: {problem}"))
    blob_dir = os.path.join(keys.root, "blobs")
    for digest, exts in conn.execute(s.bad_exts).fetchall():
        bad = [e for e in exts if not is_blob_extension(e)]
        found.append(
            (
                os.path.join(blob_dir, str(digest)),
                f"a database row not used as a path: sidecar extension(s) {bad!r}",
            )
        )
    return found


def _report_invalid(found: list[tuple[str, str]], schema: str) -> None:
    """Warn about rows the schema's CHECK (migration 2) found already there."""
    for where, why in found[:_REPORTED_ROWS]:
        _log.warning("%s (schema %s): %s; left as it is, skipped", where, schema, why)
    if len(found) > _REPORTED_ROWS:
        _log.warning(
            "%d more such rows in schema %s (PostgresSessionStorage.invalid_names lists them)",
            len(found) - _REPORTED_ROWS,
            schema,
        )
