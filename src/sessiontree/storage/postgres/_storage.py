"""`PostgresSessionStorage`: the filesystem operations of a store in PostgreSQL.

Semantics follow the filesystem: `write_atomic` and `rename` are one transaction
(readers see the old or the new file), a writer keeps appending to the file it
opened (a replaced file's writer writes into the void, like an unlinked inode),
missing parents are FileNotFoundError. Database failures surface as OSError
(EIO; ETIMEDOUT when the pool is exhausted), as filesystem failures do.

Whole-file writes, renames and blobs commit synchronously (`bulk()` defers the
WAL flush of many to one barrier). `write_atomic`, `rename` and `unlink` are one
transaction each; after a lost connection, one that failed during COMMIT asks the
database whether its effect is there (the new file row exists, the moved row has
its new key, the removed row is gone) and runs again only if not.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final

import psycopg
from psycopg_pool import ConnectionPool

import sessiontree.storage.postgres._schema as _schema
from sessiontree._util.closing import ClosesOnExit
from sessiontree._util.env import agent_dir_or_default
from sessiontree._util.fs import glob_match_name, name_problem, utf8_prefix_text
from sessiontree.storage._base import SessionMeta, StorageStat
from sessiontree.storage.postgres._batch import (
    FileTuple,
    copy_content,
    create_files,
    file_digests,
)
from sessiontree.storage.postgres._blobs import PostgresBlobStore
from sessiontree.storage.postgres._keys import Keys, child_key, key_ok, split_key
from sessiontree.storage.postgres._locks import PostgresSessionLock, lock_id
from sessiontree.storage.postgres._meta import server_time, session_meta
from sessiontree.storage.postgres._pool import (
    Attempt,
    Conn,
    Connections,
    io_errors,
    probe,
    transaction,
)
from sessiontree.storage.postgres._sql import statements
from sessiontree.storage.postgres._writer import PostgresSessionWriter

_log = logging.getLogger(__name__)

_READ_BATCH: Final = 4 << 20  # bytes of content fetched per round trip when streaming


def _oserror(cls: type[OSError], code: int, path: str) -> OSError:
    return cls(code, os.strerror(code), path)


def _stat(node_id: int, size: int, mtime_ns: int) -> StorageStat:
    return StorageStat(
        size=size,
        mtime=server_time(mtime_ns),
        mtime_ms=mtime_ns / 1e6,
        mtime_ns=mtime_ns,
        ino=node_id,
    )


class _Replayable:
    """`chunks`, remembering whether any was drawn: a one-shot iterator can be
    written again only if nothing was."""

    __slots__ = ("_chunks", "drawn")

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = chunks
        self.drawn = False

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._chunks:
            self.drawn = True
            yield chunk

    @property
    def replayable(self) -> bool:
        return not self.drawn or isinstance(self._chunks, (list, tuple))


def stream_content_rows(
    conn: Any, query: Any, file_id: int, size: int, chunk_size: int
) -> Iterator[bytes]:
    """A file's content rows (`query`: its rows with `off` from %s to %s, by offset) as
    chunks of `chunk_size` bytes, a few megabytes fetched per round trip: the one reader
    of a file's rows, for the storage and the search index alike."""
    buffer = bytearray()
    pos = 0
    with conn.cursor(binary=True) as cur:
        while pos < size:
            rows = cur.execute(query, (file_id, pos, pos + _READ_BATCH)).fetchall()
            if not rows:
                break
            for off, data in rows:
                buffer += data
                pos = int(off) + len(data)
            while len(buffer) >= chunk_size:
                yield bytes(buffer[:chunk_size])
                del buffer[:chunk_size]
    if buffer:
        yield bytes(buffer)


class PostgresSessionStorage(ClosesOnExit):
    """`SessionStorage` in a PostgreSQL schema, shared by every host that opens it.

    Args:
        conninfo: a libpq connection string or `postgresql://` URL (the storage then
            owns a connection pool and closes it in `close()`), or an open
            `psycopg_pool.ConnectionPool` that the caller keeps and closes (its
            connections should be autocommit; the storage manages transactions).
        schema: where the tables live; created and migrated on open.
        root: the absolute directory that paths are relative to (default: the
            agent dir). Hosts sharing a store each use their own root.
        durable_appends: commit every append synchronously (slower; by default
            `fsync()`/`SessionManager.flush()` is the durability barrier).
        min_size, max_size, timeout: the owned pool's size and wait limit. A
            session being loaded or fully rewritten holds one connection while
            blobs use another, so keep `max_size >= 2`. The owned pool checks a
            connection before handing it out; when it has none within a second,
            the server is asked directly (see the module docs on lost connections).

    Example::

        with PostgresSessionStorage("postgresql://agent@db/agents") as storage:
            sm = SessionManager.create("/work/proj", storage=storage)
    """

    def __init__(
        self,
        conninfo: str | ConnectionPool,
        *,
        schema: str = "sessiontree",
        root: str | None = None,
        durable_appends: bool = False,
        migrate: bool = True,
        min_size: int = 1,
        max_size: int = 8,
        timeout: float = 30.0,
    ) -> None:
        self.schema = _schema.validate_schema_name(schema)
        self._keys = Keys(agent_dir_or_default(root))
        self.root = self._keys.root
        self.durable_appends = durable_appends
        self._sql = statements(self.schema)
        self._blobs: PostgresBlobStore | None = None
        self._bulk = 0
        if isinstance(conninfo, ConnectionPool):
            self._db = Connections(conninfo, self.schema)
            if migrate:
                self.migrate()
            return
        first = probe(conninfo)
        try:
            if migrate:
                _schema.migrate(first, self.schema, self._sql, self._keys)
        finally:
            first.close()
        self._db = Connections(
            conninfo, self.schema, min_size=min_size, max_size=max_size, timeout=timeout
        )

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Close the connection pool if this storage created it (idempotent); in a
        forked child, only a pool made in the child."""
        self._db.close()

    def __repr__(self) -> str:
        return f"PostgresSessionStorage(schema={self.schema!r}, root={self.root!r})"

    @contextmanager
    def bulk(self) -> Iterator[None]:
        """Commit whole-file writes asynchronously inside, with one durability barrier at the end.

        For imports of many files: each file is still atomic, but the WAL is flushed
        once at the end instead of once per file.
        """
        self._bulk += 1
        try:
            yield
        finally:
            self._bulk -= 1
            if not self._bulk:
                self._db.run(self.root, lambda conn, _: conn.execute(self._sql.barrier))

    def migrate(self) -> int:
        """Create the schema and apply pending migrations; returns the schema version."""
        with io_errors(self.schema), self._db.pool().connection() as conn:
            return _schema.migrate(conn, self.schema, self._sql, self._keys)

    @contextmanager
    def connection(self) -> Iterator[Conn]:
        """A pooled connection to the store's database (autocommit; the caller runs its
        own transactions), its errors raised as OSError: for the search index
        (`sessiontree.search`), whose tables live in the schema (`search_*`). Not retried
        when it is lost: the caller's work is its own."""
        with io_errors(self.schema), self._db.connection() as conn:
            yield conn

    def invalid_names(self) -> list[tuple[str, str]]:
        """(path, why) of every row that readers skip because its name cannot be a path:
        a node whose name is not one path component (`..`, `a/b`, empty, longer than
        NAME_MAX...) or whose key is not its parent's key and name, and a blob with a
        sidecar extension that is not one (`<root>/blobs/<hash>`).

        The schema refuses such rows since version 2; older ones stay (nothing is
        deleted) and `list_dirs`, `list_files`, `list_session_meta` and the blob
        listings leave them out.
        """
        return self._db.run(
            self.root, lambda conn, _: _schema.invalid_names(conn, self._sql, self._keys)
        )

    # -- keys --------------------------------------------------------------------------------

    def key_for(self, path: str) -> str:
        """The key of `path`: relative to the root ('' is the root itself)."""
        return self._keys.key_for(path)

    def path_for(self, key: str) -> str:
        """This host's absolute path of a key."""
        return self._keys.path_for(key)

    # -- rows ----------------------------------------------------------------------------------

    def _node(self, conn: Conn, key: str) -> tuple[int, bool, int, int] | None:
        row = conn.execute(self._sql.node, (key,)).fetchone()
        return (int(row[0]), bool(row[1]), int(row[2]), int(row[3])) if row else None

    def _file_node(self, conn: Conn, key: str, path: str) -> tuple[int, bool, int, int]:
        node = self._node(conn, key)
        if node is None:
            raise _oserror(FileNotFoundError, errno.ENOENT, path)
        if node[1]:
            raise _oserror(IsADirectoryError, errno.EISDIR, path)
        return node

    def _check_parent(self, conn: Conn, key: str, path: str) -> None:
        if key == "":
            raise _oserror(IsADirectoryError, errno.EISDIR, path)
        row = conn.execute(self._sql.is_dir, (split_key(key)[0],)).fetchone()
        if row is None:
            raise _oserror(FileNotFoundError, errno.ENOENT, path)
        if not row[0]:
            raise _oserror(NotADirectoryError, errno.ENOTDIR, path)

    # -- SessionStorage ----------------------------------------------------------------------

    def ensure_dir(self, path: str) -> None:
        """Create `path` and its parents if missing (FileExistsError over a file)."""
        key = self.key_for(path)
        if key == "":
            return
        parts = key.split("/")
        chain = ["/".join(parts[: i + 1]) for i in range(len(parts))]

        def op(conn: Conn, _: Attempt) -> None:
            for attempt in range(2):
                kinds = dict(conn.execute(self._sql.node_kinds, (chain,)).fetchall())
                for k in chain:
                    if k in kinds and not kinds[k]:
                        raise _oserror(FileExistsError, errno.EEXIST, path)
                missing = [k for k in chain if k not in kinds]
                if not missing or attempt:
                    return
                parents = [split_key(k)[0] for k in missing]
                names = [split_key(k)[1] for k in missing]
                conn.execute(self._sql.make_dirs, (missing, parents, names))
                # A second pass catches a file another host created at the same key.

        self._db.run(path, op)

    def exists(self, path: str) -> bool:
        """Whether a file or directory exists at `path`."""
        key = self.key_for(path)
        return self._db.run(
            path, lambda conn, _: conn.execute(self._sql.exists, (key,)).fetchone() is not None
        )

    def write_text(self, path: str, content: str) -> None:
        """Atomically replace `path` with `content` (UTF-8)."""
        self.write_atomic(path, (content.encode("utf-8"),))

    def stat(self, path: str) -> StorageStat:
        """Size, mtime (server clock) and ino (the file's row id; new on every rewrite)."""
        key = self.key_for(path)
        node = self._db.run(path, lambda conn, _: self._node(conn, key))
        if node is None:
            raise _oserror(FileNotFoundError, errno.ENOENT, path)
        node_id, is_dir, size, mtime_ns = node
        return _stat(node_id, 0 if is_dir else size, mtime_ns)

    def _children(self, dir: str, is_dir: bool) -> list[str]:
        """Names in `dir`; a row whose name is no path component is left out (see
        `invalid_names`): a shared database's `..` must never become a path."""
        key = self.key_for(dir)
        rows = self._db.run(
            dir, lambda conn, _: conn.execute(self._sql.children, (key, is_dir)).fetchall()
        )
        return sorted(
            str(name)
            for name, child in rows
            if name_problem(name) is None and child == child_key(key, name)
        )

    def list_files(self, dir: str, pattern: str) -> list[str]:
        """Full paths of the files directly in `dir` matching `pattern`, sorted."""
        names = [n for n in self._children(dir, False) if glob_match_name(n, pattern)]
        return [os.path.join(dir, n) for n in names]

    def read_text(self, path: str) -> str:
        """The whole file as text (invalid UTF-8 becomes U+FFFD)."""
        key = self.key_for(path)

        def op(conn: Conn, _: Attempt) -> list[tuple[Any, ...]]:
            with conn.cursor(binary=True) as cur:
                return cur.execute(self._sql.all_data, (key,)).fetchall()

        rows = self._db.run(path, op)
        if not rows:
            raise _oserror(FileNotFoundError, errno.ENOENT, path)
        if rows[0][0]:
            raise _oserror(IsADirectoryError, errno.EISDIR, path)
        return b"".join(r[1] for r in rows if r[1] is not None).decode("utf-8", "replace")

    def read_text_prefix(self, path: str, max_bytes: int) -> str:
        """At most `max_bytes` from the start (only those rows are read)."""
        return utf8_prefix_text(self.read_bytes_range(path, 0, max(0, max_bytes)))

    def rename(self, path: str, new_path: str) -> None:
        """Move a file or directory in one transaction, replacing a file at `new_path`."""
        src, dst = self.key_for(path), self.key_for(new_path)
        s = self._sql
        moved: list[int] = []  # the row being moved (its id survives the move)

        def op(conn: Conn, attempt: Attempt) -> None:
            with transaction(conn, attempt):
                self._rename(conn, src, dst, path, new_path, moved)

        def again(conn: Conn, first: Attempt) -> None:
            if first.committing and moved:  # did the unconfirmed COMMIT happen?
                row = conn.execute(s.key_of, (moved[-1],)).fetchone()
                if row is not None and row[0] == dst:
                    return
            op(conn, Attempt())

        self._db.run(path, op, again)

    def _rename(
        self,
        conn: Conn,
        src: str,
        dst: str,
        path: str,
        new_path: str,
        moved: list[int],
    ) -> None:
        s = self._sql
        a, b = sorted((lock_id(self.schema, "path", src), lock_id(self.schema, "path", dst)))
        conn.execute(s.xact_lock2, (a, b))
        node = self._node(conn, src)
        if node is None:
            raise _oserror(FileNotFoundError, errno.ENOENT, path)
        self._check_parent(conn, dst, new_path)
        if src == dst:
            return
        moved.append(node[0])
        target = self._node(conn, dst)
        parent, name = split_key(dst)
        if not node[1]:
            if target is not None:
                if target[1]:
                    raise _oserror(IsADirectoryError, errno.EISDIR, new_path)
                conn.execute(s.delete_node, (target[0],))
            conn.execute(s.move_file, (dst, parent, name, node[0]))
            return
        if src == "":
            raise _oserror(OSError, errno.EBUSY, path)
        if target is not None and not target[1]:
            raise _oserror(NotADirectoryError, errno.ENOTDIR, new_path)
        if dst.startswith(src + "/"):
            raise _oserror(OSError, errno.EINVAL, new_path)
        if target is not None:
            if conn.execute(s.has_children, (dst,)).fetchone() is not None:
                raise _oserror(OSError, errno.ENOTEMPTY, new_path)
            conn.execute(s.delete_node, (target[0],))
        conn.execute(
            s.move_tree,
            {
                "src": src,
                "dst": dst,
                "n": len(src),
                "dparent": parent,
                "dname": name,
                "lo": src + "/",
                "hi": src + "0",  # '0' follows '/': the subtree is [src/, src0)
            },
        )

    def unlink(self, path: str) -> None:
        """Remove a file; FileNotFoundError when missing, IsADirectoryError for a directory."""
        key = self.key_for(path)
        s = self._sql
        removed: list[int] = []

        def op(conn: Conn, attempt: Attempt) -> None:
            with transaction(conn, attempt):
                conn.execute(s.xact_lock, (lock_id(self.schema, "path", key),))
                row = conn.execute(s.delete_file, (key,)).fetchone()
                if row is None:
                    if conn.execute(s.exists, (key,)).fetchone() is not None:
                        raise _oserror(IsADirectoryError, errno.EISDIR, path)
                    raise _oserror(FileNotFoundError, errno.ENOENT, path)
                removed.append(int(row[0]))

        def again(conn: Conn, first: Attempt) -> None:
            # An unconfirmed COMMIT that happened: the row is gone, and running the
            # delete again would wrongly say FileNotFoundError.
            if first.committing and removed:
                if conn.execute(s.key_of, (removed[-1],)).fetchone() is None:
                    return
            op(conn, Attempt())

        self._db.run(path, op, again)

    def open_writer(self, path: str, flags: str = "a") -> PostgresSessionWriter:
        """An appending (`"a"`) or truncating (`"w"`) writer; creates the file if missing."""
        if flags not in ("a", "w"):
            raise ValueError(f"unsupported writer flags {flags!r} (use 'a' or 'w')")
        key = self.key_for(path)
        s = self._sql

        # Idempotent, so it may run twice: creating a file that exists opens it, and
        # truncating a truncated file changes nothing.
        def op(conn: Conn, attempt: Attempt) -> PostgresSessionWriter:
            with transaction(conn, attempt):
                conn.execute(s.xact_lock, (lock_id(self.schema, "path", key),))
                self._check_parent(conn, key, path)
                node = self._node(conn, key)
                if node is None:
                    parent, name = split_key(key)
                    row = conn.execute(s.new_file, (key, parent, name)).fetchone()
                    assert row is not None
                    node_id = int(row[0])
                else:
                    if node[1]:
                        raise _oserror(IsADirectoryError, errno.EISDIR, path)
                    node_id = node[0]
                    if flags == "w":
                        conn.execute(s.truncate_lines, (node_id,))
                        conn.execute(s.reset_file, (node_id,))
                state = conn.execute(s.writer_state, (node_id,)).fetchone()
                assert state is not None
            return PostgresSessionWriter(
                self, node_id, path, int(state[0]), bool(state[1]), int(state[2])
            )

        return self._db.run(path, op)

    # -- capabilities ------------------------------------------------------------------------

    def iter_chunks(self, path: str, chunk_size: int = 1 << 20) -> Iterator[bytes]:
        """The file's bytes in `chunk_size` pieces, from one consistent snapshot.

        FileNotFoundError is raised by this call; the rows are then streamed in
        batches of about 4 MB inside one REPEATABLE READ transaction, so a
        concurrent rewrite never tears the read. A connection lost before the
        first chunk is retried; one lost after it fails the read (OSError).
        """
        if chunk_size <= 0:
            raise ValueError("chunk_size must be positive")
        key = self.key_for(path)
        self._db.run(path, lambda conn, _: self._file_node(conn, key, path))
        return self._stream(key, path, chunk_size)

    def _stream(self, key: str, path: str, chunk_size: int) -> Iterator[bytes]:
        with io_errors(path):
            first = Attempt()
            started = False
            try:
                for chunk in self._stream_once(key, path, chunk_size, first):
                    started = True
                    yield chunk
                return
            except psycopg.Error as exc:
                if started or not first.lost(exc):
                    raise
                _log.info("%s: PostgreSQL connection lost (%s); reading again", path, exc)
            self._db.purge_idle()
            yield from self._stream_once(key, path, chunk_size, Attempt())

    def _stream_once(
        self, key: str, path: str, chunk_size: int, attempt: Attempt
    ) -> Iterator[bytes]:
        s = self._sql
        with self._db.connection() as pooled, attempt.on(pooled) as conn, conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            row = conn.execute(s.file_for_read, (key,)).fetchone()
            if row is None:
                raise _oserror(FileNotFoundError, errno.ENOENT, path)
            file_id, size = int(row[0]), int(row[1])
            yield from stream_content_rows(conn, s.batch, file_id, size, chunk_size)

    def read_bytes_range(self, path: str, offset: int, length: int) -> bytes:
        """Up to `length` bytes from `offset` (negative: from the end); reads only those rows."""
        key = self.key_for(path)

        def op(conn: Conn, _: Attempt) -> bytes:
            node_id, _is_dir, size, _mtime = self._file_node(conn, key, path)
            start = max(0, size + offset) if offset < 0 else offset
            end = min(size, start + max(0, length))
            if start >= end:
                return b""
            with conn.cursor(binary=True) as cur:
                rows = cur.execute(self._sql.range, {"s": start, "e": end, "id": node_id})
                return b"".join(r[0] for r in rows.fetchall())

        return self._db.run(path, op)

    def write_atomic(self, path: str, chunks: Iterable[bytes]) -> None:
        """Replace `path` with the concatenated chunks in one transaction (a new inode).

        The content is streamed with COPY into a new, nameless file row that takes
        the name at commit; a failure (also one raised by `chunks`) rolls
        everything back, leaving the old file as it was.
        """
        key = self.key_for(path)
        s = self._sql
        source = _Replayable(chunks)
        created: list[int] = []  # the new file row: it exists iff the transaction committed

        def op(conn: Conn, attempt: Attempt) -> None:
            with transaction(conn, attempt):
                created.append(self._write_atomic(conn, key, path, source))

        def again(conn: Conn, first: Attempt) -> None:
            if first.committing and created:  # did the unconfirmed COMMIT happen?
                row = conn.execute(s.key_of, (created[-1],)).fetchone()
                if row is not None and row[0] == key:
                    return
                # Not committed (or replaced by another host since: then ours comes last).
            if not source.replayable:  # the chunks are spent: nothing to write again
                assert first.error is not None
                raise first.error
            op(conn, Attempt())

        self._db.run(path, op, again)

    def _write_atomic(self, conn: Conn, key: str, path: str, chunks: Iterable[bytes]) -> int:
        s = self._sql
        commit_mode = "off" if self._bulk else None
        conn.execute(s.write_lock, (lock_id(self.schema, "path", key), commit_mode))
        self._check_parent(conn, key, path)
        old = self._node(conn, key)
        if old is not None and old[1]:
            raise _oserror(IsADirectoryError, errno.EISDIR, path)
        parent, name = split_key(key)
        row = conn.execute(s.new_file, (None, parent, name)).fetchone()
        assert row is not None
        node_id = int(row[0])
        with conn.cursor() as cur, cur.copy(s.copy_lines) as copy:
            copy.set_types(["int8", "int8", "bytea", "text"])
            content = copy_content(copy, node_id, chunks)
        if old is not None:
            conn.execute(s.delete_node, (old[0],))
        conn.execute(s.publish, {"key": key, **content.columns(), "id": node_id})
        return node_id

    def create_files(self, files: Sequence[FileTuple]) -> list[str]:
        """Write many new files in one transaction (an import's batch: a few round trips
        for all of them, not ten for each); returns the paths left unwritten because
        something is there already. See `_batch.create_files`."""
        return create_files(self, files)

    def file_digests(self, paths: Sequence[str]) -> dict[str, tuple[int, int, str | None]]:
        """(size, mtime_ns, sha256 hex) of each of `paths` that is a file, hashed by the
        server in one round trip (an import run again: which files it need not write
        again). See `_batch.file_digests`."""
        return file_digests(self, paths)

    def fsync_dir(self, path: str) -> None:
        """Structural changes commit synchronously: only checks that the directory exists."""
        key = self.key_for(path)
        row = self._db.run(path, lambda conn, _: conn.execute(self._sql.is_dir, (key,)).fetchone())
        if row is None:
            raise _oserror(FileNotFoundError, errno.ENOENT, path)
        if not row[0]:
            raise _oserror(NotADirectoryError, errno.ENOTDIR, path)

    def list_dirs(self, dir: str) -> list[str]:
        """Full paths of the directories directly in `dir`, sorted ([] if missing)."""
        return [os.path.join(dir, n) for n in self._children(dir, True)]

    def remove_tree(self, path: str) -> None:
        """Remove a directory and its subtree in one statement; missing is fine."""
        key = self.key_for(path)

        def op(conn: Conn, attempt: Attempt) -> None:  # idempotent
            with transaction(conn, attempt):
                node = self._node(conn, key)
                if node is None:
                    return
                if not node[1]:
                    raise _oserror(NotADirectoryError, errno.ENOTDIR, path)
                if key == "":
                    conn.execute(self._sql.delete_children, ("",))  # the root itself stays
                else:
                    conn.execute(self._sql.delete_node, (node[0],))  # children cascade

        self._db.run(path, op)

    def acquire_lock(self, path: str) -> PostgresSessionLock:
        """Take the session's writer lock for every host using this store.

        A session-level advisory lock on a dedicated connection: PostgreSQL drops
        it when this process dies or its host stops answering TCP keepalives.
        """
        key = self.key_for(path)
        return PostgresSessionLock(self, path, lock_id(self.schema, "writer", key))

    def lock_held(self, path: str) -> bool:
        """Whether a writer holds the session's lock (`acquire_lock`): taken and given back
        at once on a pooled connection, one round trip. A probe through `acquire_lock`
        opened a connection of its own each time (half of an import's time: the import
        probes every file it writes)."""
        lock = lock_id(self.schema, "writer", self.key_for(path))

        def op(conn: Conn, _: Attempt) -> bool:
            row = conn.execute(
                "SELECT CASE WHEN pg_try_advisory_lock(%s) THEN NOT pg_advisory_unlock(%s) "
                "ELSE true END",
                (lock, lock),
            ).fetchone()
            return bool(row is None or row[0])

        return self._db.run(path, op)

    def blob_store(self) -> PostgresBlobStore:
        """The blob store in this schema, shared by every host."""
        if self._blobs is None:
            self._blobs = PostgresBlobStore(self)
        return self._blobs

    def list_session_meta(
        self, dir: str | None = None, *, with_text: bool = False
    ) -> list[SessionMeta]:
        """Metadata of the `*.jsonl` files directly in `dir` (None: every one under
        `<root>/sessions`), sorted by path, from the metadata columns alone."""
        s = self._sql
        if dir is None:
            query = s.meta_tree_text if with_text else s.meta_tree
            params: tuple[str, ...] = ("sessions/", "sessions0")
        else:
            query = s.meta_dir_text if with_text else s.meta_dir
            params = (self.key_for(dir),)
        base = dir
        rows = self._db.run(
            dir or self.root, lambda conn, _: conn.execute(query, params).fetchall()
        )
        metas = []
        for row in rows:
            key = str(row[0])
            if not key_ok(key) or (base is not None and split_key(key)[0] != params[0]):
                continue  # a row readers skip (`invalid_names`)
            if base is not None:
                path = os.path.join(base, split_key(key)[1])
            else:
                path = self.path_for(key)
            metas.append(session_meta(row, path, with_text))
        metas.sort(key=lambda m: m.path)
        return metas

    def set_mtime(self, path: str, mtime_ns: int) -> None:
        """Set a file's or directory's mtime (like `os.utime`; used by imports)."""
        key = self.key_for(path)
        commit_mode = "off" if self._bulk else None
        cur = self._db.run(
            path, lambda conn, _: conn.execute(self._sql.set_mtime, (mtime_ns, commit_mode, key))
        )
        if cur.rowcount == 0:
            raise _oserror(FileNotFoundError, errno.ENOENT, path)
