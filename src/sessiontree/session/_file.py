"""`SessionFile`: one session's file on a storage, and everything that keeps it safe.

It owns the writer lock, the append writer, the torn-line state, the stored
error, the rescue copy and the *guard*: what the file looked like after our own
last write (its inode, size and a running xxh3-128 hash of every byte). One
policy answers a file that changed behind our back, applied alike by append,
flush, close, rewrite and move:

- the file was **deleted**: it is recreated from memory at its path, with a
  warning (the writer holds the whole session, so nothing is lost);
- the file was **replaced or changed** (another inode, another size, or, before
  a rewrite, other bytes): the whole in-memory session is saved beside it as a
  rescue copy and `SessionWriteConflictError` is raised, and stays raised.

Checks cost what they can afford: every append compares the open file's link
count and size (one fstat); flush, close and a lock check after a quiet second
also stat the path; a rewrite or move first hashes the whole file.

A new session takes its lock and creates its file only at the first write; it
never writes over a file that is already there.

The file is its opener's: in a process forked from the one that made it, every write,
flush or check raises `InheritedHandleError` before touching anything (no rescue copy
either), and `close` only lets go of the child's copies (no flush, no unlock, no lock
file removed): the parent goes on writing as if the child did not exist.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import NoReturn, Protocol, runtime_checkable

import xxhash

from sessiontree._util.closing import process_id
from sessiontree._util.env import agent_dir_or_default
from sessiontree._util.fs import private_temp_dir, side_path
from sessiontree.errors import (
    InheritedHandleError,
    SessionClosedError,
    SessionLockError,
    SessionPersistenceError,
    SessionTreeError,
    SessionWriteConflictError,
)
from sessiontree.format import Entry, iso_now
from sessiontree.session._loader import LoadedSession, load_session
from sessiontree.storage import (
    BlobStoreLike,
    FileSessionStorage,
    HostFilesystem,
    OldInode,
    PinnedFile,
    PinnedReads,
    SessionStorage,
    SessionStorageWriter,
    StorageStat,
    WriterLock,
    acquire_session_lock,
    hand_over,
    read_chunks,
    replace_checked,
    sync_dir,
    verify_lock,
    write_whole,
)

__all__ = [
    "LOCK_CHECK_SECONDS",
    "CommittableChunks",
    "ContentSource",
    "SessionFile",
    "WriterProbe",
    "backup_path",
    "rescue_dir",
]

log = logging.getLogger("sessiontree")

LOCK_CHECK_SECONDS = 1.0
LINK_CHECK_SECONDS = 0.005
"""An append checks the file's link count (a deleted or replaced file has none) when
the last check is older than this: every append of an agent, at most 200 fstat calls a
second in a burst. Its size is checked on every append."""
_BLANK_PROBE = 4096

ContentSource = Callable[[bool], Iterable[bytes]]
"""The manager's whole session as file bytes; `True` asks for a rescue copy (a new
session id whose `parentSession` names the file)."""


@runtime_checkable
class CommittableChunks(Protocol):
    """File bytes that want to know when they were written whole as the session's
    file: `commit(pinned)` hands them a handle on the file written (an index loaded
    index first then reads its lines from there)."""

    def __iter__(self) -> Iterator[bytes]: ...

    def commit(self, pinned: PinnedFile) -> None: ...

    @property
    def left_out(self) -> int:
        """Lines of the session's file these chunks leave out (not entries, found so
        when read): a rewrite keeps the file as it was first."""
        ...


class Probed(Protocol):
    """What a probe tells: the open file's link count (0 once it was deleted or
    replaced) and size. `os.stat_result` is one."""

    @property
    def st_nlink(self) -> int: ...

    @property
    def st_size(self) -> int: ...


@runtime_checkable
class WriterProbe(Protocol):
    """A writer that can tell, cheaply enough for appends, what it appends to."""

    end: Callable[[], int]
    """The open file's size (e.g. `functools.partial(os.lseek, fd, 0, SEEK_END)`)."""
    probe: Callable[[], Probed]
    """Its link count and size (e.g. `functools.partial(os.fstat, fd)`)."""


def backup_path(storage: SessionStorage, path: str) -> str:
    """The first free `<file>.bak`, `<file>.bak.1`, ...: where a file is kept as it was."""
    candidate = side_path(path, ".bak")
    n = 1
    while storage.exists(candidate):
        candidate = side_path(path, f".bak.{n}")
        n += 1
    return candidate


def rescue_dir(agent_dir: str | None = None) -> str:
    """Where rescue copies go when they cannot be written beside the session: the
    `rescue/` of `agent_dir` (default: the configured agent dir)."""
    return os.path.join(agent_dir_or_default(agent_dir), "rescue")


@dataclass(slots=True)
class _Guard:
    """The file as our last write left it."""

    ino: int
    size: int
    digest: xxhash.xxh3_128
    lock_checked: float
    linked: float = 0.0
    """When the link count was last checked (monotonic)."""


class _Hashing:
    """Chunks passed through while counting and hashing them."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = chunks
        self.size = 0
        self.digest = xxhash.xxh3_128()

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._chunks:
            self.size += len(chunk)
            self.digest.update(chunk)
            yield chunk


class _Changed(Exception):
    """The file changed before the rename: answered once oh-my-pi's lock is let go."""

    def __init__(self, state: str) -> None:
        super().__init__(state)
        self.state = state


def _carry_over(old: list[OldInode], path: str) -> None:
    """Carry what the replaced file grew into the new one (`storage._handover`); the
    rewrite is done whatever happens here, so a failure is logged, not raised."""
    for held in old:
        try:
            held.finish()
        except OSError as exc:
            log.error("%s: could not carry what was appended during the rewrite: %s", path, exc)


def _commit(chunks: Iterable[bytes], pinned: PinnedFile | None) -> None:
    """Tell `chunks` they are now the session's file (or drop an unwanted handle)."""
    if pinned is None:
        return
    if isinstance(chunks, CommittableChunks):
        chunks.commit(pinned)
    else:
        pinned.close()


def _no_rescue(rescue: bool) -> Iterable[bytes]:
    raise AssertionError("no content: this file is not the session's only copy")


def _bytes_writer(writer: SessionStorageWriter) -> Callable[[bytes], None]:
    """The writer's `write_bytes` when it has one (the hot path), else via `write_line`."""
    write_bytes: Callable[[bytes], None] | None = getattr(writer, "write_bytes", None)
    if write_bytes is not None:
        return write_bytes
    return lambda data: writer.write_line(data.decode("utf-8"))


class SessionFile:
    """The file of one persistent session (see the module docstring for the policy)."""

    __slots__ = (
        "_closed",
        "_content",
        "_end",
        "_guard",
        "_lock",
        "_needs_newline",
        "_owner",
        "_probe",
        "_unparsed",
        "_write",
        "_writer",
        "agent_dir",
        "backups",
        "blobs",
        "error",
        "path",
        "read_only",
        "storage",
    )

    def __init__(
        self,
        storage: SessionStorage,
        path: str,
        content: ContentSource,
        blobs: BlobStoreLike,
        *,
        read_only: bool = False,
        agent_dir: str | None = None,
    ) -> None:
        self.storage = storage
        self.path = path
        self.blobs = blobs
        self.read_only = read_only
        self.agent_dir = agent_dir
        """Whose `rescue/` takes a rescue copy that cannot go beside the file (None: the
        configured agent dir's)."""
        self.error: SessionTreeError | None = None
        self._content = content
        self._lock: WriterLock | None = None
        self._writer: SessionStorageWriter | None = None
        self._write: Callable[[bytes], None] | None = None
        self._probe: Callable[[], Probed] | None = None
        self._end: Callable[[], int] | None = None
        self._guard: _Guard | None = None
        self._needs_newline = False
        self._unparsed = 0
        """Lines of the file no reader parsed (not in memory, so not in a rewrite)."""
        self.backups: list[str] = []
        """Copies of the file as it was, kept before a rewrite dropped lines of it."""
        self._closed = False
        self._owner = process_id()

    # ------------------------------------------------------------------ state

    @property
    def on_disk(self) -> bool:
        """Whether the file holds the session (appends then add one line each)."""
        return self._guard is not None

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def inherited(self) -> bool:
        """Whether this process is a fork of the one that made the file (see the module
        docstring): it may read, never write."""
        return self._owner != process_id()

    def check_usable(self) -> None:
        """Raise InheritedHandleError in a forked child (unless read-only), the stored
        error, or SessionClosedError once closed."""
        if self._owner != process_id() and not self.read_only:
            raise InheritedHandleError(self.path, self._owner)
        if self._closed:
            raise SessionClosedError(self.path)
        if self.error is not None:
            raise self.error

    # ------------------------------------------------------------------ opening

    def load(
        self, *, lazy: bool | None = None, index_first_if: Callable[[Entry], bool] | None = None
    ) -> LoadedSession:
        """Read the file, taking the writer lock first unless read-only.

        Writable: a missing file reads as blank, and the lock is kept (a new
        session starts there); a file without a valid header releases it.
        Read-only: FileNotFoundError propagates. `lazy` and `index_first_if` choose
        an index-first load (`loader.load_session`); its `pinned` handle is the
        caller's.
        """
        wants = index_first_if if index_first_if is not None else (lambda header: True)
        if self.read_only:
            # Nothing read-only pins blobs: the refs of its unread lines are looked
            # for only if a copy is made of it (`EntryIndex.file_refs`).
            return load_session(
                self.path, self.storage, lazy=lazy, index_first_if=wants, find_refs=False
            )
        self._take_lock()
        try:
            loaded = self._load_guarded(lazy, wants)
        except (FileNotFoundError, NotADirectoryError):
            return LoadedSession(exists=False)
        except BaseException:
            self.release_lock()
            raise
        if not loaded.valid and not loaded.blank:
            self.release_lock()
        return loaded

    def _load_guarded(self, lazy: bool | None, wants: Callable[[Entry], bool]) -> LoadedSession:
        storage, path = self.storage, self.path
        for _ in range(3):
            before = storage.stat(path)
            digest = xxhash.xxh3_128()
            loaded = load_session(path, storage, digest, lazy=lazy, index_first_if=wants)
            after = storage.stat(path)
            pinned_ino = loaded.pinned.ino if loaded.pinned is not None else after.ino
            if after.ino == before.ino == pinned_ino and after.size == loaded.size:
                if loaded.valid:
                    self._guard = _Guard(after.ino, loaded.size, digest, time.monotonic())
                    self._needs_newline = not loaded.ends_with_newline
                    self._unparsed = len(loaded.malformed_lines)
                return loaded
            if loaded.pinned is not None:
                loaded.pinned.close()
        raise SessionWriteConflictError(path, f"{path}: the file kept changing while being read")

    def _take_lock(self) -> None:
        if self._lock is None:
            self.storage.ensure_dir(os.path.dirname(self.path) or ".")
            self._lock = acquire_session_lock(self.storage, self.path)

    def restore_content(self, content: ContentSource) -> None:
        """Rescue copies come from `content` again (after `create(rescue=False)`)."""
        self._content = content

    def adopt_lock(self, other: SessionFile) -> None:
        """Take over `other`'s lock (the same path, reopened)."""
        self._lock, other._lock = other._lock, None

    def release_lock(self) -> None:
        lock, self._lock = self._lock, None
        if lock is not None and self._owner == process_id():
            lock.release()

    # ------------------------------------------------------------------ writing

    def create(self, chunks: Iterable[bytes], *, rescue: bool = True) -> None:
        """The first write of a new session: lock, then write the whole file atomically.

        Refuses (SessionWriteConflictError) to replace a file that is already there,
        unless it is blank (a session may be initialised in an empty file).
        `rescue=False`: a failure saves no rescue copy (the caller still holds the
        session elsewhere, e.g. a fork that failed leaves the manager on its source),
        and a half-made file (a rename whose directory fsync failed) is removed. What
        was there before, or another writer's file whose lock we could not take, is
        never touched.
        """
        self.check_usable()
        self._check_writable()
        if not rescue:
            self._content = _no_rescue
        try:
            self._take_lock()
        except OSError as exc:
            raise self.fail(exc, "create") from exc
        self._refuse_existing()
        hashing = _Hashing(chunks)
        try:
            self._write_whole(chunks, "create", hashing)
        except BaseException:
            if not rescue:
                self._remove_half_made(hashing)
            raise

    def _remove_half_made(self, written: _Hashing) -> None:
        """After a failed `create`: remove the file at the path if it holds exactly the
        bytes we wrote (a rename whose directory fsync failed). Anything else there
        (another program's file, made since the path was found free) stays."""
        storage, path = self.storage, self.path
        try:
            if not storage.exists(path) or storage.stat(path).size != written.size:
                return
            digest = xxhash.xxh3_128()
            for chunk in read_chunks(storage, path):
                digest.update(chunk)
            if digest.digest() == written.digest.digest():
                storage.unlink(path)
        except OSError:
            pass

    def _refuse_existing(self) -> None:
        storage, path = self.storage, self.path
        try:
            st = storage.stat(path)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise self.fail(exc, "create") from exc
        if st.size <= _BLANK_PROBE:
            try:
                if not storage.read_text_prefix(path, _BLANK_PROBE).strip():
                    return
            except OSError as exc:
                raise self.fail(exc, "create") from exc
        saved = self.rescue()
        error = SessionWriteConflictError(
            path, f"{path}: a file is already there; refusing to write a new session over it", saved
        )
        self._latch(error)
        raise error

    def append(self, line: bytes) -> None:
        """Append one complete line, after checking the file is still ours."""
        if self.error is not None or self._closed or self._owner != process_id():
            self.check_usable()
        guard = self._guard
        assert guard is not None
        write = self._write
        if write is not None:
            # _quick_check's common case inline: the size as we left it, the links
            # and the lock checked recently enough. Anything else: the full check.
            end = self._end
            now = time.monotonic()
            if (
                end is None
                or end() != guard.size
                or now - guard.linked > LINK_CHECK_SECONDS
                or now - guard.lock_checked > LOCK_CHECK_SECONDS
            ):
                self._quick_check(guard)
                write = self._write
        if write is None:  # first append since open or a rewrite (or a recreation)
            self._open_writer()
            write = self._write
            assert write is not None
        glued = self._needs_newline
        if glued:
            # Never glue an entry onto a torn or unterminated last line.
            line = b"\n" + line
        try:
            write(line)
        except OSError as exc:
            raise self.fail(exc, "append") from exc
        if glued:
            self._needs_newline = False
        guard = self._guard
        assert guard is not None
        guard.size += len(line)
        guard.digest.update(line)

    def _quick_check(self, guard: _Guard) -> None:
        """The per-append check: the size (one lseek), the links when not checked for
        a few milliseconds (one fstat), the lock after a quiet second."""
        end, probe = self._end, self._probe
        now = time.monotonic()
        if end is not None and probe is not None:
            if end() != guard.size:
                self.verify()
                return
            if now - guard.linked > LINK_CHECK_SECONDS:
                guard.linked = now
                if probe().st_nlink == 0:
                    self.verify()
                    return
        if now - guard.lock_checked > LOCK_CHECK_SECONDS:
            self.verify()

    def _open_writer(self) -> None:
        self.verify()
        guard = self._guard
        assert guard is not None
        try:
            writer = self.storage.open_writer(self.path, "a")
        except OSError as exc:
            raise self.fail(exc, "open for append") from exc
        self._writer = writer
        self._write = _bytes_writer(writer)
        probe = self._probe = writer.probe if isinstance(writer, WriterProbe) else None
        self._end = writer.end if isinstance(writer, WriterProbe) else None
        if probe is not None:
            # The file opened must be the one verified: nothing slipped in between.
            st = probe()
            if st.st_nlink == 0 or st.st_size != guard.size:
                self._close_writer()
                self.verify()
                self._open_writer()

    def _close_writer(self) -> None:
        writer, self._writer = self._writer, None
        self._write = None
        self._probe = self._end = None
        if writer is not None:
            try:
                writer.close()
            except OSError as exc:
                raise self.fail(exc, "close") from exc

    def rewrite(self, chunks: Iterable[bytes]) -> None:
        """Replace the whole file atomically, after checking every byte is what we left."""
        self.check_usable()
        self._check_writable()
        self.verify(full=True)
        self._count_left_out(chunks)
        self._keep_unparsed()
        self._close_writer()
        self._write_whole(chunks, "rewrite")

    def _count_left_out(self, chunks: Iterable[bytes]) -> None:
        """Lines found damaged when read (index first) count as lines no reader parsed."""
        if isinstance(chunks, CommittableChunks):
            self._unparsed += chunks.left_out

    def _keep_unparsed(self) -> None:
        """Before the file is replaced from memory: when it holds lines no reader parsed
        (someone's bytes, a torn line), copy it as it is (just verified) to `.bak`."""
        if not self._unparsed:
            return
        storage, path = self.storage, self.path
        backup = backup_path(storage, path)
        guard = self._guard
        copied = _Hashing(read_chunks(storage, path))
        try:
            write_whole(storage, backup, copied)
        except OSError as exc:
            raise self.fail(exc, f"backup to {backup}") from exc
        if guard is not None and copied.digest.digest() != guard.digest.digest():
            self._conflict("its bytes changed while being backed up")
        log.warning(
            "%s: %d line(s) that no reader can parse are left out of the rewrite; "
            "the file as it was is kept as %s",
            path,
            self._unparsed,
            backup,
        )
        self.backups.append(backup)
        self._unparsed = 0

    def _write_whole(
        self, chunks: Iterable[bytes], action: str, hashing: _Hashing | None = None
    ) -> None:
        storage, path = self.storage, self.path
        if hashing is None:
            hashing = _Hashing(chunks)
        replacing = action == "rewrite"
        old: list[OldInode] = []  # the file replaced: what it grew meanwhile is carried
        try:
            try:
                storage.ensure_dir(os.path.dirname(path) or ".")
                written, pinned = self._write_file(path, hashing, replacing=replacing, old=old)
            except OSError as exc:
                raise self.fail(exc, action) from exc
            self._guard = _Guard(written.ino, hashing.size, hashing.digest, time.monotonic())
            self._needs_newline = False
            _commit(chunks, pinned)  # the index lets go of the old file
        finally:
            _carry_over(old, path)

    def _write_file(
        self,
        path: str,
        chunks: Iterable[bytes],
        *,
        replacing: bool = False,
        old: list[OldInode] | None = None,
    ) -> tuple[StorageStat, PinnedFile | None]:
        """Write a whole file at `path` (`replacing` the session's own: checked once
        more before it takes the path, see `_replace_checked`); the stat of what was
        written, and a pinned handle on it where the storage has them. A line of the
        session that changed on disk before it could be copied (SessionWriteConflictError
        from `chunks`) is answered as every change behind our back is: rescue copy,
        then raise."""
        storage = self.storage
        try:
            if replacing:
                written = self._replace_checked(chunks, old)
            else:
                written = write_whole(storage, path, chunks)
        except SessionWriteConflictError as exc:
            if self.error is not None:
                raise  # answered already (rescued and stored by the check)
            saved = self.rescue()
            error = SessionWriteConflictError(exc.path, str(exc), saved)
            self._latch(error)
            raise error from exc
        if not isinstance(written, StorageStat):
            written = storage.stat(path)
        return written, self._pin(path, written.ino)

    def _pin(self, path: str, ino: int) -> PinnedFile | None:
        """A pinned handle on the file just written, if it still is the one at `path`
        (else None: whoever replaced it since is answered by the next check)."""
        if not isinstance(self.storage, PinnedReads):
            return None
        try:
            pinned = self.storage.open_pinned(path)
        except OSError:
            return None
        if pinned.ino != ino:
            pinned.close()
            return None
        return pinned

    def _replace_checked(
        self, chunks: Iterable[bytes], old: list[OldInode] | None
    ) -> StorageStat | None:
        """Write a rewrite beside the file, then check the file once more, then rename
        (`replace_checked`: what another program appends meanwhile is not lost).

        The whole-file check ran before the new bytes were written, which takes a while
        for a big session: another program's append meanwhile is answered as any
        change is (rescue copy, conflict), after oh-my-pi's lock is let go; a delete
        meanwhile just lets the new file take the path.
        """
        guard = self._guard

        def unchanged() -> None:
            state = self._observe(guard, False) if guard is not None else None
            if state is not None and state != "deleted":
                raise _Changed(state)

        size = guard.size if guard is not None else 0
        try:
            return replace_checked(self.storage, self.path, chunks, unchanged, size, old)
        except _Changed as exc:
            self._conflict(f"{exc.state} while the rewrite was written")

    def move(
        self, new_path: str, chunks: Iterable[bytes], artifacts: tuple[str, str] | None
    ) -> None:
        """Write the session at `new_path`, then remove it (and move its artifacts dir) here.

        Refuses when anything is already at `new_path` or at the new artifacts path,
        so a move can never unlink what it has just written. On failure the old
        file stays authoritative and the new one is removed.
        """
        self.check_usable()
        self._check_writable()
        storage, old_path = self.storage, self.path
        try:
            storage.ensure_dir(os.path.dirname(new_path) or ".")
            new_lock = acquire_session_lock(storage, new_path)
        except OSError as exc:
            raise SessionTreeError(f"{old_path}: cannot move to {new_path}: {exc}") from exc
        try:
            taken = [p for p in (new_path, artifacts and artifacts[1]) if p and storage.exists(p)]
            if taken:
                raise SessionTreeError(
                    f"{old_path}: cannot move to {new_path}: {taken[0]} already exists"
                )
            self.verify(full=True)
            self._count_left_out(chunks)
            self._keep_unparsed()
            self._close_writer()
            hashing = _Hashing(chunks)
            pinned: PinnedFile | None = None
            try:
                written, pinned = self._write_file(new_path, hashing)
            except OSError as exc:
                raise SessionTreeError(f"{old_path}: move to {new_path} failed: {exc}") from exc
            try:
                old = self._finish_move(new_path, written.ino, artifacts)
            except BaseException:
                if pinned is not None:
                    pinned.close()
                raise
        except BaseException:
            if new_lock is not None:
                new_lock.release()
            raise
        old_lock, self._lock = self._lock, new_lock
        if old_lock is not None:
            old_lock.release()
        self.path = new_path
        self._guard = _Guard(written.ino, hashing.size, hashing.digest, time.monotonic())
        self._needs_newline = False
        try:
            _commit(chunks, pinned)  # the index lets go of the old file
        finally:
            _carry_over(old, old_path)

    def _finish_move(
        self, new_path: str, new_ino: int, artifacts: tuple[str, str] | None
    ) -> list[OldInode]:
        """Check the old file once more, then move the artifacts and unlink it; the old
        file, whose growth meanwhile goes on in the new one (`_carry_over`)."""
        storage, old_path = self.storage, self.path
        guard = self._guard
        state: str | None = None

        def unchanged() -> None:
            # The old file was checked before the new one was written: check it again
            # before it goes (another program may have appended to it meanwhile).
            nonlocal state
            state = self._observe(guard, False) if guard is not None else None
            if state is not None and state != "deleted":
                raise _Changed(state)

        def swap() -> None:
            self._unlink_moved(new_path, new_ino, artifacts, state == "deleted")

        old: list[OldInode] = []
        try:
            if isinstance(storage, HostFilesystem) and guard is not None:
                # What is appended to the old file meanwhile goes on in the new one.
                host, was = storage.host_path(new_path), storage.host_path(old_path)
                held = hand_over(was, guard.size, unchanged, swap, host, new_ino)
                old = [held] if held is not None else []
            else:
                unchanged()
                swap()
        except _Changed as exc:
            self._remove_if_ours(new_path, new_ino)
            self._conflict(f"{exc.state} while it was being moved")
        try:
            sync_dir(storage, os.path.dirname(old_path) or ".")
        except OSError as exc:  # the move is done; only its durability is in doubt
            log.warning("could not fsync %s after a move: %s", os.path.dirname(old_path), exc)
        return old

    def _unlink_moved(
        self, new_path: str, new_ino: int, artifacts: tuple[str, str] | None, deleted: bool
    ) -> None:
        """Move the artifacts dir, then unlink the old file; on failure the old file
        stays authoritative: what was done is undone and the new file removed."""
        storage, old_path = self.storage, self.path
        moved = False
        try:
            if artifacts is not None and storage.exists(artifacts[0]):
                storage.rename(artifacts[0], artifacts[1])
                moved = True
            if not deleted:
                storage.unlink(old_path)
        except OSError as exc:
            # Undo what was done, then remove the new file, but only while it is still
            # the one we wrote.
            if moved and artifacts is not None:
                try:
                    storage.rename(artifacts[1], artifacts[0])
                except OSError:
                    log.error("could not move artifacts back to %s", artifacts[0])
            if storage.exists(old_path):
                self._remove_if_ours(new_path, new_ino)
            raise SessionTreeError(f"{old_path}: move to {new_path} failed: {exc}") from exc

    def _remove_if_ours(self, path: str, ino: int) -> None:
        """Remove the copy a failed move wrote, while it is still the one it wrote."""
        try:
            if self.storage.stat(path).ino == ino:
                self.storage.unlink(path)
        except OSError:
            pass

    def _check_writable(self) -> None:
        if self.read_only:
            raise SessionTreeError(f"{self.path}: session is open read-only")

    # ------------------------------------------------------------------ durability

    def flush(self) -> None:
        """Check the file is still ours, then make every write durable (blobs first)."""
        self.check_usable()
        if self.read_only:
            return
        self.verify()
        try:
            self.blobs.sync()
            if self._writer is not None:
                self._writer.fsync()
        except OSError as exc:
            raise self.fail(exc, "fsync") from exc

    def close(self) -> None:
        """Flush, release the writer and the lock; raises the stored error, if any.

        In a forked child: only marks the child's copy closed (see the module docstring).
        """
        if self._closed:
            return
        if self._owner != process_id():
            self._closed = True
            # Dropped, not closed: their own finalizers close the child's descriptors
            # at most, never the parent's lock, file or connections.
            self._writer = self._write = self._probe = self._end = None
            self._lock = None
            return
        try:
            if self.error is None and self.on_disk and not self.read_only:
                self.flush()
        finally:
            self._closed = True
            try:
                writer, self._writer = self._writer, None
                self._write = self._probe = self._end = None
                if writer is not None:
                    try:
                        writer.close()
                    except OSError as exc:
                        self.fail(exc, "close")
            finally:
                self.release_lock()
        if self.error is not None:
            raise self.error

    # ------------------------------------------------------------------ the guard

    def verify(self, full: bool = False) -> None:
        """Apply the policy: our lock still guards the file, and the file is what we left.

        A deleted file is recreated from memory; a changed one raises
        SessionWriteConflictError after the rescue copy. `full` also compares
        every byte (by hash) before a rewrite.
        """
        guard = self._guard
        if guard is None or self.read_only:
            return
        self._verify_lock()
        state = self._observe(guard, full)
        if state == "deleted":
            log.warning("%s was deleted behind this writer; recreating it from memory", self.path)
            self._close_writer()
            self._write_whole(self._content(False), "recreate")
        elif state is not None:
            self._conflict(state)

    def _observe(self, guard: _Guard, full: bool) -> str | None:
        """None when the file is as we left it, "deleted", or what changed."""
        storage, path = self.storage, self.path
        try:
            st = storage.stat(path)
        except FileNotFoundError:
            return "deleted"
        except OSError as exc:
            raise self.fail(exc, "check") from exc
        if guard.ino and st.ino != guard.ino:
            return "the file was replaced"
        if st.size != guard.size:
            return f"its size changed ({guard.size} -> {st.size} bytes)"
        if full:
            digest = xxhash.xxh3_128()
            try:
                for chunk in read_chunks(storage, path):
                    digest.update(chunk)
            except OSError as exc:
                raise self.fail(exc, "check") from exc
            if digest.digest() != guard.digest.digest():
                return "its bytes changed"
        return None

    def _verify_lock(self) -> None:
        guard = self._guard
        try:
            verify_lock(self._lock)
        except SessionLockError as exc:
            saved = self.rescue()
            message = str(exc) + (f"; in-memory session saved to {saved}" if saved else "")
            error = SessionLockError(exc.path, exc.pid, message)
            self._latch(error)
            raise error from exc
        if guard is not None:
            guard.lock_checked = time.monotonic()

    def _conflict(self, what: str) -> NoReturn:
        saved = self.rescue()
        error = SessionWriteConflictError(
            self.path, f"{self.path}: changed on disk behind this writer's back ({what})", saved
        )
        self._latch(error)
        raise error

    def _latch(self, error: SessionTreeError) -> None:
        if self.error is None:
            self.error = error
            log.error("%s", error)

    def fail(self, exc: BaseException, action: str) -> SessionTreeError:
        """Store (once) and return the persistence error for a failed `action`."""
        if self.error is None:
            message = f"{self.path}: {action} failed: {exc}"
            saved = self.rescue()
            if saved:
                message += f"; in-memory session saved to {saved}"
            error = SessionPersistenceError(message, self.path)
            error.__cause__ = exc
            self._latch(error)
        assert self.error is not None
        return self.error

    # ------------------------------------------------------------------ rescue

    def rescue(self) -> str | None:
        """Save the whole in-memory session as `<file>.conflict-<time>`; never raises.

        Beside the file when the storage allows it, else in the agent dir's
        `rescue/` folder, else in the temp dir (`sessiontree-rescue-<uid>` when that
        is this user's private directory, else a new private one: see
        `_fs.private_temp_dir`): the session is never only in memory.
        """
        if self._content is _no_rescue:
            return None
        stamp = iso_now().replace(":", "-").replace(".", "-")
        target = side_path(self.path, f".conflict-{stamp}")
        name = os.path.basename(target)
        local = FileSessionStorage()
        uid = os.getuid() if hasattr(os, "getuid") else 0
        places: list[tuple[SessionStorage, Callable[[], str]]] = [
            (self.storage, lambda: target),
            (local, lambda: os.path.join(rescue_dir(self.agent_dir), name)),
            (local, lambda: os.path.join(private_temp_dir(f"sessiontree-rescue-{uid}"), name)),
        ]
        for storage, place in places:
            path = "the temp dir"
            try:
                path = place()
                storage.ensure_dir(os.path.dirname(path) or ".")
                write_whole(storage, path, self._content(True))
            except Exception as exc:  # best effort while already failing
                log.error("could not save the session to %s: %s", path, exc)
                continue
            return path
        return None
