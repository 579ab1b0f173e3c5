"""`Store`: one value for a store of sessions, and what is done to one.

A store is where sessions live, said once: an agent dir (its `sessions/`, `blobs/`,
caches and prompt history), a PostgreSQL database (`postgresql://...`, its paths
relative to an agent dir, the caches and history in that dir on this host), or
another agent's store (Claude Code, Codex, OpenCode, Gemini CLI, Copilot CLI), which
sessiontree only reads. Everything the library does to sessions takes the storage and
the agent dir the store holds; the free functions still take them one by one.

The default store (`Store()`) is the one place the environment is consulted
(`sessiontree._util.env`). A database is connected to on first use, so a `Store` on a
URL costs nothing until a method needs the database; `close()` releases it.
"""

from __future__ import annotations

import builtins
import dataclasses
import os
import stat
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any

from sessiontree import maintenance
from sessiontree import session as _sessions
from sessiontree._util.env import (
    NATIVE_AGENTS,
    agent_dir_or_default,
    default_store_choice,
    native_agent_dir,
)
from sessiontree._util.fs import file_kind
from sessiontree.errors import (
    AmbiguousSessionError,
    InvalidStoreError,
    ReadOnlyStoreError,
    SessionNotFoundError,
    SessionTreeError,
    StoreClosedError,
)
from sessiontree.format import file_session_id
from sessiontree.layout import StoreParts, native_agent_of
from sessiontree.listing import ListingRows, SessionInfo, list_rows
from sessiontree.storage import (
    FileSessionStorage,
    SessionStorage,
    close_storage,
    file_store_dir,
    is_stored_file,
    open_storage,
    redact_url,
)
from sessiontree.store._replies import (
    PricedReplies,
    StreamedReplies,
    replies_of,
    stream_replies_of,
)
from sessiontree.store._scope import SearchScope

if TYPE_CHECKING:
    from sessiontree.foreign.store import ForeignStore
    from sessiontree.history import HistoryStorage
    from sessiontree.maintenance import (
        DeletePlan,
        Finding,
        GcReport,
        MigrationResult,
        TransferReport,
    )
    from sessiontree.maintenance._check import RepairReport
    from sessiontree.reports import Report, ReportKind, StoreStats
    from sessiontree.search import SearchResult, SessionSource
    from sessiontree.session import SessionManager
    from sessiontree.storage import BlobStoreLike
    from sessiontree.sync import SyncReport

__all__ = ["PricedReplies", "Store", "made_by", "replies_of", "report_of_replies"]

Progress = Callable[[int, int], None]
"""`progress(bytes_done, bytes_total)` while the content index is refreshed."""
Moment = int | str | datetime
"""A time: epoch milliseconds, a `datetime`, or text as `--since` takes it (`2026-02-01`,
an ISO date-time, `30m`/`12h`/`7d`/`2w` ago; a date in `until` means its end)."""


def made_by(agent: str, machine: str | None) -> str:
    """Who made a store's sessions, as every view names them: its agent (`claude`), and
    the machine when a sync brought them from another (`claude@laptop`)."""
    return agent if machine is None else f"{agent}@{machine}"


def _default_agent_dir() -> str:
    """The configured agent dir (`$PI_CODING_AGENT_DIR`, else `~/.xcsh/agent`), absolute:
    where a store that names no agent dir of its own keeps its caches (a database's
    root, another agent's store's listing cache)."""
    return os.path.abspath(agent_dir_or_default())


def _looks_native(path: str) -> bool:
    """An agent dir whose `sessions/` holds `--<cwd>--` project dirs (decided without
    loading the other agents' readers)."""
    try:
        with os.scandir(os.path.join(path, "sessions")) as entries:
            return any(entry.name.startswith("-") for entry in entries)
    except OSError:
        return False


def _inside(path: str, directory: str) -> bool:
    path, directory = os.path.realpath(path), os.path.realpath(directory)
    return path == directory or path.startswith(os.path.join(directory, ""))


def _looks_like_path(arg: str) -> bool:
    return os.sep in arg or (os.altsep is not None and os.altsep in arg) or arg.endswith(".jsonl")


def _foreign_agents() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(every agent name, the other agents'): from the module that reads their stores."""
    from sessiontree.foreign.store import AGENTS, FOREIGN_AGENTS

    return AGENTS, FOREIGN_AGENTS


class Store:
    """A store of sessions: where they live, and what is done to them.

    `location`: an agent dir (a path, `~` expanded, or a `file:` URL), a
    `postgresql://` URL (its `schema` query parameter picks the schema, default
    `sessiontree`), or another agent's store by its path (a Claude Code config dir, a
    Codex home, an OpenCode data dir, a Gemini CLI or Copilot CLI home: detected, and
    read-only). None: the default store (`$SESSIONTREE_STORE`, else
    `$PI_CODING_AGENT_DIR`, else `~/.xcsh/agent`), or, with `agent`, that agent's.

    `agent`: `"xcsh"`, `"omp"`, `"pi"` (their agent dirs, `~/.<agent>/agent`) or
    `"claude"`, `"codex"`, `"opencode"`, `"gemini"`, `"copilot"` (their stores, where
    they keep them by default or at `location`; read-only).

    `agent_dir`: for a database, the agent dir its paths are relative to and whose
    caches and history it uses (default: the default agent dir); for an agent dir, the
    same dir (anything else is refused). `storage`: read and write through a storage
    of your own (e.g. a `MemorySessionStorage`) with `location` as its agent dir; the
    store does not close it.

    A `Store` is a context manager; `close()` releases its database connections. Its
    methods may be called from several threads at once (the web app does); each
    `SessionManager` it returns is used from one thread at a time.

    Raises (on construction): `InvalidStoreError` for an unsupported URL scheme, an
    unknown agent or arguments that disagree; `SessionTreeError` for another agent's
    default store that does not exist.
    """

    location: str
    """Where the store is: an agent dir's path, or a database's URL without its password."""
    agent: str
    """The agent whose format and rules apply: xcsh, omp, pi, claude, codex, ..."""
    agent_dir: str
    """The dir the store's paths are under (`<agent_dir>/sessions/...`) and whose caches
    it uses: the agent dir; a database's root; another agent's home."""
    read_only: bool
    """Whether the store is another agent's, which sessiontree only reads."""
    found_by_default: bool
    """Whether nothing named it (no location, agent or variable): the default agent dir,
    beside which the command line reads every other store found (`find_stores`)."""
    machine: str | None
    """The machine its sessions were made on, when they came from another through a
    sync hub (`find_stores` sets it on the view it opens); None: this machine."""

    def __init__(
        self,
        location: str | os.PathLike[str] | None = None,
        *,
        agent: str | None = None,
        agent_dir: str | os.PathLike[str] | None = None,
        storage: SessionStorage | None = None,
    ) -> None:
        self._lock = threading.Lock()
        self._closed = False
        self._url: str | None = None  # a database's, with its password: never shown
        self._foreign: ForeignStore | None = None
        self._storage: SessionStorage | None = None
        self._parts: StoreParts | None = None
        self._owns_storage = storage is None
        self.read_only = False
        self.found_by_default = False
        self.machine = None
        given = os.fspath(location) if location is not None else None
        if given == "":
            raise InvalidStoreError("an empty location names no store (None: the default one)")
        chosen = (
            os.path.abspath(os.path.expanduser(os.fspath(agent_dir)))
            if agent_dir is not None
            else None
        )
        if agent is not None:
            known, _ = _foreign_agents()
            if agent not in known:
                raise InvalidStoreError(
                    f"unknown agent {agent!r}: use one of {', '.join(sorted(known))}"
                )
        if storage is not None:
            self._adopt(storage, given, agent, chosen)
            return
        explicit = given is not None
        if given is None:
            if agent is not None and agent not in NATIVE_AGENTS:
                self._open_foreign(agent, None, chosen)
                return
            if agent is not None:
                given = native_agent_dir(agent)
            else:
                given, named = default_store_choice()
                self.found_by_default = not named
        files = file_store_dir(given)  # InvalidStoreError for an unsupported scheme
        if files is None:
            self._open_database(given, agent, chosen)
            return
        if chosen is not None and chosen != files:
            raise InvalidStoreError(
                f"{given} names the agent dir {files}, but agent_dir is {chosen}"
            )
        kind = agent
        if (kind is None or kind in NATIVE_AGENTS) and explicit and not _looks_native(files):
            from sessiontree.foreign.store import detect_agent

            kind = detect_agent(files) or kind
        if kind is not None and kind not in NATIVE_AGENTS:
            if agent is not None and agent != kind:
                raise InvalidStoreError(f"{files} is a {kind} store, not a {agent} agent dir")
            self._open_foreign(kind, files, None)
            return
        self.location = files
        self.agent = agent or native_agent_of(files)
        self.agent_dir = files
        self._storage = FileSessionStorage()

    # ------------------------------------------------------------------ opening

    def _open_database(self, url: str, agent: str | None, chosen: str | None) -> None:
        if agent is not None and agent not in NATIVE_AGENTS and agent != "claude":
            raise InvalidStoreError(
                f"a database holds no {agent} store: give the database, or the {agent} store"
            )
        self._url = url
        self.location = redact_url(url)
        self.agent = agent or "xcsh"
        self.agent_dir = chosen if chosen is not None else _default_agent_dir()
        # Claude Code's layout the Claude Agent SDK adapter keeps in a database
        # (`<agent dir>/projects/...`): read through the database, read-only.
        self.read_only = agent == "claude"

    def _connect(self) -> SessionStorage:
        """The database's storage; for Claude transcripts in it, read as Claude Code's
        store is (`ForeignStore.on_storage`), with the listing cache of the agent dir."""
        assert self._url is not None
        storage = open_storage(self._url, agent_dir=self.agent_dir)
        if self.agent != "claude":
            return storage
        from sessiontree.foreign.storage import ForeignStorage
        from sessiontree.foreign.store import ForeignStore

        label = getattr(storage, "schema", "")
        store = ForeignStore.on_storage(
            storage, self.agent_dir, f"{self.location}#{label}", self.agent_dir
        )
        self._foreign = store
        return ForeignStorage(store)

    def _open_foreign(self, agent: str, path: str | None, chosen: str | None) -> None:
        from sessiontree.foreign.storage import ForeignStorage
        from sessiontree.foreign.store import FOREIGN_AGENTS, ForeignStore, require_store_exists

        source = next(a for a in FOREIGN_AGENTS if a == agent)
        cache: str | None = _default_agent_dir()  # this agent's caches, never the other's
        if path is None:
            store = ForeignStore.default(source, cache)
            require_store_exists(store)
        else:
            store = ForeignStore.at(source, path, cache)
        if chosen is not None and chosen != os.path.abspath(store.home):
            raise InvalidStoreError(
                f"the {store.name} store is at {store.home}, but agent_dir is {chosen}"
            )
        if cache is not None and _inside(cache, store.home):
            store.cache_dir = None  # never write into the other agent's directory
        self._foreign = store
        self._storage = ForeignStorage(store)
        self.read_only = True
        self.location = store.home
        self.agent = agent
        self.agent_dir = store.home

    def _adopt(
        self, storage: SessionStorage, given: str | None, agent: str | None, chosen: str | None
    ) -> None:
        if given is not None and file_store_dir(given) is None:
            raise InvalidStoreError("a storage of your own is given a path, not a URL")
        directory = file_store_dir(given) if given is not None else chosen
        if chosen is not None and directory != chosen:
            raise InvalidStoreError(f"{given} is the agent dir, but agent_dir is {chosen}")
        # A ForeignStorage is one only when its module is loaded: no import to find out.
        foreign_module = sys.modules.get("sessiontree.foreign.storage")
        foreign = foreign_module.ForeignStorage if foreign_module is not None else None
        self._storage = storage
        if foreign is not None and isinstance(storage, foreign):
            self._foreign = storage.store
            self.read_only = True
            self.agent = agent or storage.store.agent
            home = os.path.abspath(storage.store.home)
            self.agent_dir = directory if directory is not None else home
        else:
            fallback = directory if directory is not None else _default_agent_dir()
            self.agent_dir = os.path.abspath(StoreParts(storage, fallback).root)
            self.agent = agent or native_agent_of(self.agent_dir)
        self.location = self.agent_dir

    def __repr__(self) -> str:
        extra = ", read-only" if self.read_only else ""
        extra += ", closed" if self._closed else ""
        return f"Store({self.location!r}, agent={self.agent!r}{extra})"

    def __enter__(self) -> Store:
        self._check_open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Release the database connections (a second call does nothing). Sessions
        opened from the store should be closed first: they use its connections."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            storage, self._storage = self._storage, None
        if storage is not None and self._owns_storage:
            close_storage(storage)

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(self.location)

    def _check_writable(self, what: str) -> None:
        self._check_open()
        if self.read_only:
            name = self._foreign.name if self._foreign is not None else self._agent_name()
            raise ReadOnlyStoreError(
                f"{self.location}: cannot {what}: the {name} store is read-only here "
                "(`sessiontree import` copies its sessions into this agent's store)"
            )

    def _agent_name(self) -> str:
        from sessiontree.foreign.store import AGENT_NAMES

        return AGENT_NAMES.get(self.agent, self.agent)

    # ------------------------------------------------------------------ parts

    @property
    def storage(self) -> SessionStorage:
        """The storage of the store's sessions (a database is connected to here, once)."""
        storage = self._storage
        if storage is None:
            with self._lock:
                self._check_open()
                if self._storage is None:
                    self._storage = self._connect()
                storage = self._storage
        self._check_open()
        return storage

    @property
    def parts(self) -> StoreParts:
        """The store's storage and agent dir as one value: what the library's store-wide
        functions (listing, maintenance, reports, search, imports) take."""
        parts = self._parts
        if parts is None:
            parts = self._parts = StoreParts(self.storage, self.agent_dir)
        self._check_open()
        return parts

    @property
    def is_files(self) -> bool:
        """Whether the sessions are files on this host (an agent dir's)."""
        return isinstance(self._storage, FileSessionStorage)

    @property
    def blobs(self) -> BlobStoreLike | None:
        """The store's blob store (images kept once, by hash): `<agent dir>/blobs`, a
        database's table; None for another agent's store (its images are inline)."""
        if self.read_only:
            self._check_open()
            return None
        return self.blobs_for(None)

    def blobs_for(self, path: str | None) -> BlobStoreLike:
        """The blob store of the session at `path`: the store's own, or, for a session
        file under another agent dir's `sessions/`, that dir's (`blob_store_for`)."""
        return self.parts.blobs_for(path)

    @property
    def history_path(self) -> str:
        """The prompt history's database: `<agent dir>/history.db`, on this host."""
        return os.path.join(self.agent_dir, "history.db")

    def history(self) -> HistoryStorage:
        """The store's prompt history (`HistoryStorage.open(<agent dir>/history.db)`), a new
        file created with the schema of the store's agent (oh-my-pi's in an `omp` store)."""
        self._check_writable("keep a prompt history")
        from sessiontree.history import HistoryStorage

        return HistoryStorage.open(self.history_path, agent=self.agent)

    # ------------------------------------------------------------------ sessions

    def list(self, cwd: str | os.PathLike[str] | None = None) -> builtins.list[SessionInfo]:
        """The sessions of `cwd`'s project (None: of every project), newest modified first."""
        return self._list_rows(cwd).infos()

    def _list_rows(self, cwd: str | os.PathLike[str] | None = None) -> ListingRows:
        """`list`'s sessions, each one's info built when asked for (a page builds its own)."""
        return list_rows(None if cwd is None else os.fspath(cwd), self.parts)

    def files(
        self,
        cwd: str | os.PathLike[str] | None = None,
        *,
        nested: bool = True,
        passed_over: builtins.list[tuple[str, str]] | None = None,
    ) -> builtins.list[str]:
        """Every session file (`*.jsonl`, sound or not) of `cwd`'s project (None: of every
        project), sorted; `nested` includes subagent sessions in artifacts dirs. A FIFO
        (socket, device) named like a session is left out, and added to `passed_over`
        as (path, what it is) when given."""
        where = os.fspath(cwd) if cwd is not None else None
        return maintenance.session_files(self.parts, where, nested=nested, passed_over=passed_over)

    def _kind(self, path: str) -> str | None:
        """'file', 'dir', what else is there ("a FIFO") or None (missing, or outside a
        database's root)."""
        storage = self.storage
        if isinstance(storage, FileSessionStorage):
            try:
                mode = os.stat(path).st_mode
            except (OSError, ValueError):
                return None
            if stat.S_ISREG(mode):
                return "file"
            return "dir" if stat.S_ISDIR(mode) else file_kind(mode)
        try:
            if is_stored_file(storage, path):
                return "file"
            return "dir" if storage.exists(path) else None
        except ValueError:  # a path outside the store's root names nothing in it
            return None

    def resolve(
        self, session: str | os.PathLike[str], cwd: str | os.PathLike[str] | None = None
    ) -> str:
        """The path of the session `session` names: a session file's path, a session-id
        prefix or a file-name prefix (the sessions of `cwd`'s project first, default the
        current directory's, then every project's), as the CLI resolves them.

        Raises:
            SessionNotFoundError: nothing matches (a path that is no session file).
            AmbiguousSessionError: a prefix matching several sessions (`.candidates`).
        """
        arg = os.fspath(session)
        path = os.path.abspath(os.path.expanduser(arg))
        kind = self._kind(path)
        here = os.fspath(cwd) if cwd is not None else os.getcwd()
        if kind == "file":
            if _looks_like_path(arg):
                return path
            # pi reads an argument without a separator or `.jsonl` as a session id: a
            # session of exactly that id wins over a file of that name in the current dir
            return self._exact_id(arg, here) or path
        if _looks_like_path(arg):
            if kind == "dir":
                raise SessionNotFoundError(arg, f"{arg}: is a directory, not a session file")
            if kind is not None:  # a FIFO (device) where a session was: never opened
                raise SessionNotFoundError(arg, f"{arg}: {kind}, not a regular file")
            where = "" if self.is_files else " in the store"
            raise SessionNotFoundError(arg, f"{arg}: no such session file{where}")
        from sessiontree.listing import resolve_resumable_session  # a lookup's, not a listing's

        match = resolve_resumable_session(arg, here, storage=self.storage, agent_dir=self.agent_dir)
        if match is None:
            raise SessionNotFoundError(
                arg, f"no session matches {arg!r} (in this project or any other)"
            )
        return str(match.session.path)

    def _file_named(self, session: str | os.PathLike[str]) -> str:
        """A session file's absolute path as given (as `files` lists it: one that is no
        longer there, or a dangling link, is then a file that cannot be read), else the
        path `resolve` gives the name."""
        arg = os.fspath(session)
        if os.path.isabs(arg) and arg.endswith(".jsonl"):
            return arg
        return self.resolve(arg)

    def _exact_id(self, arg: str, here: str) -> str | None:
        """The path of the session whose id (or file name's id) is `arg`, case aside."""
        from sessiontree.listing import resolve_resumable_session  # as in `resolve`

        try:
            match = resolve_resumable_session(
                arg, here, storage=self.storage, agent_dir=self.agent_dir
            )
        except AmbiguousSessionError:
            return None  # only prefixes match: not that id
        if match is None:
            return None
        stem = os.path.basename(match.session.path).removesuffix(".jsonl")
        ids = (match.session.id, file_session_id(stem) or "")
        return str(match.session.path) if arg.lower() in (i.lower() for i in ids) else None

    def open(
        self,
        session: str | os.PathLike[str],
        *,
        read_only: bool = False,
        breadcrumb: bool = True,
        lazy: bool | None = None,
    ) -> SessionManager:
        """The session `session` names (see `resolve`), its images in its blob store.

        `read_only=True` writes nothing, ever (another agent's store is only opened so).
        `breadcrumb=False` leaves this terminal's "last session" pointer alone.
        """
        if not read_only:
            self._check_writable("open a session for writing (give read_only=True)")
        return self.session(
            self.resolve(session), read_only=read_only, breadcrumb=breadcrumb, lazy=lazy
        )

    def session(
        self,
        path: str,
        *,
        read_only: bool = False,
        breadcrumb: bool = True,
        lazy: bool | None = None,
    ) -> SessionManager:
        """The session file at `path` (a path of the store, as `resolve` or `files` give
        it: no prefix is looked up), read through the store's storage, its images in its
        blob store. A missing file is created on the first write (`read_only=True`:
        FileNotFoundError). `read_only`, `breadcrumb` and `lazy` as `open` takes them.
        """
        if not read_only:
            self._check_writable("open a session for writing (give read_only=True)")
        return _sessions.SessionManager.open(
            path,
            storage=self.storage,
            read_only=read_only,
            blob_store=self.blobs_for(path),
            breadcrumb=breadcrumb,
            lazy=lazy,
            agent_dir=self.agent_dir,
        )

    def create(self, cwd: str | os.PathLike[str]) -> SessionManager:
        """A new session for `cwd` in this store (written with its first assistant message)."""
        self._check_writable("create a session")
        return _sessions.SessionManager.create(
            os.fspath(cwd), storage=self.storage, agent_dir=self.agent_dir
        )

    def continue_recent(self, cwd: str | os.PathLike[str]) -> SessionManager:
        """This terminal's session for `cwd`, else its newest one, else a new one."""
        self._check_writable("continue a session")
        return _sessions.SessionManager.continue_recent(
            os.fspath(cwd), storage=self.storage, agent_dir=self.agent_dir
        )

    def fork(
        self, session: str | os.PathLike[str], cwd: str | os.PathLike[str] | None = None
    ) -> SessionManager:
        """A new session of this store holding a copy of `session` (see `resolve`), in
        `cwd`'s project (default: the source's); `parentSession` names the source."""
        self._check_writable("fork a session")
        path = self.resolve(session)
        if cwd is None:
            with self.session(path, read_only=True) as source:
                header = source.get_header() or {}
            where = str(header.get("cwd") or os.getcwd())
        else:
            where = os.fspath(cwd)
        return _sessions.SessionManager.fork_from(
            path, where, storage=self.storage, agent_dir=self.agent_dir
        )

    def delete(self, session: str | os.PathLike[str], *, force: bool = False) -> builtins.list[str]:
        """Delete a session file of the store and its artifacts dir; returns what was
        removed (`sessiontree rm`: a damaged file needs `force`)."""
        self._check_writable("delete a session")
        path = self.resolve(session)
        return maintenance.delete_session(path, self.parts, force=force)

    def migrate(self, session: str | os.PathLike[str], *, dry_run: bool = False) -> MigrationResult:
        """Bring a session file of the store to the current format version, atomically
        (`sessiontree migrate`); the result says what changed (on a dry run, would)."""
        if dry_run:
            self._check_open()
        else:
            self._check_writable("migrate a session")
        return maintenance.migrate_session_file(self.resolve(session), self.parts, dry_run=dry_run)

    def plan_delete(self, session: str | os.PathLike[str], *, force: bool = False) -> DeletePlan:
        """What `delete` would remove (the file, its artifacts dir), deleting nothing:
        the same refusals, raised before anyone is asked to confirm."""
        self._check_writable("delete a session")
        path = self.resolve(session)
        return maintenance.plan_delete(path, self.parts, force=force)

    # ------------------------------------------------------------------ reading it all

    def _view(self, paths: Sequence[str]) -> tuple[builtins.list[str | SessionSource], StoreParts]:
        """(sources, parts) the content index reads `paths` through: another agent's
        sessions by their reader (`index_view`), ours as they are."""
        if self._foreign is None:
            return builtins.list(paths), self.parts
        from sessiontree.foreign.storage import index_view

        view = index_view(self.parts, paths)
        return view.sources, view.parts

    def search(
        self,
        query: str,
        *,
        cwd: str | os.PathLike[str] | None = None,
        sessions: Iterable[str] | None = None,
        regex: bool = False,
        case_sensitive: bool = False,
        roles: Iterable[str] | None = None,
        since: Moment | None = None,
        until: Moment | None = None,
        limit: int | None = None,
        use_index: bool = True,
        progress: Progress | None = None,
    ) -> SearchResult:
        """Entries whose text contains `query` (a phrase; with `regex`, a Python regular
        expression), newest first where the content index answers: `.hits` (session
        path and id, entry id, role, time, snippet), `.mode`, `.notes`.

        In the sessions of `cwd`'s project (None: every project), or in `sessions`
        (paths). `roles`, `since`/`until` and `limit` narrow the hits. Session titles
        are searched too: a matching title is a hit of role `title` (no entry), first.
        """
        return self._search(
            query,
            self.list(cwd) if sessions is None else builtins.list(sessions),
            regex=regex,
            case_sensitive=case_sensitive,
            roles=roles,
            since=since,
            until=until,
            limit=limit,
            use_index=use_index,
            progress=progress,
        )

    def _search(
        self,
        query: str,
        sessions: builtins.list[str] | builtins.list[SessionInfo] | SearchScope,
        *,
        regex: bool,
        case_sensitive: bool,
        roles: Iterable[str] | None,
        since: Moment | None,
        until: Moment | None,
        limit: int | None,
        use_index: bool,
        progress: Progress | None,
    ) -> SearchResult:
        """`search` of `sessions`: paths, the listings of the sessions or a listing's rows
        (whose titles are then searched as listed, without listing the store again)."""
        from sessiontree.search import search, title_hits, title_test

        scope = sessions if isinstance(sessions, SearchScope) else SearchScope.of(self, sessions)
        role_list = builtins.list(roles) if roles is not None else None
        since_ms, until_ms = _ms(since, end=False), _ms(until, end=True)
        sources, view = self._view(scope.paths)
        result = search(
            sources,
            query,
            regex=regex,
            case_sensitive=case_sensitive,
            roles=role_list,
            since=since_ms,
            until=until_ms,
            limit=limit,
            storage=view.storage,
            agent_dir=view.agent_dir,
            use_index=use_index,
            index_progress=progress,
            # The listing's stats of our files (another agent's are read through a view).
            listed=scope.stats if self._foreign is None else None,
        )
        # The titles, from the listing (after the entries: the index is refreshed first).
        titled = title_hits(
            scope.titles(title_test(query, case_sensitive=case_sensitive, regex=regex)),
            query,
            case_sensitive=case_sensitive,
            regex=regex,
            roles=role_list,
            since=since_ms,
            until=until_ms,
        )
        if titled:
            result.hits[:0] = titled
            if limit is not None:
                del result.hits[limit:]
        return result

    def replies(self, *, use_index: bool = True, progress: Progress | None = None) -> PricedReplies:
        """Every assistant reply of the store, counted once (a fork's or an import's copy
        of a reply is not counted again) and priced (recorded costs, else estimates
        from the bundled price table, marked): what `usage` and `sessiontree usage`
        report on."""
        return replies_of([self], use_index=use_index, progress=progress)

    def usage(
        self,
        period: ReportKind = "daily",
        *,
        since: Moment | None = None,
        until: Moment | None = None,
        projects: Iterable[str | os.PathLike[str]] | None = None,
        tz: str | None = None,
        use_index: bool = True,
        progress: Progress | None = None,
    ) -> Report:
        """Tokens and cost per `period` ("daily", "weekly", "monthly"; or per "session" or
        "project"), each row with its models; estimated costs are marked.

        `since`/`until` bound the replies, `projects` (cwds) keeps theirs; `tz` names the
        time zone the days are in (default: the local one).
        """
        return report_of_replies(
            lambda: stream_replies_of([self], use_index=use_index, progress=progress),
            period,
            since=since,
            until=until,
            projects=projects,
            tz=tz,
        )

    def stats(
        self, cwd: str | os.PathLike[str] | None = None, *, progress: Progress | None = None
    ) -> StoreStats:
        """Sessions, bytes, entries, blobs, and tokens and cost per model and per day: of
        `cwd`'s project (None: of every project); blobs are the whole store's."""
        from sessiontree.reports import store_stats

        passed_over: builtins.list[tuple[str, str]] = []
        every = self.files(nested=False, passed_over=passed_over)
        paths = every if cwd is None else self.files(cwd, nested=False)
        context, view = self._view(every)
        scope, _ = self._view(paths)
        foreign = self.read_only  # another agent's store: its images are inline, no blobs
        stats = store_stats(
            scope,
            view,
            None if foreign else os.path.join(self.agent_dir, "blobs"),
            index_progress=progress,
            blob_store=None
            if self.is_files or foreign
            else maintenance.storage_blob_store(self.storage),
            context=context,
        )
        stats.passed_over = passed_over
        return stats

    # ------------------------------------------------------------------ keeping it sound

    def gc(
        self,
        *,
        delete: bool = False,
        min_age_seconds: float | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> GcReport:
        """The blobs no session of the store references (`.unreferenced`, `.young`, their
        bytes), and what could not be read (`.unreadable`); with `delete=True`, the old
        enough ones are deleted (`.deleted`; `.refused` says why nothing was). Younger than
        `min_age_seconds` (None: `maintenance.DEFAULT_MIN_AGE_SECONDS`, 10 minutes) is
        too young to go."""
        self._check_writable("collect its blobs")
        if min_age_seconds is None:  # not the default's own: it would load gc with a Store
            min_age_seconds = maintenance.DEFAULT_MIN_AGE_SECONDS
        return maintenance.collect_garbage(
            self.parts, delete=delete, min_age_seconds=min_age_seconds, progress=progress
        )

    def check(
        self,
        paths: Iterable[str] | None = None,
        *,
        fix: bool = False,
        progress: Callable[[str], None] | None = None,
    ) -> builtins.list[Finding]:
        """What is wrong with the named sessions (paths or prefixes; None: every session
        file of the store): each `Finding` with its `.path`; [] when all are sound. A
        file that cannot be read is a finding of kind "unreadable".

        `fix=True` repairs each damaged session in place (its original kept as
        `<file>.bak`) and returns what is still wrong after the repair; a session it
        could not repair (a live agent is writing it) keeps its findings, and one of
        kind "unrepaired" says why.
        """
        if fix:
            self._check_writable("repair its sessions")
        else:
            self._check_open()
        files = [self._file_named(p) for p in paths] if paths is not None else self.files()
        parts = self.parts
        found: builtins.list[Finding] = []
        for path in files:
            if progress is not None:
                progress(path)
            blobs = parts.blobs_for(path)
            try:
                findings = maintenance.check_session(path, storage=parts.storage, blobs=blobs)
            except (OSError, SessionTreeError) as exc:
                findings = [maintenance.Finding("unreadable", None, None, f"cannot read: {exc}")]
            else:
                if fix and findings:
                    try:
                        maintenance.repair_session(path, parts, in_place=True)
                        findings = maintenance.check_session(
                            path, storage=parts.storage, blobs=blobs
                        )
                    except (OSError, SessionTreeError) as exc:  # a live writer holds it, ...
                        message = f"not repaired: {exc}"
                        findings = [
                            *findings,
                            maintenance.Finding("unrepaired", None, None, message),
                        ]
            found += [dataclasses.replace(f, path=path) for f in findings]
        return found

    def repair(
        self,
        session: str | os.PathLike[str],
        out_path: str | None = None,
        *,
        in_place: bool = False,
        dry_run: bool = False,
    ) -> RepairReport:
        """Write a repaired copy of a session (default `<file>.repaired`; `in_place`:
        the file itself, the original kept as `.bak`), reporting every change."""
        if dry_run:
            self._check_open()
        else:
            self._check_writable("repair a session")
        path = self.resolve(session)
        return maintenance.repair_session(
            path, self.parts, out_path, in_place=in_place, dry_run=dry_run
        )

    def sync(self, hub: str, *, machine: str | None = None) -> SyncReport:
        """One two-way sync round of this (pi-format) store with `hub`, a dir or a
        `postgresql://` URL; `machine`: this machine's name there (default: the host
        name). docs/sync.md says what syncs and how; `sessiontree.sync.sync` raises."""
        from sessiontree.sync import sync

        self._check_writable("sync a store both ways")
        return sync(hub, [(self.agent, self.parts)], machine=machine)

    # ------------------------------------------------------------------ transfers

    def _database(self, what: str) -> SessionStorage:
        self._check_writable(what)
        if self._url is None and self._owns_storage:
            raise InvalidStoreError(
                f"{self.location}: {what} moves sessions between an agent dir's files and "
                "a database: open the store on the database (postgresql://...)"
            )
        return self.storage

    def import_files(
        self, agent_dir: str | os.PathLike[str], report: TransferReport | None = None
    ) -> TransferReport:
        """Copy an agent dir's `sessions/` and `blobs/` into this (database) store, byte
        for byte (`report`, when given, says what was copied if the copy stops)."""
        storage = self._database("import_files")
        source = os.path.abspath(os.path.expanduser(os.fspath(agent_dir)))
        if not os.path.isdir(source):
            raise FileNotFoundError(2, "No such directory", source)
        return maintenance.import_files(source, storage, report)

    def export_files(
        self, agent_dir: str | os.PathLike[str], report: TransferReport | None = None
    ) -> TransferReport:
        """Copy this (database) store's sessions and blobs into an agent dir's `sessions/`
        and `blobs/`, byte for byte, mtimes kept."""
        storage = self._database("export_files")
        target = os.path.abspath(os.path.expanduser(os.fspath(agent_dir)))
        if os.path.exists(target) and not os.path.isdir(target):
            raise NotADirectoryError(20, "Not a directory", target)
        return maintenance.export_files(storage, target, report)


def report_of_replies(
    load: Callable[[], PricedReplies | StreamedReplies],
    period: ReportKind,
    *,
    since: Moment | None,
    until: Moment | None,
    projects: Iterable[str | os.PathLike[str]] | None,
    tz: str | None,
) -> Report:
    """`Store.usage` (and `Stores.usage`): the replies `load` gives, reported per `period`
    (the period and the zone checked before anything is read)."""
    from sessiontree.reports import report, time_zone

    if period not in ("daily", "weekly", "monthly", "session", "project"):
        raise ValueError(f"unknown period {period!r}: daily, weekly, monthly, session or project")
    zone, zone_name = time_zone(tz)
    priced = load()
    return report(
        priced.replies,
        period,
        tz=zone,
        tz_name=zone_name,
        since=_ms(since, end=False, tz=zone),
        until=_ms(until, end=True, tz=zone),
        projects=[os.path.abspath(os.path.expanduser(os.fspath(p))) for p in projects]
        if projects is not None
        else None,
        duplicates=priced.duplicates,
    )


def _ms(moment: Moment | None, *, end: bool, tz: Any = None) -> int | None:
    """Epoch milliseconds of a `Moment` (text parsed in `tz`, default the local zone)."""
    if moment is None or isinstance(moment, int):
        return moment
    if isinstance(moment, datetime):
        return int(moment.timestamp() * 1000)
    from sessiontree.reports import parse_time, time_zone

    zone = tz if tz is not None else time_zone(None)[0]
    return parse_time(moment, zone, end=end)
