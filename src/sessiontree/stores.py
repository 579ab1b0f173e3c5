"""Opening a session store by URL, and moving a file store into a database and back.

`open_store` is what the CLI's `--store` option (or `SESSIONTREE_STORE`) calls:

- nothing, a path or a `file:` URL: the agent dir's files (`FileSessionStorage`);
- `postgresql://...` (or `postgres://`): `PostgresSessionStorage`; a `schema`
  query parameter picks the schema (default `sessiontree`), every other parameter
  goes to libpq. Paths map to keys relative to the agent dir (see
  `sessiontree.storage.postgres`).

`import_files` / `export_files` copy `blobs/`, then `sessions/` (every directory
and file, byte for byte, mtimes kept) between an agent dir and any storage. Only
those two trees move: `history.db`, terminal breadcrumbs and settings (which may
hold credentials) stay on the host. Lock sidecars and temp files are left out.
Every file copied takes the blobs it refers to along, as every copy of a session
does (`agent_dir.BlobCarry`); a ref that neither store can resolve is listed
(`TransferReport.missing_blobs`).

A name that is not UTF-8 (a file or directory, with everything in it) is skipped
and reported: a database key is text, which cannot hold those bytes, and changing
the name would break the agents' path rules. A blob whose content does not match
its name is skipped and reported too. A copy that stops (a live writer, a lost
connection) leaves every file it copied whole; running it again finishes the job,
replacing those files rather than adding copies.

A file already at the target is replaced only when that loses nothing of it: it
holds the start of the source's bytes (the source grew), or it is older than the
source and is kept as `<file>.bak` first. A target newer than its source (a session
continued there after the copy) is kept and reported as skipped; one that a live
writer holds stops the copy, as a live writer of the source does.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

import xxhash

from .agent_dir import BlobCarry, blob_carry, blob_store_for
from .blobs import BlobStore, parse_blob_ref
from .errors import SessionLockError, SessionTreeError
from .locks import is_locked, lock_path_for
from .paths import get_agent_dir
from .session_file import backup_path
from .storage.base import (
    HostFilesystem,
    SessionStorage,
    StorageStat,
    directory_tree,
    read_chunks,
    store_root,
    write_whole,
)
from .storage.file import FileSessionStorage, fsync_directory

__all__ = [
    "STORE_ENV",
    "TransferReport",
    "close_store",
    "export_files",
    "file_store_dir",
    "import_files",
    "open_store",
]

STORE_ENV: Final = "SESSIONTREE_STORE"
_PG_SCHEMES: Final = ("postgresql", "postgres")
_BLOB_NAME: Final = re.compile(r"([0-9a-f]{64})(?:\.([a-zA-Z0-9][a-zA-Z0-9._-]*))?")
_TREES: Final = ("sessions",)


def _scheme(target: str) -> str:
    return urlsplit(target).scheme.lower() if "://" in target or target.startswith("file:") else ""


def file_store_dir(url_or_path: str) -> str | None:
    """The agent dir a path or `file:` URL names (absolute, `~` expanded); None for a
    PostgreSQL URL.

    Raises:
        SessionTreeError: an unsupported URL scheme.
    """
    scheme = _scheme(url_or_path)
    if scheme == "":
        return os.path.abspath(os.path.expanduser(url_or_path))
    if scheme == "file":
        return os.path.abspath(os.path.expanduser(unquote(urlsplit(url_or_path).path)))
    if scheme in _PG_SCHEMES:
        return None
    raise SessionTreeError(
        f"unsupported store {_redact(url_or_path)!r}: use a path or a postgresql:// URL"
    )


def open_store(url_or_path: str | None = None, *, agent_dir: str | None = None) -> SessionStorage:
    """The storage a URL or path names (None: `$SESSIONTREE_STORE`, else the agent dir's files).

    A path (or `file:` URL) names the agent dir of a file store: the caller keeps
    using it as its `agent_dir`. A PostgreSQL URL opens (and migrates) the
    database; its paths are relative to `agent_dir` (default: the agent dir).
    Close what this returns with `close_store`.

    Raises:
        BackendUnavailableError: psycopg is not installed (the message says what to install).
        SessionTreeError: an unsupported URL scheme, or the database cannot be used.
    """
    target = url_or_path if url_or_path else os.environ.get(STORE_ENV) or None
    if target is None:
        return FileSessionStorage()
    scheme = _scheme(target)
    if scheme in ("", "file"):
        return FileSessionStorage()
    if scheme not in _PG_SCHEMES:
        raise SessionTreeError(
            f"unsupported store {_redact(target)!r}: use a path or a postgresql:// URL"
        )
    from .storage.postgres import PostgresSessionStorage

    conninfo, schema = _split_schema(target)
    return PostgresSessionStorage(conninfo, schema=schema or "sessiontree", root=agent_dir)


def close_store(storage: SessionStorage) -> None:
    """Release what `open_store` opened (a database pool); files need nothing."""
    close = getattr(storage, "close", None)
    if callable(close):
        close()


def _split_schema(url: str) -> tuple[str, str | None]:
    """The URL without its `schema` query parameter, and that parameter."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schema = next((v for k, v in query if k == "schema"), None)
    rest = urlencode([(k, v) for k, v in query if k != "schema"])
    return urlunsplit(parts._replace(query=rest)), schema


def _redact(url: str) -> str:
    """A URL without its password, for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


# -- moving stores ---------------------------------------------------------------------------


@dataclass(slots=True)
class TransferReport:
    """What `import_files` / `export_files` copied, and what they skipped.

    Pass one in to read what was copied when the copy stops with an exception.
    """

    dirs: int = 0
    files: int = 0
    bytes: int = 0
    blobs: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """(path, why) of each file, directory or blob not copied."""
    missing_blobs: list[tuple[str, str]] = field(default_factory=list)
    """(path of a copied file, hash) of each blob it refers to that neither store holds."""


NOT_UTF8: Final = "the name is not UTF-8, which a database key cannot hold"


def _host_local(name: str) -> bool:
    """Host-local leftovers: writer-lock sidecars and temp files of atomic writes."""
    return name.startswith(".") and name.endswith((".writer-lock", ".tmp"))


def _is_utf8(name: str) -> bool:
    """Whether a name read from the file system (surrogateescape) was valid UTF-8."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _walk(
    storage: SessionStorage, top: str, report: TransferReport
) -> Iterator[tuple[str, list[str]]]:
    """(directory, files in it) for `top` and every directory below, parents first.

    Names that are not UTF-8 go to `report.skipped` (a directory with all it holds).
    """
    pending = [top]
    while pending:
        directory = pending.pop()
        names = storage.list_files(directory, "*") + storage.list_files(directory, ".*")
        files = []
        for path in sorted(names):
            name = os.path.basename(path)
            if not _is_utf8(name):
                report.skipped.append((path, NOT_UTF8))
            elif not _host_local(name):
                files.append(path)
        yield directory, files
        subdirs = []
        for path in directory_tree(storage, "copying a store").list_dirs(directory):
            if _is_utf8(os.path.basename(path)):
                subdirs.append(path)
            else:
                report.skipped.append((path, NOT_UTF8 + " (a directory: nothing in it copied)"))
        pending.extend(reversed(subdirs))


def _maybe_locked(storage: SessionStorage, path: str) -> bool:
    """Whether a live writer holds the session (files: only probed when a lock sidecar exists)."""
    if isinstance(storage, HostFilesystem) and not os.path.exists(lock_path_for(path)):
        return False  # a writer keeps its sidecar while it holds the lock
    return is_locked(storage, path)


def _set_mtime(storage: SessionStorage, path: str, mtime_ns: int) -> None:
    if isinstance(storage, HostFilesystem):
        os.utime(path, ns=(mtime_ns, mtime_ns))
        return
    set_mtime = getattr(storage, "set_mtime", None)
    if callable(set_mtime):
        set_mtime(path, mtime_ns)


def _copy_trees(
    source: SessionStorage,
    src_root: str,
    target: SessionStorage,
    dst_root: str,
    report: TransferReport,
    carry: BlobCarry,
) -> None:
    for tree in _TREES:
        top = os.path.join(src_root, tree)
        if not source.exists(top):
            continue
        dirs: list[tuple[str, int]] = []
        for directory, files in _walk(source, top, report):
            rel = os.path.relpath(directory, src_root)
            dst_dir = os.path.join(dst_root, rel)
            target.ensure_dir(dst_dir)
            dirs.append((dst_dir, source.stat(directory).mtime_ns))
            report.dirs += 1
            for path in files:
                name = os.path.basename(path)
                dst = os.path.join(dst_dir, name)
                if name.endswith(".jsonl"):
                    for storage, busy in ((source, path), (target, dst)):
                        if _maybe_locked(storage, busy):
                            raise SessionLockError(
                                busy, message=f"{busy}: a writer is active; retry later"
                            )
                st = source.stat(path)
                kept = _keep_target(source, path, st, target, dst)
                if kept is not None:
                    report.skipped.append((path, kept))
                    continue
                write_whole(target, dst, carry.chunks(read_chunks(source, path), dst))
                _set_mtime(target, dst, st.mtime_ns)
                report.files += 1
                report.bytes += st.size
        # Children first, so creating a child does not move its parent's mtime again.
        for dst_dir, mtime_ns in reversed(dirs):
            _set_mtime(target, dst_dir, mtime_ns)


def _keep_target(
    source: SessionStorage, path: str, st: StorageStat, target: SessionStorage, dst: str
) -> str | None:
    """Why `dst` must not be replaced by `path`'s bytes, or None when it may be.

    A copy keeps the source's mtime, so a target newer than its source changed after
    it was copied (a session continued there): it is kept, unless its bytes are the
    start of the source's (replacing it loses nothing). An older target that differs
    otherwise is kept beside it as `<file>.bak` before it is replaced.
    """
    try:
        there = target.stat(dst)
    except FileNotFoundError:
        return None
    if there.size <= st.size and _starts_with(source, path, target, dst, there.size):
        return None
    if there.mtime_ns > st.mtime_ns:
        return f"{dst} changed after it was copied (newer than the source); not replaced"
    write_whole(target, backup_path(target, dst), read_chunks(target, dst))
    return None


def _starts_with(
    source: SessionStorage, path: str, target: SessionStorage, dst: str, size: int
) -> bool:
    """Whether `dst` (of `size` bytes) holds exactly the first `size` bytes of `path`."""
    theirs, ours = xxhash.xxh3_128(), xxhash.xxh3_128()
    for chunk in read_chunks(target, dst):
        theirs.update(chunk)
    left = size
    for chunk in read_chunks(source, path):
        if left <= 0:
            break
        ours.update(chunk[:left])
        left -= len(chunk)
    return left <= 0 and theirs.digest() == ours.digest()


def import_files(
    agent_dir: str | None, storage: SessionStorage, report: TransferReport | None = None
) -> TransferReport:
    """Copy an agent dir's `blobs/` and `sessions/` into `storage`, byte for byte.

    Files already in `storage` at the same paths are replaced, so running it again
    after it stopped finishes the import without duplicating anything. A session
    being written by a live process raises SessionLockError (import it once it is
    done). Names that are not UTF-8 and blobs whose content does not match their
    name are skipped (`report.skipped`). The blobs go first, then every file copied
    takes the blobs it refers to along (`BlobCarry`): one that neither store holds
    is listed in `report.missing_blobs`. `report` (new if None) is filled as files
    are copied, so after an exception it says what was.
    """
    report = report if report is not None else TransferReport()
    agent_dir = os.path.abspath(agent_dir if agent_dir is not None else get_agent_dir())
    files = FileSessionStorage()
    root = store_root(storage, agent_dir)
    carry = blob_carry(
        blob_store_for(None, files, agent_dir),
        os.path.join(root, "sessions"),
        storage,
        agent_dir=root,
    )
    _import_blobs(os.path.join(agent_dir, "blobs"), carry, report)
    bulk = getattr(storage, "bulk", None)  # one durability barrier for the whole import
    with bulk() if callable(bulk) else nullcontext():
        _copy_trees(files, agent_dir, storage, root, report, carry)
    report.missing_blobs.extend(carry.missing)
    return report


def _import_blobs(blob_dir: str, carry: BlobCarry, report: TransferReport) -> None:
    """Every intact blob of `blob_dir` (and its sidecars' extensions) into `carry.target`."""
    if not os.path.isdir(blob_dir):
        return
    target = carry.target
    sidecars: list[tuple[str, str]] = []
    for name in sorted(os.listdir(blob_dir)):
        match = _BLOB_NAME.fullmatch(name)
        if match is None or not os.path.isfile(os.path.join(blob_dir, name)):
            continue
        digest, ext = match.group(1), match.group(2)
        if ext is not None:
            sidecars.append((digest, ext))
            continue
        path = os.path.join(blob_dir, name)
        with open(path, "rb") as f:
            data = f.read()
        if hashlib.sha256(data).hexdigest() != digest:
            # Damaged on disk: copying it would spread the damage, and stopping here
            # would make the import impossible to finish.
            report.skipped.append((path, "the content does not match its name (hash)"))
            continue
        target.put(data)
        report.blobs += 1
    add_extension = getattr(target, "add_extension", None)
    for digest, ext in sidecars:
        if callable(add_extension) and target.has(digest):
            add_extension(digest, ext)
    target.sync()


def export_files(
    storage: SessionStorage, agent_dir: str | None, report: TransferReport | None = None
) -> TransferReport:
    """Copy `storage`'s blobs and `sessions/` into an agent dir, byte for byte (mtimes too).

    As for `import_files`: the blobs go first, every file copied takes the blobs it
    refers to along, and one that neither store holds is listed in
    `report.missing_blobs`. `report` (new if None) is filled as files are copied.
    """
    report = report if report is not None else TransferReport()
    agent_dir = os.path.abspath(agent_dir if agent_dir is not None else get_agent_dir())
    files = FileSessionStorage()
    root = store_root(storage, agent_dir)
    carry = blob_carry(
        blob_store_for(None, storage, root),
        os.path.join(agent_dir, "sessions"),
        files,
        agent_dir=agent_dir,
    )
    _export_blobs(carry, report)
    _copy_trees(storage, root, files, agent_dir, report, carry)
    report.missing_blobs.extend(carry.missing)
    return report


def _export_blobs(carry: BlobCarry, report: TransferReport) -> None:
    """Every blob a database store lists (with its sidecars) into `carry.target`."""
    listing = getattr(carry.source, "list", None)
    if not callable(listing):
        return
    blobs = carry.target
    blob_dir = blobs.dir if isinstance(blobs, BlobStore) else None
    for digest, exts in listing():
        if parse_blob_ref("blob:sha256:" + digest) is None:
            continue
        data = carry.source.get(digest)
        if data is None:
            continue
        blobs.put(data)
        if blob_dir is not None:
            path = os.path.join(blob_dir, digest)
            for ext in exts:
                sidecar = f"{path}.{ext}"
                if not os.path.exists(sidecar):
                    os.link(path, sidecar)  # as BlobStore makes them: a hard link
        report.blobs += 1
    blobs.sync()
    if report.blobs and blob_dir is not None:
        fsync_directory(blob_dir)
