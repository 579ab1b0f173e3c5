"""The session files of a local pi-format store as a sync sees them: each with its
project dir, file name and identity, found without reading any of them, and the
identity of one file now."""

from __future__ import annotations

import os
from dataclasses import dataclass

from sessiontree.layout import StoreParts
from sessiontree.listing import stat_identity
from sessiontree.storage import HostFilesystem, directory_tree
from sessiontree.sync._names import is_project_dir_name, is_session_file_name

__all__ = ["Identity", "LocalFile", "identity_now", "local_files"]

Identity = tuple[int, int, int, int]


@dataclass(frozen=True, slots=True)
class LocalFile:
    project: str
    name: str
    path: str
    identity: Identity
    """`stat_identity`: size, mtime_ns, inode, ctime_ns (0: a storage that keeps none)."""

    @property
    def size(self) -> int:
        return self.identity[0]

    @property
    def ino(self) -> int:
        return self.identity[2]


def identity_now(parts: StoreParts, path: str) -> Identity:
    """The file's identity now (FileNotFoundError when it is gone)."""
    storage = parts.storage
    if isinstance(storage, HostFilesystem):
        return stat_identity(os.stat(storage.host_path(path)))
    s = storage.stat(path)
    return s.size, s.mtime_ns or int(s.mtime_ms * 1e6), s.ino, 0


def local_files(parts: StoreParts, now_ns: int) -> list[LocalFile]:
    """Every session file `<sessions>/<project dir>/<name>.jsonl` of the store (names a
    hub could not carry are left out), stat'ed at `now_ns`."""
    storage = parts.storage
    sessions = parts.sessions_dir
    out: list[LocalFile] = []
    if isinstance(storage, HostFilesystem):
        top = storage.host_path(sessions)
        try:
            projects = sorted(e.name for e in os.scandir(top) if e.is_dir(follow_symlinks=False))
        except OSError:
            return out
        for project in projects:
            if not is_project_dir_name(project):
                continue
            try:
                with os.scandir(os.path.join(top, project)) as entries:
                    found = [
                        (e.name, e.stat(follow_symlinks=False))
                        for e in entries
                        if is_session_file_name(e.name) and e.is_file(follow_symlinks=False)
                    ]
            except OSError:
                continue
            for name, st in sorted(found):
                path = os.path.join(sessions, project, name)
                out.append(LocalFile(project, name, path, stat_identity(st, now_ns)))
        return out
    for directory in sorted(directory_tree(storage, "a sync").list_dirs(sessions)):
        project = os.path.basename(directory)
        if not is_project_dir_name(project):
            continue
        for path in sorted(storage.list_files(directory, "*.jsonl")):
            name = os.path.basename(path)
            if not is_session_file_name(name):
                continue
            try:
                s = storage.stat(path)
            except FileNotFoundError:
                continue
            ident = (s.size, s.mtime_ns or int(s.mtime_ms * 1e6), s.ino, 0)
            out.append(LocalFile(project, name, path, ident))
    return out
