"""Blob garbage collection: find (and optionally delete) blobs no session references.

Deleting a blob that a session still needs loses a user's image for good, so
the rules lean to keeping:

- Marking reads the raw bytes of *every* regular file under `<agent>/sessions`
  (all projects, subagent sessions in artifacts dirs, `.bak` and conflict
  copies, temp files), rescue copies in `<agent>/rescue`, the files named by
  terminal breadcrumbs, the session dirs
  outside the store that managers recorded in `<agent>/external-session-dirs`
  (complete lines only; see `_external_dirs`), and any extra roots given.
  Sessions anywhere else (another agent dir, another host) are invisible to it.
  A blob is referenced by `blob:sha256:<hex>` and, to be safe, by its bare
  64-hex hash anywhere (a display path `blobs/<hash>.png` in a tool result counts).
- The walk is repeated until two passes see the same files with the same
  sizes and mtimes, so a session written or moved during marking is read again.
- A blob (with its `<hash>.<ext>` sidecars) younger than `min_age_seconds`
  (10 minutes) by mtime or ctime on the real clock is never deleted: a writer may
  have just put it.
- A blob that a live manager on this host holds (pinned in `<blobs>/.live/`, see
  `sessiontree.storage._pins`: an in-memory session's `put_blob`, a session not written yet)
  is never deleted, whatever its age. The pins are read before marking (a manager
  lets its pins go when it closes, after its file is written: a blob unpinned before
  marking began is named by a file marking reads) and again just before deleting; a
  pin whose process is gone is ignored (and removed by `delete=True`). A blob is
  deleted in two steps: its files are renamed away, then the pins and their mtimes
  are looked at once more, so a manager that put it again or pinned it in the
  moment before is given it back (`_delete_blobs`).
- If any session file or directory cannot be read, nothing is deleted; nor when
  the store holds no session file at all (a wrong or unmounted agent dir). A place
  gc cannot look into is unknown, not empty: a symlink under `sessions/` whose
  target is missing (a disk not mounted), a dir recorded in
  `external-session-dirs` that is not there, an extra root that is missing, a dir
  it may not list. Each is reported with why (`unreadable`), and only removing the
  link or the registry line, or bringing the disk back, lets gc delete again.

Any storage works (`storage=`): for one other than the files, marking walks every
file under `<root>/sessions` through `list_dirs`/`list_files` and reads it with
`iter_chunks`, and the blobs are the storage's own blob store (a
`CollectableBlobStore`, e.g. PostgreSQL's table), whose `delete` checks the
minimum age on the store's clock in the same step as the removal.
"""

from __future__ import annotations

import os
import re
import stat
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from sessiontree._util.fs import open_read, temp_side_path
from sessiontree.errors import SessionTreeError
from sessiontree.layout import EXTERNAL_SESSION_DIRS, StoreParts, read_registry
from sessiontree.storage import (
    BlobBackedStorage,
    CollectableBlobStore,
    HostFilesystem,
    SessionStorage,
    directory_tree,
    fsync_directory,
    is_stored_file,
    read_chunks,
    read_pins,
)

__all__ = [
    "DEFAULT_MIN_AGE_SECONDS",
    "BlobFile",
    "GcReport",
    "collect_garbage",
    "find_referenced_hashes",
    "list_blobs",
    "list_store_blobs",
    "storage_blob_store",
]

DEFAULT_MIN_AGE_SECONDS = 600.0

# One pass over every run of 64+ hex digits (twice as fast as separate patterns
# for refs and bare hashes): a run of exactly 64 is a hash, whether it follows
# `blob:sha256:` or not; a longer run may be a ref followed by more hex, so both
# its ends are kept too (a false mark only keeps a blob, never loses one).
_HEX_RUN = re.compile(rb"[0-9a-fA-F]{64,}")
_BLOB_NAME = re.compile(r"([0-9a-f]{64})(?:\.([A-Za-z0-9][A-Za-z0-9._-]*))?")
_CHUNK = 1 << 20
_OVERLAP = 128  # a hash cut by a chunk boundary is found in the next window
_MAX_ROUNDS = 5

Progress = Callable[[str], None]
"""Called with each file's path as marking reads it."""


@dataclass(frozen=True, slots=True)
class BlobFile:
    """One blob in the store: its file and sidecars."""

    hash: str
    paths: tuple[str, ...]
    """The blob file (if present) first, then its `<hash>.<ext>` sidecars."""
    size: int
    """Bytes held (hard-linked sidecars counted once)."""
    newest: float
    """The latest mtime or ctime among the files, in epoch seconds."""


@dataclass(slots=True)
class GcReport:
    """The outcome of a collection (a dry run when `deleted` stays empty)."""

    blob_dir: str
    files_scanned: int = 0
    bytes_scanned: int = 0
    referenced: int = 0
    """Distinct hashes found in session files (present in the store or not)."""
    pinned: int = 0
    """Distinct hashes that live managers on this host hold (kept whatever their age)."""
    stale_pins: list[str] = field(default_factory=list)
    """Pin files left by processes that are gone (ignored; removed when deleting)."""
    blobs: int = 0
    blob_bytes: int = 0
    unreferenced: list[BlobFile] = field(default_factory=list)
    """Referenced by nothing and old enough to delete."""
    young: list[BlobFile] = field(default_factory=list)
    """Referenced by nothing but too young to delete."""
    unreadable: list[tuple[str, str]] = field(default_factory=list)
    external_dirs: list[str] = field(default_factory=list)
    """Session dirs outside `<agent>/sessions` that were read, from the registry
    `<agent>/external-session-dirs` (a file store's only)."""
    deleted: list[BlobFile] = field(default_factory=list)
    refused: str | None = None
    """Why deletion was not attempted, when it was asked for and refused."""

    @property
    def unreferenced_bytes(self) -> int:
        return sum(b.size for b in self.unreferenced)

    @property
    def freed_bytes(self) -> int:
        return sum(b.size for b in self.deleted)


def list_blobs(blob_dir: str) -> list[BlobFile]:
    """Every blob in `blob_dir` grouped with its sidecars, sorted by hash.

    Temp files (`.…tmp`) and names that are not `<64 hex>[.<ext>]` are ignored.
    """
    groups: dict[str, list[tuple[bool, str, os.stat_result]]] = {}
    try:
        with os.scandir(blob_dir) as it:
            for item in it:
                match = _BLOB_NAME.fullmatch(item.name)
                if match is None:
                    continue
                try:
                    st = item.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if not stat.S_ISREG(st.st_mode):
                    continue
                groups.setdefault(match.group(1), []).append(
                    (match.group(2) is not None, item.path, st)
                )
    except (FileNotFoundError, NotADirectoryError):
        return []
    blobs = []
    for digest in sorted(groups):
        members = sorted(groups[digest], key=lambda m: (m[0], m[1]))
        inodes = {(st.st_dev, st.st_ino): st.st_size for _, _, st in members}
        newest = max(max(st.st_mtime, st.st_ctime) for _, _, st in members)
        blobs.append(
            BlobFile(digest, tuple(p for _, p, _ in members), sum(inodes.values()), newest)
        )
    return blobs


def list_store_blobs(store: CollectableBlobStore) -> list[BlobFile]:
    """Every blob of a `CollectableBlobStore`, as `list_blobs` describes a directory's.

    `paths` are the blob's and its sidecars' paths under the store's `dir` (where
    an export puts them), `newest` its last put on the store's clock.
    """
    directory = str(getattr(store, "dir", "") or "")
    blobs = []
    for info in store.list_info():
        base = os.path.join(directory, info.hash)
        paths = (base, *(f"{base}.{ext}" for ext in info.exts))
        blobs.append(BlobFile(info.hash, paths, info.size, info.mtime))
    return blobs


def storage_blob_store(storage: SessionStorage | None) -> CollectableBlobStore | None:
    """The storage's own blob store, for `gc` and `stats`; None when its blobs are files.

    Raises SessionTreeError when the storage keeps blobs in a store that cannot
    list or delete them (gc cannot run on it).
    """
    if storage is None or isinstance(storage, HostFilesystem):
        return None
    if not isinstance(storage, BlobBackedStorage):
        return None
    own = storage.blob_store()
    if own is None:
        return None
    if not isinstance(own, CollectableBlobStore):
        raise SessionTreeError(
            f"the blob store of {storage!r} cannot list or delete blobs "
            "(it is not a CollectableBlobStore)"
        )
    return own


def _scan_chunks(chunks: Iterable[bytes], found: set[str]) -> int:
    """Add every hash in the bytes to `found`; returns the bytes read."""
    total = 0
    tail = b""
    for chunk in chunks:
        if not chunk:
            continue
        total += len(chunk)
        window = tail + chunk
        for match in _HEX_RUN.finditer(window):
            run = match.group(0)
            found.add(run[:64].decode("ascii").lower())
            if len(run) > 64:
                found.add(run[-64:].decode("ascii").lower())
        tail = window[-_OVERLAP:]
    return total


def _file_chunks(path: str) -> Iterable[bytes]:
    with open_read(path) as f:
        while True:
            chunk = f.read(_CHUNK)
            if not chunk:
                return
            yield chunk


def _scan_file(path: str, found: set[str]) -> int:
    """Add every hash in the file's bytes to `found`; returns the bytes read."""
    return _scan_chunks(_file_chunks(path), found)


def _scan_stored(storage: SessionStorage, path: str, found: set[str]) -> int:
    """`_scan_file` for a file in a storage."""
    return _scan_chunks(read_chunks(storage, path, _CHUNK), found)


Snapshot = dict[str, tuple[int, int, int]]


def _walk(roots: Iterable[str], errors: list[tuple[str, str]]) -> Snapshot:
    """Regular files under `roots` (symlinks followed, loops cut) -> (size, mtime_ns, ino)."""
    snapshot: Snapshot = {}
    seen_dirs: set[tuple[int, int]] = set()

    def on_error(exc: OSError) -> None:
        path = os.fsdecode(exc.filename or "")
        if isinstance(exc, FileNotFoundError):
            # A directory removed mid-walk: its sessions are gone. But a link that
            # is still there points at a place that is away, not empty.
            _note_dangling(path, errors)
            return
        errors.append((path, exc.strerror or str(exc)))

    for root in roots:
        if os.path.isfile(root):
            _add_file(root, snapshot, errors)
            continue
        for directory, dirs, files in os.walk(root, onerror=on_error, followlinks=True):
            try:
                st = os.stat(directory)
            except OSError:
                dirs[:] = []
                continue
            key = (st.st_dev, st.st_ino)
            if key in seen_dirs:
                dirs[:] = []
                continue
            seen_dirs.add(key)
            for name in files:
                _add_file(os.path.join(directory, name), snapshot, errors)
    return snapshot


def _add_file(path: str, snapshot: Snapshot, errors: list[tuple[str, str]]) -> None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        # Removed or renamed mid-walk (the next pass sees where it went), or a
        # link to a place that is away.
        _note_dangling(path, errors)
        return
    except OSError as exc:
        errors.append((path, exc.strerror or str(exc)))
        return
    if stat.S_ISREG(st.st_mode):
        snapshot[path] = (st.st_size, st.st_mtime_ns, st.st_ino)


def _note_dangling(path: str, errors: list[tuple[str, str]]) -> None:
    """Report `path` when it is a symlink whose target is missing.

    A project dir or session file linked to another disk dangles while that disk
    is not mounted; its sessions still name blobs, so gc must not take it as gone.
    """
    try:
        target = os.readlink(path)
    except OSError:
        return  # not there, or not a link: really gone
    if os.path.exists(path):
        return  # the target came back meanwhile; the next pass reads it
    errors.append(
        (
            path,
            f"a symlink to {target!r}, which is not there (a disk not mounted?); "
            "its sessions are unknown, so nothing is deleted. Remove the link if "
            "they are gone for good",
        )
    )


def _all_files(storage: SessionStorage, directory: str) -> list[str]:
    """Every file directly in `directory`: `*` and `.*` where the storage matches any
    name, else the `*.jsonl` files (the one pattern every storage supports)."""
    try:
        names = storage.list_files(directory, "*") + storage.list_files(directory, ".*")
    except NotImplementedError:
        names = storage.list_files(directory, "*.jsonl")
    return sorted(set(names))


def _walk_storage(
    storage: SessionStorage, roots: Iterable[str], errors: list[tuple[str, str]]
) -> Snapshot:
    """Every file under `roots` in `storage` -> (size, mtime_ns, ino)."""
    snapshot: Snapshot = {}

    def fail(path: str, exc: Exception) -> None:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        errors.append((path, reason or type(exc).__name__))

    def add(path: str) -> None:
        try:
            st = storage.stat(path)
        except FileNotFoundError:
            return  # removed or renamed mid-walk; the next pass sees where it went
        except (OSError, ValueError) as exc:
            fail(path, exc)
            return
        snapshot[path] = (st.size, st.mtime_ns, st.ino)

    pending: list[str] = []
    for root in roots:
        try:
            if is_stored_file(storage, root):
                add(root)
            else:
                pending.append(root)
        except (OSError, ValueError) as exc:
            fail(root, exc)
    seen: set[str] = set()
    while pending:
        directory = pending.pop()
        if directory in seen:
            continue
        seen.add(directory)
        try:
            files = _all_files(storage, directory)
            dirs = directory_tree(storage, "gc").list_dirs(directory)
        except FileNotFoundError:
            continue  # a directory removed mid-walk: its sessions are gone
        except (OSError, ValueError) as exc:
            fail(directory, exc)
            continue
        for path in files:
            add(path)
        pending.extend(reversed(dirs))
    return snapshot


def _breadcrumb_targets(agent_dir: str, errors: list[tuple[str, str]]) -> list[str]:
    """Session files named by terminal breadcrumbs (`<agent>/terminal-sessions/*`, line 2)."""
    directory = os.path.join(agent_dir, "terminal-sessions")
    targets = []
    try:
        names = sorted(os.listdir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        errors.append((directory, exc.strerror or str(exc)))
        return []
    for name in names:
        path = os.path.join(directory, name)
        try:
            if not os.path.isfile(path):
                continue
            with open_read(path) as f:
                text = f.read(16384).decode("utf-8", "replace")
        except FileNotFoundError:
            continue
        except OSError as exc:
            errors.append((path, exc.strerror or str(exc)))
            continue
        lines = text.split("\n")
        if len(lines) >= 2 and lines[1] and os.path.isfile(lines[1]):
            targets.append(lines[1])
    return targets


def _external_dirs(agent_dir: str, errors: list[tuple[str, str]]) -> list[str]:
    """Session dirs outside `<agent>/sessions` that managers recorded as using our blobs.

    The registry is appended to by managers while gc may read it, so a line counts
    only once its newline is there: an unterminated last line is a path still being
    written (or cut by a crash), and a prefix of a path may name another directory
    (`/` or `$HOME`) whose reading would be wrong. It is reported as unreadable, so
    nothing is deleted while it is there (marking repeats until the walk is stable,
    so an append in flight is usually complete by the last pass). A damaged line (a
    NUL where a path was: what a crash can leave) is reported the same way. Blank,
    relative and duplicate lines are skipped. A recorded path that is not there, or is not
    a directory, is reported: its disk may only be away (not mounted), and its
    sessions still name blobs. A path that cannot be looked at is reported too.
    """
    registry = os.path.join(agent_dir, EXTERNAL_SESSION_DIRS)
    try:
        recorded, torn, damaged = read_registry(agent_dir)
    except OSError as exc:
        errors.append((registry, exc.strerror or str(exc)))
        return []
    if torn:
        errors.append(
            (
                registry,
                f"its last line has no newline (being written, or cut short): "
                f"{os.fsdecode(torn)!r}",
            )
        )
    for raw in damaged:
        shown = os.fsdecode(raw.replace(b"\0", b"?"))
        errors.append(
            (
                registry,
                f"a line is damaged (NULs where a path was, as a crash leaves it): {shown!r}; "
                "the dir it named is unknown, so nothing is deleted. Delete that line if its "
                "sessions are gone for good",
            )
        )
    dirs: list[str] = []
    for line in recorded:
        try:
            st = os.stat(line)
        except (FileNotFoundError, NotADirectoryError):
            # Its disk may only be away: the sessions there still name blobs.
            errors.append((line, _away(registry, "is not there (a disk not mounted?)")))
            continue
        except OSError as exc:
            errors.append((line, exc.strerror or str(exc)))
            continue
        if stat.S_ISDIR(st.st_mode):
            dirs.append(line)
        else:
            errors.append((line, _away(registry, "is not a directory")))
    return dirs


def _away(registry: str, what: str) -> str:
    return (
        f"recorded in {registry} as a session dir but {what}; its sessions are "
        "unknown, so nothing is deleted. Delete its line there if they are gone for good"
    )


def find_referenced_hashes(
    parts: StoreParts,
    extra_roots: Iterable[str] = (),
    progress: Progress | None = None,
    report: GcReport | None = None,
) -> tuple[set[str], list[tuple[str, str]], bool]:
    """Mark: every hash referenced by the store's files.

    With a storage other than the files, its `<root>/sessions` (and `extra_roots`,
    paths in that storage) are walked instead; terminal breadcrumbs are a file
    store's only. Returns (hashes, unreadable (path, reason) pairs, stable).
    `stable` is False when files kept changing for several passes.
    """
    agent = parts.agent_dir
    files = isinstance(parts.storage, HostFilesystem)
    via = None if files else parts.storage
    sessions = os.path.join(agent if files else parts.root, "sessions")
    extra = list(extra_roots)  # walked again on every pass
    found: set[str] = set()
    errors: list[tuple[str, str]] = []
    scanned: Snapshot = {}
    stable = False
    for _ in range(_MAX_ROUNDS):
        walk_errors: list[tuple[str, str]] = []
        if via is None:
            external = _external_dirs(agent, walk_errors)
            if report is not None:
                report.external_dirs = external
            # Rescue copies saved outside the session dirs reference blobs too.
            rescue = os.path.join(agent, "rescue")
            roots = [
                sessions,
                rescue,
                *_breadcrumb_targets(agent, walk_errors),
                *external,
                *extra,
            ]
            snapshot = _walk(roots, walk_errors)
        else:
            snapshot = _walk_storage(via, [sessions, *extra], walk_errors)
        if via is None:
            # A root the caller named that is not there is unknown, not empty.
            walk_errors += [(root, "not there") for root in extra if not os.path.lexists(root)]
        errors = walk_errors
        changed = [p for p, sig in snapshot.items() if scanned.get(p) != sig]
        if not changed and scanned:
            stable = True
            break
        for path in changed:
            if progress is not None:
                progress(path)
            try:
                if via is None:
                    read = _scan_file(path, found)
                else:
                    read = _scan_stored(via, path, found)
            except FileNotFoundError:
                continue  # gone since the walk; the next pass decides
            except (OSError, ValueError) as exc:
                reason = exc.strerror if isinstance(exc, OSError) else None
                errors.append((path, reason or str(exc)))
                continue
            if report is not None:
                report.bytes_scanned += read
            scanned[path] = snapshot[path]
        if not snapshot:
            stable = True
            break
    # Files that failed to read stay unscanned; report each once.
    unreadable = list(dict.fromkeys(errors))
    if report is not None:
        report.files_scanned = len(scanned)
    return found, unreadable, stable


def collect_garbage(
    parts: StoreParts,
    *,
    delete: bool = False,
    min_age_seconds: float = DEFAULT_MIN_AGE_SECONDS,
    extra_roots: Iterable[str] = (),
    now: float | None = None,
    progress: Progress | None = None,
) -> GcReport:
    """Find blobs no session references; with `delete=True`, remove the old enough ones.

    See the module docstring for the marking rules. Deletion is refused (and
    `refused` says why) when a file could not be read, the store kept changing,
    or there is no session file at all. The storage is where the sessions are;
    its own blob store, when it has one, is where the blobs are, else
    `<agent dir>/blobs`. `now` sorts blobs into young and old for the
    report only: deletion checks each blob's age again on the real clock (a blob
    store's `delete` on its own clock), whatever `now` says.
    """
    agent = parts.agent_dir
    store = storage_blob_store(parts.storage)
    blob_dir = (
        os.path.join(agent, "blobs") if store is None else str(getattr(store, "dir", "") or "")
    )
    report = GcReport(blob_dir)
    if delete and store is None:
        put_back_taken(blob_dir)
    # Before marking: a manager lets a pin go only once a file names the blob.
    pinned, pin_errors = _pinned(store, blob_dir, report, remove_stale=False)
    referenced, unreadable, stable = find_referenced_hashes(parts, extra_roots, progress, report)
    report.unreadable = pin_errors + unreadable
    report.referenced = len(referenced)
    blobs = list_blobs(blob_dir) if store is None else list_store_blobs(store)
    report.blobs = len(blobs)
    report.blob_bytes = sum(b.size for b in blobs)
    if now is not None:
        clock = now
    else:
        clock = time.time() if store is None else store.now()
    for blob in blobs:
        if blob.hash in referenced or blob.hash in pinned:
            continue
        if clock - blob.newest < min_age_seconds:
            report.young.append(blob)
        else:
            report.unreferenced.append(blob)
    if not delete:
        return report
    if report.unreadable:
        first = report.unreadable[0][0]
        more = f" and {len(report.unreadable) - 1} more" if len(report.unreadable) > 1 else ""
        report.refused = f"{first}{more} could not be read; deleting nothing"
    elif not stable:
        report.refused = "session files kept changing while being read; deleting nothing"
    elif report.files_scanned == 0 and blobs:
        where = os.path.join(agent if store is None else parts.root, "sessions")
        report.refused = f"no session file found under {where}; refusing to delete every blob"
    if report.refused is not None:
        return report
    # Again just before deleting: a manager may have pinned an old blob since.
    again, pin_errors = _pinned(store, blob_dir, report, remove_stale=True)
    if pin_errors:
        report.unreadable = pin_errors
        report.refused = f"{len(pin_errors)} pin file(s) could not be read; deleting nothing"
        return report
    pinned |= again
    report.pinned = len(pinned)
    report.unreferenced = [b for b in report.unreferenced if b.hash not in pinned]
    if store is not None:
        for blob in report.unreferenced:
            if store.delete(blob.hash, min_age_seconds=min_age_seconds):
                report.deleted.append(blob)
        return report
    report.deleted = _delete_blobs(report.unreferenced, blob_dir, min_age_seconds)
    if report.deleted:
        fsync_directory(blob_dir)
    return report


def _pinned(
    store: CollectableBlobStore | None, blob_dir: str, report: GcReport, *, remove_stale: bool
) -> tuple[set[str], list[tuple[str, str]]]:
    """The hashes live managers pin (and the pin files that could not be read)."""
    if store is not None:
        pinned_hashes = getattr(store, "pinned_hashes", None)
        found = set(pinned_hashes()) if callable(pinned_hashes) else set()
        report.pinned = len(found)
        return found, []
    pins = read_pins(blob_dir, remove_stale=remove_stale)
    report.pinned = len(pins.hashes)
    report.stale_pins = pins.stale
    return pins.hashes, pins.unreadable


_TAKEN_SUFFIX = ".gc.tmp"
"""A blob file gc has taken from its name and not yet deleted or put back."""


def _delete_blobs(blobs: list[BlobFile], blob_dir: str, min_age_seconds: float) -> list[BlobFile]:
    """Delete these blobs (with their sidecars) unless a writer takes one meanwhile.

    A manager may put one again (a re-put touches its mtime) or pin it between gc's
    last look and the removal. So each blob's files are first taken from their names
    (renamed to hidden temp names), then the pins are read again and the files looked
    at once more: a blob touched or pinned meanwhile is put back, the rest deleted.
    A writer that comes after the rename finds the blob missing and stores it anew
    (`BlobStore.put`), or refuses to write a session naming it (a pin).
    """
    taken = [(blob, files) for blob in blobs if (files := _take(blob, min_age_seconds))]
    if not taken:
        return []
    pins = read_pins(blob_dir)
    deleted = []
    for blob, files in taken:
        kept = bool(pins.unreadable) or blob.hash in pins.hashes or _touched(files)
        for path, tmp, _ in files:
            if kept:
                _put_back(tmp, path)
            else:
                _unlink(tmp)
        if not kept:
            deleted.append(blob)
    return deleted


def _take(blob: BlobFile, min_age_seconds: float) -> list[tuple[str, str, int]]:
    """Rename the blob's files (sidecars first) to hidden temp names; (path, temp name,
    mtime_ns) of each. Nothing is taken when a file got younger since the listing.

    The age is taken on the real clock, never the caller's `now`: a `now` in the
    future must not make a blob a writer just put look old enough to delete.
    """
    clock = time.time()
    present = []
    for path in blob.paths:
        try:
            st = os.stat(path, follow_symlinks=False)
        except FileNotFoundError:
            continue
        newest = max(st.st_mtime, st.st_ctime)
        if clock - newest < min_age_seconds or newest > blob.newest:
            return []
        present.append((path, st.st_mtime_ns))
    files: list[tuple[str, str, int]] = []
    for path, mtime_ns in reversed(present):  # sidecars first: the blob itself goes last
        tmp = temp_side_path(path, _TAKEN_SUFFIX)
        try:
            os.rename(path, tmp)
        except FileNotFoundError:
            continue
        except OSError:
            for done, moved, _ in files:
                _put_back(moved, done)
            return []
        files.append((path, tmp, mtime_ns))
    return files


def _touched(files: list[tuple[str, str, int]]) -> bool:
    """Whether a writer touched one of the taken files before it was taken (a re-put)."""
    for _, tmp, mtime_ns in files:
        try:
            if os.stat(tmp, follow_symlinks=False).st_mtime_ns != mtime_ns:
                return True
        except OSError:
            return True  # cannot tell: keep it
    return False


def _put_back(tmp: str, path: str) -> None:
    """The taken file back under its name, unless a writer stored the blob anew there."""
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass  # stored anew meanwhile: the same bytes
    except OSError:
        if not os.path.lexists(path):
            os.rename(tmp, path)
            return
    _unlink(tmp)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def put_back_taken(blob_dir: str) -> None:
    """Put back the blob files a gc that stopped midway (a crash) left taken: the next
    run decides about them again."""
    try:
        names = os.listdir(blob_dir)
    except OSError:
        return
    for name in names:
        if not (name.startswith(".") and name.endswith(_TAKEN_SUFFIX)):
            continue
        stem = name[1:].rsplit(".", 3)[0]  # .<name>.<random>.gc.tmp
        if _BLOB_NAME.fullmatch(stem):
            _put_back(os.path.join(blob_dir, name), os.path.join(blob_dir, stem))
