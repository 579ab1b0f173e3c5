"""`SessionManager`: one session, as the agents use it.

A facade over three parts, each with one job and tests of its own:

- `EntryIndex` (`_index`): the entries, ids, children, labels, the leaf and the
  incremental context; no I/O;
- `SessionHead` (`sessiontree.format`): the header and oh-my-pi's title slot, and the
  naming rule;
- `SessionFile` (`_file`): the file on a storage, with the writer lock, the guard
  against changes behind our back, the stored error and the rescue copy.

The manager builds entries, and expresses each lifecycle operation as "a head and
entries -> a file": a session in memory has no file at all. Persistence starts with
the first assistant message (a session that never got an answer leaves nothing on
disk) or `ensure_on_disk()`; from then on every append is one line handed to the OS
before it returns, and full rewrites are atomic.

One class, written in four modules by job: the state, the file and the blobs it pins
(`_manager_storage.SessionOnStorage`), the entries it appends
(`_manager_appends.SessionAppends`), the new files it writes from the session
(`_manager_copies.SessionCopies`), and here the factories, the reading of the tree and
the name.
"""

from __future__ import annotations

import builtins
import os
import re
from dataclasses import dataclass
from typing import Any

from sessiontree._util.env import agent_dir_or_default
from sessiontree.errors import InvalidSessionFileError, SessionLockError
from sessiontree.format import (
    Entry,
    SessionContext,
    SessionTreeNode,
    UsageTotals,
    new_header,
    pi_session_name,
    session_name,
)
from sessiontree.layout import (
    blob_store_for,
    get_default_session_dir,
    home_relative_dir_name,
    read_breadcrumb,
)
from sessiontree.session._manager_appends import SessionAppends
from sessiontree.session._manager_copies import SessionCopies
from sessiontree.session._shape import TreeShape
from sessiontree.storage import (
    BlobStoreLike,
    HostFilesystem,
    MemorySessionStorage,
    SessionStorage,
    default_storage,
)

__all__ = ["SessionManager", "UsageStatistics"]

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


@dataclass(frozen=True, slots=True)
class UsageStatistics:
    """Token and cost totals of a session, summed as pi 1.6 sums them (assistant
    replies, tool results, `usage` entries, compactions and branch summaries)."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    cost: float = 0.0


def clean_session_name(name: str) -> str:
    """Control characters become spaces, runs of whitespace collapse, ends trimmed."""
    return " ".join(_CONTROL.sub(" ", name).split())


class SessionManager(SessionAppends, SessionCopies):
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

    # ------------------------------------------------------------------ naming

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

    # ------------------------------------------------------------------ usage

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
