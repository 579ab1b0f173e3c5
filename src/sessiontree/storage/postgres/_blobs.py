"""Blobs: content-addressed images in the store's `blobs` table, shared by every host."""

from __future__ import annotations

import builtins
import hashlib
import os
from typing import TYPE_CHECKING, Any

from psycopg import sql

from sessiontree.storage._blobs import (
    BLOB_REF_PREFIX,
    BlobInfo,
    BlobPutResult,
    BlobStatus,
    _intact,
    _warn_damaged,
    _warn_replaced,
    blob_extension_for_mime_type,
    check_hash,
    is_blob_extension,
)
from sessiontree.storage.postgres._pool import Attempt, Conn

if TYPE_CHECKING:
    from sessiontree.storage.postgres._storage import PostgresSessionStorage


class PostgresBlobStore:
    """Content-addressed blobs in the store's `blobs` table (`BlobStoreLike`,
    `CollectableBlobStore`).

    Inserts are insert-if-absent, so hosts putting the same image race harmlessly;
    a blob's image extensions are remembered so an export can recreate the
    `<hash>.<ext>` sidecars a file store has. A blob's mtime (`created_at`, the
    server's clock) is its last put: a re-put refreshes it when it is over a minute
    old, so `gc` (which deletes only blobs older than 10 minutes, checked in the
    DELETE itself) never takes a blob a writer is about to reference.
    """

    def __init__(self, storage: PostgresSessionStorage) -> None:
        self._storage = storage
        self.dir = os.path.join(storage.root, "blobs")

    def put(self, data: bytes, mime_type: str | None = None) -> BlobPutResult:
        """Store `data` under its sha256 (sent only when the blob is new or damaged)."""
        digest = hashlib.sha256(data).hexdigest()
        ext = blob_extension_for_mime_type(mime_type)
        s = self._storage._sql
        path = os.path.join(self.dir, digest)

        def op(conn: Conn, _: Attempt) -> None:  # content-addressed: idempotent
            row = conn.execute(s.blob_state, (digest,)).fetchone()
            if row is not None and not row[2]:
                # Stored bytes that do not hash to their name: the caller's are the true ones.
                _warn_replaced(f"{path} (table {self._storage.schema}.blobs)")
                row = conn.execute(s.blob_repair, (bytes(data), len(data), digest)).fetchone()
            elif row is not None and row[1]:
                # A fresh use keeps the blob from gc; if gc took it meanwhile, insert it.
                row = conn.execute(s.blob_touch, (digest,)).fetchone()
            if row is None:
                conn.execute(s.blob_insert, (digest, bytes(data), len(data), [ext] if ext else []))
            if ext and (row is None or ext not in row[0]):
                conn.execute(s.blob_add_ext, (ext, digest, ext))

        self._storage._db.run(self.dir, op)
        return BlobPutResult(
            digest, path, BLOB_REF_PREFIX + digest, f"{path}.{ext}" if ext else None
        )

    def get(self, hash: str) -> bytes | None:
        """The blob's bytes, or None when missing or damaged (a warning names it);
        InvalidBlobRefError for a bad hash."""
        digest = check_hash(hash)

        def op(conn: Conn, _: Attempt) -> tuple[Any, ...] | None:
            with conn.cursor(binary=True) as cur:
                return cur.execute(self._storage._sql.blob_get, (digest,)).fetchone()

        row = self._storage._db.run(self.dir, op)
        if row is None:
            return None
        data = bytes(row[0])
        if not _intact(data, digest):
            _warn_damaged(
                f"{os.path.join(self.dir, digest)} (table {self._storage.schema}.blobs)", len(data)
            )
            return None
        return data

    def verify(self, hash: str) -> BlobStatus:
        """Whether the blob is there and holds bytes that hash to its name (the server hashes)."""
        digest = check_hash(hash)
        row = self._storage._db.run(
            self.dir,
            lambda conn, _: conn.execute(self._storage._sql.blob_verify, (digest,)).fetchone(),
        )
        if row is None:
            return "missing"
        return "ok" if row[0] else "damaged"

    def has(self, hash: str) -> bool:
        """Whether the blob exists; InvalidBlobRefError for a bad hash."""
        digest = check_hash(hash)
        return self._query(self._storage._sql.blob_has, (digest,)) != []

    def sync(self) -> None:
        """Nothing to do: blob inserts commit synchronously."""

    def add_extension(self, hash: str, ext: str) -> None:
        """Remember a `<hash>.<ext>` sidecar of a stored blob (file-store imports)."""
        digest = check_hash(hash)
        if not is_blob_extension(ext):
            raise ValueError(f"invalid blob extension {ext!r}")
        self._storage._db.run(
            self.dir,
            lambda conn, _: conn.execute(self._storage._sql.blob_add_ext, (ext, digest, ext)),
        )

    def list(self) -> list[tuple[str, list[str]]]:
        """Every blob's hash and its sidecar extensions, by hash."""
        rows = self._query(self._storage._sql.blob_list)
        return [(str(h), [str(e) for e in exts if is_blob_extension(e)]) for h, exts in rows]

    def list_hashes(self) -> builtins.list[str]:
        """Every stored blob's hash, sorted."""
        rows = self._query(self._storage._sql.blob_hashes)
        return [str(r[0]) for r in rows]

    def list_info(self) -> builtins.list[BlobInfo]:
        """Every stored blob with its size and mtime (server clock), sorted by hash."""
        rows = self._query(self._storage._sql.blob_info)
        return [
            BlobInfo(
                str(h), int(size), float(mtime), tuple(e for e in exts if is_blob_extension(e))
            )
            for h, size, mtime, exts in rows
        ]

    def mtime(self, hash: str) -> float | None:
        """When the blob was last put (epoch seconds, server clock), None when missing."""
        digest = check_hash(hash)
        rows = self._query(self._storage._sql.blob_mtime, (digest,))
        return float(rows[0][0]) if rows else None

    def now(self) -> float:
        """The server's clock (epoch seconds): what `mtime` is measured on."""
        ((now,),) = self._query(self._storage._sql.blob_now)
        return float(now)

    def delete(self, hash: str, *, min_age_seconds: float = 0.0) -> bool:
        """Remove the blob unless it was put less than `min_age_seconds` ago (one statement,
        so a concurrent re-put either keeps it or comes after); True when removed."""
        digest = check_hash(hash)
        s = self._storage._sql

        def op(conn: Conn, _: Attempt) -> bool:
            cur = conn.execute(s.blob_delete, (digest, float(min_age_seconds)))
            return bool(cur.rowcount > 0)

        def again(conn: Conn, _: Attempt) -> bool:
            # The first DELETE may have gone through unconfirmed: gone now counts as removed.
            return op(conn, _) or conn.execute(s.blob_has, (digest,)).fetchone() is None

        return self._storage._db.run(self.dir, op, again)

    def _query(
        self, query: sql.Composed, params: tuple[Any, ...] = ()
    ) -> builtins.list[tuple[Any, ...]]:
        return self._storage._db.run(
            self.dir, lambda conn, _: conn.execute(query, params).fetchall()
        )
