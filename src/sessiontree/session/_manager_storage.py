"""`SessionOnStorage`: where a session lives, the base of `SessionManager`.

It holds the session's state (its head, its `EntryIndex`, its `SessionFile` on a
storage, its blob store) and does what keeps that state and the file one: opening a
file and switching files, the checks before a write, rewrites, `flush` and `close`,
and the blobs it pins (`put_blob`, the refs its file names). A session in memory has
no file at all. What builds entries (`SessionAppends`) and what writes the session
as a new file (`SessionCopies`) are built on it.
"""

from __future__ import annotations

import atexit
import builtins
import itertools
import logging
import os
import weakref
from collections.abc import Iterable, Mapping
from functools import partial

from sessiontree._util.closing import ClosesOnExit
from sessiontree._util.env import agent_dir_or_default
from sessiontree.errors import (
    EntryNotSerializableError,
    InvalidSessionFileError,
    MissingBlobError,
    SessionClosedError,
    SessionTreeError,
)
from sessiontree.format import (
    Entry,
    SessionHead,
    allow_deep_nesting,
    generate_session_id,
    header_needs_migration,
    migrate_session_entries,
    new_header,
    ordered_header,
    session_path,
)
from sessiontree.layout import (
    BlobCarry,
    blob_carry,
    blob_store_for,
    register_session_dir,
    write_breadcrumb,
    writes_pi_form,
)
from sessiontree.session._entry_removal import entries_without
from sessiontree.session._file import ContentSource, SessionFile
from sessiontree.session._index import EntryIndex
from sessiontree.session._line_source import LineSource
from sessiontree.session._persistence import held_blob_refs, resolve_blob_refs, validate_entry
from sessiontree.session._session_chunks import SessionChunks
from sessiontree.storage import (
    LIVE_DIR,
    BlobPins,
    BlobPutResult,
    BlobStore,
    BlobStoreLike,
    HostFilesystem,
    SessionStorage,
    find_blob_refs,
    pin_error,
    save_unsaved,
)

__all__ = ["SessionOnStorage"]

log = logging.getLogger("sessiontree")

_open_managers: weakref.WeakSet[SessionOnStorage] = weakref.WeakSet()


@atexit.register
def _close_open_managers() -> None:
    for manager in list(_open_managers):
        try:
            manager.close()
        except Exception as exc:
            log.warning("closing session at exit failed: %s", exc)


class SessionOnStorage(ClosesOnExit):
    """A session's state and its file (see the module doc); `SessionManager` is the
    class to use."""

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
            source = LineSource(
                loaded.pinned, lines.offsets, lines.lengths, self._blobs, path, lines.marks
            )
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
        kept, removed, leaf = entries_without(index.entries, wanted, replace, index.leaf)
        replacement = EntryIndex(kept)
        replacement.leaf = leaf
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

    # ------------------------------------------------------------------ blobs

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

    # ------------------------------------------------------------------ identity

    def get_session_id(self) -> str:
        return str(self._head.header.get("id", ""))

    def get_session_file(self) -> str | None:
        return self._file.path if self._file is not None else None

    def get_session_dir(self) -> str:
        return self._session_dir

    def get_cwd(self) -> str:
        return self._cwd
