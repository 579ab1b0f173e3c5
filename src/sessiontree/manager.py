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
import copy as copy_module
import itertools
import logging
import os
import re
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

import orjson

from . import persistence
from ._closing import ClosesOnExit
from ._unset import UNSET, Maybe, UnsetType
from .agent_dir import read_breadcrumb, register_session_dir, write_breadcrumb
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
    EntryNotSerializableError,
    InvalidSessionFileError,
    SessionClosedError,
    SessionLockError,
    SessionPersistenceError,
    SessionTreeError,
)
from .jsonl import allow_deep_nesting, find_unserializable, serialize_entry_bytes
from .loader import TITLE_SLOT_BYTES
from .migrations import migrate_session_entries
from .paths import (
    get_agent_dir,
    get_default_session_dir,
    home_relative_dir_name,
    session_file_name,
)
from .session_file import ContentSource, SessionFile
from .storage.base import SessionStorage
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
        self._file: SessionFile | None = None  # None: in memory
        self._closed = False
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

        breadcrumb = read_breadcrumb(cwd) if isinstance(storage, FileSessionStorage) else None
        candidate = breadcrumb or newest()
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
        header = source._header_with_title(manager._fresh_header(source.get_session_id()))
        manager._write_new_file(header, source._entries)
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

    # ------------------------------------------------------------------ state

    def _fresh_header(self, parent_session: str | None = None) -> Entry:
        header: Entry = {
            "type": "session",
            "version": CURRENT_SESSION_VERSION,
            "id": generate_session_id(),
            "timestamp": iso_now(),
            "cwd": self._cwd,
        }
        if parent_session is not None:
            header["parentSession"] = parent_session
        return header

    def _path_for(self, header: Entry) -> str:
        return os.path.join(self._session_dir, session_file_name(header["timestamp"], header["id"]))

    def _new_session_state(
        self, parent_session: str | None, file: SessionFile | None = None
    ) -> None:
        """An empty session with a new id; persistent, at `file` or a new path in the dir.

        Nothing is written, and no lock taken, until the first write.
        """
        header = self._fresh_header(parent_session)
        if self._persist:
            # The old file is closed first: until then it may still need this session's
            # content (to recreate a deleted file, or for a rescue copy).
            self._use_file(file if file is not None else self._new_file(self._path_for(header)))
        self._header = header
        self._title_slot_raw = None
        self._slot_title = self._slot_source = None
        self._load_entries([])

    def _new_file(self, path: str, read_only: bool = False) -> SessionFile:
        return SessionFile(
            self._storage, path, self._content_source(), self._blobs, read_only=read_only
        )

    def _content_source(self) -> ContentSource:
        """`_content` for the file, without a reference cycle (the manager owns the file:
        a cycle would keep a closed session's entries alive until the cyclic GC)."""
        manager = weakref.ref(self)

        def content(rescue: bool) -> Iterable[bytes]:
            owner = manager()
            return owner._content(rescue) if owner is not None else ()

        return content

    def _use_file(self, file: SessionFile) -> None:
        """Switch to `file`; the previous one is closed (flushed, its lock released)."""
        old, self._file = self._file, file
        if old is not None and old is not file:
            try:
                old.close()
            except SessionTreeError as exc:
                # Already saved to a rescue copy when it was raised; this session moves on.
                log.warning("closing %s: %s", old.path, exc)

    def _content(self, rescue: bool) -> Iterator[bytes]:
        """The whole session as file bytes; a rescue copy gets its own id."""
        if not rescue:
            return self._file_chunks()
        header = dict(self._header)
        header["id"] = generate_session_id()
        header["parentSession"] = self.get_session_file() or ""
        return self._file_chunks(_ordered_header(header))

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
        self._check_open()
        read_only = self._read_only or not self._persist
        if not read_only and isinstance(self._storage, FileSessionStorage) and os.path.islink(path):
            # Writes never go through a symlink: work on the file it names.
            path = os.path.realpath(path)
        file = self._new_file(path, read_only=read_only)
        old = self._file
        if old is not None and not read_only and old.path == path:
            file.adopt_lock(old)  # reopening our own file: the lock is already ours
        try:
            loaded = file.load()
        except BaseException:
            if old is not None and old.path == path:
                old.adopt_lock(file)
            raise
        if not loaded.valid:
            if not loaded.blank:
                raise InvalidSessionFileError(path, line=loaded.header_line)
            if read_only:
                raise FileNotFoundError(f"{path}: empty session file")
            self._use_file(file)
            self._session_dir = os.path.dirname(path) or self._session_dir
            self._new_session_state(None, file)
            file.create(self._file_chunks())
            self._after_first_write()
            return
        header = loaded.header
        assert header is not None
        self._use_file(file)
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
        if read_only:
            return
        if migrated:
            file.rewrite(self._file_chunks())
        self._after_first_write()

    def _after_first_write(self) -> None:
        """The file exists now: record where it is (breadcrumb, outside-dir registry)."""
        file = self._file
        assert file is not None
        self._leave_breadcrumb(file.path)
        if isinstance(self._storage, FileSessionStorage) and isinstance(self._blobs, BlobStore):
            agent = get_agent_dir()
            if os.path.realpath(self._blobs.dir) == os.path.realpath(os.path.join(agent, "blobs")):
                register_session_dir(file.path, agent)

    def _leave_breadcrumb(self, path: str) -> None:
        if self._breadcrumb and isinstance(self._storage, FileSessionStorage):
            write_breadcrumb(self._cwd, path)

    # ------------------------------------------------------------------ persistence

    def _check_open(self) -> None:
        if self._closed:
            raise SessionClosedError(self.get_session_file())

    def _check_writable(self) -> None:
        if self._closed:
            raise SessionClosedError(self.get_session_file())
        if self._read_only:
            raise SessionTreeError(f"{self.get_session_file()}: session is open read-only")
        file = self._file
        if file is not None and file.error is not None:
            raise file.error

    def _serialize(self, entry: Entry) -> bytes:
        """The entry's line as written (persistence transforms applied)."""
        blobs = self._blobs
        try:
            try:
                prepared = persistence.prepare_for_persist(entry, blobs)
            except RecursionError:
                prepared = allow_deep_nesting(lambda: persistence.prepare_for_persist(entry, blobs))
            return serialize_entry_bytes(prepared) + b"\n"
        except (TypeError, ValueError) as exc:
            raise _not_serializable(entry, exc) from exc

    def _images_refused(self, exc: OSError) -> SessionTreeError:
        """A blob store that cannot take an entry's images refuses the append (nothing
        changed, so nothing is stored as an error)."""
        path = self.get_session_file()
        return SessionPersistenceError(
            f"{path}: could not store the entry's images: {exc}; nothing was appended", path
        )

    def _file_chunks(self, header: Entry | None = None) -> Iterator[bytes]:
        """This session as file bytes (with `header` instead of its own, if given)."""
        header = header if header is not None else self._header
        return self._chunks(self._title_slot_raw, header, self._entries)

    def _chunks(
        self, title_slot: bytes | None, header: Entry, entries: builtins.list[Entry]
    ) -> Iterator[bytes]:
        if title_slot is not None:
            yield title_slot
        yield serialize_entry_bytes(header) + b"\n"
        batch: builtins.list[bytes] = []
        size = 0
        for entry in entries:
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

    def _rewrite(self) -> None:
        """Atomically rewrite the whole file, if it exists yet."""
        file = self._file
        if file is not None and file.on_disk and not self._read_only:
            file.rewrite(self._file_chunks())

    def ensure_on_disk(self) -> None:
        """Write the session now, even before an assistant message; every entry after too."""
        self._check_writable()
        file = self._file
        if file is not None and not file.on_disk:
            file.create(self._file_chunks())
            self._after_first_write()

    def flush(self) -> None:
        """Make every write so far durable: blobs first, then the session file."""
        self._check_open()
        file = self._file
        if file is not None:
            file.flush()

    def close(self) -> None:
        """Flush and release the file; raises the stored persistence error, if any.

        Afterwards the in-memory session can still be read, but every operation that
        would change it or touch storage raises SessionClosedError.
        """
        if self._closed:
            return
        self._closed = True
        _open_managers.discard(self)
        if self._file is not None:
            self._file.close()

    def rewrite_entries(self) -> None:
        """Atomically rewrite the file after in-place edits of entries."""
        self._check_writable()
        self._context = None  # entries may have changed in place
        self._has_assistant = None
        self._rewrite()

    def is_persisted(self) -> bool:
        """Whether this session writes to storage at all."""
        return self._persist

    def is_read_only(self) -> bool:
        return self._read_only

    def put_blob(self, data: bytes) -> BlobPutResult:
        """Store bytes in the blob store (content addressed)."""
        self._check_writable()
        return self._blobs.put(data)

    # ------------------------------------------------------------------ appending

    def _append(self, entry: Entry) -> str:
        """Persist (or, not yet on disk, validate) the entry, then add it to memory.

        An entry that cannot be written changes nothing: it is refused before it
        joins the tree, and a failed write leaves it out of memory too.
        """
        self._check_writable()
        file = self._file
        if file is None:
            _validate(entry)
        elif file.on_disk:
            try:
                line = self._serialize(entry)
            except OSError as exc:
                raise self._images_refused(exc) from exc
            file.append(line)
        elif _is_assistant(entry) or self._session_has_assistant():
            # The first assistant message: the whole session, this entry included.
            try:
                line = self._serialize(entry)
            except OSError as exc:
                raise self._images_refused(exc) from exc
            file.create(itertools.chain(self._file_chunks(), (line,)))
            self._after_first_write()
        else:
            _validate(entry)
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
        return self._file.path if self._file is not None else None

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
        self._rewrite()
        return True

    # ------------------------------------------------------------------ lifecycle

    def new_session(self, parent_session: str | None = None) -> str | None:
        """Start a fresh session (new id and file); returns its path (None in memory)."""
        self._check_writable()
        self._new_session_state(parent_session)
        return self.get_session_file()

    def _header_with_title(self, header: Entry) -> Entry:
        """`header` carrying this session's name, also one held only by a title slot
        (a new file gets no slot, so the name must not stay behind in it)."""
        for key in ("title", "titleSource"):
            if key in self._header:
                header[key] = self._header[key]
        if "title" not in header and self._slot_title:
            header["title"] = self._slot_title
            if self._slot_source:
                header["titleSource"] = self._slot_source
        return _ordered_header(header)

    def _write_new_file(self, header: Entry, entries: builtins.list[Entry]) -> str:
        """Write `header` + `entries` as a new session file at once and switch to it.

        On failure the manager stays on its current session, unchanged.
        """
        current = self._file
        if current is not None and current.on_disk:
            current.flush()  # a conflict in the current file surfaces before the switch
        file = self._new_file(self._path_for(header))
        try:
            file.create(self._chunks(None, header, entries), rescue=False)
        except BaseException:
            # A fresh name that nothing else could have taken: whatever is there now
            # (a rename whose directory fsync failed) is our half-made copy.
            try:
                if self._storage.exists(file.path):
                    self._storage.unlink(file.path)
            except OSError:
                pass
            file.release_lock()
            raise
        file.restore_content(self._content_source())
        self._use_file(file)
        self._header = header
        self._title_slot_raw = None
        self._slot_title = self._slot_source = None
        if entries is not self._entries:
            self._load_entries(entries)
        self._after_first_write()
        return file.path

    def fork(self) -> tuple[str, str] | None:
        """Copy this session to a new file with a new id; `parentSession` = old id."""
        self._check_writable()
        if not self._persist:
            return None
        old_file = self.get_session_file() or ""
        header = dict(self._header)
        header["id"] = generate_session_id()
        header["timestamp"] = iso_now()
        header["parentSession"] = self.get_session_id()
        new_file = self._write_new_file(self._header_with_title(header), self._entries)
        return old_file, new_file

    def create_branched_session(self, leaf_id: str) -> str | None:
        """Keep only the root->`leaf_id` path (labels re-created after it) in a new session.

        Persistent: a new file whose `parentSession` is the previous file, which
        the manager switches to (written at once, as oh-my-pi does: the user asked
        for this file explicitly). In memory the session is replaced and None returned.
        """
        self._check_writable()
        path = self.get_branch(leaf_id)
        if not path:
            raise EntryNotFoundError(leaf_id)
        entries = branch_with_labels(path, self._labels)
        previous_file = self.get_session_file()
        header = self._fresh_header(previous_file if self._persist else None)
        header = self._header_with_title(header)
        if not self._persist:
            self._header = header
            self._title_slot_raw = None
            self._slot_title = self._slot_source = None
            self._load_entries(entries)
            return None
        return self._write_new_file(header, entries)

    def persist_copy(
        self,
        session_dir: str | None = None,
        storage: SessionStorage | None = None,
        breadcrumb: bool = True,
        *,
        leaf_id: str | None = None,
        blob_store: BlobStoreLike | None = None,
    ) -> SessionManager:
        """A new persistent session holding a copy of this one (in memory or not).

        New id and file in `session_dir` (default: the cwd's dir in the agent dir),
        the same entries (deep copies), name and title source; written at once,
        images into the new storage's blob store (oh-my-pi's `persistCopy`). With
        `leaf_id`, only the root -> `leaf_id` path (with its labels) is copied and
        `parentSession` names this session's file, as `create_branched_session` does.
        """
        self._check_open()
        if leaf_id is not None:
            path = self.get_branch(leaf_id)
            if not path:
                raise EntryNotFoundError(leaf_id)
            entries = branch_with_labels(path, self._labels)
        else:
            entries = self._entries
        storage = storage if storage is not None else FileSessionStorage()
        directory = session_dir if session_dir is not None else get_default_session_dir(self._cwd)
        copy = SessionManager(
            self._cwd, directory, None, True, storage, blob_store=blob_store, breadcrumb=breadcrumb
        )
        parent = self.get_session_file() if leaf_id is not None else None
        header = self._header_with_title(copy._fresh_header(parent))
        copy._write_new_file(header, copy_module.deepcopy(entries))
        return copy

    def move_to(self, new_cwd: str) -> None:
        """Move the session (file and artifacts dir) to `new_cwd`'s session dir.

        When that is the directory the session is in already (the same cwd, or one
        whose name encodes the same way), the file stays where it is and only its
        header's cwd changes. Refuses to move onto an existing file.
        """
        self._check_writable()
        new_dir = get_default_session_dir(new_cwd)
        header = dict(self._header)
        header["cwd"] = new_cwd
        file = self._file
        if file is None:
            self._header, self._cwd = header, new_cwd
            return
        old_path = file.path
        new_path = os.path.join(new_dir, os.path.basename(old_path))
        if self._same_place(old_path, new_path):
            if header != self._header:
                self._header, self._cwd = header, new_cwd
                self._rewrite()
            return
        if not file.on_disk:
            # Nothing written yet (and no lock taken): the first write goes there.
            self._use_file(self._new_file(new_path))
            self._header, self._cwd, self._session_dir = header, new_cwd, new_dir
            return
        artifacts = None
        if old_path.endswith(".jsonl") and new_path.endswith(".jsonl"):
            artifacts = (old_path[: -len(".jsonl")], new_path[: -len(".jsonl")])
        old_header = self._header
        self._header = header
        try:
            file.move(new_path, self._file_chunks(), artifacts)
        except BaseException:
            self._header = old_header
            raise
        self._cwd, self._session_dir = new_cwd, new_dir
        self._after_first_write()

    def _same_place(self, a: str, b: str) -> bool:
        """Whether two session paths name one file (however the names are spelled)."""
        if os.path.normpath(a) == os.path.normpath(b):
            return True
        if not isinstance(self._storage, FileSessionStorage):
            return False
        if os.path.realpath(a) == os.path.realpath(b):
            return True
        try:
            return os.path.samefile(os.path.dirname(a), os.path.dirname(b)) and (
                os.path.basename(a) == os.path.basename(b)
            )
        except OSError:
            return False

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


_DUMPS_OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS


def _validate(entry: Entry) -> None:
    """Raise EntryNotSerializableError unless the entry can be written as JSON."""
    try:
        orjson.dumps(
            entry, option=orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
        )
    except (TypeError, orjson.JSONEncodeError):
        # orjson refuses some things JSON.stringify writes (lone surrogates, huge
        # ints, deep nesting, undefined): the exact encoder decides.
        try:
            serialize_entry_bytes(entry)
        except (TypeError, ValueError) as exc:
            raise _not_serializable(entry, exc) from exc


def _not_serializable(entry: Entry, exc: BaseException) -> SessionTreeError:
    found = allow_deep_nesting(lambda: find_unserializable(entry))
    if found is None:
        return EntryNotSerializableError("", exc)
    return EntryNotSerializableError(*found)


def _default_blobs(storage: SessionStorage) -> BlobStoreLike:
    own = getattr(storage, "blob_store", None)
    if callable(own):
        store = own()
        if store is not None:
            return store  # type: ignore[no-any-return]  # a backend's own blob store
    if isinstance(storage, MemorySessionStorage):
        return MemoryBlobStore()
    return BlobStore(os.path.join(get_agent_dir(), "blobs"))
