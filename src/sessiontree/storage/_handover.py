"""Handing a session file's path to new bytes without losing another program's append.

Every in-place rewrite (a rename, a migration, label and entry edits, `repair
--in-place`) writes the new file beside the old one, checks the old one is still
what it read, then renames the new one over it; a move checks the old file, then
unlinks it. A line another agent appends between that check and the rename (or
unlink) goes into the inode the path no longer names. Two things close the window:

- **oh-my-pi's publish lock**, which oh-my-pi (18.2) takes around each append and
  around its own check-then-rename (`FileSessionStorage.#withPublishLock` in
  `src/session/session-storage.ts`): an OS gate on `.<file>.lock.os` (on Linux an
  abstract datagram socket `omp-file-lock-<two seeded xxh64 of that path>`, elsewhere
  `flock` on that file; the kernel drops it when its holder dies), then the lock file
  `.<file>.lock` created exclusively with `<pid>:<ms>`, taken over only from a dead
  holder. Holding both over the check and the rename, oh-my-pi waits for us (it
  gives up after 500 ms, so nothing slow happens under it), and after the rename it
  reopens the path before it appends;
- **the old inode, held open**: pi appends without a lock (`appendFileSync`: open,
  write, close), so after the rename whatever the old inode grew past the size the
  check saw is read back, and its complete lines that parse as JSON objects are
  appended to the new file. What cannot be carried so (a torn or unparsable line) is
  kept with the old file whole as a conflict copy, `<file>.conflict-<time>-<tag>`,
  and a warning names it. That name is given to the old file (a hard link) before
  the swap and taken away once all it grew is carried: a rewrite killed in between
  leaves the old file, appends and all, as that conflict copy.

The looks at the old inode go on until no other process holds it open: the kernel
grants a write lease on a file only then, and an unlinked file nobody holds open can
never be written again; the caller lets go of its own handles on it first (`finish`
runs after the index moved to the new file). Where leases cannot tell (another
filesystem, another owner) or some process keeps it open longer (oh-my-pi keeps its
session file open, and reopens the path under its lock), the looks stop after two
that find nothing new; what remains then is a lockless append whose `open` came
before the rename and whose `write` comes after the last look.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import socket
import stat
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import orjson
import xxhash

from sessiontree._util.fs import O_NOFOLLOW, open_regular, side_path, write_all
from sessiontree.errors import SessionLockError

__all__ = ["Handover", "OldInode", "PublishLock", "hand_over", "publish_lock_name"]

log = logging.getLogger("sessiontree")

_WAIT_SECONDS = 0.5
"""How long oh-my-pi waits for its publish lock before it fails; we wait as long."""
_POLL_SECONDS = 0.002
_HIGH_SEED = 0x4F4D502D4C4F434B
_LOW_SEED = 0x50492D46494C454C
_SETTLE_SECONDS = 0.001
"""Between looks at the old inode after the rename (a lockless append in flight)."""
_SETTLE_LIMIT = 0.2
"""How long the looks wait for the last other holder of the old inode to close it
(oh-my-pi keeps its session open: it appends under its lock, to the path)."""


def publish_lock_name(gate_path: str) -> str:
    """The abstract socket name oh-my-pi's native `FileLock` binds for `gate_path`."""
    data = gate_path.encode()
    high = xxhash.xxh64_intdigest(data, _HIGH_SEED)
    low = xxhash.xxh64_intdigest(data, _LOW_SEED)
    return f"omp-file-lock-{high:016x}{low:016x}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # EPERM: alive, not ours
    return True


class PublishLock:
    """oh-my-pi's publish lock of one session file (see the module doc), held while
    the object lives between `acquire` and `release`."""

    def __init__(self, session_file: str) -> None:
        session_file = os.path.abspath(session_file)
        directory, name = os.path.split(session_file)
        self.session_file = session_file
        self.lock_path = os.path.join(directory, f".{name}.lock")
        self.gate_path = f"{self.lock_path}.os"
        self._gate: socket.socket | int | None = None
        self._record: bytes | None = None

    def acquire(self) -> None:
        """Take the gate, then the lock file; SessionLockError after oh-my-pi's wait."""
        deadline = time.monotonic() + _WAIT_SECONDS
        while not self._take_gate():
            self._wait(deadline)
        try:
            while not self._take_file():
                self._wait(deadline)
        except BaseException:
            self._drop_gate()
            raise

    def release(self) -> None:
        record, self._record = self._record, None
        try:
            if record is not None:
                self._remove_file(record)
        finally:
            self._drop_gate()

    def __enter__(self) -> PublishLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _wait(self, deadline: float) -> None:
        if time.monotonic() >= deadline:
            raise SessionLockError(
                self.session_file,
                message=f"{self.session_file}: oh-my-pi holds its publish lock "
                f"({self.lock_path}); retry later",
            )
        time.sleep(_POLL_SECONDS)

    def _take_gate(self) -> bool:
        if sys.platform.startswith("linux"):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            try:
                sock.bind("\0" + publish_lock_name(self.gate_path))
            except OSError as exc:
                sock.close()
                if exc.errno == errno.EADDRINUSE:
                    return False
                raise
            self._gate = sock
            return True
        try:
            fd = open_regular(self.gate_path, os.O_RDWR | os.O_CREAT)
        except OSError as exc:
            if exc.errno == errno.ENAMETOOLONG:
                return True  # oh-my-pi cannot lock such a name either: nobody to wait for
            raise
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return False
            raise
        self._gate = fd
        return True

    def _drop_gate(self) -> None:
        gate, self._gate = self._gate, None
        if isinstance(gate, socket.socket):
            gate.close()
        elif gate is not None:
            os.close(gate)  # the sidecar stays: removing it would race a successor

    def _take_file(self) -> bool:
        record = f"{os.getpid()}:{int(time.time() * 1000)}\n".encode()
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
        try:
            fd = open_regular(self.lock_path, flags, 0o600)
        except OSError as exc:
            if exc.errno == errno.ENAMETOOLONG:
                return True  # oh-my-pi cannot take such a lock file either (nor write)
            if exc.errno != errno.EEXIST:
                raise
            if not self._take_over_stale():
                return False
            try:
                fd = open_regular(self.lock_path, flags, 0o600)
            except FileExistsError:
                return False
        try:
            os.write(fd, record)
        finally:
            os.close(fd)
        self._record = record
        return True

    def _take_over_stale(self) -> bool:
        """Remove a lock file whose holder is dead (oh-my-pi's rule); whether to retry."""
        try:
            content = _read_lock(self.lock_path)
        except FileNotFoundError:
            return True
        head = content.split(b":", 1)[0]
        if head.isdigit() and content.endswith(b"\n"):
            if _pid_alive(int(head)):
                return False
        else:
            try:
                age = time.time() - os.lstat(self.lock_path).st_mtime
            except FileNotFoundError:
                return True
            if age <= _WAIT_SECONDS:
                return False  # being written by its taker
        return self._remove_file(content)

    def _remove_file(self, expected: bytes) -> bool:
        """Unlink the lock file when it still holds `expected`."""
        try:
            if _read_lock(self.lock_path) != expected:
                return False
            os.unlink(self.lock_path)
        except FileNotFoundError:
            pass
        return True


def _read_lock(path: str) -> bytes:
    """The start of the lock file at `path`, read without blocking or following a
    symlink: a FIFO (or link, socket) planted under its name holds no one's record and
    reads as empty, so it is taken for a stale lock once it is old enough, never
    waited on (a plain `open` of a FIFO blocks until a writer comes: forever)."""
    try:
        fd = os.open(path, os.O_RDONLY | O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return b""
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return b""
        return os.pread(fd, 64, 0)
    finally:
        os.close(fd)


@dataclass(slots=True)
class Handover:
    """What another program appended to the old file between the check and the swap."""

    carried: int = 0
    """Lines carried into the new file."""
    kept: str | None = None
    """Where the old file was kept whole because part of what it grew could not be."""


class OldInode:
    """The file a swap took the path from, held open until what it grew is carried
    (`finish`): the caller first lets go of its own handles on it (see `_seal`).

    `kept`: a second name of it, `<file>.conflict-<time>-<tag>`, made before the swap
    and removed once all it grew is carried: a process killed between the swap and the
    end of the carry leaves the old file (what was appended to it included) as a
    conflict copy instead of an unlinked inode nobody can reach (`verify` names it)."""

    def __init__(
        self, fd: int, path: str, at: int, carry_to: str, carry_ino: int, kept: str | None = None
    ) -> None:
        self._fd: int | None = fd
        self.path, self.at, self.carry_to, self.carry_ino = path, at, carry_to, carry_ino
        self.kept = kept

    def finish(self) -> Handover:
        """Carry what the old file grew into the new one (once; then closed)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return Handover()
        kept, self.kept = self.kept, None
        try:
            try:
                done = _carry(fd, self.path, self.at, self.carry_to, self.carry_ino, kept)
            except OSError as exc:
                # The new file would not take them: the old one is kept whole instead.
                log.error("%s: could not carry what was appended meanwhile: %s", self.path, exc)
                return _keep(fd, self.path, Handover(), kept)
            if kept is not None and done.kept != kept:
                _unlink_quietly(kept)  # all it grew is in the new file
            return done
        finally:
            os.close(fd)

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def hand_over(
    path: str,
    checked_size: int,
    check: Callable[[], None],
    swap: Callable[[], None],
    carry_to: str,
    carry_ino: int,
) -> OldInode | None:
    """Run `check()` (it raises to stop) then `swap()` (the rename over `path`, or the
    unlink of a moved file) under oh-my-pi's publish lock of `path`; the old file,
    whose growth past `checked_size` its `finish()` carries into `carry_to` (the file
    written, inode `carry_ino`), or None when there was none. Host files only."""
    try:
        fd = open_regular(path, os.O_RDONLY)
    except FileNotFoundError:
        with PublishLock(path):
            check()
            swap()
        return None
    try:
        with PublishLock(path):
            check()
            kept = _second_name(path, fd)
            try:
                swap()
            except BaseException:
                if kept is not None:
                    _unlink_quietly(kept)
                raise
    except BaseException:
        os.close(fd)
        raise
    return OldInode(fd, path, checked_size, carry_to, carry_ino, kept)


def _conflict_name(path: str) -> str:
    stamp = time.strftime("%Y-%m-%dT%H-%M-%S", time.gmtime())
    # secrets.token_hex(3), without importing secrets (hashlib, hmac, base64)
    return side_path(path, f".conflict-{stamp}-{os.urandom(3).hex()}")


def _second_name(path: str, fd: int) -> str | None:
    """Link the file at `path` (open as `fd`) under a conflict-copy name, so that it
    outlives the swap whatever happens to this process (see `OldInode`); None where
    no link can be made (a filesystem without hard links): the carry then relies on
    this process alone, as it did."""
    target = _conflict_name(path)
    try:
        os.link(path, target, follow_symlinks=False)
    except OSError as exc:
        log.debug("%s: no second name for the old file during the rewrite: %s", path, exc)
        return None
    held, linked = os.fstat(fd), os.lstat(target)
    if (held.st_dev, held.st_ino) != (linked.st_dev, linked.st_ino):
        _unlink_quietly(target)  # the path changed since it was opened: the check says so
        return None
    return target


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError as exc:
        log.warning("%s: could not remove: %s", path, exc)


def _seal(fd: int, names: int) -> bool | None:
    """Whether no other descriptor is open on the file `fd`, unlinked but for `names`
    names of our own (then no one can write it any more): a write lease is granted
    only then. None when that cannot be told (no leases here, or the file has another
    name)."""
    try:
        if os.fstat(fd).st_nlink > names:
            return None
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)
    except OSError as exc:
        return False if exc.errno == errno.EAGAIN else None
    fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
    return True


def _carry(
    old: int, path: str, at: int, carry_to: str, carry_ino: int, kept: str | None
) -> Handover:
    """Look at the old file until no one else holds it open (`_seal`), or, where that
    cannot be told or takes longer than `_SETTLE_LIMIT`, until two looks a
    millisecond apart find nothing new; carry each complete line it grew."""
    done = Handover()
    torn = b""  # grown past `at`, not carried yet: the start of a line still being written
    quiet = 0
    deadline = time.monotonic() + _SETTLE_LIMIT
    names = 0 if kept is None else 1  # our own second name is no other writer's way in
    while True:
        sealed = _seal(old, names)  # before the look: whatever comes after it is read
        grown = _read_from(old, at + len(torn))
        if grown:
            data = torn + grown
            end = data.rfind(b"\n") + 1
            lines = [line + b"\n" for line in data[: end - 1].split(b"\n")] if end else []
            if not all(_is_entry_line(line) for line in lines):
                return _keep(old, path, done, kept)
            if lines:
                _append(carry_to, carry_ino, data[:end])
                done.carried += len(lines)
            at += end
            torn = data[end:]
        if sealed:
            break
        quiet = 0 if grown else quiet + 1
        if quiet >= 2 and (sealed is None or time.monotonic() > deadline):
            break
        time.sleep(_SETTLE_SECONDS)
    if torn:
        return _keep(old, path, done, kept)
    if done.carried:
        log.warning(
            "%s: %d line(s) another program appended while the file was rewritten were "
            "carried into the new file",
            path,
            done.carried,
        )
    return done


def _read_from(fd: int, offset: int) -> bytes:
    parts: list[bytes] = []
    while True:
        part = os.pread(fd, 1 << 20, offset)
        if not part:
            return b"".join(parts)
        parts.append(part)
        offset += len(part)


def _is_entry_line(line: bytes) -> bool:
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        return False
    return isinstance(value, dict)


def _append(carry_to: str, carry_ino: int, data: bytes) -> None:
    fd = open_regular(carry_to, os.O_WRONLY | os.O_APPEND)  # a FIFO there: refused, not waited on
    try:
        if os.fstat(fd).st_ino != carry_ino:
            raise FileNotFoundError(errno.ENOENT, "replaced again meanwhile", carry_to)
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _keep(old: int, path: str, done: Handover, kept: str | None) -> Handover:
    """Keep the old file whole (what it grew included) beside `path`, and say so: its
    second name `kept` where it has one (the same inode: a line its last holder
    completes later lands there too), else a copy."""
    target = kept if kept is not None else _copy(old, path)
    done.kept = target
    log.warning(
        "%s: another program appended to the file while it was rewritten, and not only "
        "whole entry lines; the file as it then was is kept as %s",
        path,
        target,
    )
    return done


def _copy(old: int, path: str) -> str:
    target = _conflict_name(path)
    fd = open_regular(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        offset = 0
        while chunk := os.pread(old, 1 << 20, offset):
            write_all(fd, chunk)
            offset += len(chunk)
        os.fsync(fd)
    finally:
        os.close(fd)
    return target
