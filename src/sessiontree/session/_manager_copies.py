"""`SessionCopies`: a session written as a new file, the manager then on it or not.

`new_session`, `fork`, `create_branched_session`, `persist_copy` and `move_to` each
express "a head and entries -> a file" through `_write_new_file` (or, for a move, the
file's own `move`): written at once and atomically, the images going where
`blob_carry` says; on failure the manager stays on the session it was on.
"""

from __future__ import annotations

import copy
import os
from typing import TYPE_CHECKING

from sessiontree.format import (
    Entry,
    SessionHead,
    generate_session_id,
    iso_now,
    new_header,
    pi_session_name,
    session_path,
)
from sessiontree.layout import get_default_session_dir, writes_pi_form
from sessiontree.session._index import EntryIndex
from sessiontree.session._manager_storage import SessionOnStorage
from sessiontree.storage import (
    BlobStoreLike,
    HostFilesystem,
    SessionStorage,
    default_storage,
    directory_tree,
)

if TYPE_CHECKING:
    from sessiontree.session._manager import SessionManager

__all__ = ["SessionCopies"]


class SessionCopies(SessionOnStorage):
    """New files from this session (see the module doc)."""

    def _write_new_file(
        self,
        header: Entry,
        index: EntryIndex,
        source: SessionOnStorage,
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
        # The copy is of this session's class (SessionManager, built on this one; imported
        # from here it would close an import circle).
        copy_: SessionManager = type(self)(  # type: ignore[assignment]
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
