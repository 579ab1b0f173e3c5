"""Every statement on a store's tables, with the schema as a quoted identifier.

A statement is a field of `Statements`, written once with its SQL: `{s}` stands
for the schema and `{now}` for the server's clock. `statements(schema)` composes
them all with psycopg.sql (the schema name comes from URLs: it is only ever
quoted by `sql.Identifier`, never pasted in), so each use, `s.node`, is an
attribute that mypy checks.
"""

# ruff: noqa: RUF009 - `_statement(...)` is a `dataclasses.field`, not a shared default

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Final

from psycopg import sql

# Server time in ns (microsecond resolution): every host agrees on one clock.
NOW_NS: Final = "((floor(extract(epoch FROM clock_timestamp()) * 1000000))::bigint * 1000)"

# What a `nodes` row must be (the CHECK of migration 2, and the query that finds the
# rows from before it that are not): the root, or a row whose name is one path
# component (`_fs.name_problem`: a NUL never fits in a text) and whose key is its
# parent's key and its name. chr(92) is a backslash, Windows' separator.
NODE_OK: Final = (
    "(key = '' AND parent IS NULL AND name = '') OR (parent IS NOT NULL "
    "AND name NOT IN ('', '.', '..') AND strpos(name, '/') = 0 "
    "AND strpos(name, chr(92)) = 0 AND octet_length(name) <= 255 "
    "AND (key IS NULL OR key = CASE WHEN parent = '' THEN name ELSE parent || '/' || name END))"
)
# A blob's sidecar extensions (`blobs.is_blob_extension`): none holds a '/', so joined
# by '/' they split back into the same ones, each matched by the pattern.
_EXT_RE: Final = "[a-zA-Z0-9][a-zA-Z0-9._-]{{0,31}}"  # braces doubled for sql.SQL.format
EXTS_OK: Final = (
    "array_position(exts, NULL) IS NULL AND strpos(array_to_string(exts, ''), '/') = 0 "
    f"AND (cardinality(exts) = 0 OR array_to_string(exts, '/') ~ '^{_EXT_RE}(/{_EXT_RE})*$')"
)

# The listing's columns (`_meta.session_meta` reads them by position), optionally
# followed by the text of every message, and which rows are listed.
_META_COLUMNS: Final = (
    "n.key, n.size, n.line_count, n.mtime_ns, n.meta_state, n.header_id, n.cwd, "
    "n.slot, n.slot_title, n.header_title, n.session_name, n.short_summary, "
    "n.title_source, "
    "n.parent_session, n.created, n.message_count, n.first_message, "
    "n.last_activity_ms, n.id"
)
_TEXT_COLUMN: Final = (
    ", (SELECT string_agg(l.msg_text, ' ' ORDER BY l.off) FROM {s}.lines l "
    "WHERE l.file_id = n.id AND l.msg_text IS NOT NULL)"
)
_JSONL_FILE: Final = (
    "NOT n.is_dir AND n.key IS NOT NULL AND n.name LIKE '%%.jsonl' "
    "AND n.name NOT LIKE '.%%'"
    f" AND ({NODE_OK})"  # a row readers skip (`invalid_names`)
)
_IN_DIR: Final = "FROM {s}.nodes n WHERE n.parent = %s AND " + _JSONL_FILE
_IN_TREE: Final = "FROM {s}.nodes n WHERE n.key >= %s AND n.key < %s AND " + _JSONL_FILE


def _statement(text: str) -> Any:
    """A field of `Statements` whose SQL is `text`."""
    return field(metadata={"sql": text})


@dataclass(frozen=True, slots=True)
class Statements:
    """The statements of one schema (built by `statements`)."""

    # -- nodes: paths, directories, files
    node: sql.Composed = _statement(
        "SELECT id, is_dir, size, mtime_ns FROM {s}.nodes WHERE key = %s"
    )
    node_kinds: sql.Composed = _statement("SELECT key, is_dir FROM {s}.nodes WHERE key = ANY(%s)")
    is_dir: sql.Composed = _statement("SELECT is_dir FROM {s}.nodes WHERE key = %s")
    exists: sql.Composed = _statement("SELECT 1 FROM {s}.nodes WHERE key = %s")
    make_dirs: sql.Composed = _statement(
        "INSERT INTO {s}.nodes (key, parent, name, is_dir, mtime_ns) "
        "SELECT k, p, n, true, {now} FROM unnest(%s::text[], %s::text[], %s::text[]) "
        "AS u(k, p, n) ON CONFLICT (key) DO NOTHING"
    )
    children: sql.Composed = _statement(
        "SELECT name, key FROM {s}.nodes WHERE parent = %s AND is_dir = %s AND key IS NOT NULL"
    )
    has_children: sql.Composed = _statement("SELECT 1 FROM {s}.nodes WHERE parent = %s LIMIT 1")
    xact_lock: sql.Composed = _statement("SELECT pg_advisory_xact_lock(%s)")
    xact_lock2: sql.Composed = _statement(
        "SELECT pg_advisory_xact_lock(%s), pg_advisory_xact_lock(%s)"
    )
    new_file: sql.Composed = _statement(
        "INSERT INTO {s}.nodes (key, parent, name, is_dir, mtime_ns) "
        "VALUES (%s, %s, %s, false, {now}) RETURNING id"
    )
    delete_node: sql.Composed = _statement("DELETE FROM {s}.nodes WHERE id = %s")
    delete_file: sql.Composed = _statement(
        "DELETE FROM {s}.nodes WHERE key = %s AND NOT is_dir RETURNING id"
    )
    delete_children: sql.Composed = _statement("DELETE FROM {s}.nodes WHERE parent = %s")
    key_of: sql.Composed = _statement("SELECT key FROM {s}.nodes WHERE id = %s")
    move_file: sql.Composed = _statement(
        "UPDATE {s}.nodes SET key = %s, parent = %s, name = %s WHERE id = %s"
    )
    # Directory rename: the directory and its subtree, in one statement.
    move_tree: sql.Composed = _statement(
        "UPDATE {s}.nodes SET "
        "key = %(dst)s || substr(key, %(n)s + 1), "
        "parent = CASE WHEN key = %(src)s THEN %(dparent)s "
        "ELSE %(dst)s || substr(parent, %(n)s + 1) END, "
        "name = CASE WHEN key = %(src)s THEN %(dname)s ELSE name END "
        "WHERE key = %(src)s OR (key >= %(lo)s AND key < %(hi)s)"
    )
    # `%s` NULL keeps the session's synchronous_commit; 'off' inside bulk().
    set_mtime: sql.Composed = _statement(
        "UPDATE {s}.nodes SET mtime_ns = %s FROM (SELECT set_config('synchronous_commit', "
        "coalesce(%s, current_setting('synchronous_commit')), true)) AS c WHERE key = %s"
    )

    # -- whole files: write_atomic, truncation, reads
    write_lock: sql.Composed = _statement(
        "SELECT pg_advisory_xact_lock(%s), set_config('synchronous_commit', "
        "coalesce(%s, current_setting('synchronous_commit')), true)"
    )
    copy_lines: sql.Composed = _statement(
        "COPY {s}.lines (file_id, off, data, msg_text) FROM STDIN (FORMAT BINARY)"
    )
    publish: sql.Composed = _statement(
        "UPDATE {s}.nodes SET key = %(key)s, size = %(size)s, line_count = %(lines)s, "
        "ends_with_newline = %(ends)s, mtime_ns = {now}, meta_state = %(state)s, "
        "header_id = %(hid)s, cwd = %(cwd)s, slot = %(slot)s, slot_title = %(stitle)s, "
        "header_title = %(htitle)s, title_source = %(tsrc)s, session_name = %(name)s, "
        "short_summary = %(short)s, parent_session = %(psess)s, created = %(created)s, "
        "message_count = %(msgs)s, first_message = %(first)s, "
        "last_activity_ms = %(act)s WHERE id = %(id)s"
    )
    # -- many new files in one transaction (`create_files`, an import's batch)
    # Every file's path lock, in the order given (sorted: two batches never wait on
    # each other in a cycle), and the commit mode as `write_lock` sets it.
    batch_locks: sql.Composed = _statement(
        "SELECT set_config('synchronous_commit', coalesce(%s, "
        "current_setting('synchronous_commit')), true), "
        "(SELECT count(pg_advisory_xact_lock(l)) FROM unnest(%s::bigint[]) AS l)"
    )
    # Per file, under its path lock: what is at its key, whether a live writer holds
    # its session (`lock_held`, asked only where `probe`), what its parent is.
    batch_probe: sql.Composed = _statement(
        "SELECT u.k, n.is_dir, CASE WHEN u.probe THEN CASE WHEN pg_try_advisory_lock(u.w) "
        "THEN NOT pg_advisory_unlock(u.w) ELSE true END ELSE false END, p.is_dir "
        "FROM unnest(%s::text[], %s::bigint[], %s::bool[], %s::text[]) AS u(k, w, probe, par) "
        "LEFT JOIN {s}.nodes n ON n.key = u.k LEFT JOIN {s}.nodes p ON p.key = u.par"
    )
    new_files: sql.Composed = _statement(
        "INSERT INTO {s}.nodes (key, parent, name, is_dir, mtime_ns) "
        "SELECT NULL, p, n, false, {now} FROM unnest(%s::text[], %s::text[]) AS u(p, n) "
        "RETURNING id, parent, name"
    )
    # `publish` for many files; a NULL mtime is the server's clock.
    publish_many: sql.Composed = _statement(
        "UPDATE {s}.nodes n SET key = u.key, size = u.size, line_count = u.lines, "
        "ends_with_newline = u.ends, mtime_ns = coalesce(u.mtime, {now}), "
        "meta_state = u.state, header_id = u.hid, cwd = u.cwd, slot = u.slot, "
        "slot_title = u.stitle, header_title = u.htitle, title_source = u.tsrc, "
        "session_name = u.name, short_summary = u.short, parent_session = u.psess, "
        "created = u.created, message_count = u.msgs, first_message = u.first, "
        "last_activity_ms = u.act FROM unnest(%(id)s::bigint[], %(key)s::text[], "
        "%(size)s::bigint[], %(lines)s::bigint[], %(ends)s::bool[], %(mtime)s::bigint[], "
        "%(state)s::smallint[], %(hid)s::text[], %(cwd)s::text[], %(slot)s::bool[], "
        "%(stitle)s::text[], %(htitle)s::text[], %(tsrc)s::text[], %(name)s::text[], "
        "%(short)s::text[], %(psess)s::text[], %(created)s::text[], %(msgs)s::int[], "
        "%(first)s::text[], %(act)s::bigint[]) AS u(id, key, size, lines, ends, mtime, "
        "state, hid, cwd, slot, stitle, htitle, tsrc, name, short, psess, created, msgs, "
        "first, act) WHERE n.id = u.id"
    )
    # What an import run again asks of the files already there: size, mtime and the
    # sha256 of the content, hashed by the server (NULL past a size: one value of the
    # aggregate must fit in memory, and bytea stops at 1 GB).
    file_digests: sql.Composed = _statement(
        "SELECT n.key, n.size, n.mtime_ns, CASE WHEN n.size <= %s THEN (SELECT "
        "encode(sha256(coalesce(string_agg(l.data, ''::bytea ORDER BY l.off), ''::bytea)), "
        "'hex') FROM {s}.lines l WHERE l.file_id = n.id) END "
        "FROM {s}.nodes n WHERE n.key = ANY(%s) AND NOT n.is_dir"
    )
    truncate_lines: sql.Composed = _statement("DELETE FROM {s}.lines WHERE file_id = %s")
    reset_file: sql.Composed = _statement(
        "UPDATE {s}.nodes SET size = 0, line_count = 0, ends_with_newline = true, "
        "mtime_ns = greatest(mtime_ns + 1, {now}), meta_state = 0, header_id = NULL, "
        "cwd = NULL, slot = false, slot_title = NULL, header_title = NULL, "
        "title_source = NULL, session_name = NULL, short_summary = NULL, "
        "parent_session = NULL, "
        "created = NULL, message_count = 0, first_message = NULL, "
        "last_activity_ms = NULL WHERE id = %s"
    )
    all_data: sql.Composed = _statement(
        "SELECT n.is_dir, l.data FROM {s}.nodes n LEFT JOIN {s}.lines l "
        "ON l.file_id = n.id WHERE n.key = %s ORDER BY l.off"
    )
    range: sql.Composed = _statement(
        "SELECT substring(data FROM (greatest(%(s)s - off, 0) + 1)::int "
        "FOR (%(e)s - greatest(off, %(s)s))::int) FROM {s}.lines "
        "WHERE file_id = %(id)s AND off < %(e)s AND off >= (SELECT coalesce(max(off), 0) "
        "FROM {s}.lines WHERE file_id = %(id)s AND off <= %(s)s) ORDER BY off"
    )
    batch: sql.Composed = _statement(
        "SELECT off, data FROM {s}.lines WHERE file_id = %s AND off >= %s AND off < %s ORDER BY off"
    )
    file_for_read: sql.Composed = _statement(
        "SELECT id, size FROM {s}.nodes WHERE key = %s AND NOT is_dir"
    )

    # -- appends (the writer)
    writer_state: sql.Composed = _statement(
        "SELECT meta_state, ends_with_newline, size FROM {s}.nodes WHERE id = %s"
    )
    # One statement per append: bump the file's size and metadata, insert the
    # line at the old size. `set_config(..., true)` makes this commit asynchronous.
    # Nothing happens when the file is gone or shorter than the writer knows it
    # (`off`: the writer's end of file), so a line never lands after a hole.
    append: sql.Composed = _statement(
        "WITH f AS (UPDATE {s}.nodes SET size = size + %(n)s, "
        "line_count = line_count + %(nl)s, ends_with_newline = %(ends)s, "
        "mtime_ns = greatest(mtime_ns + 1, {now}), "
        "message_count = message_count + %(msgs)s, "
        "first_message = coalesce(first_message, %(first)s), "
        "session_name = CASE WHEN %(name_set)s THEN %(name)s ELSE session_name END, "
        "short_summary = coalesce(%(short)s, short_summary), "
        "last_activity_ms = greatest(last_activity_ms, %(act)s) "
        "WHERE id = %(id)s AND size >= %(off)s RETURNING size - %(n)s AS off), "
        "c AS (SELECT set_config('synchronous_commit', %(sync)s, true)) "
        "INSERT INTO {s}.lines (file_id, off, data, msg_text) "
        "SELECT %(id)s, f.off, %(data)s, %(text)s FROM f, c RETURNING off"
    )
    file_size: sql.Composed = _statement("SELECT size FROM {s}.nodes WHERE id = %s")
    # Did an append whose commit went unconfirmed land? Its bytes at its offset.
    line_at: sql.Composed = _statement(
        "SELECT 1 FROM {s}.lines WHERE file_id = %s AND off = %s AND data = %s"
    )
    lock_file_row: sql.Composed = _statement(
        "SELECT size, line_count, meta_state, slot, slot_title, title_source "
        "FROM {s}.nodes WHERE id = %s FOR UPDATE"
    )
    append_slow: sql.Composed = _statement(
        "UPDATE {s}.nodes SET size = size + %(n)s, line_count = line_count + %(nl)s, "
        "ends_with_newline = %(ends)s, mtime_ns = greatest(mtime_ns + 1, {now}), "
        "meta_state = %(state)s, header_id = %(hid)s, cwd = %(cwd)s, "
        "slot = %(slot)s, slot_title = %(stitle)s, header_title = %(htitle)s, "
        "title_source = %(tsrc)s, session_name = %(name)s, short_summary = %(short)s, "
        "parent_session = %(psess)s, "
        "created = %(created)s, message_count = message_count + %(msgs)s, "
        "first_message = coalesce(first_message, %(first)s), "
        "last_activity_ms = greatest(last_activity_ms, %(act)s) WHERE id = %(id)s"
    )
    insert_line: sql.Composed = _statement(
        "INSERT INTO {s}.lines (file_id, off, data, msg_text) VALUES (%s, %s, %s, %s)"
    )
    # The durability barrier: a synchronous commit of a transaction that wrote WAL
    # flushes the WAL up to its commit record, past every earlier (asynchronous)
    # commit. It must write: PostgreSQL commits a transaction that wrote no WAL
    # asynchronously whatever synchronous_commit says (an xid alone is not enough).
    # So it rewrites one row unchanged: the writer's file row (returning its size),
    # or the root's after a bulk import.
    barrier: sql.Composed = _statement(
        "WITH c AS (SELECT set_config('synchronous_commit', 'on', true)) "
        "UPDATE {s}.nodes SET mtime_ns = mtime_ns FROM c WHERE key = ''"
    )
    writer_barrier: sql.Composed = _statement(
        "WITH c AS (SELECT set_config('synchronous_commit', 'on', true)) "
        "UPDATE {s}.nodes SET size = size FROM c WHERE id = %s RETURNING size"
    )

    # -- the listing: session metadata of the *.jsonl files in a directory or a subtree
    meta_dir: sql.Composed = _statement(f"SELECT {_META_COLUMNS} {_IN_DIR}")
    meta_dir_text: sql.Composed = _statement(f"SELECT {_META_COLUMNS}{_TEXT_COLUMN} {_IN_DIR}")
    meta_tree: sql.Composed = _statement(f"SELECT {_META_COLUMNS} {_IN_TREE}")
    meta_tree_text: sql.Composed = _statement(f"SELECT {_META_COLUMNS}{_TEXT_COLUMN} {_IN_TREE}")

    # -- blobs
    # `created_at` is when the blob was last put: a re-put of a blob older than a
    # minute refreshes it (as `BlobStore.put` touches the file), and `gc` never
    # deletes a blob put within its minimum age (10 minutes).
    blob_touch: sql.Composed = _statement(
        "UPDATE {s}.blobs SET created_at = now() WHERE hash = %s RETURNING exts"
    )
    # The server hashes the stored bytes, so a re-put or `verify` never fetches them.
    blob_state: sql.Composed = _statement(
        "SELECT exts, created_at < now() - interval '60 seconds', "
        "encode(sha256(data), 'hex') = hash FROM {s}.blobs WHERE hash = %s"
    )
    blob_repair: sql.Composed = _statement(
        "UPDATE {s}.blobs SET data = %s, size = %s, created_at = now() "
        "WHERE hash = %s RETURNING exts"
    )
    blob_verify: sql.Composed = _statement(
        "SELECT encode(sha256(data), 'hex') = hash FROM {s}.blobs WHERE hash = %s"
    )
    blob_info: sql.Composed = _statement(
        "SELECT hash, size, extract(epoch FROM created_at)::float8, exts FROM {s}.blobs "
        "ORDER BY hash"
    )
    blob_hashes: sql.Composed = _statement("SELECT hash FROM {s}.blobs ORDER BY hash")
    blob_mtime: sql.Composed = _statement(
        "SELECT extract(epoch FROM created_at)::float8 FROM {s}.blobs WHERE hash = %s"
    )
    blob_now: sql.Composed = _statement("SELECT extract(epoch FROM clock_timestamp())::float8")
    blob_delete: sql.Composed = _statement(
        "DELETE FROM {s}.blobs WHERE hash = %s "
        "AND created_at <= clock_timestamp() - make_interval(secs => %s)"
    )
    blob_insert: sql.Composed = _statement(
        "INSERT INTO {s}.blobs (hash, data, size, exts) VALUES (%s, %s, %s, %s) "
        "ON CONFLICT (hash) DO NOTHING"
    )
    blob_add_ext: sql.Composed = _statement(
        "UPDATE {s}.blobs SET exts = array_append(exts, %s) "
        "WHERE hash = %s AND NOT (%s = ANY(exts))"
    )
    blob_get: sql.Composed = _statement("SELECT data FROM {s}.blobs WHERE hash = %s")
    blob_has: sql.Composed = _statement("SELECT 1 FROM {s}.blobs WHERE hash = %s")
    blob_list: sql.Composed = _statement("SELECT hash, exts FROM {s}.blobs ORDER BY hash")

    # -- the schema: its version, and the rows from before a migration's CHECK
    create_schema: sql.Composed = _statement("CREATE SCHEMA IF NOT EXISTS {s}")
    migrations_table: sql.Composed = _statement(
        "CREATE TABLE IF NOT EXISTS {s}.schema_migrations (version integer PRIMARY KEY, "
        "name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
    )
    current_version: sql.Composed = _statement(
        "SELECT coalesce(max(version), 0) FROM {s}.schema_migrations"
    )
    record_version: sql.Composed = _statement(
        "INSERT INTO {s}.schema_migrations (version, name) VALUES (%s, %s)"
    )
    # Rows a reader skips (`NODE_OK`): from before migration 2, or written around it.
    bad_nodes: sql.Composed = _statement(
        f"SELECT key, parent, name FROM {{s}}.nodes WHERE NOT ({NODE_OK}) ORDER BY id"
    )
    bad_exts: sql.Composed = _statement(
        f"SELECT hash, exts FROM {{s}}.blobs WHERE NOT ({EXTS_OK}) ORDER BY hash"
    )


def compose(text: str, schema: str) -> sql.Composed:
    """`text` with `{s}` the quoted schema and `{now}` the server's clock (`NOW_NS`)."""
    return sql.SQL(text).format(s=sql.Identifier(schema), now=sql.SQL(NOW_NS))


def statements(schema: str) -> Statements:
    """Every statement of `schema` (a name `validate_schema_name` accepted), composed once."""
    return Statements(**{f.name: compose(f.metadata["sql"], schema) for f in fields(Statements)})
