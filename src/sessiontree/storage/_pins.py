"""Pins: the blobs that live managers hold and that no session file may name yet.

`gc` finds the blobs sessions need by reading session files. A manager can hold a
ref that no file names: an in-memory session's `put_blob`, a new session that is not
written before its first reply, the lines of its file an index-first load has not read
once that file is deleted (it writes them again from their bytes). Once such a blob is
older than gc's minimum age, `gc --delete` would remove it, and the session written
later would name a blob that is gone. So a process lists the hashes its live managers
hold, per blob dir, in a pin file: `<blobs>/.live/<pid>-<random>.pin`, one hash a line
(0600), and gc keeps every blob a live pin names, whatever its age.

- **Live or stale is an `flock`.** The process holds an exclusive lock on its pin file
  as long as the file exists; the kernel drops it when the process dies. gc tries a
  shared lock: when it gets one, the pin was left by a process that is gone (a crash,
  SIGKILL) and is ignored (and removed by `gc --delete`).
- **A pin file is named only once it is locked.** It is made under a `.tmp` name,
  locked, written, then renamed to its `.pin` name, so a reader never takes a pin
  being made for a stale one (a locked `.tmp` counts as a live pin; an unlocked one is
  removed once it is old).
- **Cheap on the hot path.** A hash new to the process costs one `write` of 65 bytes
  (the file is appended to); a hash held already costs a dict lookup. A hash is let go
  when no holder of the process holds it any more: the file is made anew without the
  hashes let go once they are most of it, and removed when nothing is left.
- **Forks.** A forked child forgets its parent's pins: it closes its copy of each pin
  file's descriptor (which leaves the parent's lock alone: the lock goes only when
  every descriptor of it is closed) and never writes, unlocks or removes the parent's
  files; what the child pins goes to a file of its own.
- **Best effort for the writer.** A pin that cannot be written is logged and kept in
  memory; a manager checks that the blobs it pinned still exist before it writes a
  session that names them (see `SessionManager`).
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Final

from sessiontree._util.fs import ensure_private_dir, open_regular, write_all

__all__ = ["LIVE_DIR", "LivePins", "pin", "read_pins", "unpin"]

_log = logging.getLogger("sessiontree")

LIVE_DIR: Final = ".live"
"""The directory of pin files inside a blob dir (never a blob name: those are hex)."""

_PIN_NAME: Final = re.compile(r"[0-9]{1,10}-[0-9a-f]{16}\.pin")
_TMP_NAME: Final = re.compile(r"\.[0-9]{1,10}-[0-9a-f]{16}\.tmp")
_HASH_LINE: Final = re.compile(rb"^([0-9a-f]{64})\n", re.MULTILINE)
_STALE_TMP_SECONDS: Final = 600.0
"""A `.tmp` pin left unlocked this long is a crash's leftover (one being made is locked
within microseconds of its creation)."""
_MAX_PIN_BYTES: Final = 64 << 20
_COMPACT_SLACK: Final = 64
_WOULD_BLOCK: Final = frozenset({errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES})


class _PinFile:
    """This process's pin file in one blob dir, and the holders of each hash in it."""

    __slots__ = ("counts", "dir", "error", "fd", "lines", "path", "unsaved")

    def __init__(self, blob_dir: str) -> None:
        self.dir = blob_dir
        self.counts: dict[str, int] = {}
        self.lines = 0
        """Hashes written to the file (let-go ones included)."""
        self.fd: int | None = None
        self.path: str | None = None
        self.error: OSError | None = None
        """Why the pin file is unsaved."""
        self.unsaved = False
        """A hash held is not (or not whole) in the file: a write failed (a full disk). The
        next pin, or `save_unsaved` (every flush), writes the whole file again."""

    def add(self, digest: str) -> None:
        held = self.counts.get(digest, 0)
        self.counts[digest] = held + 1
        if held and not self.unsaved:
            return
        try:
            if self.fd is None or self.unsaved:
                # Every hash held: one that could not be written before is written now
                # (and a line a failed write left torn is gone with the old file).
                self.save()
            else:
                write_all(self.fd, digest.encode("ascii") + b"\n")
                self.lines += 1
        except OSError as exc:
            self.unsaved, self.error = True, exc
            _log.warning(
                "could not pin blob %s in %s: %s (tried again at the next flush; until "
                "then gc may delete it once it is old)",
                digest,
                os.path.join(self.dir, LIVE_DIR),
                exc,
            )

    def save(self) -> None:
        """Write every hash held into a new pin file (it replaces ours); raises OSError."""
        self._make(b"".join(d.encode("ascii") + b"\n" for d in self.counts))
        self.lines = len(self.counts)
        self.unsaved, self.error = False, None

    def remove(self, digest: str) -> None:
        held = self.counts.get(digest)
        if held is None:
            return
        if held > 1:
            self.counts[digest] = held - 1
            return
        del self.counts[digest]
        try:
            if not self.counts:
                self._drop()
            elif self.lines > 2 * len(self.counts) + _COMPACT_SLACK:
                self._make(b"".join(d.encode("ascii") + b"\n" for d in self.counts))
                self.lines = len(self.counts)
        except OSError as exc:
            # A hash left in the file only keeps a blob longer.
            _log.debug("could not update the pin file %s: %s", self.path, exc)

    def _make(self, content: bytes) -> None:
        """A new pin file holding `content`, locked before it is named; it replaces ours."""
        live = os.path.join(self.dir, LIVE_DIR)
        ensure_private_dir(live)
        # secrets.token_hex(8), without importing secrets (hashlib, hmac, base64)
        name = self.path or os.path.join(live, f"{os.getpid()}-{os.urandom(8).hex()}.pin")
        tmp = os.path.join(live, "." + os.path.basename(name)[: -len(".pin")] + ".tmp")
        fd = open_regular(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        try:
            # Blocking: a reader may hold a shared lock on it for a moment.
            fcntl.flock(fd, fcntl.LOCK_EX)
            write_all(fd, content)
            os.replace(tmp, name)
        except BaseException:
            os.close(fd)
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        old, self.fd, self.path = self.fd, fd, name
        if old is not None:
            os.close(old)  # the new file is locked and named: the old one may go

    def _drop(self) -> None:
        fd, path = self.fd, self.path
        self.fd = self.path = None
        self.lines = 0
        if fd is None:
            return
        try:
            if path is not None and os.stat(path).st_ino == os.fstat(fd).st_ino:
                os.unlink(path)
        finally:
            os.close(fd)

    def forget(self) -> None:
        """In a forked child: let go of the parent's file without touching it."""
        if self.fd is not None:
            try:
                os.close(self.fd)
            except OSError:
                pass
        self.fd = self.path = None
        self.counts.clear()
        self.lines = 0


_lock = threading.Lock()
_files: dict[str, _PinFile] = {}


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # another thread may have held it at the fork
    for pins in _files.values():
        pins.forget()
    _files.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def pin(blob_dir: str, digest: str) -> None:
    """Hold `digest` (a checked hash) in this process's pin file of `blob_dir` (an
    absolute path) until as many `unpin` calls; best effort (a failure is logged)."""
    key = blob_dir if os.path.isabs(blob_dir) else os.path.abspath(blob_dir)
    with _lock:
        pins = _files.get(key)
        if pins is None:
            pins = _files[key] = _PinFile(key)
        pins.add(digest)


def save_unsaved() -> None:
    """Write again every pin file of this process that a failed write left short (a full
    disk that has room again): until then gc may take a blob a live session names."""
    with _lock:
        for pins in _files.values():
            if not pins.unsaved or not pins.counts:
                continue
            try:
                pins.save()
            except OSError as exc:
                _log.debug("could not save the pin file of %s yet: %s", pins.dir, exc)


def pin_error(blob_dir: str) -> OSError | None:
    """Why this process's pin file of `blob_dir` does not hold every hash pinned there
    (written again first), or None when it does."""
    save_unsaved()
    key = blob_dir if os.path.isabs(blob_dir) else os.path.abspath(blob_dir)
    with _lock:
        pins = _files.get(key)
        return pins.error if pins is not None and pins.unsaved else None


def unpin(blob_dir: str, digest: str) -> None:
    """Let go of one hold of `digest`; the hash leaves the pin file with its last one."""
    key = blob_dir if os.path.isabs(blob_dir) else os.path.abspath(blob_dir)
    with _lock:
        pins = _files.get(key)
        if pins is None:
            return
        pins.remove(digest)
        if not pins.counts:
            del _files[key]


@dataclass(slots=True)
class LivePins:
    """What the pin files of a blob dir say (see `read_pins`)."""

    hashes: set[str] = field(default_factory=set)
    """Hashes that a live process holds."""
    live: list[str] = field(default_factory=list)
    """Pin files of live processes."""
    stale: list[str] = field(default_factory=list)
    """Pin files that processes which are gone left (removed when asked)."""
    unreadable: list[tuple[str, str]] = field(default_factory=list)


def read_pins(blob_dir: str, *, remove_stale: bool = False) -> LivePins:
    """The hashes live processes hold in `blob_dir`'s pin files.

    A pin file nobody holds locked is stale: ignored, and removed with `remove_stale`
    (a `.tmp` one only once it is old). A pin file that cannot be read, or something
    other than a directory at `.live`, is reported in `unreadable` (a caller about to
    delete should then delete nothing).
    """
    found = LivePins()
    live = os.path.join(blob_dir, LIVE_DIR)
    try:
        names = sorted(os.listdir(live))
    except (FileNotFoundError, NotADirectoryError):
        if os.path.lexists(live) and os.path.isdir(blob_dir):
            # A file or a link to nowhere in its place: no process could pin there.
            found.unreadable.append((live, "not a directory: no process can pin there"))
        return found
    except OSError as exc:
        found.unreadable.append((live, exc.strerror or str(exc)))
        return found
    for name in names:
        is_pin = _PIN_NAME.fullmatch(name) is not None
        if not is_pin and _TMP_NAME.fullmatch(name) is None:
            continue
        path = os.path.join(live, name)
        try:
            _read_pin(path, is_pin, remove_stale, found)
        except OSError as exc:
            found.unreadable.append((path, exc.strerror or str(exc)))
    return found


def _read_pin(path: str, is_pin: bool, remove_stale: bool, found: LivePins) -> None:
    for _ in range(5):
        try:
            fd = open_regular(path, os.O_RDONLY)
        except FileNotFoundError:
            return  # let go of meanwhile
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in _WOULD_BLOCK:
                    raise
                # Locked: its process lives. A `.tmp` is a pin file being made, which
                # may hold old hashes (one made anew without those let go): kept too.
                found.hashes.update(_hashes(fd))
                if is_pin:
                    found.live.append(path)
                return
            # Unlocked: its process is gone, unless the name now holds a newer file
            # (the holder made its pin anew and let the old one go): read that one.
            try:
                same = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                return
            if not same:
                continue
            if not is_pin and time.time() - os.fstat(fd).st_mtime <= _STALE_TMP_SECONDS:
                return  # being made: its maker locks it in a moment
            found.stale.append(path)
            if remove_stale:
                os.unlink(path)
            return
        finally:
            os.close(fd)
    raise OSError(errno.EAGAIN, "pin file keeps changing", path)


def _hashes(fd: int) -> set[str]:
    chunks = []
    size = 0
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
        size += len(chunk)
        if size > _MAX_PIN_BYTES:
            raise OSError(errno.EFBIG, "pin file too big")
    # Whole lines only: a line still being appended holds a blob just put.
    return {m.decode("ascii") for m in _HASH_LINE.findall(b"".join(chunks))}
