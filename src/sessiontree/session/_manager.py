"""`SessionManager`: one session, as the agents use it.

A facade over three parts, each with one job and tests of its own:

- `EntryIndex` (`index.py`): the entries, ids, children, labels, the leaf and the
  incremental context; no I/O;
- `SessionHead` (`naming.py`): the header and oh-my-pi's title slot, and the naming rule;
- `SessionFile` (`session_file.py`): the file on a storage, with the writer lock, the
  guard against changes behind our back, the stored error and the rescue copy.

The manager builds entries, and expresses each lifecycle operation as "a head and
entries -> a file": a session in memory has no file at all. Persistence starts with
the first assistant message (a session that never got an answer leaves nothing on
disk) or `ensure_on_disk()`; from then on every append is one line handed to the OS
before it returns, and full rewrites are atomic.
"""

from __future__ import annotations

import atexit
import builtins
import copy
import itertools
import logging
import os
import re
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from sessiontree._util.closing import ClosesOnExit
from sessiontree._util.env import agent_dir_or_default
from sessiontree._util.unset import UNSET, Maybe, UnsetType
from sessiontree.errors import (
    EntryNotSerializableError,
    InvalidSessionFileError,
    MissingBlobError,
    SessionClosedError,
    SessionLockError,
    SessionPersistenceError,
    SessionTreeError,
)
from sessiontree.format import (
    Entry,
    SessionContext,
    SessionHead,
    SessionTreeNode,
    UsageTotals,
    allow_deep_nesting,
    current_system_message,
    generate_session_id,
    header_needs_migration,
    iso_now,
    migrate_session_entries,
    new_header,
    ordered_header,
    parse_iso_ms,
    pi_session_name,
    session_name,
    session_path,
)
from sessiontree.layout import (
    BlobCarry,
    blob_carry,
    blob_store_for,
    get_default_session_dir,
    home_relative_dir_name,
    read_breadcrumb,
    register_session_dir,
    write_breadcrumb,
    writes_pi_form,
)
from sessiontree.session._file import ContentSource, SessionFile
from sessiontree.session._index import (
    EntryIndex,
    LineSource,
    SessionChunks,
    is_assistant_message,
    is_conversation_message,
)
from sessiontree.session._persistence import (
    entry_line,
    held_blob_refs,
    resolve_blob_refs,
    validate_entry,
)
from sessiontree.session._shape import TreeShape
from sessiontree.storage import (
    BLOB_REF_PREFIX,
    LIVE_DIR,
    BlobPins,
    BlobPutResult,
    BlobStore,
    BlobStoreLike,
    HostFilesystem,
    MemorySessionStorage,
    SessionStorage,
    default_storage,
    directory_tree,
    find_blob_refs,
    pin_error,
    save_unsaved,
)

__all__ = ["SessionManager", "UsageStatistics"]

log = logging.getLogger("sessiontree")

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_REF_MARK = BLOB_REF_PREFIX.encode("ascii")


@dataclass(frozen=True, slots=True)
class UsageStatistics:
    """Token and cost totals of a session, summed as pi 1.6 sums them (assistant
    replies, tool results, `usage` entries, compactions and branch summaries)."""

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


def clean_session_name(name: str) -> str:
    """Control characters become spaces, runs of whitespace collapse, ends trimmed."""
    return " ".join(_CONTROL.sub(" ", name).split())


class SessionManager(ClosesOnExit):
    """One session: an append-only entry tree plus a movable leaf pointer.

    Use the factories (`create`, `open`, `continue_recent`, `fork_from`,
    `in_memory`); the manager is a context manager that flushes and closes.

    A persistent session belongs to the process that opened it. A forked child (os.fork,
    a `multiprocessing` fork process or pool) reads what its copy holds (entries, tree,
    context, `persist_copy`; moving the leaf changes only the copy), but every append,
    rewrite, flush or switch raises `InheritedHandleError` before anything changes, and
    `close` (also the child's at-exit close) lets go of the copy without flushing,
    unlocking or writing: the parent keeps its lock and goes on as before. An
    `in_memory()` session is the child's own copy, to use as it likes.
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
        lazy: bool | None = None,
        agent_dir: str | None = None,
    ) -> None:
        self._cwd = cwd
        self._session_dir = session_dir
        self._storage = storage
        self._breadcrumb = breadcrumb
        # Chosen once: the environment is read here, never written (see `paths`).
        self._agent_dir = agent_dir_or_default(agent_dir)
        self._blobs: BlobStoreLike = (
            blob_store
            if blob_store is not None
            else blob_store_for(session_file or session_dir or None, storage, self._agent_dir)
        )
        # Entries are written as pi writes them in pi's store (`writes_pi_form`).
        self._pi_form = writes_pi_form(
            session_file or session_dir or None, storage, self._agent_dir
        )
        self._index = EntryIndex()
        self._head = SessionHead(new_header(cwd))
        # None: in memory. A persistent session always has one, even before it is written.
        self._file: SessionFile | None = None
        self._closed = False
        # Blobs this manager holds refs to that no file of its names yet (see `_pin`).
        self._pins = BlobPins()
        self._pins_finalizer: object | None = None
        # Blobs its file names, kept from gc while it may write the file again (see
        # `_hold_file_refs`); not a promise that they exist (`_check_pinned` ignores them).
        self._file_pins = BlobPins()
        self._file_pins_finalizer: object | None = None
        if session_file is not None:
            self._open_file(session_file, read_only, lazy)
        elif persist:
            self._start_new_session(None, persistent=True)
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
        agent_dir: str | None = None,
    ) -> SessionManager:
        """A new persistent session for `cwd` (written with the first assistant message).

        `agent_dir` (default: the configured one) is the store whose session dir,
        blobs, breadcrumbs and `rescue/` the session uses; every factory takes it.
        """
        storage = default_storage(storage)
        directory = (
            session_dir if session_dir is not None else get_default_session_dir(cwd, agent_dir)
        )
        return cls(cwd, directory, None, True, storage, blob_store=blob_store, agent_dir=agent_dir)

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
        lazy: bool | None = None,
        agent_dir: str | None = None,
    ) -> SessionManager:
        """Open a session file; its cwd comes from the header.

        `read_only=True` writes nothing, ever; a missing file is FileNotFoundError.
        `breadcrumb=False` leaves this terminal's "last session" pointer alone (tools
        that edit a session for the user should not redirect their next resume).
        `lazy`: load index first, reading entries only when asked for (True), never
        (False), or when the file is big (None: at least `loader.LAZY_LOAD_BYTES`);
        see `sessiontree.session._index` for what reads what.
        """
        storage = default_storage(storage)
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
            lazy=lazy,
            agent_dir=agent_dir,
        )

    @classmethod
    def continue_recent(
        cls,
        cwd: str,
        session_dir: str | None = None,
        storage: SessionStorage | None = None,
        *,
        blob_store: BlobStoreLike | None = None,
        agent_dir: str | None = None,
    ) -> SessionManager:
        """Resume this terminal's session, else the newest one for `cwd`, else a new one.

        Sessions that another live process is writing are passed over. Without a
        `session_dir`, the directory newer TypeScript agents use for `cwd`
        (`-<path relative to home>`) is searched too; new sessions go to the spec's.
        """
        from sessiontree.listing import find_most_recent_session

        storage = default_storage(storage)
        agent = agent_dir_or_default(agent_dir)
        directory = session_dir if session_dir is not None else get_default_session_dir(cwd, agent)
        dirs = [directory]
        alt = home_relative_dir_name(cwd)
        if session_dir is None and alt is not None:
            dirs.append(os.path.join(agent, "sessions", alt))
        taken: set[str] = set()  # sessions another live process holds

        def newest() -> str | None:
            found = [
                find_most_recent_session(d, storage=storage, skip=taken.__contains__) for d in dirs
            ]
            paths = [p for p in found if p is not None]
            return max(paths, key=lambda p: storage.stat(p).mtime_ns) if paths else None

        breadcrumb = read_breadcrumb(cwd, agent) if isinstance(storage, HostFilesystem) else None
        candidate = breadcrumb or newest()
        while candidate is not None:
            try:
                return cls(
                    cwd, directory, candidate, True, storage, blob_store=blob_store, agent_dir=agent
                )
            except (SessionLockError, InvalidSessionFileError):
                # Taking the writer lock is the test (no probe that could race); a
                # damaged file a breadcrumb named is passed over too, untouched.
                taken.add(candidate)
                candidate = newest()
        return cls(cwd, directory, None, True, storage, blob_store=blob_store, agent_dir=agent)

    @classmethod
    def fork_from(
        cls,
        source_path: str,
        cwd: str,
        session_dir: str | None = None,
        storage: SessionStorage | None = None,
        *,
        blob_store: BlobStoreLike | None = None,
        agent_dir: str | None = None,
    ) -> SessionManager:
        """A new session in `cwd` holding a copy of another session's entries.

        Its images go where `blob_carry` says: the store of its own agent dir (a
        source in another agent dir has its images copied along), unless
        `blob_store` is a store chosen for the source, which then holds the fork's too.
        """
        storage = default_storage(storage)
        source = cls.open(
            source_path, storage=storage, read_only=True, blob_store=blob_store, agent_dir=agent_dir
        )
        directory = (
            session_dir if session_dir is not None else get_default_session_dir(cwd, agent_dir)
        )
        manager = cls(
            cwd, directory, None, True, storage, blob_store=blob_store, agent_dir=agent_dir
        )
        header = source._head.carried_title(new_header(cwd, source.get_session_id()))
        manager._write_new_file(header, source._index, source)
        return manager

    @classmethod
    def in_memory(
        cls,
        cwd: str | None = None,
        storage: SessionStorage | None = None,
        *,
        agent_dir: str | None = None,
    ) -> SessionManager:
        """A session that is never persisted (MemorySessionStorage).

        Blobs it is given (`put_blob`) go to the agent dir's store, as oh-my-pi's do,
        so their refs resolve once the session is persisted (`persist_copy`); `gc`
        keeps them while the manager lives (they are pinned, see `sessiontree.storage._pins`).
        """
        # Chosen before the default storage is made: the agent dir's blobs, not
        # MemorySessionStorage's own, so that refs outlive this session.
        blobs = blob_store_for(None, storage, agent_dir_or_default(agent_dir))
        storage = storage if storage is not None else MemorySessionStorage()
        cwd = cwd if cwd is not None else os.getcwd()
        return cls(cwd, "", None, False, storage, blob_store=blobs, agent_dir=agent_dir)

    @staticmethod
    def list(
        cwd: str, session_dir: str | None = None, storage: SessionStorage | None = None
    ) -> builtins.list[Any]:
        """Sessions of `cwd`'s project (or of `session_dir`), newest modified first."""
        from sessiontree.layout import store_parts
        from sessiontree.listing import list_sessions

        return list_sessions(cwd, store_parts(storage), session_dir=session_dir)

    @staticmethod
    def list_all(
        storage: SessionStorage | None = None, agent_dir: str | None = None
    ) -> builtins.list[Any]:
        """Sessions of every project under `<agent dir>/sessions`, newest modified first."""
        from sessiontree.layout import store_parts
        from sessiontree.listing import list_all_sessions

        return list_all_sessions(store_parts(storage, agent_dir))

    # ------------------------------------------------------------------ files

    def _new_file(
        self, path: str, read_only: bool = False, blobs: BlobStoreLike | None = None
    ) -> SessionFile:
        return SessionFile(
            self._storage,
            path,
            self._content_source(),
            self._blobs if blobs is None else blobs,
            read_only=read_only,
            agent_dir=self._agent_dir,
        )

    def _content_source(self) -> ContentSource:
        """`_content` for the file, without a reference cycle (the manager owns the file:
        a cycle would keep a closed session's entries alive until the cyclic GC)."""
        manager = weakref.ref(self)

        def content(rescue: bool) -> Iterable[bytes]:
            owner = manager()
            return owner._content(rescue) if owner is not None else ()

        return content

    def _content(self, rescue: bool) -> SessionChunks:
        """The whole session as file bytes; a rescue copy gets its own id."""
        head = self._head
        if rescue:
            header = {**head.header, "id": generate_session_id()}
            header["parentSession"] = self.get_session_file() or ""
            lines = head.lines(ordered_header(header))
            return self._index.file_chunks(lines, self._blobs, rescue=True, pi_form=self._pi_form)
        # A rewrite compares the whole file first; a recreation reads the deleted inode.
        return self._index.file_chunks(
            head.lines(), self._blobs, file_checked=True, pi_form=self._pi_form
        )

    def _use_file(self, file: SessionFile) -> None:
        """Switch to `file`; the previous one is closed (flushed, its lock released).

        Call it before the session's state changes: until it is closed, the old file
        may still need this session's content (to recreate a deleted file, or for a
        rescue copy).
        """
        old, self._file = self._file, file
        if old is not None and old is not file:
            try:
                old.close()
            except SessionTreeError as exc:
                # Already saved to a rescue copy when it was raised; this session moves on.
                log.warning("closing %s: %s", old.path, exc)

    def _start_new_session(
        self, parent_session: str | None, file: SessionFile | None = None, persistent: bool = False
    ) -> None:
        """An empty session with a new id; persistent, at `file` or a new path in the dir.

        Nothing is written, and no lock taken, until the first write.
        """
        header = new_header(self._cwd, parent_session)
        if file is None and persistent:
            file = self._new_file(session_path(self._session_dir, header))
        if file is not None:
            self._use_file(file)
        self._head = SessionHead(header)
        self._index.reset([])

    def _open_file(self, path: str, read_only: bool, lazy: bool | None = None) -> None:
        """Switch to the session at `path` (see `set_session_file`)."""
        if not read_only and isinstance(self._storage, HostFilesystem) and os.path.islink(path):
            # Writes never go through a symlink: work on the file it names.
            path = os.path.realpath(path)
        self._pi_form = writes_pi_form(path, self._storage, self._agent_dir)
        file = self._new_file(path, read_only=read_only)
        old = self._file
        same = old is not None and not read_only and old.path == path
        if same:
            assert old is not None
            file.adopt_lock(old)  # reopening our own file: the lock is already ours
        try:
            loaded = file.load(
                lazy=lazy, index_first_if=lambda header: not header_needs_migration(header)
            )
        except BaseException:
            if same:
                assert old is not None
                old.adopt_lock(file)
            raise
        if not loaded.valid:
            if not loaded.blank:
                raise InvalidSessionFileError(path, line=loaded.header_line)
            if read_only:
                raise FileNotFoundError(f"{path}: empty session file")
            # A missing or blank file: a new session at exactly that path, written at once.
            self._session_dir = os.path.dirname(path) or self._session_dir
            self._start_new_session(None, file)
            file.create(self._content(False))
            self._after_first_write()
            return
        header = loaded.header
        assert header is not None
        self._use_file(file)
        cwd = header.get("cwd")
        if isinstance(cwd, str):
            self._cwd = cwd
        if loaded.lines is not None and loaded.pinned is not None:
            self._head = SessionHead(header, loaded.title_slot, loaded.title_slot_raw)
            lines = loaded.lines
            for index in lines.blob_refs:
                entry = lines.entries[index]
                assert entry is not None
                lines.entries[index] = allow_deep_nesting(
                    partial(resolve_blob_refs, entry, self._blobs)
                )
            source = LineSource(loaded.pinned, lines.offsets, lines.lengths, self._blobs, path)
            self._index.reset_lines(lines, source)
            if not read_only:
                self._after_first_write()
            return
        raw = [header, *loaded.entries]
        migrated = migrate_session_entries(raw)
        self._head = SessionHead(header, loaded.title_slot, loaded.title_slot_raw)
        entries = raw[1:]
        held: set[str] = set()  # refs kept as refs in memory (frames, missing blobs)
        for index in loaded.blob_ref_entries:
            entries[index] = entry = allow_deep_nesting(
                partial(resolve_blob_refs, entries[index], self._blobs)
            )
            held |= held_blob_refs(entry)
        self._index.reset(entries, held)
        if read_only:
            return
        if migrated:
            file.rewrite(self._content(False))
        self._after_first_write()

    def _after_first_write(self) -> None:
        """The file exists: keep the blobs it names from gc (`_hold_file_refs`), and
        record where (the terminal's breadcrumb, and the registry of session dirs outside
        the store when its images are in the agent's blobs)."""
        file = self._file
        assert file is not None
        self._hold_file_refs()
        if not isinstance(self._storage, HostFilesystem):
            return
        if self._breadcrumb:
            write_breadcrumb(self._cwd, file.path, self._agent_dir)
        if isinstance(self._blobs, BlobStore):
            agent = self._agent_dir
            if os.path.realpath(self._blobs.dir) == os.path.realpath(os.path.join(agent, "blobs")):
                register_session_dir(file.path, agent)

    def blob_carry(
        self,
        copy_path: str,
        storage: SessionStorage | None = None,
        *,
        agent_dir: str | None = None,
        blob_store: BlobStoreLike | None = None,
        standalone: bool = False,
    ) -> BlobCarry:
        """How a copy of this session written at `copy_path` (on `storage`, default
        this session's) takes its images along: the store they go to and the carrying
        (`sessiontree.layout._agent_dir.blob_carry`, which every copy uses). A
        `standalone` copy (one no manager writes: an export) holds its images itself
        when it is written outside every agent dir."""
        file = self._file
        return blob_carry(
            self._blobs,
            copy_path,
            storage if storage is not None else self._storage,
            source_path=file.path if file is not None else None,
            source_storage=self._storage,
            agent_dir=agent_dir if agent_dir is not None else self._agent_dir,
            blob_store=blob_store,
            standalone=standalone,
        )

    def _write_new_file(
        self,
        header: Entry,
        index: EntryIndex,
        source: SessionManager,
        *,
        agent_dir: str | None = None,
        blob_store: BlobStoreLike | None = None,
        path: str | None = None,
    ) -> str:
        """Write `header` + the entries of `index` (a copy of `source`'s) as a new session
        file at once and switch to it (and to `index`), its images in the store
        `source.blob_carry` gives its path. `source` may be this manager; its pinned
        blobs are the ones the entries may name. `path`: the file (default: the
        header's name in the session dir).

        On failure the manager stays on its current session, unchanged.
        """
        if path is None:
            path = session_path(self._session_dir, header)
        source._check_pinned(index, path)
        current = self._file
        if current is not None and current.on_disk:
            current.flush()  # a conflict in the current file surfaces before the switch
        agent = agent_dir if agent_dir is not None else self._agent_dir
        carry = source.blob_carry(path, self._storage, agent_dir=agent, blob_store=blob_store)
        blobs = carry.target
        file = self._new_file(path, blobs=blobs)
        pi_form = writes_pi_form(path, self._storage, agent)  # the new file's store's, not ours
        if pi_form:
            header, index = _named_by_entry(header, index, source._index)
        try:
            chunks = index.file_chunks(
                SessionHead(header).lines(), blobs, carry=carry, pi_form=pi_form
            )
            file.create(chunks, rescue=False)
        except BaseException:
            # The name may be taken after all (ids of two processes can collide): the
            # file there is not ours. `create` removed a half-made copy of its own.
            file.release_lock()
            raise
        self._blobs = blobs
        self._pi_form = pi_form
        index.use_blobs(blobs)  # its unread lines now name blobs of this store
        # The copy may name every blob the source held as a ref (`_hold_file_refs`).
        index.file_refs |= source._index.file_refs | source._pins.hashes()
        file.restore_content(self._content_source())
        self._use_file(file)
        self._head = SessionHead(header)
        self._index = index
        self._after_first_write()
        carry.report()
        return file.path

    # ------------------------------------------------------------------ checks

    def _check_open(self) -> None:
        if self._closed:
            raise SessionClosedError(self.get_session_file())

    def _check_writable(self) -> None:
        if self._closed:
            raise SessionClosedError(self.get_session_file())
        file = self._file
        if file is not None:
            if file.inherited and not file.read_only:
                # Before anything changes, in memory too: the child's copy stays the
                # parent's session as it was at the fork.
                file.check_usable()
            if file.read_only:
                raise SessionTreeError(f"{file.path}: session is open read-only")
            if file.error is not None:
                raise file.error

    # ------------------------------------------------------------------ persistence

    def set_session_file(self, path: str) -> None:
        """Switch to the session at `path`: load, migrate (rewriting), resolve blobs.

        A missing or blank file starts a new session at exactly that path (its
        header written at once). A non-empty file without a valid header raises
        `InvalidSessionFileError` and is left untouched.
        """
        self._check_open()
        file = self._file
        if file is not None and file.inherited and not file.read_only:
            file.check_usable()  # the parent's session and lock: not the child's to switch
        self._open_file(path, file is None or file.read_only)

    def _check_rewrite(self) -> None:
        """`_check_pinned` before a rewrite of the file (if it exists yet)."""
        file = self._file
        if file is not None and file.on_disk:
            self._check_pinned(self._index, file.path)

    def _rewrite(self) -> None:
        """Atomically rewrite the whole file, if it exists yet."""
        file = self._file
        if file is not None and file.on_disk:
            file.rewrite(self._content(False))

    def ensure_on_disk(self) -> None:
        """Write the session now, even before an assistant message; every entry after too."""
        self._check_writable()
        file = self._file
        if file is not None and not file.on_disk:
            self._check_pinned(self._index, file.path)
            file.create(self._content(False))
            self._after_first_write()

    def flush(self) -> None:
        """Make every write so far durable: blobs first, then the session file.

        (A storage writer's own `flush` only hands data to the OS; this is the
        durability barrier: it fsyncs.)
        """
        self._check_open()
        if self._file is not None:
            self._file.flush()
        if self._pins or self._file_pins:
            # A pin a full disk refused is written now: the blobs this session names
            # are kept from gc again once the disk has room.
            save_unsaved()

    def close(self) -> None:
        """Flush and release the file; raises the stored persistence error, if any.

        Afterwards the in-memory session can still be read, but every operation that
        would change it or touch storage raises SessionClosedError. In a process forked
        from the one that opened the session, it closes only the child's copy: nothing
        is flushed, unlocked or written (the at-exit close of a child does the same).
        """
        if self._closed:
            return
        self._closed = True
        _open_managers.discard(self)
        try:
            if self._file is not None:
                self._file.close()
        finally:
            self._pins.release()
            self._file_pins.release()

    def rewrite_entries(self) -> None:
        """Atomically rewrite the file after in-place edits of entries."""
        self._check_writable()
        self._check_rewrite()
        self._index.changed_in_place()
        self._rewrite()

    def remove_entries(
        self, entry_ids: Iterable[str], *, replace: Mapping[str, Entry] | None = None
    ) -> builtins.list[str]:
        """Remove entries and rewrite the file atomically, keeping every other entry
        (`replace`: id -> an entry to write in place of the one with that id, its id
        and parent kept).

        A child of a removed entry takes the nearest kept ancestor as its parent (None:
        it becomes a root), a label of a removed entry goes with it, and the leaf moves
        up the same way. The rewrite is the one every rewrite is: the same path, under
        this manager's lock, refused when the file changed since this manager read or
        wrote it, and atomic (the old file or the new one, never half of it); when it
        fails nothing changes, in memory or on disk. Returns the ids removed, in file
        order (ids the session does not have are passed over).
        """
        self._check_writable()
        index = self._index
        wanted = {i for i in entry_ids if i in index}
        replace = {i: e for i, e in (replace or {}).items() if i in index and i not in wanted}
        if not wanted and not replace:
            return []
        entries = index.entries
        for entry in entries:
            if entry.get("type") == "label" and entry.get("targetId") in wanted:
                wanted.add(str(entry["id"]))
        parents = {str(e.get("id")): e.get("parentId") for e in entries}

        def kept_ancestor(entry_id: Any) -> Any:
            seen: set[str] = set()
            while entry_id in wanted and entry_id not in seen:
                seen.add(entry_id)
                entry_id = parents.get(entry_id)
            return None if entry_id in wanted else entry_id

        kept: builtins.list[Entry] = []
        removed: builtins.list[str] = []
        for entry in entries:
            entry_id = entry.get("id")
            if entry_id in wanted:
                removed.append(str(entry_id))
                continue
            parent = entry.get("parentId")
            if entry_id in replace:
                entry = {**replace[entry_id], "id": entry_id, "parentId": parent}
            if parent in wanted:
                entry = {**entry, "parentId": kept_ancestor(parent)}
            first_kept = entry.get("firstKeptEntryId")
            if entry.get("type") == "compaction" and first_kept in wanted:
                # The context keeps from the next kept entry of its path on.
                path: builtins.list[Any] = []
                current, seen = parent, set()
                while isinstance(current, str) and current not in seen:
                    if current == first_kept:
                        later = [i for i in path if i not in wanted]
                        if later:
                            entry = {**entry, "firstKeptEntryId": later[-1]}
                        break
                    seen.add(current)
                    path.append(current)
                    current = parents.get(current)
            kept.append(entry)
        replacement = EntryIndex(kept)
        replacement.leaf = kept_ancestor(index.leaf)
        self._index = replacement
        try:
            self._check_rewrite()
            self._rewrite()
        except BaseException:
            self._index = index
            raise
        index.reset([])  # lets go of the lines it may still read from the old file
        return removed

    def is_persisted(self) -> bool:
        """Whether this session writes to storage at all."""
        return self._file is not None

    def is_read_only(self) -> bool:
        return self._file is not None and self._file.read_only

    def put_blob(self, data: bytes) -> BlobPutResult:
        """Store bytes in the blob store (content addressed).

        The blob is pinned until the manager closes: `gc` keeps it whatever its age,
        as the ref may go into an entry (or a copy of this session) at any time.
        """
        self._check_writable()
        result = self._blobs.put(data)
        self._pin((result.hash,))
        blob_dir = getattr(self._blobs, "dir", None)
        error = pin_error(blob_dir) if isinstance(blob_dir, str) else None
        if error is not None and isinstance(blob_dir, str):
            live = os.path.join(blob_dir, LIVE_DIR)
            # Something other than a dir at `.live` stops every gc from deleting: the ref
            # is safe unpinned. Otherwise (a full disk refused the pin) gc would take the
            # blob: the caller learns it now, before an entry names it.
            if not os.path.lexists(live) or os.path.isdir(live):
                raise OSError(
                    error.errno,
                    f"could not pin blob {result.hash} in {live}: {error.strerror or error}",
                ) from error
        return result

    def _pin(self, hashes: Iterable[str]) -> None:
        """Keep these blobs from `gc` while this manager lives (`sessiontree.storage._pins`).

        Pins go with `close` (or when the manager is collected, or its process ends):
        a pin costs one short write per hash new to the process, so pins are not let
        go one by one as files come to name the blobs.
        """
        for digest in hashes:
            self._pins.add(self._blobs, digest)
        if self._pins_finalizer is None and self._pins:
            # A manager nobody closes (in memory, say) lets its pins go when collected.
            self._pins_finalizer = weakref.finalize(self, self._pins.release)

    def _hold_file_refs(self) -> None:
        """Pin every blob the session's file names (`EntryIndex.file_refs`) while this
        manager lives (issue 21.2). A file deleted under a live writer is written again
        from what the manager holds, and the lines an index-first load has not read
        hold their images only in the file (a whole load holds snapcompact frames as
        refs too): a gc that runs meanwhile must keep them."""
        refs = self._index.file_refs
        if not refs:
            return
        pins, blobs = self._file_pins, self._blobs
        for digest in refs:
            pins.add(blobs, digest)
        if self._file_pins_finalizer is None and pins:
            self._file_pins_finalizer = weakref.finalize(self, pins.release)

    def _check_refs(self, refs: Iterable[str], path: str) -> None:
        """MissingBlobError when a ref about to be written names a blob this manager
        pinned that is gone (only pinned ones are looked at: one stat each)."""
        pinned = self._pins.hashes()
        for digest in sorted(set(refs) & pinned):
            if not self._blobs.has(digest):
                raise MissingBlobError(digest, path, getattr(self._blobs, "dir", None))

    def _check_pinned(self, index: EntryIndex, path: str, *more: Entry) -> None:
        """Before a whole session (`index`'s entries and `more`) is written: refuse when
        an entry held in memory names a blob this manager pinned that is gone (the
        manager keeps no copy of what it put, so it cannot put it back; the caller can,
        with `put_blob`). Unread entries are in the file already."""
        if not self._pins:
            return
        missing = self._pins.missing()
        if not missing:
            return
        for entry in itertools.chain((e for _, e in index.read_so_far()), more):
            if entry is None:
                continue  # unread: its line is in the file already
            try:
                refs = find_blob_refs(validate_entry(entry))
            except EntryNotSerializableError:
                continue
            for digest in missing:
                if digest in refs:
                    raise MissingBlobError(digest, path, getattr(self._blobs, "dir", None))

    # ------------------------------------------------------------------ appending

    def _append(self, entry: Entry) -> str:
        """Persist (or, not yet on disk, validate) the entry, then add it to memory.

        An entry that cannot be written changes nothing: it is refused before it
        joins the tree, and a failed write leaves it out of memory too.
        """
        self._check_writable()
        file = self._file
        if file is not None and (file.on_disk or self._starts_file(entry)):
            try:
                line = entry_line(entry, self._blobs, pi_form=self._pi_form)
            except OSError as exc:
                path = file.path
                raise SessionPersistenceError(
                    f"{path}: could not store the entry's images: {exc}; nothing was appended",
                    path,
                ) from exc
            if file.on_disk:
                # (A finalizer exists once anything was pinned: one attribute to look at.)
                if self._pins_finalizer is not None and _REF_MARK in line:
                    self._check_refs(find_blob_refs(line), file.path)
                file.append(line)
            else:
                # The first assistant message: the whole session, this entry included.
                self._check_pinned(self._index, file.path, entry)
                file.create(itertools.chain(self._content(False), (line,)))
                self._after_first_write()
        else:
            data = validate_entry(entry)
            if _REF_MARK in data:
                # Held until it is written: the blobs its refs name are kept from gc.
                self._pin(find_blob_refs(data))
        self._index.add(entry)
        return str(entry["id"])

    def _starts_file(self, entry: Entry) -> bool:
        """Whether appending `entry` writes a new session's file: at the first
        assistant message (oh-my-pi, xcsh), in pi's store at the first user or
        assistant message (pi 0.99+; 0.73 waited for the assistant too)."""
        if self._pi_form:
            return is_conversation_message(entry) or self._index.has_conversation()
        return is_assistant_message(entry) or self._index.has_assistant()

    def _base(self, kind: str) -> Entry:
        return {
            "type": kind,
            "id": self._index.new_id(),
            "parentId": self._index.leaf,
            "timestamp": iso_now(),
        }

    def append_message(
        self, message: dict[str, Any], *, extra: Mapping[str, Any] | None = None
    ) -> str:
        """Append a message entry (stored verbatim).

        `extra`: more fields of the entry, after `message` (what an integration keeps
        beside the message, e.g. the framework's own item); the agents ignore fields
        they do not know. ValueError for a field the entry already has.
        """
        entry = self._base("message")
        entry["message"] = message
        if extra:
            for key, value in extra.items():
                if key in entry:
                    raise ValueError(f"an extra field cannot replace the entry's {key!r}")
                entry[key] = value
        return self._append(entry)

    def append_thinking_level_change(self, thinking_level: str | None) -> str:
        """Append a thinking level change; None is written as `null`."""
        entry = self._base("thinking_level_change")
        entry["thinkingLevel"] = thinking_level
        return self._append(entry)

    def append_model_change(self, model: str, role: str | None = None) -> str:
        """Append a model change (`"provider/id"`); role omitted when None.

        In pi's store a change of the default model is written as pi writes it
        (`provider`, `modelId`: pi reads no `model`); pi has no roles, so a change of
        another role keeps oh-my-pi's form.
        """
        entry = self._base("model_change")
        provider, slash, model_id = model.partition("/")
        if self._pi_form and slash and role in (None, "default"):
            entry["provider"] = provider
            entry["modelId"] = model_id
            return self._append(entry)
        entry["model"] = model
        _put(entry, "role", role)
        return self._append(entry)

    def append_compaction(
        self,
        summary: str,
        short_summary: Maybe[str | None],
        first_kept_entry_id: str | None,
        tokens_before: int,
        details: Maybe[Any] = UNSET,
        from_extension: Maybe[bool | None] = UNSET,
        preserve_data: Maybe[Any] = UNSET,
        *,
        usage: Maybe[dict[str, Any] | None] = UNSET,
        system_message: Maybe[dict[str, Any] | None] = UNSET,
    ) -> str:
        """Append a compaction: the context keeps `first_kept_entry_id`..here after its
        summary; None keeps nothing before it ("retain none": pi 1.6 writes the
        compaction's own id as `firstKeptEntryId`).

        `usage`: what making the summary cost (pi 1.6 counts it in the session's
        totals). `system_message`: the system message the context starts from after
        the compaction (pi 1.6's `systemMessage`, emitted before the summary). Not
        given, it is what pi 1.6 records: every system message of the context
        replayed into one (`current_system_message`), stamped with the compaction's
        time, or none when the context has none; None writes none. Keys in pi 1.6's
        order: `...,details,usage,fromHook,systemMessage` (`shortSummary` after
        `summary`, `fromExtension` and `preserveData` after `usage`, as oh-my-pi).
        """
        entry = self._base("compaction")
        entry["summary"] = summary
        _put(entry, "shortSummary", short_summary)
        entry["firstKeptEntryId"] = (
            first_kept_entry_id if first_kept_entry_id is not None else entry["id"]
        )
        entry["tokensBefore"] = tokens_before
        _put(entry, "details", details)
        _put(entry, "usage", usage)
        _put(entry, "fromExtension", from_extension)
        _put(entry, "preserveData", preserve_data)
        if isinstance(system_message, UnsetType):
            current = current_system_message(self._index.context().messages)
            if current is not None:
                current["timestamp"] = parse_iso_ms(entry["timestamp"])
            system_message = current
        _put(entry, "systemMessage", system_message)
        return self._append(entry)

    def append_context_edit(self, target_id: str, replacement: dict[str, Any] | None) -> str:
        """Append a branch-local edit of an earlier entry's part of the context (pi 1.6):
        None drops the entry from the context, `{"content": ...}` (a string or a list of
        blocks) replaces its content. The latest edit of an entry on the branch wins.

        The target must be on the active branch and give the model content: a user,
        assistant or toolResult message or a custom message (EntryNotFoundError for an
        unknown id, ValueError otherwise). A string replacing an assistant's or a tool
        result's content is stored as one text block, as pi stores it.
        """
        if replacement is not None and not (
            isinstance(replacement, dict) and isinstance(replacement.get("content"), (str, list))
        ):
            raise ValueError("Context edit replacement must be None or contain string/list content")
        target = self._index.require(target_id)
        if not any(e.get("id") == target_id for e in self._index.branch(None)):
            raise ValueError(f"Entry {target_id} is not on the active branch")
        message = target.get("message")
        role = message.get("role") if isinstance(message, dict) else None
        if target.get("type") == "message" and role in ("user", "assistant", "toolResult"):
            if role != "user" and replacement is not None:
                content = replacement["content"]
                if isinstance(content, str):
                    replacement = {"content": [{"type": "text", "text": content}]}
        elif target.get("type") != "custom_message":
            raise ValueError(f"Entry {target_id} does not contribute editable model content")
        entry = self._base("context_edit")
        entry["targetId"] = target_id
        entry["replacement"] = replacement
        return self._append(entry)

    def append_usage(
        self,
        kind: str,
        provider: str,
        model: str,
        usage: dict[str, Any],
        note: Maybe[str | None] = UNSET,
    ) -> str:
        """Append usage spent outside a reply (pi 0.87+'s `usage` entry, e.g. a cache
        warm-up): counted in the session's totals, not part of the model context."""
        entry = self._base("usage")
        entry["kind"] = kind
        entry["provider"] = provider
        entry["model"] = model
        entry["usage"] = usage
        if isinstance(note, str) and note:  # pi: `...(note ? { note } : {})`, no empty note
            entry["note"] = note
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

    def append_label_change(self, target_id: str, label: Maybe[str | None]) -> str:
        """Set (or with None/""/UNSET clear) the label of an entry."""
        self._index.require(target_id)
        entry = self._base("label")
        entry["targetId"] = target_id
        _put(entry, "label", label)
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
        self._check_open()
        self._index.require(entry_id)
        self._index.leaf = entry_id

    def reset_leaf(self) -> None:
        """Leaf = None: the next append creates a new root."""
        self._check_open()
        self._index.leaf = None

    def branch_with_summary(
        self,
        branch_from_id: str | None,
        summary: str,
        details: Maybe[Any] = UNSET,
        from_extension: Maybe[bool | None] = UNSET,
    ) -> str:
        """Branch to `branch_from_id` (None: the root) and record a summary of what was left.

        `fromId` is the branch target ("root" for None) as oh-my-pi writes it; in pi's
        store, the leaf that was left ("root" when there was none), as pi 0.84.3+ does.
        """
        self._check_writable()
        if branch_from_id is not None:
            self._index.require(branch_from_id)
        left = self._index.leaf
        self._index.leaf = branch_from_id
        entry = self._base("branch_summary")
        from_id = left if self._pi_form else branch_from_id
        entry["fromId"] = from_id if from_id is not None else "root"
        entry["summary"] = summary
        _put(entry, "details", details)
        _put(entry, "fromExtension", from_extension)
        return self._append(entry)

    def get_leaf_id(self) -> str | None:
        return self._index.leaf

    def get_leaf_entry(self) -> Entry | None:
        leaf = self._index.leaf
        return self._index.get(leaf) if leaf is not None else None

    def get_entry(self, entry_id: str) -> Entry | None:
        return self._index.get(entry_id)

    def get_children(self, parent_id: str | None) -> builtins.list[Entry]:
        """Direct children of an entry (None: the roots), in insertion order."""
        return self._index.children(parent_id)

    def get_label(self, entry_id: str) -> str | None:
        return self._index.label(entry_id)

    def get_labels(self) -> dict[str, str]:
        """Every label in effect: target id -> label."""
        return self._index.labels()

    def get_branch(self, from_id: str | None = None) -> builtins.list[Entry]:
        """Entries from the root to `from_id` (default: the leaf); [] if unknown."""
        return self._index.branch(from_id)

    def get_header(self) -> Entry | None:
        return self._head.header or None

    def get_entries(self) -> builtins.list[Entry]:
        """All non-header entries in insertion order (a shallow copy); a session loaded
        index first reads every line for it (see `sessiontree.session._index`)."""
        return list(self._index.entries)

    def get_tree(self) -> builtins.list[SessionTreeNode]:
        """Roots of the entry tree (orphans are roots), children oldest first (reads
        every entry of a session loaded index first)."""
        return self._index.tree()

    def get_tree_shape(self) -> TreeShape:
        """The tree without its entries: ids, kinds, parents and labels by position,
        entries read only when asked for by position (`TreeShape`). What a viewer of
        a big session loaded index first asks for instead of `get_tree`."""
        return self._index.shape()

    def build_session_context(self) -> SessionContext:
        """The model context at the current leaf.

        Kept incrementally: appending to the leaf extends the cached context, so an
        agent that rebuilds its context every turn pays O(1) per new entry. A session
        loaded index first reads only what the context holds: the path from the last
        compaction's first kept entry on, and the messages that set the model.
        """
        return self._index.context()

    def get_injected_ttsr_rules(self) -> builtins.list[str]:
        """Rules injected on the current path, de-duplicated, first seen first (as the
        context reports them)."""
        return self._index.context().injected_ttsr_rules

    # ------------------------------------------------------------------ identity

    def get_session_id(self) -> str:
        return str(self._head.header.get("id", ""))

    def get_session_file(self) -> str | None:
        return self._file.path if self._file is not None else None

    def get_session_dir(self) -> str:
        return self._session_dir

    def get_cwd(self) -> str:
        return self._cwd

    def get_session_name(self) -> str | None:
        """The session's name by the rule in `sessiontree.format._naming`: the header title (a
        title slot replacing it), else the latest `session_info`/`title_change` entry."""
        return session_name(self._head.title(), self._index.latest_name)

    def set_session_name(self, name: str, source: str = "auto") -> bool:
        """Name the session (header `title`/`titleSource`); never appends an entry,
        except in pi's store (see `_name_as_pi`).

        Returns False when nothing changed: an empty name, or an "auto" name after
        a "user" one. Once the file exists it is rewritten atomically.
        """
        self._check_writable()
        if self._pi_form:
            return self._name_as_pi(name, source)
        cleaned = clean_session_name(name)
        if not cleaned:
            return False
        current_source = self._head.title_source()
        if source == "auto" and current_source == "user":
            return False
        if self.get_session_name() == cleaned and current_source == source:
            return False
        self._check_rewrite()
        self._head = self._head.renamed(cleaned, source)
        self._rewrite()
        return True

    def _name_as_pi(self, name: str, source: str) -> bool:
        """A name in pi's store: a `session_info` entry, what pi reads (it ignores the
        header's title), the name cleaned as pi 1.6 stores it (`pi_session_name`).

        pi keeps no source and its names are the user's (`/name`), so an "auto" name
        replaces none. A title the header still carries (a rename by an older
        sessiontree) is dropped in the same step, since it would hide the entry's name.
        """
        cleaned = pi_session_name(name)
        if not cleaned:
            return False
        current = self.get_session_name()
        if current == cleaned:
            return False
        head = self._head
        if source == "auto" and current is not None:
            return False
        titled = "title" in head.header or "titleSource" in head.header
        if titled:
            self._check_rewrite()
            header = {k: v for k, v in head.header.items() if k not in ("title", "titleSource")}
            self._head = head.with_header(header)
        entry = self._base("session_info")
        entry["name"] = cleaned
        try:
            self._append(entry)
        except BaseException:
            self._head = head
            raise
        if titled:
            self._rewrite()
        return True

    # ------------------------------------------------------------------ lifecycle

    def new_session(self, parent_session: str | None = None) -> str | None:
        """Start a fresh session (new id and file); returns its path (None in memory)."""
        self._check_writable()
        self._start_new_session(parent_session, persistent=self._file is not None)
        return self.get_session_file()

    def fork(self) -> tuple[str, str] | None:
        """Copy this session to a new file with a new id; `parentSession` = old id."""
        self._check_writable()
        if self._file is None:
            return None
        old_file = self._file.path
        header = {
            **self._head.header,
            "id": generate_session_id(),
            "timestamp": iso_now(),
            "parentSession": self.get_session_id(),
        }
        new_file = self._write_new_file(self._head.carried_title(header), self._index, self)
        return old_file, new_file

    def create_branched_session(self, leaf_id: str) -> str | None:
        """Keep only the root->`leaf_id` path (labels re-created after it) in a new session.

        Persistent: a new file whose `parentSession` is the previous file, which
        the manager switches to (written at once, as oh-my-pi does: the user asked
        for this file explicitly). In memory the session is replaced and None returned.
        """
        self._check_writable()
        header = self._head.carried_title(new_header(self._cwd, self.get_session_file()))
        if self._file is None:
            self._head = SessionHead(header)
            self._index.reset(self._index.branch_with_labels(leaf_id))
            return None
        path = session_path(self._session_dir, header)
        if not writes_pi_form(path, self._storage, self._agent_dir):
            return self._write_new_file(
                header, EntryIndex(self._index.branch_with_labels(leaf_id)), self
            )
        # pi's store: what pi 1.6 writes (no entry left without its parent), and only
        # once the path holds a conversation (a user or assistant message), as it does.
        index = EntryIndex(self._index.branch_as_pi(leaf_id))
        if index.has_conversation():
            return self._write_new_file(header, index, self, path=path)
        self._use_file(self._new_file(path))
        self._pi_form = True
        self._head = SessionHead(header)
        self._index = index
        return path

    def persist_copy(
        self,
        session_dir: str | None = None,
        storage: SessionStorage | None = None,
        breadcrumb: bool = True,
        *,
        leaf_id: str | None = None,
        blob_store: BlobStoreLike | None = None,
        parent_session: str | None = None,
        agent_dir: str | None = None,
        path: str | None = None,
    ) -> SessionManager:
        """A new persistent session holding a copy of this one (in memory or not).

        New id and file in `session_dir` (default: the cwd's dir in the agent dir),
        the same entries (deep copies), name and title source; written at once,
        images into the copy's blob store (oh-my-pi's `persistCopy`): `blob_store`,
        else the one `blob_carry` gives the copy's path. With `leaf_id`, only the root
        -> `leaf_id` path (with its labels) is copied and `parentSession` names this
        session's file, as `create_branched_session` does. `parent_session` sets the
        new header's `parentSession` (an import names the session its source was
        forked from, a subagent's copy its parent's file). `agent_dir`: the copy's
        agent dir (default: this session's). `path`: the copy's file (default: a new
        name in `session_dir`; refused, as any new file, where a file is).
        """
        self._check_open()
        storage = default_storage(storage)
        agent = agent_dir if agent_dir is not None else self._agent_dir
        directory = (
            session_dir if session_dir is not None else get_default_session_dir(self._cwd, agent)
        )
        if leaf_id is None:
            entries = self._index.entries
        elif writes_pi_form(path or directory, storage, agent):
            entries = self._index.branch_as_pi(leaf_id)  # as `create_branched_session`
        else:
            entries = self._index.branch_with_labels(leaf_id)
        copy_ = SessionManager(
            self._cwd,
            directory,
            None,
            True,
            storage,
            blob_store=blob_store,
            breadcrumb=breadcrumb,
            agent_dir=agent,
        )
        parent = self.get_session_file() if leaf_id is not None else None
        if parent_session is not None:
            parent = parent_session
        header = self._head.carried_title(new_header(self._cwd, parent))
        copy_._write_new_file(
            header,
            EntryIndex(copy.deepcopy(entries)),
            self,
            agent_dir=agent,
            blob_store=blob_store,
            path=path,
        )
        return copy_

    def move_to(self, new_cwd: str) -> None:
        """Move the session (file and artifacts dir) to `new_cwd`'s session dir.

        When that is the directory the session is in already (the same cwd, or one
        whose name encodes the same way), the file stays where it is and only its
        header's cwd changes. Refuses to move onto an existing file.
        """
        self._check_writable()
        if self._file is not None:
            directory_tree(self._storage, "move_to (it moves the artifacts dir too)")
        new_dir = get_default_session_dir(new_cwd, self._agent_dir)
        head = self._head.with_header({**self._head.header, "cwd": new_cwd})
        file = self._file
        if file is None:
            self._head, self._cwd = head, new_cwd
            return
        old_path = file.path
        new_path = os.path.join(new_dir, os.path.basename(old_path))
        self._check_rewrite()
        if self._same_place(old_path, new_path):
            if head.header != self._head.header:
                self._head, self._cwd = head, new_cwd
                self._rewrite()
            return
        if not file.on_disk:
            # Nothing written yet (and no lock taken): the first write goes there.
            self._use_file(self._new_file(new_path))
            self._pi_form = writes_pi_form(new_path, self._storage, self._agent_dir)
            self._head, self._cwd, self._session_dir = head, new_cwd, new_dir
            return
        artifacts = None
        if old_path.endswith(".jsonl") and new_path.endswith(".jsonl"):
            artifacts = (old_path[: -len(".jsonl")], new_path[: -len(".jsonl")])
        # Into another agent dir: its images go along into that dir's blob store, as
        # a copy's do (a blob store the caller chose stays the session's).
        carry = self.blob_carry(new_path)
        blobs = carry.target
        old_head, self._head = self._head, head
        pi_form = writes_pi_form(new_path, self._storage, self._agent_dir)
        try:
            chunks = self._index.file_chunks(
                head.lines(), blobs, carry=carry, file_checked=True, pi_form=pi_form
            )
            file.move(new_path, chunks, artifacts)
        except BaseException:
            self._head = old_head
            raise
        self._pi_form = pi_form
        if carry.carries:
            self._blobs = file.blobs = blobs
            self._index.use_blobs(blobs)
        self._cwd, self._session_dir = new_cwd, new_dir
        self._after_first_write()
        carry.report()

    def _same_place(self, a: str, b: str) -> bool:
        """Whether two session paths name one file (however the names are spelled)."""
        if os.path.normpath(a) == os.path.normpath(b):
            return True
        if not isinstance(self._storage, HostFilesystem):
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
        """Tokens and cost summed over every entry as pi 1.6 sums them: assistant
        messages, tool results' `usage`, `usage` entries, and compactions' and branch
        summaries' `usage` (lines not read yet are parsed for it and let go)."""
        totals = UsageTotals()
        for _, usage in self._index.counted_usages():
            totals.add_usage(usage)
        return UsageStatistics(
            totals.input, totals.output, totals.cache_read, totals.cache_write, totals.cost
        )


def _named_by_entry(
    header: Entry, index: EntryIndex, shared: EntryIndex
) -> tuple[Entry, EntryIndex]:
    """A copy into pi's store: the header's title (which pi never shows) becomes the
    `session_info` entry pi reads, after the copy's leaf, unless that entry is its
    name already. `shared`: an index that belongs to a manager still in use, which is
    copied rather than changed."""
    if "title" not in header and "titleSource" not in header:
        return header, index
    title = header.get("title")
    header = {k: v for k, v in header.items() if k not in ("title", "titleSource")}
    name = pi_session_name(title) if isinstance(title, str) else ""
    if not name or name == index.latest_name:
        return header, index
    if index is shared:
        leaf = index.leaf
        index = EntryIndex(list(index.entries))
        index.leaf = leaf
    entry = {
        "type": "session_info",
        "id": index.new_id(),
        "parentId": index.leaf,
        "timestamp": iso_now(),
        "name": name,
    }
    index.add(entry)
    return header, index


def _put(entry: Entry, key: str, value: object) -> None:
    """Set `key` unless the value is UNSET or None (both mean JS `undefined`)."""
    if value is not None and not isinstance(value, UnsetType):
        entry[key] = value
