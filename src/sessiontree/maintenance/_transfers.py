"""Moving a file store into a database and back.

`import_files` / `export_files` copy `blobs/`, then `sessions/` (every directory
and file, byte for byte, mtimes kept) between an agent dir and any storage. Only
those two trees move: `history.db`, terminal breadcrumbs and settings (which may
hold credentials) stay on the host. Lock sidecars and temp files are left out.
Every file copied takes the blobs it refers to along, as every copy of a session
does (`agent_dir.BlobCarry`); a ref that neither store can resolve is listed
(`TransferReport.missing_blobs`).

Every name is checked before it becomes a path, on the way in and on the way out
(a shared database holds whatever its users wrote): one path component (no `.`,
`..`, `/`, `\\`, NUL, empty or longer than NAME_MAX), UTF-8 (a database key is
text, which cannot hold other bytes, and changing a name would break the agents'
path rules). Blob names are sha256 hex, sidecar extensions plain. A name that is not
(a file or directory, with everything in it) is skipped and reported, and so is a
symlink, FIFO or device in the tree being read (never followed, never opened), a
symlink or non-directory where the copy would write (never written through), and
what lies more than `_MAX_DEPTH` levels down. A blob whose content does not match
its name is skipped and reported too. A copy that stops (a live writer, a lost
connection) leaves every file it copied whole; running it again finishes the job,
replacing those files rather than adding copies (a file that already holds its
source's bytes at its mtime is left as it is, where the target can tell cheaply).

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
import stat
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Final

import xxhash

from sessiontree._util.fs import name_problem, open_regular
from sessiontree.errors import SessionLockError
from sessiontree.layout import BlobCarry, StoreParts, blob_carry, blob_store_for
from sessiontree.session import backup_path
from sessiontree.storage import (
    BlobStore,
    FileSessionStorage,
    HostFilesystem,
    SessionStorage,
    StorageStat,
    directory_tree,
    fsync_directory,
    is_blob_extension,
    is_locked,
    lock_path_for,
    parse_blob_ref,
    read_chunks,
    write_whole,
)

__all__ = ["TransferReport", "export_files", "import_files"]

_BLOB_NAME: Final = re.compile(r"([0-9a-f]{64})(?:\.([a-zA-Z0-9][a-zA-Z0-9._-]*))?")
_TREES: Final = ("sessions",)
# A batch of new files written at once (`create_files`): up to this many, or bytes.
_BATCH_FILES: Final = 256
_BATCH_BYTES: Final = 16 << 20


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
_MAX_DEPTH: Final = 32
"""Directory levels below `sessions/` a copy descends into (agents write two)."""
_PATH_MAX: Final = 4096
"""Bytes in a path this host's file system takes (Linux's PATH_MAX)."""


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


def _kinds(storage: SessionStorage, directory: str) -> list[tuple[str, str]]:
    """(name, kind) of what `directory` holds: kind is "file", "dir", "link" or "other".

    On this host's files an entry is what it is, not what it points to: a symlink is
    never followed (into `~/.ssh`, or back up the tree) and a FIFO never opened.
    """
    if isinstance(storage, HostFilesystem):
        found = []
        try:
            with os.scandir(storage.host_path(directory)) as entries:
                for entry in entries:
                    if entry.is_symlink():
                        kind = "link"
                    elif entry.is_dir(follow_symlinks=False):
                        kind = "dir"
                    elif entry.is_file(follow_symlinks=False):
                        kind = "file"
                    else:
                        kind = "other"
                    found.append((entry.name, kind))
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(found)
    files = storage.list_files(directory, "*") + storage.list_files(directory, ".*")
    dirs = directory_tree(storage, "copying a store").list_dirs(directory)
    return sorted(
        [(os.path.basename(p), "file") for p in files]
        + [(os.path.basename(p), "dir") for p in dirs]
    )


def _listing(
    storage: SessionStorage, directory: str, report: TransferReport
) -> tuple[list[str], list[str]]:
    """Paths of the files and of the directories in `directory` that a copy takes.

    Every name is checked before it becomes a path, whichever side it comes from (a
    shared database can hold any text): one component that both sides can hold
    (`_fs.name_problem`). What is left out goes to `report.skipped`, except lock
    sidecars and temp files, which are host-local.
    """
    files: list[str] = []
    dirs: list[str] = []
    for name, kind in _kinds(storage, directory):
        path = os.path.join(directory, name)
        whole = " (a directory: nothing in it copied)" if kind == "dir" else ""
        if not _is_utf8(name):
            report.skipped.append((path, NOT_UTF8 + whole))
        elif (problem := name_problem(name)) is not None:
            report.skipped.append((path, f"{problem}: not a name a copy writes{whole}"))
        elif kind == "link":
            report.skipped.append((path, "a symbolic link: not followed, not copied"))
        elif kind == "other":
            report.skipped.append((path, "not a regular file (a FIFO, socket or device)"))
        elif kind == "dir":
            dirs.append(path)
        elif not _host_local(name):
            files.append(path)
    return files, dirs


def _dir_id(storage: SessionStorage, directory: str) -> tuple[object, int]:
    """What tells two directories apart (a bind mount can show one at two paths), and
    the directory's mtime."""
    if isinstance(storage, HostFilesystem):
        st = os.stat(storage.host_path(directory))
        return (st.st_dev, st.st_ino), st.st_mtime_ns
    return os.path.normpath(directory), storage.stat(directory).mtime_ns


def _not_ours(target: SessionStorage, path: str, want_dir: bool) -> str | None:
    """Why a copy must not write at `path` of a host target, or None when it may.

    Only what the copy itself made may be written through: a symlink (or anything
    but a directory, a regular file) already there is kept and reported, so the copy
    writes nothing outside `sessions/` and `blobs/`.
    """
    if not isinstance(target, HostFilesystem):
        return None
    host = target.host_path(path)
    if len(os.fsencode(host)) >= _PATH_MAX:
        return f"{host}: the path is longer than this file system takes; not copied"
    try:
        st = os.lstat(host)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return f"{host} is a symbolic link; not written through, not replaced"
    if want_dir and not stat.S_ISDIR(st.st_mode):
        return f"{host} is not a directory; nothing copied into it"
    if not want_dir and not stat.S_ISREG(st.st_mode):
        return f"{host} is not a regular file; not replaced"
    return None


def _read(storage: SessionStorage, path: str) -> Iterator[bytes]:
    """The file's bytes; on this host's files never through a symlink or from a FIFO
    that took the file's place after it was listed."""
    if not isinstance(storage, HostFilesystem):
        yield from read_chunks(storage, path)
        return
    fd = open_regular(storage.host_path(path), os.O_RDONLY)
    try:
        while chunk := os.read(fd, 1 << 20):
            yield chunk
    finally:
        os.close(fd)


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
    """Copy `sessions/` from `source` to `target`, parents first, depth first.

    The walk is bounded: at most `_MAX_DEPTH` levels, each directory once.
    """
    for tree in _TREES:
        top = os.path.join(src_root, tree)
        if not source.exists(top):
            continue
        dirs: list[tuple[str, int]] = []
        seen: set[object] = set()
        pending = [(top, 0)]
        while pending:
            directory, depth = pending.pop()
            dst_dir = os.path.join(dst_root, os.path.relpath(directory, src_root))
            # The top may be a link the user made (sessions on another disk); below it,
            # only directories the copy makes or finds as directories.
            why = _not_ours(target, dst_dir, want_dir=True) if depth else None
            if why is not None:
                report.skipped.append((directory, why))
                continue
            identity, mtime_ns = _dir_id(source, directory)
            if identity in seen:
                report.skipped.append((directory, "a directory seen before (a cycle)"))
                continue
            seen.add(identity)
            files, subdirs = _listing(source, directory, report)
            target.ensure_dir(dst_dir)
            dirs.append((dst_dir, mtime_ns))
            report.dirs += 1
            _copy_files(source, files, target, dst_dir, report, carry)
            for sub in reversed(subdirs):
                if depth + 1 > _MAX_DEPTH:
                    report.skipped.append(
                        (sub, f"more than {_MAX_DEPTH} directories deep: nothing in it copied")
                    )
                else:
                    pending.append((sub, depth + 1))
        # Children first, so creating a child does not move its parent's mtime again.
        for dst_dir, mtime_ns in reversed(dirs):
            _set_mtime(target, dst_dir, mtime_ns)


def _copy_files(
    source: SessionStorage,
    paths: list[str],
    target: SessionStorage,
    dst_dir: str,
    report: TransferReport,
    carry: BlobCarry,
) -> None:
    """Copy the files `paths` (of one directory) into `dst_dir`.

    A target that writes many new files at once (`create_files`: PostgreSQL, in one
    transaction; each file a `(path, chunks, mtime_ns, writer-locked)` tuple) takes
    them in batches; a file already there (which `_keep_target`
    must judge) is left out of its batch and copied alone, as every file is elsewhere.
    """
    create = getattr(target, "create_files", None)
    if not callable(create):
        for path in paths:
            _copy_file(
                source, path, target, os.path.join(dst_dir, os.path.basename(path)), report, carry
            )
        return
    batch: list[tuple[str, str, StorageStat]] = []
    size = 0
    for path in paths:
        dst = os.path.join(dst_dir, os.path.basename(path))
        why = _not_ours(target, dst, want_dir=False)
        if why is not None:
            report.skipped.append((path, why))
            continue
        if _is_session(path) and _maybe_locked(source, path):
            raise SessionLockError(path, message=f"{path}: a writer is active; retry later")
        st = source.stat(path)
        batch.append((path, dst, st))
        size += st.size
        if len(batch) >= _BATCH_FILES or size >= _BATCH_BYTES:
            _copy_batch(source, batch, target, report, carry, create)
            batch, size = [], 0
    _copy_batch(source, batch, target, report, carry, create)


def _copy_batch(
    source: SessionStorage,
    batch: list[tuple[str, str, StorageStat]],
    target: SessionStorage,
    report: TransferReport,
    carry: BlobCarry,
    create: Callable[[list[tuple[str, Callable[[], Iterator[bytes]], int, bool]]], list[str]],
) -> None:
    """One `create_files` of `batch` ((source path, target path, its stat) each); the
    files it left out (something is there) copied one by one."""
    if not batch:
        return

    def reader(path: str, dst: str) -> Callable[[], Iterator[bytes]]:
        return lambda: carry.chunks(_read(source, path), dst)

    left = set(
        create([(dst, reader(path, dst), st.mtime_ns, _is_session(dst)) for path, dst, st in batch])
    )
    same = _already_there(source, [b for b in batch if b[1] in left], target, carry)
    for path, dst, st in batch:
        if dst in left and dst not in same:
            _copy_file(source, path, target, dst, report, carry)
        else:
            report.files += 1
            report.bytes += st.size


def _already_there(
    source: SessionStorage,
    batch: list[tuple[str, str, StorageStat]],
    target: SessionStorage,
    carry: BlobCarry,
) -> set[str]:
    """The target paths of `batch` that already hold their source's bytes at its mtime
    (an import run again after it stopped): copying them again would change nothing.

    The target hashes its files (`file_digests`, one round trip) and the source's
    bytes pass `carry` as a copy's do, so the blobs they refer to are there too.
    """
    digests = getattr(target, "file_digests", None)
    if not batch or not callable(digests):
        return set()
    there = digests([dst for _, dst, _ in batch])
    same = set()
    for path, dst, st in batch:
        size, mtime_ns, digest = there.get(dst, (-1, -1, None))
        if digest is None or (size, mtime_ns) != (st.size, st.mtime_ns):
            continue
        sha = hashlib.sha256()
        for chunk in carry.chunks(_read(source, path), dst):
            sha.update(chunk)
        if sha.hexdigest() == digest:
            same.add(dst)
    return same


def _is_session(path: str) -> bool:
    """Whether a writer's lock guards the file (a session's `.jsonl`)."""
    return os.path.basename(path).endswith(".jsonl")


def _copy_file(
    source: SessionStorage,
    path: str,
    target: SessionStorage,
    dst: str,
    report: TransferReport,
    carry: BlobCarry,
) -> None:
    why = _not_ours(target, dst, want_dir=False)
    if why is not None:
        report.skipped.append((path, why))
        return
    if _is_session(path):
        for storage, busy in ((source, path), (target, dst)):
            if _maybe_locked(storage, busy):
                raise SessionLockError(busy, message=f"{busy}: a writer is active; retry later")
    st = source.stat(path)
    kept = _keep_target(source, path, st, target, dst)
    if kept is not None:
        report.skipped.append((path, kept))
        return
    write_whole(target, dst, carry.chunks(_read(source, path), dst))
    _set_mtime(target, dst, st.mtime_ns)
    report.files += 1
    report.bytes += st.size


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
    source_dir: str, storage: SessionStorage, report: TransferReport | None = None
) -> TransferReport:
    """Copy the `blobs/` and `sessions/` of the agent dir `source_dir` (on this host's
    files) into `storage`, byte for byte: under its root (`RootedStorage`), else
    under the same paths.

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
    agent_dir = os.path.abspath(source_dir)
    files = FileSessionStorage()
    root = StoreParts(storage, agent_dir).root
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
    files = FileSessionStorage()
    sidecars: list[tuple[str, str]] = []
    for name, kind in _kinds(files, blob_dir):
        match = _BLOB_NAME.fullmatch(name)
        if match is None:
            continue  # not a blob (a temp file of a write that did not finish)
        path = os.path.join(blob_dir, name)
        digest, ext = match.group(1), match.group(2)
        if kind != "file":
            report.skipped.append((path, "not a regular file (a symbolic link?): not copied"))
            continue
        if ext is not None:
            if is_blob_extension(ext):
                sidecars.append((digest, ext))
            else:
                report.skipped.append((path, "not a blob sidecar's extension: not copied"))
            continue
        data = b"".join(_read(files, path))
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
    storage: SessionStorage, target_dir: str, report: TransferReport | None = None
) -> TransferReport:
    """Copy `storage`'s blobs and `sessions/` (under its root, else under `target_dir`)
    into the agent dir `target_dir` on this host's files, byte for byte (mtimes too).

    As for `import_files`: the blobs go first, every file copied takes the blobs it
    refers to along, and one that neither store holds is listed in
    `report.missing_blobs`. `report` (new if None) is filled as files are copied.
    """
    report = report if report is not None else TransferReport()
    agent_dir = os.path.abspath(target_dir)
    files = FileSessionStorage()
    root = StoreParts(storage, agent_dir).root
    invalid_names = getattr(storage, "invalid_names", None)
    if callable(invalid_names):  # rows the storage itself leaves out of its listings
        inside = tuple(os.path.join(root, tree) + os.sep for tree in (*_TREES, "blobs"))
        report.skipped.extend((p, why) for p, why in invalid_names() if p.startswith(inside))
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
        path = os.path.join(blob_dir or "blobs", str(digest))
        if parse_blob_ref(f"blob:sha256:{digest}") is None:
            report.skipped.append((path, "not a blob's name (a sha256 in hex): not copied"))
            continue
        data = carry.source.get(digest)
        if data is None:
            continue
        if blobs.put(data).hash != digest:  # `get` checks the bytes; another store may not
            report.skipped.append((path, "the content does not match its name (hash)"))
            continue
        if blob_dir is not None:
            for ext in exts:
                sidecar = f"{path}.{ext}"
                if not is_blob_extension(ext):
                    report.skipped.append((sidecar, "not a blob sidecar's extension: not copied"))
                elif not os.path.lexists(sidecar):
                    os.link(path, sidecar)  # as BlobStore makes them: a hard link
        report.blobs += 1
    blobs.sync()
    if report.blobs and blob_dir is not None:
        fsync_directory(blob_dir)
