"""The other machines' files of other agents, written on this machine where they are read
(`<view root>/<machine>/<agent>/<path>`), and found again as stores.

The view is written from names another machine chose: every dir is opened beneath the
view root one component at a time with `O_NOFOLLOW` (a symlink planted anywhere in it,
pointing at an agent's own store or anywhere else, is refused, never followed), every
file is opened the same way, and a file is replaced by a rename inside its dir. The
view is derived: a copy lost in a crash is written whole again (its identity differs
from the one remembered), so nothing here is synced to disk.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Sequence

from sessiontree._util.fs import (
    DIR_MODE,
    FILE_MODE,
    O_CLOEXEC,
    O_NOFOLLOW,
    open_regular,
    write_all,
)
from sessiontree.layout import is_safe_name
from sessiontree.sync._foreign_paths import FOREIGN_SYNCED
from sessiontree.sync._names import HubNameError, check_machine_name

__all__ = ["MACHINES_DIR", "ViewRefused", "ViewTree", "machine_views"]

MACHINES_DIR = "machines"
"""The dir of a hub's sync dir holding one view per other machine."""

_O_DIRECTORY: int = getattr(os, "O_DIRECTORY", 0)


class ViewRefused(OSError):
    """A path of the view that is not written: a symlink or a non-dir in its way."""


class ViewTree:
    """The view root, open; every path below it given as its parts."""

    def __init__(self, root: str) -> None:
        os.makedirs(root, DIR_MODE, exist_ok=True)
        self.root = root
        try:
            self._fd = os.open(root, os.O_RDONLY | _O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        except OSError as exc:
            raise ViewRefused(exc.errno, "the view root is a symlink or no dir", root) from None

    def close(self) -> None:
        os.close(self._fd)

    def __enter__(self) -> ViewTree:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _dir(self, parts: Sequence[str], create: bool) -> int | None:
        """A descriptor of the dir `parts` names (made when `create`), None when it is
        missing; ViewRefused when a symlink or a file stands in the way."""
        fd = os.dup(self._fd)
        try:
            for at, name in enumerate(parts):
                if not is_safe_name(name):
                    raise ViewRefused(errno.EINVAL, "not a plain name", self._path(parts[: at + 1]))
                if create:
                    try:
                        os.mkdir(name, DIR_MODE, dir_fd=fd)
                    except FileExistsError:
                        pass
                try:
                    inner = os.open(
                        name, os.O_RDONLY | _O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, dir_fd=fd
                    )
                except FileNotFoundError:
                    if create:
                        raise
                    os.close(fd)
                    return None
                except OSError as exc:  # ELOOP: a symlink; ENOTDIR: a file
                    raise ViewRefused(
                        exc.errno, "a symlink or a file where a dir is", self._path(parts[: at + 1])
                    ) from None
                os.close(fd)
                fd = inner
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _path(self, parts: Sequence[str]) -> str:
        return os.path.join(self.root, *parts)

    def lstat(self, parts: Sequence[str]) -> os.stat_result | None:
        """The file's own stat (a symlink's, not its target's); None when missing."""
        fd = self._dir(parts[:-1], create=False)
        if fd is None:
            return None
        try:
            return os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        finally:
            os.close(fd)

    def append(
        self, parts: Sequence[str], data: bytes, expected: tuple[int, int], mtime_ns: int
    ) -> os.stat_result | None:
        """Append `data` to the file if it is still the one remembered (inode, size);
        its stat after, or None when it is not (the caller writes it whole)."""
        fd = self._dir(parts[:-1], create=False)
        if fd is None:
            return None
        try:
            try:
                # A FIFO there is refused, never waited on (no reader: the open blocks).
                file = open_regular(parts[-1], os.O_WRONLY | os.O_APPEND, dir_fd=fd)
            except OSError:
                return None
            try:
                st = os.fstat(file)
                if not stat.S_ISREG(st.st_mode) or (st.st_ino, st.st_size) != expected:
                    return None
                write_all(file, data)
                if mtime_ns:
                    os.utime(file, ns=(mtime_ns, mtime_ns))
                return os.fstat(file)
            finally:
                os.close(file)
        finally:
            os.close(fd)

    def replace(self, parts: Sequence[str], data: bytes, mtime_ns: int) -> os.stat_result:
        """Write the file whole (a new file renamed over the old one, in its dir)."""
        fd = self._dir(parts[:-1], create=True)
        assert fd is not None
        name = parts[-1]
        try:
            try:
                old = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                old = None
            if old is not None and not stat.S_ISREG(old.st_mode):
                raise ViewRefused(errno.EEXIST, "a symlink or a dir is there", self._path(parts))
            temp = f".{name[:200]}.{secrets.token_hex(6)}.tmp"
            file = os.open(
                temp,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                FILE_MODE,
                dir_fd=fd,
            )
            try:
                try:
                    write_all(file, data)
                    if mtime_ns:
                        os.utime(file, ns=(mtime_ns, mtime_ns))
                    st = os.fstat(file)
                finally:
                    os.close(file)
                os.replace(temp, name, src_dir_fd=fd, dst_dir_fd=fd)
            except BaseException:
                try:
                    os.unlink(temp, dir_fd=fd)
                except OSError:
                    pass
                raise
            return st
        finally:
            os.close(fd)


def machine_views(sync_dir: str) -> list[tuple[str, str, str]]:
    """(machine, agent, home) of every view under `sync_dir` (`<sync dir>/<hub>/machines/
    <machine>/<agent>`), each a real dir (a symlink is passed over), sorted."""
    found: list[tuple[str, str, str]] = []
    for hub in _real_dirs(sync_dir):
        machines = os.path.join(sync_dir, hub, MACHINES_DIR)
        for machine in _real_dirs(machines):
            try:
                check_machine_name(machine)
            except HubNameError:
                continue
            for agent in _real_dirs(os.path.join(machines, machine)):
                if agent in FOREIGN_SYNCED:
                    found.append((machine, agent, os.path.join(machines, machine, agent)))
    return sorted(found)


def _real_dirs(path: str) -> list[str]:
    try:
        with os.scandir(path) as entries:
            return sorted(e.name for e in entries if e.is_dir(follow_symlinks=False))
    except OSError:
        return []
