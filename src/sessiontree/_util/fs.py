"""Filesystem primitives every layer shares (a leaf module: it imports nothing of ours).

Sessions hold secrets (prompts, tool output, keys pasted by users), so every
directory the package creates is 0700 and every file 0600. Files the package
creates beside a session or in the agent dir (locks, temp files, registries)
are opened with `O_NOFOLLOW` and checked to be regular files: a symlink planted
under one of those names must never make us truncate or write its target.
Side-file names are derived by `side_path`, which keeps them within `NAME_MAX`
however long the session's own name is.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import stat
from collections.abc import Iterable
from typing import BinaryIO

__all__ = [
    "DIR_MODE",
    "FILE_MODE",
    "NAME_MAX",
    "O_CLOEXEC",
    "O_NOFOLLOW",
    "atomic_write",
    "clear_non_regular",
    "create_new",
    "ensure_private_dir",
    "file_kind",
    "fsync_directory",
    "glob_escape",
    "glob_match_name",
    "name_problem",
    "not_regular",
    "open_read",
    "open_regular",
    "private_database",
    "private_temp_dir",
    "read_fd",
    "refuse_non_regular",
    "side_path",
    "side_stem",
    "temp_side_path",
    "utf8_encodable",
    "utf8_prefix_text",
    "write_all",
]

DIR_MODE = 0o700
FILE_MODE = 0o600
NAME_MAX = 255
"""Bytes in one path component on every filesystem the agents run on."""
O_CLOEXEC: int = getattr(os, "O_CLOEXEC", 0)
O_NOFOLLOW: int = getattr(os, "O_NOFOLLOW", 0)
_O_DIRECTORY: int = getattr(os, "O_DIRECTORY", 0)
_O_NONBLOCK: int = getattr(os, "O_NONBLOCK", 0)

# Room kept for what side files add to a session's name: a leading dot plus the
# longest suffix (".conflict-2026-12-01T07-25-07-123Z", ".<12 hex>.tmp", ...).
_NO_HARD_LINKS = frozenset(
    getattr(errno, name)
    for name in ("EPERM", "EOPNOTSUPP", "ENOTSUP", "EMLINK")
    if hasattr(errno, name)
)
NO_HARD_LINKS = _NO_HARD_LINKS
"""The errors a hard link fails with where the filesystem has none."""
_SIDE_RESERVE = 40
_DIGEST_CHARS = 16


def ensure_private_dir(path: str) -> None:
    """Create `path` and any missing parents with mode 0700 (existing ones are left alone)."""
    # os.makedirs applies `mode` to the leaf only; parents would get 0777 & ~umask.
    missing: list[str] = []
    current = os.path.abspath(path)
    while not os.path.isdir(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, DIR_MODE)
        except FileExistsError:
            if not os.path.isdir(directory):
                raise


def fsync_directory(path: str) -> None:
    """fsync a directory so entries created or renamed in it survive a crash."""
    try:
        fd = os.open(path or ".", os.O_RDONLY | _O_DIRECTORY | O_CLOEXEC)
    except OSError as exc:
        # Some platforms/filesystems cannot open directories; nothing to sync there.
        if exc.errno in (errno.EACCES, errno.EISDIR, errno.EINVAL):
            return
        raise
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EBADF):
            raise
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes | bytearray | memoryview) -> int:
    """os.write until every byte is written (writes can be short); returns the count."""
    view = memoryview(data)
    total = len(view)
    written = 0
    while written < total:
        written += os.write(fd, view[written:])
    return written


def side_stem(name: str) -> str:
    """The part of a side file's name that stands for the file `name`.

    `name` itself when a side file fits in `NAME_MAX` with any suffix we use;
    else a cut of it plus `~` and a digest of the whole name, so that every
    process derives the same lock name and siblings stay findable by prefix.
    """
    encoded = os.fsencode(name)
    if len(encoded) <= NAME_MAX - _SIDE_RESERVE:
        return name
    import hashlib  # here: a name this long is rare, and hashlib loads OpenSSL

    digest = hashlib.blake2b(encoded, digest_size=_DIGEST_CHARS // 2).hexdigest()
    room = NAME_MAX - _SIDE_RESERVE - 1 - _DIGEST_CHARS
    cut = ""
    size = 0
    for char in name:
        width = len(os.fsencode(char))
        if size + width > room:
            break
        cut += char
        size += width
    return f"{cut}~{digest}"


def side_path(path: str, suffix: str, *, hidden: bool = False) -> str:
    """`<dir>/[.]<stem><suffix>`: a side file of `path` whose name fits in NAME_MAX."""
    directory, name = os.path.split(path)
    prefix = "." if hidden else ""
    return os.path.join(directory, f"{prefix}{side_stem(name)}{suffix}")


def temp_side_path(path: str, suffix: str = ".tmp") -> str:
    """A hidden side file of `path` with a random part (`.<stem>.<12 hex><suffix>`), where
    a write is made before its rename: `os.urandom`'s bytes, as `secrets.token_hex(6)`
    gives them, without importing `secrets` (hashlib, hmac, base64) at every start-up."""
    return side_path(path, f".{os.urandom(6).hex()}{suffix}", hidden=True)


def open_regular(path: str, flags: int, mode: int = FILE_MODE, *, dir_fd: int | None = None) -> int:
    """`os.open` that never follows a symlink at `path` and refuses anything but a file.

    A FIFO or device planted under the name is neither blocked on nor written:
    the open is non-blocking and the descriptor is checked with fstat. `dir_fd`: the
    open dir `path` is relative to (as `os.open`'s).
    """
    return _open_file(path, flags | O_NOFOLLOW, mode, dir_fd)


def _open_file(path: str, flags: int, mode: int = FILE_MODE, dir_fd: int | None = None) -> int:
    """`os.open` that never blocks (a FIFO) and refuses anything but a regular file with
    OSError(EINVAL) naming the file and what it is; the descriptor it returns blocks."""
    try:
        fd = os.open(path, flags | O_CLOEXEC | _O_NONBLOCK, mode, dir_fd=dir_fd)
    except OSError as exc:
        # A FIFO opened for writing without blocking, while no one reads it, fails with
        # ENXIO (a socket always does): said as what is there, as for any other reader.
        if exc.errno != errno.ENXIO:
            raise
        try:
            st = os.stat(path, dir_fd=dir_fd, follow_symlinks=not flags & O_NOFOLLOW)
        except OSError:
            raise exc from None
        if stat.S_ISREG(st.st_mode):
            raise
        raise OSError(errno.EINVAL, f"{file_kind(st.st_mode)}, not a regular file", path) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, f"{file_kind(st.st_mode)}, not a regular file", path)
        if _O_NONBLOCK:
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISDIR, "a directory"),
)


def not_regular(error: BaseException) -> str | None:
    """What `read_fd` (`open_regular`) refused the file for ("a FIFO, not a regular
    file"), None when `error` is not that refusal."""
    if isinstance(error, OSError) and error.errno == errno.EINVAL:
        what = str(error.strerror or "")
        if what.endswith("not a regular file"):
            return what
    return None


def file_kind(mode: int) -> str:
    """What a non-regular file is, in words ("a FIFO")."""
    return next((name for test, name in _KINDS if test(mode)), "not a file")


def read_fd(path: str) -> int:
    """A blocking descriptor for reading the regular file at `path` (symlinks followed).

    The one way a session file (ours or another agent's) is opened for reading: a
    FIFO named like a session would block a plain open (and a read) forever, and a
    device would be read without end. The open never blocks (O_NONBLOCK), the
    descriptor is checked with fstat, and anything but a regular file raises
    OSError(EINVAL) naming the file and what it is.
    """
    return _open_file(path, os.O_RDONLY)


def open_read(path: str) -> BinaryIO:
    """`open(path, "rb")` through `read_fd`: regular files only, never blocking."""
    fd = read_fd(path)
    try:
        return open(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def refuse_non_regular(path: str) -> None:
    """OSError(EINVAL) naming `path` and what it is when a FIFO, socket or device is there
    (a symlink followed): a rewrite renamed over a FIFO put where a session was would
    replace what the user put there. Nothing there is fine; a directory is left to the
    rename (which refuses it: IsADirectoryError)."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return
    if not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode):
        raise OSError(errno.EINVAL, f"{file_kind(st.st_mode)}, not a regular file", path)


def clear_non_regular(path: str) -> None:
    """Remove what is at `path` when it is not a regular file: a planted symlink (or
    FIFO, socket) is unlinked, never followed; a directory there raises EISDIR."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        raise OSError(errno.EISDIR, "a directory where a file of ours belongs", path)
    if not stat.S_ISREG(st.st_mode):
        os.unlink(path)


def private_database(path: str) -> os.stat_result:
    """Ready `path` for SQLite, which follows symlinks: no link under its name or its
    side files' (`-wal`, `-shm`, `-journal`), and the file there, 0600 (created so, or
    made so: it holds what the sessions say). Returns the file's stat."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        clear_non_regular(path + suffix)
    fd = open_regular(path, os.O_RDWR | os.O_CREAT, FILE_MODE)
    try:
        st = os.fstat(fd)
        if stat.S_IMODE(st.st_mode) != FILE_MODE:
            os.fchmod(fd, FILE_MODE)
    finally:
        os.close(fd)
    return st


def private_temp_dir(name: str) -> str:
    """`<temp dir>/<name>` when it is this user's private directory, else a fresh one.

    The temp dir is shared by every user: a directory there under our name may have
    been made by someone else (who could then delete or swap what we put in it), be
    readable by others, or be a symlink to anywhere. Only a real directory (not a
    link) owned by us with mode 0700 is used; anything else is left alone and a new
    private directory (`tempfile.mkdtemp`, `<name>-XXXXXXXX`) is made instead.
    Returns the directory to use.
    """
    import tempfile  # here: only a rescue of a session that could not be written uses it

    parent = tempfile.gettempdir()
    ensure_private_dir(parent)  # normally there; made (0700) when it is not
    path = os.path.join(parent, name)
    try:
        os.mkdir(path, DIR_MODE)
        os.chmod(path, DIR_MODE)  # mkdir applies the umask
    except FileExistsError:
        pass
    st = os.lstat(path)
    uid = os.getuid() if hasattr(os, "getuid") else None
    if (
        stat.S_ISDIR(st.st_mode)
        and (uid is None or st.st_uid == uid)
        and stat.S_IMODE(st.st_mode) == DIR_MODE
    ):
        return path
    return tempfile.mkdtemp(prefix=f"{name}-")


def atomic_write(path: str, chunks: Iterable[bytes], *, durable: bool = True) -> os.stat_result:
    """Write a new file at `path`: temp file (same dir, 0600) + fsync + rename + dir fsync.

    Returns the stat of the file written (its inode is the one now at `path`).
    On any failure before the rename the temp file is removed and the target is
    left exactly as it was. The temp file is created exclusively, so nothing
    planted under its name (a symlink included) is ever written through.
    `durable=False` leaves out both fsyncs, for a caller that syncs many files at once.
    """
    directory = os.path.dirname(path)
    tmp = temp_side_path(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | O_CLOEXEC | O_NOFOLLOW, FILE_MODE)
    try:
        try:
            for chunk in chunks:
                write_all(fd, chunk)
            if durable:
                os.fsync(fd)
            written = os.fstat(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if durable:
        fsync_directory(directory)
    return written


def create_new(names: Iterable[str], chunks: Iterable[bytes], *, durable: bool = True) -> str:
    """Write `chunks` as a new file under the first of `names` (one directory) that is
    free, and return it. Nothing already there is ever replaced: not a file, not a
    symlink, not one another program creates meanwhile.

    The bytes go to a temp file beside (0600, fsync) that is then hard-linked to the
    name: the link fails on an existing name, so the next is tried. On a file system
    without hard links, a rename to a name found free (what such a system allows).
    FileExistsError when every name is taken. `durable=False` leaves out the fsyncs, for
    a caller that syncs many files at once.
    """
    names = iter(names)
    first = next(names)
    directory = os.path.dirname(first)
    tmp = temp_side_path(first)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | O_CLOEXEC | O_NOFOLLOW, FILE_MODE)
    try:
        try:
            for chunk in chunks:
                write_all(fd, chunk)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        for name in (first, *names):
            try:
                os.link(tmp, name, follow_symlinks=False)
            except FileExistsError:
                continue
            except OSError as exc:
                if exc.errno not in _NO_HARD_LINKS:
                    raise
                if os.path.lexists(name):
                    continue
                os.rename(tmp, name)
            if durable:
                fsync_directory(directory)
            return name
        raise FileExistsError(errno.EEXIST, "every name is taken", first)
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def glob_escape(name: str) -> str:
    """`name` as a glob pattern that matches only itself (metacharacters made literal)."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


def glob_match_name(name: str, pattern: str) -> bool:
    """Shell-style match of one file name (case-sensitive; `*` skips dotfiles)."""
    # Like shell globs, wildcards do not match a leading dot: temp files and lock
    # sidecars (`.<name>.jsonl.tmp`) never show up as sessions.
    if name.startswith(".") and not pattern.startswith("."):
        return False
    return fnmatch.fnmatchcase(name, pattern)


def name_problem(name: str) -> str | None:
    """Why `name` cannot be one component of a stored path, or None when it can.

    For names that come from elsewhere (a shared database, a file tree being
    imported) before they become paths: one component, portable to the agents'
    hosts (no `\\`, Windows' separator), that encodes as UTF-8 (a database key is
    text) and fits in `NAME_MAX`.
    """
    if name in ("", ".", ".."):
        return f"{name!r} is not a file name"
    for char, what in (("/", "a '/'"), ("\\", "a '\\'"), ("\x00", "a NUL")):
        if char in name:
            return f"the name holds {what}"
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError:
        return "the name is not UTF-8"
    if len(encoded) > NAME_MAX:
        return f"the name is longer than {NAME_MAX} bytes"
    return None


def utf8_encodable(name: str) -> bool:
    """Whether `name` encodes as UTF-8: a file name that is not UTF-8 decodes to lone
    surrogates, which SQLite (the listing cache, the content index) cannot store."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def utf8_prefix_text(data: bytes) -> str:
    """Decode `data`, dropping a multibyte character cut off at the end."""
    end = len(data)
    # An incomplete sequence is at most 3 bytes long: find its lead byte among them.
    for back in (1, 2, 3):
        i = end - back
        if i < 0:
            break
        byte = data[i]
        if byte & 0xC0 == 0x80:
            continue
        if byte >= 0xC0:
            need = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            if back < need:
                end = i
        break
    return data[:end].decode("utf-8", "replace")
