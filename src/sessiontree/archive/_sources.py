"""Reading the stores' files for a run: the walk (no symlink followed), a span of a
file, and the check that a file that grew still holds what was archived of it."""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator
from typing import Any

import xxhash

from sessiontree._util.fs import O_CLOEXEC, O_NOFOLLOW
from sessiontree.archive._model import ArchiveReport


def walk_files(
    home: str, root: str, report: ArchiveReport, unreadable: set[str] | None = None
) -> Iterator[tuple[str, os.stat_result]]:
    """Regular files under `home/root` (relative paths), no symlink followed below
    the root. A dir that cannot be read is named in `report.skipped` and its path
    (relative, with a trailing slash) added to `unreadable`: its files are not gone."""
    top = os.path.join(home, root)
    stack = [top]
    while stack:
        directory = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError as exc:
            if os.path.lexists(directory):
                report.skipped.append(f"{directory}: cannot be read ({exc.strerror or exc})")
                if unreadable is not None:
                    unreadable.add(os.path.join(os.path.relpath(directory, home), ""))
            continue
        for entry in sorted(entries, key=lambda e: e.name):
            if entry.is_symlink():
                report.skipped.append(f"{entry.path}: a symlink (not followed)")
                continue
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
            elif entry.is_file(follow_symlinks=False) and not entry.name.endswith(".tmp"):
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                yield os.path.relpath(entry.path, home), st


def read_span(path: str, offset: int, size: int) -> tuple[bytes, os.stat_result] | None:
    """`size` bytes of `path` from `offset`, and its stat when opened; None when the
    file is gone, is no longer a regular file, or was replaced or cut meanwhile."""
    try:
        # O_NONBLOCK: a FIFO put where the file was (between the walk and this open)
        # would block the run forever; it is refused below as not a regular file.
        fd = os.open(path, os.O_RDONLY | O_CLOEXEC | O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        before = os.fstat(fd)
        if not stat.S_ISREG(before.st_mode):
            return None
        data = os.pread(fd, size, offset) if size else b""
        while len(data) < size:
            more = os.pread(fd, size - len(data), offset + len(data))
            if not more:
                return None  # cut short while read
            data += more
    finally:
        os.close(fd)
    return data, before


def prefix_check(
    path: str, old: dict[str, Any], upto: int, ino: int
) -> tuple[Any, int, int] | None:
    """Whether `path` still holds, in its first `old["size"]` bytes, what the archive
    kept of it: every byte read again (an agent that rewrites in place, as oh-my-pi its
    256-byte title slot at offset 0, changes bytes anywhere before the old end). Checked
    against the manifest's xxh3 of the whole file (`xxh`), or, for a manifest written
    before it had one, against each chunk's sha256. Then the xxh3 state after `upto`
    bytes (to go on hashing what follows), the lines in them, and the bytes read; None
    when anything differs, or the file is no longer the one stat'ed."""
    size = int(old.get("size", 0))
    expected = old.get("xxh")
    hasher = xxhash.xxh3_128()
    at_upto: Any = hasher.copy() if upto == 0 else None
    lines = 0
    try:
        fd = os.open(path, os.O_RDONLY | O_CLOEXEC | O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    pieces: list[tuple[int, int, str | None]] = []
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_ino != ino or st.st_size < size:
            return None
        if isinstance(expected, str):
            offset = 0
            while offset < size:
                step = min(1 << 20, size - offset)
                if offset < upto < offset + step:
                    step = upto - offset  # a piece ends at `upto`, to copy the state there
                pieces.append((offset, step, None))
                offset += step
        else:
            offset = 0
            for digest, length in old.get("chunks", []):
                pieces.append((offset, int(length), str(digest)))
                offset += int(length)
            if offset != size:
                return None
        for offset, length, digest in pieces:
            data = os.pread(fd, length, offset)
            while len(data) < length:
                more = os.pread(fd, length - len(data), offset + len(data))
                if not more:
                    return None  # cut short while read
                data += more
            if digest is not None and hashlib.sha256(data).hexdigest() != digest:
                return None
            hasher.update(data)
            if offset + length <= upto:
                lines += data.count(b"\n")
            if offset + length == upto:
                at_upto = hasher.copy()
    finally:
        os.close(fd)
    if isinstance(expected, str) and hasher.hexdigest() != expected:
        return None
    if at_upto is None:
        return None
    return at_upto, lines, size


def stat_or_none(path: str) -> os.stat_result | None:
    try:
        return os.stat(path, follow_symlinks=False)
    except OSError:
        return None


def listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []
