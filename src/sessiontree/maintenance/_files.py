"""Store maintenance: finding session files, migrating them in place, deleting them.

`session_files` enumerates what a store holds (valid or not, which discovery's
listings skip); `migrate_session_file` brings one file to the current version
through `SessionManager.open` (an atomic rewrite) and says what changed;
`delete_session` removes a session file together with its artifacts directory.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field

from sessiontree._util.fs import file_kind
from sessiontree.errors import InvalidSessionFileError, SessionTreeError, SessionWriteConflictError
from sessiontree.format import CURRENT_SESSION_VERSION, Entry, session_version
from sessiontree.layout import (
    StoreParts,
    encode_session_dir_name,
    home_relative_dir_name,
    registered_session_dirs,
)
from sessiontree.session import read_head
from sessiontree.storage import (
    HostFilesystem,
    LockingStorage,
    MissingCapabilityError,
    RootedStorage,
    SessionStorage,
    acquire_session_lock,
    default_storage,
    directory_tree,
    sync_dir,
)

__all__ = [
    "DeletePlan",
    "MigrationResult",
    "artifacts_dir",
    "delete_session",
    "file_version",
    "migrate_session_file",
    "plan_delete",
    "project_session_dirs",
    "session_files",
]


def project_session_dirs(cwd: str, parts: StoreParts) -> list[str]:
    """The existing session dirs of `cwd`'s project (both naming schemes the agents use)."""
    root, storage = parts.sessions_dir, parts.storage
    names = [encode_session_dir_name(cwd)]
    home_relative = home_relative_dir_name(cwd)
    if home_relative is not None and home_relative not in names:
        names.append(home_relative)
    if isinstance(storage, HostFilesystem):
        return [os.path.join(root, n) for n in names if os.path.isdir(os.path.join(root, n))]
    listed = set(directory_tree(storage, "finding a project's sessions").list_dirs(root))
    return [os.path.join(root, n) for n in names if os.path.join(root, n) in listed]


def _stored_session_files(storage: SessionStorage, root: str, max_depth: int | None) -> list[str]:
    """`session_files` through a storage's `list_dirs`/`list_files`."""
    found: list[str] = []
    pending = [(root, 0)]
    while pending:
        directory, depth = pending.pop()
        found.extend(storage.list_files(directory, "*.jsonl"))
        if max_depth is not None and depth >= max_depth:
            continue
        pending.extend(
            (d, depth + 1)
            for d in directory_tree(storage, "finding every session").list_dirs(directory)
            if not os.path.basename(d).startswith(".")
        )
    return found


def session_files(
    parts: StoreParts,
    cwd: str | None = None,
    *,
    nested: bool = True,
    passed_over: list[tuple[str, str]] | None = None,
) -> list[str]:
    """Every `*.jsonl` session file of the store, sorted (dot files skipped).

    With `cwd`, only that project's dirs. `nested` includes sessions kept
    inside artifacts dirs (subagents). Files that are not valid sessions are
    included: they are what `verify` is for. A FIFO, socket or device named like
    a session is not a file: it is left out (a reader would block on it), and
    added to `passed_over` as (path, what it is) when given. For a storage other than
    the files, paths are under the agent dir as it maps them.
    """
    storage = parts.storage
    roots = [parts.sessions_dir] if cwd is None else project_session_dirs(cwd, parts)
    if not isinstance(storage, HostFilesystem):
        depth = None if nested else (1 if cwd is None else 0)
        return sorted(p for r in roots for p in _stored_session_files(storage, r, depth))
    found: list[str] = []
    for root in roots:
        depth0 = root.rstrip(os.sep).count(os.sep)
        for directory, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            if not nested and directory.count(os.sep) - depth0 >= (2 if cwd is None else 1):
                dirs[:] = []
                continue
            for f in sorted(files):
                if f.endswith(".jsonl") and not f.startswith("."):
                    path = os.path.join(directory, f)
                    what = _not_a_file(path)
                    if what is None:
                        found.append(path)
                    elif passed_over is not None:
                        passed_over.append((path, what))
    return sorted(found)


def _not_a_file(path: str) -> str | None:
    """What `path` is when it is there and not a regular file (a FIFO...), else None.

    A path that cannot be looked at is kept: its reader says why it cannot be read.
    """
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    return None if stat.S_ISREG(mode) else f"{file_kind(mode)}, not a regular file"


def file_version(path: str, storage: SessionStorage | None = None) -> int | None:
    """The format version written in a session file's header (1 when absent), None if none.

    Reads only the start of the file, up to the end of the header line.
    """
    storage = default_storage(storage)
    header = read_head(path, storage)
    return session_version([header]) if header is not None else None


def artifacts_dir(path: str) -> str | None:
    """The artifacts directory of a session file: its path without `.jsonl`."""
    return path[: -len(".jsonl")] if path.endswith(".jsonl") else None


_STORE_NAME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}-\d{3}Z_(.+)")


@dataclass(frozen=True, slots=True)
class DeletePlan:
    """What `delete_session` removes: the file, and its artifacts dir when it has one."""

    path: str
    artifacts: str | None
    valid: bool
    """The file starts with a valid session header (else only `force` deletes it)."""
    ino: int


def _session_roots(parts: StoreParts) -> list[str]:
    storage = parts.storage
    if not isinstance(storage, HostFilesystem) and isinstance(storage, RootedStorage):
        return [os.path.join(parts.root, "sessions")]
    roots = [parts.sessions_dir]
    try:
        roots += registered_session_dirs(parts.agent_dir)
    except OSError:
        pass
    return [os.path.realpath(r) for r in roots]


def _inside(path: str, roots: list[str]) -> bool:
    return any(os.path.commonpath([path, root]) == root for root in roots)


def _header_of(path: str, storage: SessionStorage) -> Entry | None:
    """The session header of a file (after an optional title slot), None if it has none."""
    return read_head(path, storage)


def plan_delete(path: str, parts: StoreParts, *, force: bool = False) -> DeletePlan:
    """Check that `path` is a session of this store before anything deletes it.

    Refuses (SessionTreeError) a symlink, a file that is not `*.jsonl`, a file
    outside `<agent>/sessions` and the registered outside session dirs, and (unless
    `force`) a file without a valid session header. The artifacts dir is included
    only for a file named `<timestamp>_<header id>.jsonl` whose sibling dir has
    exactly that stem. FileNotFoundError when there is no such file.
    """
    storage, agent = parts.storage, parts.agent_dir
    files = isinstance(storage, HostFilesystem)
    if files:
        if os.path.islink(path):
            raise SessionTreeError(f"{path}: is a symbolic link, not a session file; not deleted")
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{path}: no such session file")
        where = os.path.realpath(path)
    else:
        if not storage.exists(path):
            raise FileNotFoundError(f"{path}: no such session file")
        where = os.path.normpath(path)
    if not path.endswith(".jsonl"):
        raise SessionTreeError(f"{path}: not a session file (not *.jsonl); not deleted")
    if not _inside(where, _session_roots(parts)):
        raise SessionTreeError(
            f"{path}: not in the session store ({os.path.join(agent, 'sessions')} or a "
            "registered session dir); not deleted"
        )
    header = _header_of(path, storage)
    if header is None and not force:
        raise InvalidSessionFileError(
            path,
            f"{path}: not a valid session file (no session header); "
            "--force deletes a damaged session",
        )
    artifacts = None
    stem = artifacts_dir(path)
    match = _STORE_NAME.fullmatch(os.path.basename(stem or ""))
    if header is not None and stem is not None and match and match.group(1) == header["id"]:
        if (os.path.isdir(stem) and not os.path.islink(stem)) if files else storage.exists(stem):
            artifacts = stem
    return DeletePlan(path, artifacts, header is not None, storage.stat(path).ino)


def delete_session(path: str, parts: StoreParts, *, force: bool = False) -> list[str]:
    """Remove a session file and its artifacts dir; returns what was removed.

    `plan_delete` decides what may go. SessionLockError when a live writer holds
    the session; SessionWriteConflictError when the file changed since it was checked.
    """
    storage = parts.storage
    directory_tree(storage, "rm (it removes the artifacts dir too)")
    if not isinstance(storage, LockingStorage):
        raise MissingCapabilityError(
            storage, "LockingStorage (acquire_lock)", "rm (a live writer must be able to refuse it)"
        )
    plan = plan_delete(path, parts, force=force)
    removed = []
    # SessionLockError when a live agent is writing this session.
    lock = acquire_session_lock(storage, path)
    try:
        if storage.stat(path).ino != plan.ino:
            raise SessionWriteConflictError(
                path, f"{path}: replaced while being deleted; nothing was deleted"
            )
        storage.unlink(path)
        removed.append(path)
        if plan.artifacts is not None:
            directory_tree(storage, "removing an artifacts dir").remove_tree(plan.artifacts)
            removed.append(plan.artifacts + os.sep)
    finally:
        if lock is not None:
            lock.release()
    sync_dir(storage, os.path.dirname(path) or ".")
    return removed


@dataclass(slots=True)
class MigrationResult:
    """What migrating one file did (or, on a dry run, would do)."""

    path: str
    from_version: int
    to_version: int
    changes: list[str] = field(default_factory=list)
    written: bool = False

    @property
    def needed(self) -> bool:
        return self.from_version < self.to_version


def migrate_session_file(path: str, parts: StoreParts, *, dry_run: bool = False) -> MigrationResult:
    """Bring one session file to the current version, atomically; report what changed.

    A current file is not touched. The rewrite is `SessionManager.open`'s (temp
    file, fsync, rename), so lines no reader can parse are not carried over;
    they are counted in the changes. InvalidSessionFileError for a file without
    a valid header, FileNotFoundError for a missing one. The session's images are in
    `parts.blobs_for(path)`; its agent dir's `rescue/` is the store's.
    """
    # The checker and the session manager are the migration's: listing the store's files
    # (what a usage report or an import does with this module) needs neither.
    from sessiontree.maintenance._check import scan_session
    from sessiontree.session import SessionManager, backup_path

    storage = parts.storage
    scanned = scan_session(path, storage)
    if scanned.header is None:
        if scanned.blank:
            raise InvalidSessionFileError(path, f"{path}: empty file, nothing to migrate")
        raise InvalidSessionFileError(path, line=scanned.invalid_header_line)
    version = scanned.version
    result = MigrationResult(path, version, max(version, CURRENT_SESSION_VERSION))
    if not result.needed:
        return result
    entries = [line.entry for line in scanned.entries]
    if version < 2:
        result.changes.append(
            f"gave {len(entries)} entries ids and parentIds (a linear chain in file order)"
        )
        converted = sum(
            1 for e in entries if e.get("type") == "compaction" and "firstKeptEntryIndex" in e
        )
        if converted:
            result.changes.append(
                f"converted firstKeptEntryIndex to firstKeptEntryId in {converted} compaction(s)"
            )
    hook = sum(
        1
        for e in entries
        if e.get("type") == "message"
        and isinstance(e.get("message"), dict)
        and e["message"].get("role") == "hookMessage"
    )
    if hook:
        result.changes.append(f"renamed message role hookMessage to custom in {hook} entries")
    dropped = len(scanned.malformed)
    if dropped:
        result.changes.append(f"dropped {dropped} unparseable line(s)")
    result.changes.append(f"header version {version} -> {result.to_version}")
    if dry_run:
        if dropped:
            result.changes[-2] += " (the file as it was would be kept as a .bak)"
        return result
    backup = backup_path(storage, path)  # where the rewrite keeps the dropped lines
    manager = SessionManager.open(
        path,
        storage=storage,
        blob_store=parts.blobs_for(path),
        breadcrumb=False,
        agent_dir=parts.agent_dir,
    )
    manager.close()
    if dropped and storage.exists(backup):
        result.changes[-2] += f" (the file as it was is kept as {backup})"
    result.written = True
    return result
