"""Restore: archived files written back byte for byte with their mtimes, only under
the target named, never through a symlink, never over an existing file."""

from __future__ import annotations

import errno
import os
import re
import secrets
import stat
from dataclasses import replace

from sessiontree._util.fs import (
    NO_HARD_LINKS,
    O_CLOEXEC,
    O_NOFOLLOW,
    ensure_private_dir,
    side_path,
    write_all,
)
from sessiontree.archive._chunks import file_hash, get_chunk
from sessiontree.archive._contents import archived_files
from sessiontree.archive._ids import find_archived_session
from sessiontree.archive._manifests import load_manifest
from sessiontree.archive._model import ArchivedFile, ArchivedVersion, ArchiveError, RestoreReport
from sessiontree.archive._restore_targets import agent_file, restore_refusal, safe_rel
from sessiontree.archive._sessions import PI_FORMAT, companions
from sessiontree.archive._storage import ArchiveStorage, inside, opened
from sessiontree.archive._versions import described, pick_version


def archived_versions(archive: str, session: str) -> tuple[ArchivedFile, list[ArchivedVersion]]:
    """The archived session `session` (as `restore_session` finds it) and every version
    of it the archive keeps, oldest first."""
    file, _ = find_archived_session(archive, archived_files(archive), session)
    with opened(archive) as place:
        manifest = load_manifest(place, file.key) or {}
        return file, described(place, manifest)


def _version_at(versions: list[ArchivedVersion], at_ms: int, where: str) -> int:
    """The version the file held at `at_ms` (epoch ms): the newest written by then."""
    held = [v.number for v in versions if v.mtime_ns // 1_000_000 <= at_ms]
    if not held:
        raise ArchiveError(f"{where}: the archive keeps no version written by then")
    return held[-1]


def restore_session(
    archive: str,
    session: str,
    *,
    to: str | None = None,
    deleted_only: bool = False,
    version: int | None = None,
    at_ms: int | None = None,
) -> RestoreReport:
    """Write the archived session `session` (its id as `list` shows it, a prefix of that,
    its file name, or its path) and its companion files back where its agent keeps them
    (or under `to`, as the agent's home), byte for byte with their mtimes. A file already
    there with the same bytes is left alone; one with other bytes is never replaced
    (ArchiveError: give `to`).
    `version` (a number of `archived_versions`) or `at_ms` (the version the file held
    then) restores an earlier version of the session file (its companions as they are
    newest)."""
    every = archived_files(archive)
    file, session_id = find_archived_session(archive, every, session)
    where = f"{file.agent}:{file.home}/{file.rel}"
    notes = []
    with opened(archive) as place:
        versions = described(place, load_manifest(place, file.key) or {})
    if at_ms is not None:
        version = _version_at(versions, at_ms, where)
    if version is not None and not 1 <= version <= len(versions):
        raise ArchiveError(
            f"{where}: has no version {version} (the archive keeps versions 1 to {len(versions)})"
        )
    if version is not None and version != len(versions):
        file = replace(file, version=version)
    elif versions[-1].clobber:
        fullest = max(versions, key=lambda v: (v.lines or 0, v.number))
        notes.append(
            f"{where}: the newest version ({versions[-1].lines} lines) is a clobber; version "
            f"{fullest.number} holds {fullest.lines} lines: restore --version "
            f"{fullest.number} (with --to, as the file is there)"
        )
    found = next(f for f in every if f.key == file.key)  # the one `companions` passes over
    files = [file, *companions(found, session_id, every)]
    if file.agent in PI_FORMAT:
        files += _blobs_of(archive, files, every)
    report = restore_files(archive, files, to=to)
    report.notes.extend(notes)
    return report


_BLOB_REF = re.compile(rb"blob:sha256:([0-9a-f]{64})")


def _blobs_of(
    archive: str, files: list[ArchivedFile], every: list[ArchivedFile]
) -> list[ArchivedFile]:
    """The images a pi-format session refers to (`blob:sha256:<hex>`): they are kept in
    its agent dir's `blobs/` (`<hex>`, and a `<hex>.<ext>` beside), shared by sessions,
    not beside the session; a restore brings back the ones its files name."""
    refs: set[str] = set()
    with opened(archive) as place:
        for file in files:
            manifest = load_manifest(place, file.key) or {}
            chunks = pick_version(manifest, file.version, file.manifest).get("chunks", [])
            data = b"".join(get_chunk(place, d, n) for d, n in chunks)
            refs.update(m.decode() for m in _BLOB_REF.findall(data))
    home = files[0].home
    return [
        other
        for other in every
        if other.agent == files[0].agent
        and other.home == home
        and other.rel.startswith("blobs/")
        and other.rel[6:].split(".", 1)[0] in refs
        and other not in files
    ]


def restore_files(
    archive: str,
    files: list[ArchivedFile],
    *,
    to: str | None,
    keep_going: bool = False,
    per_agent: bool = False,
) -> RestoreReport:
    """Write `files` (of `archived_files(archive)`) back (see `restore_session`).
    `keep_going`: a file that cannot be restored (there with other bytes: a session
    the agent wrote to since it was archived; a damaged chunk) is named in `conflicts`,
    and the others are still restored (`restore --all` after a cleanup: the sessions
    gone come back); a full disk still stops it. `per_agent` (with `to`): each store's
    files go under `to/<agent>/` (`<agent>-2/` for a second home of one agent), not all
    under `to` (pi's and Codex's `sessions/` would mix)."""
    with opened(archive) as place:
        return _restore(place, files, to, keep_going=keep_going, per_agent=per_agent)


def _agent_folders(files: list[ArchivedFile]) -> dict[tuple[str, str], str]:
    """The folder under `--to` of each (agent, home) of `files`: the agent's name, its
    further homes numbered in the order of their paths."""
    homes: dict[str, set[str]] = {}
    for file in files:
        homes.setdefault(file.agent, set()).add(file.home)
    return {
        (agent, home): agent if number == 1 else f"{agent}-{number}"
        for agent, every in homes.items()
        for number, home in enumerate(sorted(every), 1)
    }


def _opencode_note(targets: list[str]) -> str:
    """How OpenCode takes back the `opencode export` documents restored: it reads its
    sessions from its database, never from a file where it is written."""
    if len(targets) == 1:
        return (
            f"{targets[0]}: an `opencode export` document, which OpenCode does not read "
            f"where it is; `opencode import {targets[0]}` takes the session back"
        )
    return (
        f"{len(targets)} OpenCode sessions are `opencode export` documents (such as "
        f"{targets[0]}), which OpenCode does not read where they are; `opencode import "
        "FILE` takes each back"
    )


def _restore(
    archive: ArchiveStorage,
    files: list[ArchivedFile],
    to: str | None,
    *,
    keep_going: bool = False,
    per_agent: bool = False,
) -> RestoreReport:
    report = RestoreReport()
    folders = _agent_folders(files) if per_agent and to is not None else {}
    if to is not None:
        to = os.path.abspath(os.path.expanduser(to))
        local = archive.local
        if local is not None and (inside(to, local) or inside(local, to)):
            raise ArchiveError(f"{to}: is the archive, or inside it, or holds it")
    plans = []
    for file in files:
        if not safe_rel(file.rel):
            raise ArchiveError(f"{file.manifest}: names {file.rel!r}, not a path inside a store")
        if not agent_file(file.agent, file.rel):
            raise ArchiveError(
                f"{file.manifest}: names {file.agent}:{file.rel!r}, not a file of that "
                "agent's session dirs; refused"
            )
        home = to if to is not None else file.home
        if to is not None and folders:  # an agent known to `agent_file`: a plain name
            home = os.path.join(to, folders[(file.agent, file.home)])
        if not os.path.isabs(home) or os.path.normpath(home) != home:
            raise ArchiveError(f"{file.manifest}: its home {home!r} is not an absolute path")
        refusal = None if to is not None else restore_refusal(file)
        if refusal is not None:
            if not keep_going:
                raise ArchiveError(refusal)
            report.conflicts.append(refusal)
            continue
        target = os.path.join(home, file.rel)
        if archive.local is not None and inside(target, archive.local):
            raise ArchiveError(f"{target}: is inside the archive; a restore never writes there")
        plans.append((file, home, target))
    for file, home, target in plans:
        try:
            _restore_one(archive, file, home, target, report)
        except (ArchiveError, OSError) as exc:
            full = isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)
            if not keep_going or full:
                raise
            why = str(exc) if isinstance(exc, ArchiveError) else f"{target}: {exc}"
            report.conflicts.append(why)
    there = {*report.written, *report.unchanged}
    exports = [
        target
        for file, _, target in plans
        if file.agent == "opencode" and file.rel.startswith("export/") and target in there
    ]
    if exports:
        report.notes.append(_opencode_note(exports))
    return report


def _restore_one(
    archive: ArchiveStorage, file: ArchivedFile, home: str, target: str, report: RestoreReport
) -> None:
    manifest = pick_version(load_manifest(archive, file.key) or {}, file.version, file.manifest)
    data = b"".join(get_chunk(archive, d, int(n)) for d, n in manifest.get("chunks", []))
    if file_hash(manifest.get("chunks", [])) != manifest.get("hash"):
        raise ArchiveError(f"{file.manifest}: does not match its recorded hash")
    mtime = int(manifest.get("mtimeNs") or 0)
    directory = _open_dirs_inside(home, os.path.dirname(target))
    try:
        written = _write_new_in(directory, target, data, mtime)
    finally:
        os.close(directory)
    (report.written if written else report.unchanged).append(target)


def _open_dirs_inside(home: str, directory: str) -> int:
    """A descriptor of `directory` under `home`, each component below `home` made where
    missing and opened without following a symlink: a restore never writes through
    one, not even one that replaces a dir between a look and the write (a `--to` dir
    that another user can write to)."""
    ensure_private_dir(home)
    fd = os.open(home, os.O_RDONLY | os.O_DIRECTORY | O_CLOEXEC)
    rel = os.path.relpath(directory, home)
    current = home
    try:
        for part in [] if rel == "." else rel.split(os.sep):
            current = os.path.join(current, part)
            try:
                os.mkdir(part, 0o700, dir_fd=fd)
            except FileExistsError:
                pass
            try:
                inner = os.open(
                    part, os.O_RDONLY | os.O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, dir_fd=fd
                )
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise ArchiveError(
                        f"{current}: is a symlink (or not a dir); a restore never writes "
                        "through one"
                    ) from None
                raise
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def _write_new_in(directory: int, target: str, data: bytes, mtime: int) -> bool:
    """Write `data` as the new file `target` in the dir open as `directory` (True), or
    find it there with these bytes (False); anything else there is left alone
    (ArchiveError). Every name is taken relative to `directory`, never followed."""
    name = os.path.basename(target)
    try:
        st = os.lstat(name, dir_fd=directory)
    except FileNotFoundError:
        st = None
    if st is not None:
        if not stat.S_ISREG(st.st_mode):
            raise ArchiveError(f"{target}: is there and is not a regular file; left alone")
        fd = os.open(name, os.O_RDONLY | O_NOFOLLOW | O_CLOEXEC | os.O_NONBLOCK, dir_fd=directory)
        with open(fd, "rb") as f:
            if stat.S_ISREG(os.fstat(f.fileno()).st_mode) and f.read() == data:
                return False
        raise ArchiveError(
            f"{target}: is there with other bytes; never replaced (restore it --to another dir)"
        )
    temp = os.path.basename(side_path(target, f".{secrets.token_hex(6)}.tmp", hidden=True))
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | O_NOFOLLOW | O_CLOEXEC
    fd = os.open(temp, flags, 0o600, dir_fd=directory)
    try:
        try:
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(temp, name, src_dir_fd=directory, dst_dir_fd=directory, follow_symlinks=False)
        except FileExistsError:
            raise ArchiveError(
                f"{target}: appeared while it was restored; left alone (run again)"
            ) from None
        except OSError as exc:
            if exc.errno not in NO_HARD_LINKS:
                raise
            try:  # a filesystem without hard links: a rename to a name found free
                os.lstat(name, dir_fd=directory)
            except FileNotFoundError:
                os.rename(temp, name, src_dir_fd=directory, dst_dir_fd=directory)
            else:
                raise ArchiveError(
                    f"{target}: appeared while it was restored; left alone (run again)"
                ) from None
    finally:
        try:
            os.unlink(temp, dir_fd=directory)
        except OSError:
            pass
    os.fsync(directory)
    if mtime:
        os.utime(name, ns=(mtime, mtime), dir_fd=directory, follow_symlinks=False)
    return True
