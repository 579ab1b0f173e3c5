"""`SessionManager`: the session tree in memory, persisted as one JSONL file.

Appends update memory first and, once persistence is active, hand exactly one
line to the OS before returning. Persistence starts with the first assistant
message (a session that never got an answer leaves no file) or `ensure_on_disk()`.
Full rewrites (migration, rename, fork, move) go through `write_atomic`: temp
file, fsync, rename, directory fsync — a crash leaves the old or the new file.
"""

from __future__ import annotations

import atexit
import builtins
import logging
import os
import re
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from . import persistence
from ._closing import ClosesOnExit
from ._unset import UNSET, Maybe, UnsetType
from .blobs import BlobPutResult, BlobStore, BlobStoreLike, MemoryBlobStore
from .context import ContextBuilder, SessionContext, build_session_context
from .entries import (
    CURRENT_SESSION_VERSION,
    Entry,
    generate_entry_id,
    generate_session_id,
    iso_now,
)
from .errors import (
    EntryNotFoundError,
    InvalidSessionFileError,
    SessionLockError,
    SessionPersistenceError,
    SessionTreeError,
    SessionWriteConflictError,
)
from .jsonl import allow_deep_nesting, serialize_entry_bytes
from .loader import TITLE_SLOT_BYTES, LoadedSession, read_session
from .locks import SessionLock, acquire_session_lock, verify_lock
from .migrations import migrate_session_entries
from .paths import (
    EXTERNAL_SESSION_DIRS,
    get_agent_dir,
    get_default_session_dir,
    get_terminal_id,
    home_relative_dir_name,
    session_file_name,
)
from .storage.base import SessionStorage, SessionStorageWriter
from .storage.file import FileSessionStorage
from .storage.memory import MemorySessionStorage
from .tree import SessionTreeNode, branch_with_labels, build_tree, path_to_root
from .usage import UsageTotals

__all__ = ["SessionManager", "UsageStatistics"]

log = logging.getLogger("sessiontree")

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_HEADER_KEY_ORDER = (
    "type",
    "version",
    "id",
    "timestamp",
    "cwd",
    "title",
    "titleSource",
    "parentSession",
)


_TAIL = 4096
_GAP_SECONDS = 1.0


@dataclass(slots=True)
class _DiskState:
    """The session file as we left it: inode, size and its last 4 KB."""

    ino: int
    size: int
    _tail: bytes
    checked: float
    _recent: list[bytes] = field(default_factory=list)  # short lines written since `_tail`
    _recent_bytes: int = 0

    def wrote(self, line: bytes, now: float) -> None:
        self.size += len(line)
        self.checked = now
        if len(line) >= _TAIL:
            # A long line alone is the new tail: keep 4 KB of it, never the line.
            self._tail = line[-_TAIL:]
            self._recent.clear()
            self._recent_bytes = 0
            return
        self._recent.append(line)
        self._recent_bytes += len(line)
        if self._recent_bytes >= 4 * _TAIL:  # bounded memory, no copy per append
            self._tail = self.tail

    @property
    def tail(self) -> bytes:
        if self._recent:
            self._tail = (self._tail + b"".join(self._recent))[-_TAIL:]
            self._recent.clear()
            self._recent_bytes = 0
        return self._tail


@dataclass(frozen=True, slots=True)
class UsageStatistics:
    """Token and cost totals summed from assistant message `usage`."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    cost: float = 0.0


_open_managers: weakref.WeakSet[SessionManager] = weakref.WeakSet()


@atexit.register
def _close_open_managers() -> None:
    for manager in list(_open_managers):
        try:
            manager.close()
        except Exception as exc:
            log.warning("closing session at exit failed: %s", exc)


def _is_assistant(entry: Entry) -> bool:
    if entry.get("type") != "message":
        return False
    message = entry.get("message")
    return isinstance(message, dict) and message.get("role") == "assistant"


def clean_session_name(name: str) -> str:
    """Control characters become spaces, runs of whitespace collapse, ends trimmed."""
    return " ".join(_CONTROL.sub(" ", name).split())


def _ordered_header(header: Entry) -> Entry:
    """The header with known keys in the reference order, unknown keys after."""
    ordered = {k: header[k] for k in _HEADER_KEY_ORDER if k in header}
    for key, value in header.items():
        if key not in ordered:
            ordered[key] = value
    return ordered


def _title_slot_line(title: str, source: str | None, updated_at: str) -> bytes:
    """The fixed-width (256-byte) title line of oh-my-pi, title cut by code points to fit."""

    def line(text: str, pad: str) -> bytes:
        slot: dict[str, Any] = {"type": "title", "v": 1, "title": text}
        if source:
            slot["source"] = source
        slot["updatedAt"] = updated_at
        slot["pad"] = pad
        return serialize_entry_bytes(slot) + b"\n"

    low, high, best = 0, len(title), ""
    while low <= high:
        mid = (low + high) // 2
        if len(line(title[:mid], "")) <= TITLE_SLOT_BYTES:
            best, low = title[:mid], mid + 1
        else:
            high = mid - 1
    unpadded = line(best, "")
    return line(best, " " * (TITLE_SLOT_BYTES - len(unpadded)))


class SessionManager(ClosesOnExit):
    """One session: an append-only entry tree plus a movable leaf pointer.

    Use the factories (`create`, `open`, `continue_recent`, `fork_from`,
    `in_memory`); the manager is a context manager that flushes and closes.
    """

    def __init__(
        self,
        cwd: str,
        session_dir: str,
        session_file: str | None,
        persist: bool,
        storage: SessionStorage,
        *,
        read_only: bool = False,
        blob_store: BlobStoreLike | None = None,
        breadcrumb: bool = True,
    ) -> None:
        self._cwd = cwd
        self._session_dir = session_dir
        self._storage = storage
        self._persist = persist
        self._read_only = read_only
        self._breadcrumb = breadcrumb
        self._blobs: BlobStoreLike = (
            blob_store if blob_store is not None else _default_blobs(storage)
        )
        self._session_file: str | None = None
        self._header: Entry = {}
        self._title_slot_raw: bytes | None = None
        self._slot_title: str | None = None
        self._slot_source: str | None = None
        self._entries: builtins.list[Entry] = []
        self._by_id: dict[str, Entry] = {}
        self._children: dict[str | None, builtins.list[Entry]] | None = None
        self._labels: dict[str, str] = {}
        self._leaf_id: str | None = None
        self._has_assistant: bool | None = False
        self._context: ContextBuilder | None = None  # incremental context at the leaf
        self._on_disk = False  # the file holds everything; appends add one line each
        self._needs_newline = False  # the file ends without "\n" (torn or unterminated line)
        self._writer: SessionStorageWriter | None = None
        self._write: Callable[[bytes], None] | None = None  # the writer's bytes method
        self._error: SessionTreeError | None = None
        self._closed = False
        self._lock: SessionLock | None = None
        # What the file looked like after our last write, to notice edits behind our back.
        self._disk: _DiskState | None = None
        if session_file is not None:
            self.set_session_file(session_file)
        else:
            self._new_session_state(None)
        if persist and not read_only:
            _open_managers.add(self)

    # ------------------------------------------------------------------ factories

    @classmethod
    def create(
        cls,
        cwd: str,
        session_dir: str | None = None,
        storage: SessionStorage | None = None,
        *,
        blob_store: BlobStoreLike | None = None,
    ) -> SessionManager:
        """A new persistent session for `cwd` (written with the first assistant message)."""
        storage = storage if storage is not None else FileSessionStorage()
        directory = session_dir if session_dir is not None else get_default_session_dir(cwd)
        return cls(cwd, directory, None, True, storage, blob_store=blob_store)

    @classmethod
    def open(
        cls,
        path: str,
        session_dir: str | None = None,
        storage: SessionStorage | None = None,
        read_only: bool = False,
        *,
        blob_store: BlobStoreLike | None = None,
        breadcrumb: bool = True,
    ) -> SessionManager:
        """Open a session file; its cwd comes from the header.

        `read_only=True` writes nothing, ever; a missing file is FileNotFoundError.
        `breadcrumb=False` leaves this terminal's "last session" pointer alone (tools
        that edit a session for the user should not redirect their next resume).
        """
        storage = storage if storage is not None else FileSessionStorage()
        directory = session_dir if session_dir is not None else os.path.dirname(path)
        return cls(
            os.getcwd(),
            directory,
            path,
            True,
            storage,
            read_only=read_only,
            blob_store=blob_store,
            breadcrumb=breadcrumb,
        )

    @classmethod
    def continue_recent(
        cls,
        cwd: str,
        session_dir: str | None = None,
        storage: SessionStorage | None = None,
        *,
        blob_store: BlobStoreLike | None = None,
    ) -> SessionManager:
        """Resume this terminal's session, else the newest one for `cwd`, else a new one.

        Sessions that another live process is writing are passed over. Without a
        `session_dir`, the directory newer TypeScript agents use for `cwd`
        (`-<path relative to home>`) is searched too; new sessions go to the spec's.
        """
        from .discovery import find_most_recent_session

        storage = storage if storage is not None else FileSessionStorage()
        directory = session_dir if session_dir is not None else get_default_session_dir(cwd)
        dirs = [directory]
        alt = home_relative_dir_name(cwd)
        if session_dir is None and alt is not None:
            dirs.append(os.path.join(get_agent_dir(), "sessions", alt))
        taken: set[str] = set()  # sessions another live process holds

        def newest() -> str | None:
            found = [
                find_most_recent_session(d, storage=storage, skip=taken.__contains__) for d in dirs
            ]
            paths = [p for p in found if p is not None]
            return max(paths, key=lambda p: storage.stat(p).mtime_ns) if paths else None

        candidate = _read_breadcrumb(cwd, storage) or newest()
        while candidate is not None:
            try:
                return cls(cwd, directory, candidate, True, storage, blob_store=blob_store)
            except (SessionLockError, InvalidSessionFileError):
                # Taking the writer lock is the test (no probe that could race); a
                # damaged file a breadcrumb named is passed over too, untouched.
                taken.add(candidate)
                candidate = newest()
        return cls(cwd, directory, None, True, storage, blob_store=blob_store)

    @classmethod
    def fork_from(
        cls,
        source_path: str,
        cwd: str,
        session_dir: str | None = None,
        storage: SessionStorage | None = None,
        *,
        blob_store: BlobStoreLike | None = None,
    ) -> SessionManager:
        """A new session in `cwd` holding a copy of another session's entries."""
        storage = storage if storage is not None else FileSessionStorage()
        source = cls.open(source_path, storage=storage, read_only=True, blob_store=blob_store)
        directory = session_dir if session_dir is not None else get_default_session_dir(cwd)
        manager = cls(cwd, directory, None, True, storage, blob_store=blob_store)
        header = manager._header
        header["parentSession"] = source.get_session_id()
        for key in ("title", "titleSource"):
            if key in source._header:
                header[key] = source._header[key]
        if "title" not in header and source._slot_title:
            header["title"] = source._slot_title
            if source._slot_source:
                header["titleSource"] = source._slot_source
        manager._header = _ordered_header(header)
        manager._load_entries(source._entries)
        manager._write_full()
        return manager

    @classmethod
    def in_memory(
        cls, cwd: str | None = None, storage: SessionStorage | None = None
    ) -> SessionManager:
        """A session that is never persisted (MemorySessionStorage)."""
        storage = storage if storage is not None else MemorySessionStorage()
        cwd = cwd if cwd is not None else os.getcwd()
        return cls(cwd, "", None, False, storage)

    @staticmethod
    def list(
        cwd: str, session_dir: str | None = None, storage: SessionStorage | None = None
    ) -> builtins.list[Any]:
        """Sessions of `cwd`'s project (or of `session_dir`), newest modified first."""
        from .discovery import list_sessions

        return list_sessions(cwd, session_dir=session_dir, storage=storage)

    @staticmethod
    def list_all(
        storage: SessionStorage | None = None, agent_dir: str | None = None
    ) -> builtins.list[Any]:
        """Sessions of every project under `<agent dir>/sessions`, newest modified first."""
        from .discovery import list_all_sessions

        return list_all_sessions(storage=storage, agent_dir=agent_dir)

    # ------------------------------------------------------------------ context manager

    # ------------------------------------------------------------------ state

    def _new_session_state(self, parent_session: str | None) -> None:
        session_id = generate_session_id()
        timestamp = iso_now()
        header: Entry = {
            "type": "session",
            "version": CURRENT_SESSION_VERSION,
            "id": session_id,
            "timestamp": timestamp,
            "cwd": self._cwd,
        }
        if parent_session is not None:
            header["parentSession"] = parent_session
        self._header = header
        self._title_slot_raw = None
        self._slot_title = self._slot_source = None
        self._load_entries([])
        self._on_disk = False
        self._needs_newline = False
        self._disk = None
        if self._persist:
            path = os.path.join(self._session_dir, session_file_name(timestamp, session_id))
            self._switch_lock(path)
            self._session_file = path
        else:
            self._session_file = None

    def _load_entries(self, entries: builtins.list[Entry]) -> None:
        """Replace the entries and rebuild the indexes in one pass."""
        self._entries = entries
        by_id: dict[str, Entry] = {}
        labels: dict[str, str] = {}
        for entry in entries:
            entry_id = entry.get("id")
            if entry_id.__class__ is str:
                by_id[entry_id] = entry
            if entry.get("type") == "label":
                _apply_label(entry, labels)
        self._by_id, self._labels = by_id, labels
        self._children = None  # built on first use: most sessions never ask
        self._has_assistant = None  # computed on first use
        self._context = None
        last_id = entries[-1].get("id") if entries else None
        self._leaf_id = last_id if isinstance(last_id, str) else None

    def _children_index(self) -> dict[str | None, builtins.list[Entry]]:
        children = self._children
        if children is None:
            children = {}
            for entry in self._entries:
                parent = entry.get("parentId")
                if parent is None or parent.__class__ is str:
                    children.setdefault(parent, []).append(entry)
            self._children = children
        return children

    def _session_has_assistant(self) -> bool:
        if self._has_assistant is None:
            self._has_assistant = any(_is_assistant(e) for e in self._entries)
        return self._has_assistant

    # ------------------------------------------------------------------ loading

    def set_session_file(self, path: str) -> None:
        """Switch to the session at `path`: load, migrate (rewriting), resolve blobs.

        A missing or blank file starts a new session at exactly that path (its
        header written at once). A non-empty file without a valid header raises
        `InvalidSessionFileError` and is left untouched.
        """
        self._close_writer()
        previous_lock = self._lock
        if self._persist and not self._read_only:
            self._switch_lock(path, keep_old=True)
        try:
            loaded = self._read_for_open(path)
        except BaseException:
            if self._lock is not previous_lock and self._lock is not None:
                self._lock.release()
                self._lock = previous_lock
            raise
        if previous_lock is not None and previous_lock is not self._lock:
            previous_lock.release()
        if not loaded.valid:
            self._new_session_state(None)
            self._switch_lock(path)
            self._session_file = path
            self._session_dir = os.path.dirname(path) or self._session_dir
            self._write_full()
            return
        header = loaded.header
        assert header is not None
        self._session_file = path
        self._header = header
        cwd = header.get("cwd")
        if isinstance(cwd, str):
            self._cwd = cwd
        self._title_slot_raw = loaded.title_slot_raw
        slot = loaded.title_slot
        self._slot_title = slot.get("title") if slot else None
        self._slot_source = slot.get("source") if slot else None
        raw = [header, *loaded.entries]
        migrated = migrate_session_entries(raw)
        entries = raw[1:]
        for index in loaded.blob_ref_entries:
            resolve = partial(persistence.resolve_blob_refs, entries[index], self._blobs)
            entries[index] = allow_deep_nesting(resolve)
        self._load_entries(entries)
        self._on_disk = True
        self._needs_newline = not loaded.ends_with_newline
        if self._read_only:
            return
        self._disk = self._observe_disk(path)
        if migrated:
            self._write_full()
        else:
            self._leave_breadcrumb(path)

    def _read_for_open(self, path: str) -> LoadedSession:
        try:
            loaded = read_session(path, self._storage)
        except (FileNotFoundError, NotADirectoryError):
            if self._read_only:
                raise
            return LoadedSession(exists=False)
        if not loaded.valid:
            if not loaded.blank:
                raise InvalidSessionFileError(path, line=loaded.header_line)
            if self._read_only:
                raise FileNotFoundError(f"{path}: empty session file")
        return loaded

    # ------------------------------------------------------------------ locks and conflicts

    def _switch_lock(self, path: str, keep_old: bool = False) -> None:
        """Take the writer lock of `path` (SessionLockError if held), release the old one."""
        if not self._persist or self._read_only:
            return
        old = self._lock
        if old is not None and old.session_file == path:
            return
        self._storage.ensure_dir(os.path.dirname(path) or ".")
        self._lock = acquire_session_lock(self._storage, path)
        if old is not None and not keep_old:
            old.release()

    def _leave_breadcrumb(self, path: str) -> None:
        if self._breadcrumb:
            _write_breadcrumb(self._cwd, path, self._storage)

    def _release_lock(self) -> None:
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.release()

    def _observe_disk(self, path: str) -> _DiskState | None:
        try:
            st = self._storage.stat(path)
            tail = self._storage.read_bytes_range(path, max(0, st.size - _TAIL), _TAIL)
        except OSError:
            return None
        return _DiskState(st.ino, st.size, tail, time.monotonic())

    def _verify_unchanged(self) -> None:
        """Raise if another writer may have touched the file since our last write.

        SessionLockError when our writer lock was lost; SessionWriteConflictError
        when the file changed (inode, size or its last 4 KB). Either way the whole
        in-memory session is saved beside the file first, and the error sticks.
        """
        self._verify_lock()
        expected = self._disk
        path = self._session_file
        if expected is None or path is None:
            return
        try:
            st = self._storage.stat(path)
            changed = (expected.ino and st.ino != expected.ino) or st.size != expected.size
            if not changed:
                tail = self._storage.read_bytes_range(path, max(0, st.size - _TAIL), _TAIL)
                changed = tail != expected.tail
        except FileNotFoundError:
            changed = True
        if changed:
            saved = self._save_rescue_copy()
            error = SessionWriteConflictError(
                path, f"{path}: the file changed on disk behind this writer's back", saved
            )
            self._error = error
            log.error("%s", error)
            raise error

    def _verify_lock(self) -> None:
        try:
            verify_lock(self._lock)
        except SessionLockError as exc:
            saved = self._save_rescue_copy()
            message = str(exc) + (f"; in-memory session saved to {saved}" if saved else "")
            error = SessionLockError(exc.path, exc.pid, message)
            self._error = error
            log.error("%s", error)
            raise error from exc

    def _save_rescue_copy(self) -> str | None:
        """Write the whole in-memory session beside the file; never raises.

        Named `<file>.conflict-<time>` (not `*.jsonl`), so listings and
        continue_recent never pick it up; its header names the original file.
        """
        path = self._session_file
        if path is None:
            return None
        target = f"{path}.conflict-{iso_now().replace(':', '-').replace('.', '-')}"
        header = dict(self._header)
        header["id"] = generate_session_id()
        header["parentSession"] = path
        try:
            self._storage.write_atomic(target, self._file_chunks(_ordered_header(header)))
        except Exception as exc:  # best effort while already failing
            log.error("could not save the session to %s: %s", target, exc)
            return None
        return target

    # ------------------------------------------------------------------ persistence

    def _check_writable(self) -> None:
        if self._read_only:
            raise SessionTreeError(f"{self._session_file}: session is open read-only")
        if self._error is not None:
            raise self._error

    def _fail(self, exc: BaseException, action: str) -> SessionTreeError:
        if self._error is None:
            message = f"{self._session_file}: {action} failed: {exc}"
            saved = self._save_rescue_copy() if self._on_disk else None
            if saved:
                message += f"; in-memory session saved to {saved}"
            error = SessionPersistenceError(message, self._session_file)
            error.__cause__ = exc
            self._error = error
            log.error("session persistence failed: %s", message)
        return self._error

    def _serialize(self, entry: Entry) -> bytes:
        blobs = self._blobs
        try:
            prepared = persistence.prepare_for_persist(entry, blobs)
        except RecursionError:
            prepared = allow_deep_nesting(lambda: persistence.prepare_for_persist(entry, blobs))
        return serialize_entry_bytes(prepared) + b"\n"

    def _file_chunks(self, header: Entry | None = None) -> Iterator[bytes]:
        if self._title_slot_raw is not None:
            yield self._title_slot_raw
        yield serialize_entry_bytes(header if header is not None else self._header) + b"\n"
        batch: builtins.list[bytes] = []
        size = 0
        for entry in self._entries:
            line = self._serialize(entry)
            batch.append(line)
            size += len(line)
            if size >= 1 << 20:
                yield b"".join(batch)
                batch, size = [], 0
        if batch:
            yield b"".join(batch)
        # Runs before write_atomic fsyncs and renames: a durable line never
        # references a blob that is not.
        self._blobs.sync()

    def _write_full(self) -> None:
        """Atomically (re)write the whole session file; persistence is then active."""
        if not self._persist or self._read_only or self._session_file is None:
            return
        self._check_writable()
        self._close_writer()
        path = self._session_file
        if self._on_disk:
            self._verify_unchanged()
        try:
            self._storage.ensure_dir(os.path.dirname(path) or ".")
            self._storage.write_atomic(path, self._file_chunks())
        except OSError as exc:
            raise self._fail(exc, "rewrite") from exc
        was_on_disk = self._on_disk
        self._on_disk = True
        self._needs_newline = False
        self._disk = self._observe_disk(path)
        if not was_on_disk:
            _register_external_dir(path, self._storage, self._blobs)
        if not was_on_disk:
            self._leave_breadcrumb(path)

    def _persist_entry(self, entry: Entry) -> None:
        if not self._persist:
            return
        if not self._on_disk:
            if self._session_has_assistant():
                self._write_full()
            return
        disk = self._disk
        now = time.monotonic()
        if disk is not None and now - disk.checked > _GAP_SECONDS:
            self._verify_unchanged()
        write = self._write
        if write is None:
            try:
                writer = self._writer = self._storage.open_writer(self._session_file or "", "a")
            except OSError as exc:
                raise self._fail(exc, "open for append") from exc
            write = self._write = _bytes_writer(writer)
        try:
            line = self._serialize(entry)
            if self._needs_newline:
                # Never glue an entry onto a torn or unterminated last line.
                line = b"\n" + line
            write(line)
            self._needs_newline = False
        except OSError as exc:
            raise self._fail(exc, "append") from exc
        if disk is not None:
            disk.wrote(line, now)

    def _close_writer(self) -> None:
        writer, self._writer = self._writer, None
        self._write = None
        if writer is not None:
            try:
                writer.close()
            except OSError as exc:
                raise self._fail(exc, "close") from exc

    def ensure_on_disk(self) -> None:
        """Write the session now, even before an assistant message; every entry after too."""
        self._check_writable()
        if self._persist and not self._on_disk:
            self._write_full()

    def flush(self) -> None:
        """Make every write so far durable: blobs first, then the session file."""
        if self._error is not None:
            raise self._error
        try:
            self._blobs.sync()
            if self._writer is not None:
                self._writer.fsync()
        except OSError as exc:
            raise self._fail(exc, "fsync") from exc

    def close(self) -> None:
        """Flush and release the file; raises the stored persistence error, if any."""
        if self._closed:
            return
        self._closed = True
        _open_managers.discard(self)
        try:
            self.flush()
        finally:
            try:
                self._close_writer()
            finally:
                self._release_lock()
        if self._error is not None:
            raise self._error

    def rewrite_entries(self) -> None:
        """Atomically rewrite the file after in-place edits of entries."""
        self._check_writable()
        self._context = None  # entries may have changed in place
        if self._on_disk:
            self._write_full()

    def is_persisted(self) -> bool:
        """Whether this session writes to storage at all."""
        return self._persist

    def is_read_only(self) -> bool:
        return self._read_only

    def put_blob(self, data: bytes) -> BlobPutResult:
        """Store bytes in the blob store (content addressed)."""
        return self._blobs.put(data)

    # ------------------------------------------------------------------ appending

    def _append(self, entry: Entry) -> str:
        self._check_writable()
        self._entries.append(entry)
        entry_id: str = entry["id"]
        self._by_id[entry_id] = entry
        if self._children is not None:
            self._children.setdefault(entry["parentId"], []).append(entry)
        if entry["type"] == "label":
            _apply_label(entry, self._labels)
        context = self._context
        if context is not None:
            if context.leaf_id is not None and context.leaf_id == entry["parentId"]:
                context.add(entry)
            else:
                self._context = None
        self._leaf_id = entry_id
        if self._has_assistant is False and _is_assistant(entry):
            self._has_assistant = True
        self._persist_entry(entry)
        return entry_id

    def _base(self, kind: str) -> Entry:
        return {
            "type": kind,
            "id": generate_entry_id(self._by_id),
            "parentId": self._leaf_id,
            "timestamp": iso_now(),
        }

    def append_message(self, message: dict[str, Any]) -> str:
        """Append a message entry (stored verbatim)."""
        entry = self._base("message")
        entry["message"] = message
        return self._append(entry)

    def append_thinking_level_change(self, thinking_level: str | None) -> str:
        """Append a thinking level change; None is written as `null`."""
        entry = self._base("thinking_level_change")
        entry["thinkingLevel"] = thinking_level
        return self._append(entry)

    def append_model_change(self, model: str, role: str | None = None) -> str:
        """Append a model change (`"provider/id"`); role omitted when None."""
        entry = self._base("model_change")
        entry["model"] = model
        if role is not None:
            entry["role"] = role
        return self._append(entry)

    def append_compaction(
        self,
        summary: str,
        short_summary: Maybe[str | None],
        first_kept_entry_id: str,
        tokens_before: int,
        details: Maybe[Any] = UNSET,
        from_extension: Maybe[bool | None] = UNSET,
        preserve_data: Maybe[Any] = UNSET,
    ) -> str:
        """Append a compaction: context keeps `first_kept_entry_id`..here after its summary."""
        entry = self._base("compaction")
        entry["summary"] = summary
        _put(entry, "shortSummary", short_summary)
        entry["firstKeptEntryId"] = first_kept_entry_id
        entry["tokensBefore"] = tokens_before
        _put(entry, "details", details)
        _put(entry, "fromExtension", from_extension)
        _put(entry, "preserveData", preserve_data)
        return self._append(entry)

    def append_custom_entry(self, custom_type: str, data: Maybe[Any] = UNSET) -> str:
        """Append extension state (not part of the model context)."""
        entry: Entry = {"type": "custom", "customType": custom_type}
        _put(entry, "data", data)
        entry.update(self._base("custom"))
        return self._append(entry)

    def append_custom_message_entry(
        self,
        custom_type: str,
        content: str | builtins.list[dict[str, Any]],
        display: bool,
        details: Maybe[Any] = UNSET,
        attribution: Maybe[str | None] = "agent",
    ) -> str:
        """Append an extension message that takes part in the model context."""
        entry: Entry = {
            "type": "custom_message",
            "customType": custom_type,
            "content": content,
            "display": display,
        }
        _put(entry, "details", details)
        _put(entry, "attribution", attribution)
        entry.update(self._base("custom_message"))
        return self._append(entry)

    def append_label_change(self, target_id: str, label: str | None) -> str:
        """Set (or with None/"" clear) the label of an entry."""
        if target_id not in self._by_id:
            raise EntryNotFoundError(target_id)
        entry = self._base("label")
        entry["targetId"] = target_id
        if label is not None:
            entry["label"] = label
        return self._append(entry)

    def append_ttsr_injection(self, rule_names: builtins.list[str]) -> str:
        entry = self._base("ttsr_injection")
        entry["injectedRules"] = list(rule_names)
        return self._append(entry)

    def append_session_init(
        self,
        system_prompt: str,
        task: str,
        tools: builtins.list[Any],
        output_schema: Maybe[Any] = UNSET,
    ) -> str:
        entry = self._base("session_init")
        entry["systemPrompt"] = system_prompt
        entry["task"] = task
        entry["tools"] = tools
        _put(entry, "outputSchema", output_schema)
        return self._append(entry)

    def append_mode_change(self, mode: str, data: Maybe[Any] = UNSET) -> str:
        entry = self._base("mode_change")
        entry["mode"] = mode
        _put(entry, "data", data)
        return self._append(entry)

    # ------------------------------------------------------------------ tree and leaf

    def branch(self, entry_id: str) -> None:
        """Move the leaf to `entry_id`; the next append becomes its child."""
        if entry_id not in self._by_id:
            raise EntryNotFoundError(entry_id)
        self._leaf_id = entry_id

    def reset_leaf(self) -> None:
        """Leaf = None: the next append creates a new root."""
        self._leaf_id = None

    def branch_with_summary(
        self,
        branch_from_id: str | None,
        summary: str,
        details: Maybe[Any] = UNSET,
        from_extension: Maybe[bool | None] = UNSET,
    ) -> str:
        """Branch to `branch_from_id` (None: the root) and record a summary of what was left."""
        if branch_from_id is not None and branch_from_id not in self._by_id:
            raise EntryNotFoundError(branch_from_id)
        self._leaf_id = branch_from_id
        entry = self._base("branch_summary")
        entry["fromId"] = branch_from_id if branch_from_id is not None else "root"
        entry["summary"] = summary
        _put(entry, "details", details)
        _put(entry, "fromExtension", from_extension)
        return self._append(entry)

    def get_leaf_id(self) -> str | None:
        return self._leaf_id

    def get_leaf_entry(self) -> Entry | None:
        return self._by_id.get(self._leaf_id) if self._leaf_id is not None else None

    def get_entry(self, entry_id: str) -> Entry | None:
        return self._by_id.get(entry_id)

    def get_children(self, parent_id: str | None) -> builtins.list[Entry]:
        """Direct children of an entry (None: the roots), in insertion order."""
        return list(self._children_index().get(parent_id, ()))

    def get_label(self, entry_id: str) -> str | None:
        return self._labels.get(entry_id)

    def get_labels(self) -> dict[str, str]:
        """Every label in effect: target id -> label."""
        return dict(self._labels)

    def get_branch(self, from_id: str | None = None) -> builtins.list[Entry]:
        """Entries from the root to `from_id` (default: the leaf); [] if unknown."""
        start_id = from_id if from_id is not None else self._leaf_id
        if start_id is None:
            return []
        return path_to_root(self._by_id, self._by_id.get(start_id))

    def get_header(self) -> Entry | None:
        return self._header or None

    def get_entries(self) -> builtins.list[Entry]:
        """All non-header entries in insertion order (a shallow copy)."""
        return list(self._entries)

    def get_tree(self) -> builtins.list[SessionTreeNode]:
        """Roots of the entry tree (orphans are roots), children oldest first."""
        return build_tree(self._entries, self._labels)

    def build_session_context(self) -> SessionContext:
        """The model context at the current leaf.

        Kept incrementally: appending to the leaf extends the cached context, so an
        agent that rebuilds its context every turn pays O(1) per new entry.
        """
        leaf_id = self._leaf_id
        if leaf_id is None or leaf_id not in self._by_id:
            return build_session_context(self._entries, leaf_id, self._by_id)
        context = self._context
        if context is None or context.leaf_id != leaf_id:
            context = self._context = ContextBuilder.from_leaf(self._by_id, self._by_id[leaf_id])
        return context.snapshot()

    def get_injected_ttsr_rules(self) -> builtins.list[str]:
        """Rules injected on the current path, de-duplicated, first seen first."""
        seen: dict[str, None] = {}
        for entry in self.get_branch():
            if entry.get("type") == "ttsr_injection" and isinstance(
                entry.get("injectedRules"), list
            ):
                for rule in entry["injectedRules"]:
                    if isinstance(rule, str):
                        seen.setdefault(rule, None)
        return list(seen)

    # ------------------------------------------------------------------ identity

    def get_session_id(self) -> str:
        return str(self._header.get("id", ""))

    def get_session_file(self) -> str | None:
        return self._session_file

    def get_session_dir(self) -> str:
        return self._session_dir

    def get_cwd(self) -> str:
        return self._cwd

    def get_session_name(self) -> str | None:
        """The header title, else oh-my-pi's title slot, else the latest name entry.

        Other writers name sessions with entries: pi with `session_info` (`name`),
        oh-my-pi with `title_change` (`title`).
        """
        title = self._header.get("title")
        if isinstance(title, str) and title:
            return title
        if self._slot_title:
            return self._slot_title
        for entry in reversed(self._entries):
            kind = entry.get("type")
            if kind == "title_change" or kind == "session_info":
                name = entry.get("title" if kind == "title_change" else "name")
                if isinstance(name, str) and name.strip():
                    return name.strip()
        return None

    def _title_source(self) -> str | None:
        source = self._header.get("titleSource")
        return source if isinstance(source, str) else self._slot_source

    def set_session_name(self, name: str, source: str = "auto") -> bool:
        """Name the session (header `title`/`titleSource`); never appends an entry.

        Returns False when nothing changed: an empty name, or an "auto" name after
        a "user" one. Once the file exists it is rewritten atomically.
        """
        self._check_writable()
        cleaned = clean_session_name(name)
        if not cleaned:
            return False
        if source == "auto" and self._title_source() == "user":
            return False
        if self.get_session_name() == cleaned and self._title_source() == source:
            return False
        header = dict(self._header)
        header["title"] = cleaned
        header["titleSource"] = source
        self._header = _ordered_header(header)
        if self._title_slot_raw is not None:
            self._title_slot_raw = _title_slot_line(cleaned, source, iso_now())
            self._slot_title, self._slot_source = cleaned, source
        if self._on_disk:
            self._write_full()
        return True

    # ------------------------------------------------------------------ lifecycle

    def new_session(self, parent_session: str | None = None) -> str | None:
        """Start a fresh session (new id and file); returns its path (None in memory)."""
        self._check_writable()
        self._close_writer()
        self._new_session_state(parent_session)
        return self._session_file

    def fork(self) -> tuple[str, str] | None:
        """Copy this session to a new file with a new id; `parentSession` = old id."""
        if not self._persist:
            return None
        self._check_writable()
        old_file = self._session_file or ""
        old_id = self.get_session_id()
        self._close_writer()
        header = dict(self._header)
        header["id"] = generate_session_id()
        header["timestamp"] = iso_now()
        header["parentSession"] = old_id
        new_file = os.path.join(
            self._session_dir, session_file_name(header["timestamp"], header["id"])
        )
        self._switch_lock(new_file)
        self._header = _ordered_header(header)
        self._title_slot_raw = None
        self._session_file = new_file
        self._on_disk = False
        self._disk = None
        self._write_full()
        return old_file, new_file

    def create_branched_session(self, leaf_id: str) -> str | None:
        """Keep only the root->`leaf_id` path (labels re-created after it) in a new session.

        Persistent: a new file whose `parentSession` is the previous file, which
        the manager switches to. In memory the session is replaced and None returned.
        """
        self._check_writable()
        path = self.get_branch(leaf_id)
        if not path:
            raise EntryNotFoundError(leaf_id)
        entries = branch_with_labels(path, self._labels)
        previous_file = self._session_file
        self._close_writer()
        header: Entry = {
            "type": "session",
            "version": CURRENT_SESSION_VERSION,
            "id": generate_session_id(),
            "timestamp": iso_now(),
            "cwd": self._cwd,
        }
        for key in ("title", "titleSource"):
            if key in self._header:
                header[key] = self._header[key]
        if self._persist and previous_file:
            header["parentSession"] = previous_file
        self._header = header
        self._title_slot_raw = None
        self._load_entries(entries)
        self._on_disk = False
        if not self._persist:
            self._session_file = None
            return None
        new_file = os.path.join(
            self._session_dir, session_file_name(header["timestamp"], header["id"])
        )
        self._switch_lock(new_file)
        self._session_file = new_file
        self._disk = None
        # Written at once (as oh-my-pi does): the user asked for this file explicitly.
        self._write_full()
        return self._session_file

    def move_to(self, new_cwd: str) -> None:
        """Move the session (file and artifacts dir) to `new_cwd`'s session dir."""
        self._check_writable()
        new_dir = get_default_session_dir(new_cwd)
        old_file = self._session_file
        header = dict(self._header)
        header["cwd"] = new_cwd
        if not self._persist or old_file is None:
            self._header, self._cwd = header, new_cwd
            return
        new_file = os.path.join(new_dir, os.path.basename(old_file))
        old_artifacts = old_file[: -len(".jsonl")] if old_file.endswith(".jsonl") else None
        new_artifacts = new_file[: -len(".jsonl")] if new_file.endswith(".jsonl") else None
        storage = self._storage
        old_lock = self._lock
        self._switch_lock(new_file, keep_old=True)
        if not self._on_disk:
            if old_lock is not None and old_lock is not self._lock:
                old_lock.release()
            self._header, self._cwd = header, new_cwd
            self._session_dir, self._session_file = new_dir, new_file
            return
        self._close_writer()
        self._verify_unchanged()
        old_header = self._header
        self._header = header
        moved_artifacts = False
        try:
            storage.write_atomic(new_file, self._file_chunks())
            if old_artifacts and new_artifacts and storage.exists(old_artifacts):
                storage.rename(old_artifacts, new_artifacts)
                moved_artifacts = True
            storage.unlink(old_file)
            storage.fsync_dir(os.path.dirname(old_file))
        except OSError as exc:
            # Roll back: the old file stays authoritative.
            self._header = old_header
            if moved_artifacts and old_artifacts and new_artifacts:
                try:
                    storage.rename(new_artifacts, old_artifacts)
                except OSError:
                    log.error("could not move artifacts back to %s", old_artifacts)
            if storage.exists(old_file) and storage.exists(new_file):
                try:
                    storage.unlink(new_file)
                except OSError:
                    pass
            if self._lock is not old_lock and self._lock is not None:
                self._lock.release()
                self._lock = old_lock
            raise SessionTreeError(f"{old_file}: move to {new_dir} failed: {exc}") from exc
        if old_lock is not None and old_lock is not self._lock:
            old_lock.release()
        self._disk = self._observe_disk(new_file)
        self._cwd = new_cwd
        self._session_dir = new_dir
        self._session_file = new_file
        self._leave_breadcrumb(new_file)

    def get_usage_statistics(self) -> UsageStatistics:
        """Tokens and cost summed over the assistant messages of every entry."""
        totals = UsageTotals()
        for entry in self._entries:
            if _is_assistant(entry):
                totals.add_usage(entry["message"].get("usage"))
        return UsageStatistics(
            totals.input, totals.output, totals.cache_read, totals.cache_write, totals.cost
        )


def _apply_label(entry: Entry, labels: dict[str, str]) -> None:
    """Fold a label entry into the labels in effect, with the reference's Map
    semantics: re-setting keeps the position, clearing deletes."""
    target = entry.get("targetId")
    if isinstance(target, str):
        label = entry.get("label")
        if isinstance(label, str) and label:
            labels[target] = label
        else:
            labels.pop(target, None)


def _put(entry: Entry, key: str, value: object) -> None:
    """Set `key` unless the value is UNSET or None (both mean JS `undefined`)."""
    if value is not None and not isinstance(value, UnsetType):
        entry[key] = value


def _bytes_writer(writer: SessionStorageWriter) -> Callable[[bytes], None]:
    """The writer's `write_bytes` when it has one (the hot path), else via `write_line`."""
    write_bytes: Callable[[bytes], None] | None = getattr(writer, "write_bytes", None)
    if write_bytes is not None:
        return write_bytes
    return lambda data: writer.write_line(data.decode("utf-8"))


def _default_blobs(storage: SessionStorage) -> BlobStoreLike:
    own = getattr(storage, "blob_store", None)
    if callable(own):
        store = own()
        if store is not None:
            return store  # type: ignore[no-any-return]  # a backend's own blob store
    if isinstance(storage, MemorySessionStorage):
        return MemoryBlobStore()
    return BlobStore(os.path.join(get_agent_dir(), "blobs"))


def _register_external_dir(path: str, storage: SessionStorage, blobs: BlobStoreLike) -> None:
    """Remember a session dir outside `<agent>/sessions` that uses the agent's blobs.

    `gc` marks blobs by reading every session file it knows of; a session kept
    elsewhere (a custom `session_dir`) must not lose its images to it. Best effort.
    """
    if not isinstance(storage, FileSessionStorage) or not isinstance(blobs, BlobStore):
        return
    agent = get_agent_dir()
    if os.path.realpath(blobs.dir) != os.path.realpath(os.path.join(agent, "blobs")):
        return
    directory = os.path.realpath(os.path.dirname(os.path.abspath(path)))
    sessions = os.path.realpath(os.path.join(agent, "sessions"))
    if os.path.commonpath([directory, sessions]) == sessions:
        return
    registry = os.path.join(agent, EXTERNAL_SESSION_DIRS)
    try:
        try:
            known = storage.read_text(registry).splitlines()
        except FileNotFoundError:
            known = []
        if directory in known:
            return
        storage.ensure_dir(agent)
        storage.write_text(registry, "".join(f"{d}\n" for d in [*known, directory]))
    except OSError as exc:
        log.warning("could not record session dir %s in %s: %s", directory, registry, exc)


def _breadcrumb_path() -> str | None:
    terminal = get_terminal_id()
    if terminal is None:
        return None
    return os.path.join(get_agent_dir(), "terminal-sessions", terminal)


def _write_breadcrumb(cwd: str, session_file: str, storage: SessionStorage) -> None:
    """Remember this terminal's session (best effort: never fails the caller)."""
    if not isinstance(storage, FileSessionStorage):
        return
    path = _breadcrumb_path()
    if path is None:
        return
    try:
        storage.ensure_dir(os.path.dirname(path))
        storage.write_text(path, f"{cwd}\n{os.path.abspath(session_file)}\n")
    except OSError as exc:
        log.debug("could not write terminal breadcrumb %s: %s", path, exc)


def _read_breadcrumb(cwd: str, storage: SessionStorage) -> str | None:
    """This terminal's last session file, if its cwd matches and the file exists."""
    path = _breadcrumb_path()
    if path is None or not isinstance(storage, FileSessionStorage):
        return None
    try:
        text = storage.read_text_prefix(path, 8192)
    except OSError:
        return None
    lines = text.split("\n")
    if len(lines) < 2 or lines[0] != cwd:
        return None
    target = lines[1]
    if not target.endswith(".jsonl") or "\x00" in target or not os.path.isabs(target):
        return None
    # A breadcrumb is a file anyone could have edited: follow it only into our store.
    sessions_root = os.path.realpath(os.path.join(get_agent_dir(), "sessions"))
    real = os.path.realpath(target)
    if os.path.commonpath([real, sessions_root]) != sessions_root:
        log.warning(
            "ignoring terminal breadcrumb %s: %s is outside %s", path, target, sessions_root
        )
        return None
    return target if storage.exists(target) else None
