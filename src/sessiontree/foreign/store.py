"""Where Claude Code, Codex, OpenCode, Gemini CLI and Copilot CLI keep their sessions, and
listing them.

* **Claude Code**: `<config dir>/projects/<project>/<session uuid>.jsonl`. The config
  dirs are `$CLAUDE_CONFIG_DIR` (several may be given, comma-separated), else
  `~/.claude` and `~/.config/claude`. Subagent transcripts live beside their
  session (`<session uuid>/subagents/`) and are not listed on their own.
* **Codex**: `$CODEX_HOME` (default `~/.codex`), rollouts under `sessions/YYYY/MM/DD/`
  and `archived_sessions/`; thread names in `session_index.jsonl`.
* **OpenCode**, **Gemini CLI**, **Copilot CLI**: see `agents` (each a `Backend`).

`ForeignStore.list()` reads each new file whole, once: a Claude Code or Codex file's
records give its id, cwd and times (`listing`), and the session the reader makes of the
same records the title, first prompt and message count every view gives
(`session.title_parts`, `session.message_count`); a cold listing of many files reads
them in forked worker processes (`_workers_for`). What it found is kept in the
persistent listing cache of the agent dir it is given, so a second listing only stats
the files.

Files are reached through `ForeignStore.fs` (`_files`): this host's, or, for Claude
Code's layout the Claude Agent SDK adapter keeps in a database, a `SessionStorage`'s
(`ForeignStore.on_storage`), read by the same readers; a database's listing records are
cached under its label and path, never a host path.
"""

from __future__ import annotations

import builtins
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial

from sessiontree._util.env import claude_config_dirs, codex_home, native_agent_dir
from sessiontree._util.forked import can_fork, map_forked
from sessiontree.errors import SessionTreeError
from sessiontree.foreign._files import HOST_FILES, Files, StorageFiles
from sessiontree.foreign._model import ForeignSession, Source
from sessiontree.foreign._records import Transcript, read_transcript
from sessiontree.foreign.agents import BACKENDS, Backend, Located, detect_store
from sessiontree.foreign.claude import claude_session_from
from sessiontree.foreign.codex import codex_session_from
from sessiontree.foreign.listing import ForeignMeta, claude_meta, codex_meta
from sessiontree.format import clean_title
from sessiontree.listing import (
    Identity,
    IdentityCache,
    identity_family,
    plan_changes,
)
from sessiontree.session import message_count, title_parts
from sessiontree.storage import SessionStorage

log = logging.getLogger("sessiontree")

FOREIGN_LISTINGS = identity_family("foreign_files", 1)
"""The listing records of other agents' sessions, in the listing cache's file."""

__all__ = [
    "AGENTS",
    "FOREIGN_AGENTS",
    "ForeignListing",
    "ForeignStore",
    "claude_config_dirs",
    "codex_home",
    "detect_agent",
    "native_agent_dir",
]

FOREIGN_AGENTS: tuple[Source, ...] = ("claude", "codex", "opencode", "gemini", "copilot")
AGENTS = ("claude", "codex", "opencode", "gemini", "copilot", "pi", "omp", "xcsh")
AGENT_NAMES = {"claude": "Claude Code", "codex": "Codex"} | {
    agent: backend.name for agent, backend in BACKENDS.items()
}


def _has_jsonl_below(directory: str, depth: int) -> bool:
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.is_file() and entry.name.endswith(".jsonl"):
                    return True
                if depth > 0 and entry.is_dir() and _has_jsonl_below(entry.path, depth - 1):
                    return True
    except OSError:
        return False
    return False


def detect_agent(path: str) -> Source | None:
    """Which foreign agent's store `path` is (None: a pi/omp/xcsh agent dir, or unknown).

    An agent dir's `sessions/` holds `--<cwd>--` project dirs; a Codex home's holds
    year dirs (`2025/`), and it may have `archived_sessions/` or `session_index.jsonl`.
    A Claude Code config dir has `projects/` and no `sessions/`; a `projects` dir
    holding project dirs of transcripts counts too.
    """
    sessions = os.path.join(path, "sessions")
    try:
        names = os.listdir(sessions)
    except OSError:
        names = None
    if names is not None:
        if any(n.startswith("-") for n in names):
            return None
        if any(len(n) == 4 and n.isdigit() for n in names):
            return "codex"
    if os.path.isdir(os.path.join(path, "archived_sessions")) or os.path.isfile(
        os.path.join(path, "session_index.jsonl")
    ):
        return "codex"
    if names is None and os.path.isdir(os.path.join(path, "projects")):
        return "claude"
    if os.path.basename(os.path.normpath(path)) == "projects" and _has_jsonl_below(path, 1):
        return "claude"
    return detect_store(path)


@dataclass(slots=True)
class ForeignListing:
    """One listed session file of a foreign store."""

    path: str
    size: int
    mtime_ns: int
    ino: int
    meta: ForeignMeta


@dataclass
class ForeignStore:
    """The sessions of Claude Code or Codex in one or more directories."""

    agent: Source
    home: str
    """The config dir (Claude Code) or Codex home: where the store is said to be."""
    roots: tuple[str, ...]
    """Claude Code: its `projects` dirs; Codex: its `sessions` and `archived_sessions`."""
    cache_dir: str | None = None
    """The agent dir whose listing cache keeps what was read (None: no cache)."""
    _titles: dict[str, str] | None = field(default=None, repr=False)
    only: str | None = None
    """The one session of a store made for a file given by its path (`single`)."""
    fs: Files = field(default=HOST_FILES, repr=False)
    """Where its files are read: this host's, or a storage's (`on_storage`)."""

    @property
    def backend(self) -> Backend | None:
        """OpenCode's, Gemini CLI's or Copilot CLI's (None for Claude Code and Codex)."""
        return BACKENDS.get(self.agent)

    @classmethod
    def default(cls, agent: Source, cache_dir: str | None = None) -> ForeignStore:
        """The store at the agent's default location (see the module doc)."""
        backend = BACKENDS.get(agent)
        if backend is not None:
            return cls.at(agent, backend.default_home(), cache_dir)
        if agent == "claude":
            homes = claude_config_dirs()
            roots = tuple(os.path.join(h, "projects") for h in homes)
            existing = [h for h in homes if os.path.isdir(os.path.join(h, "projects"))]
            home = existing[0] if existing else homes[0]
            return cls(agent, home, roots, cache_dir)
        return cls.at(agent, codex_home(), cache_dir)

    @classmethod
    def single(cls, agent: Source, path: str) -> ForeignStore:
        """A store of the one session at `path` (a file anywhere, or an OpenCode
        database's `<db>/<session id>`), read as `agent`'s."""
        path = os.path.abspath(path)
        directory = os.path.dirname(path)
        return cls(agent, directory, (directory,), None, only=path)

    @classmethod
    def at(cls, agent: Source, path: str, cache_dir: str | None = None) -> ForeignStore:
        """The store in `path` (a Claude Code config or projects dir; a Codex home)."""
        path = os.path.abspath(os.path.expanduser(path))
        backend = BACKENDS.get(agent)
        if backend is not None:
            if os.path.isfile(path):  # an OpenCode database given by its file
                path = os.path.dirname(path)
            return cls(agent, path, backend.roots(path), cache_dir)
        if agent == "claude":
            if os.path.basename(os.path.normpath(path)) == "projects" and not os.path.isdir(
                os.path.join(path, "projects")
            ):
                return cls(agent, os.path.dirname(path), (path,), cache_dir)
            return cls(agent, path, (os.path.join(path, "projects"),), cache_dir)
        return cls(
            agent,
            path,
            (os.path.join(path, "sessions"), os.path.join(path, "archived_sessions")),
            cache_dir,
        )

    @classmethod
    def on_storage(
        cls,
        storage: SessionStorage,
        root: str,
        label: str,
        cache_dir: str | None = None,
        *,
        owned: bool = True,
    ) -> ForeignStore:
        """Claude Code's layout in a storage's files (`<root>/projects/...`: a PostgreSQL
        database's, where the Claude Agent SDK adapter writes it), read through the
        storage alone. `label` names the storage in the listing cache's keys (see
        `StorageFiles`); `owned`: the store's `close` closes the storage."""
        root = os.path.abspath(root)
        files = StorageFiles(storage, label, owned=owned)
        return cls("claude", root, (os.path.join(root, "projects"),), cache_dir, fs=files)

    @property
    def name(self) -> str:
        return AGENT_NAMES[self.agent]

    def close(self) -> None:
        """Release what its files are read through (a storage it owns)."""
        self.fs.close()

    # ------------------------------------------------------------------ files

    def owns(self, path: str) -> bool:
        """Whether `path` lies in one of the store's roots."""
        path = os.path.abspath(path)
        if self.only is not None:
            return path == self.only
        return any(path.startswith(os.path.join(root, "")) for root in self.roots)

    def files(self) -> builtins.list[str]:
        """Every session file of the store (subagent transcripts not included)."""
        return sorted(located.path for located in self.locate())

    def locate(self) -> builtins.list[Located]:
        """Every session of the store, with the identity its listing is cached under."""
        if self.only is not None:
            one = self.locate_path(self.only)
            return [one] if one is not None else []
        if self.backend is not None:
            return builtins.list(self.backend.locate(self.roots))
        found: builtins.list[Located] = []
        for path in self._iter_files():
            st = self.fs.stat(path, listed=True)
            if st is not None:
                found.append(Located(path, st.identity, st.size, st.mtime_ns, st.ino))
        return found

    def locate_path(self, path: str) -> Located | None:
        """The session at `path` (a file, or an OpenCode database's session), else None."""
        if self.only is not None and os.path.abspath(path) != self.only:
            return None
        if self.backend is not None:
            found = self.backend.locate_path(path)
            if found is not None or self.only is None:
                return found
        if not (path.endswith(".jsonl") or self.only is not None):
            return None
        st = self.fs.stat(path)
        if st is None:
            return None
        return Located(path, st.identity, st.size, st.mtime_ns, st.ino)

    def is_session(self, path: str) -> bool:
        """Whether `path` is a session of this store (in one of its roots)."""
        if not self.owns(path):
            return False
        if self.only is not None:
            return self.locate_path(path) is not None
        if self.backend is not None:
            return self.backend.is_session_name(path) and self.backend.locate_path(path) is not None
        return path.endswith(".jsonl") and self.fs.stat(path) is not None

    def sessions_in(self, directory: str) -> builtins.list[str]:
        """The sessions directly in `directory` (an OpenCode database's, given its file)."""
        if self.only is not None:
            same = os.path.abspath(directory) == os.path.dirname(self.only)
            return [self.only] if same else []
        if self.backend is not None:
            return [p for p in self.backend.sessions_in(directory) if self.owns(p)]
        names = [n for n, is_dir in self.fs.entries(directory) if not is_dir]
        return [os.path.join(directory, n) for n in names if n.endswith(".jsonl")]

    def stem(self, path: str) -> str:
        if self.backend is not None:
            return self.backend.stem(path)
        name = os.path.basename(path)
        return name[: -len(".jsonl")] if name.endswith(".jsonl") else name

    def _iter_files(self) -> Iterator[str]:
        if self.agent == "claude":
            for root in self.roots:
                for project, is_dir in self.fs.entries(root):
                    if not is_dir or project.startswith("."):
                        continue
                    directory = os.path.join(root, project)
                    for name, sub in self.fs.entries(directory):
                        if (
                            not sub
                            and name.endswith(".jsonl")
                            and not name.startswith((".", "agent-"))
                        ):
                            yield os.path.join(directory, name)
            return
        for root in self.roots:
            for directory, dirs, names in os.walk(root):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for name in names:
                    if name.endswith(".jsonl") and not name.startswith("."):
                        yield os.path.join(directory, name)

    def titles(self) -> dict[str, str]:
        """Codex thread names from `session_index.jsonl` (the latest per id)."""
        if self._titles is None:
            titles: dict[str, str] = {}
            index = os.path.join(self.home, "session_index.jsonl")
            if self.agent == "codex" and os.path.isfile(index):
                try:
                    for record in read_transcript(index).records:
                        sid, name = record.value.get("id"), record.value.get("thread_name")
                        if isinstance(sid, str) and isinstance(name, str) and name:
                            titles[sid.lower()] = name
                except OSError:
                    pass
            self._titles = titles
        return self._titles

    # ------------------------------------------------------------------ reading

    def read(self, path: str, *, subagents: bool = True) -> ForeignSession:
        """The session at `path` as a v3 tree (OSError when unreadable)."""
        if self.backend is not None:
            return self.backend.read(path, subagents=subagents)
        return self._session_of(read_transcript(path, self.fs), subagents=subagents)

    def _session_of(self, transcript: Transcript, *, subagents: bool) -> ForeignSession:
        """The Claude Code or Codex session of a file read (`read_transcript`)."""
        if self.agent == "claude":
            return claude_session_from(transcript, subagents=subagents, files=self.fs)
        rollout = codex_session_from(transcript)
        if rollout.name is None:
            title = self.titles().get(rollout.source_id.lower())
            if title:
                rollout.manager.set_session_name(title, "auto")
                rollout.name = title
        return rollout

    def list(self, paths: builtins.list[str] | None = None) -> builtins.list[ForeignListing]:
        """Listing records of the store's sessions (or of `paths`), newest modified first.

        Reads a file once per file identity (whole): the results are kept in the
        listing cache of `cache_dir` (default: none).
        """
        if paths is None:
            located = self.locate()
        else:
            located = [f for p in paths if (f := self.locate_path(p)) is not None]
        cache = IdentityCache(self.cache_dir, FOREIGN_LISTINGS)
        key = self.fs.cache_key
        cached = cache.fetch(key(f.path) for f in located) if self.cache_dir else {}
        found: list[ForeignListing] = []
        children: list[ForeignListing] = []
        fresh: list[tuple[str, Identity, object]] = []
        known: dict[str, tuple[ForeignMeta, int]] = {}
        # The table is shared by every store of this cache dir: `gone` is not theirs.
        plan = plan_changes(((key(f.path), *f.identity) for f in located), cached)
        unchanged = {s[0]: row.value for s, row in plan.unchanged}
        for item in located:
            if key(item.path) in unchanged:
                try:
                    known[item.path] = self._load_cached(unchanged[key(item.path)], item)
                except (ValueError, TypeError):
                    pass
        scanned = self._scan_all([item for item in located if item.path not in known])
        for item in located:
            path = item.path
            if path in known:
                meta, size = known[path]
            else:
                result = scanned.get(path)
                if result is None or isinstance(result, BaseException):
                    if result is not None and (self.backend is not None or _not_a_file(result)):
                        log.warning("%s: skipped (%s)", path, _reason(result))
                    continue
                meta, size = result
                fresh.append((key(path), item.identity, self._dump(meta, size)))
            if meta.listed:
                found.append(ForeignListing(path, size, item.mtime_ns, item.ino, meta))
            elif self.backend is not None and meta.parent:
                children.append(ForeignListing(path, size, item.mtime_ns, item.ino, meta))
        found += self._unheld(found, children)
        if fresh:
            cache.store(fresh)
        found.sort(key=lambda f: (f.mtime_ns, f.path), reverse=True)
        return found

    def _unheld(
        self, found: builtins.list[ForeignListing], children: builtins.list[ForeignListing]
    ) -> builtins.list[ForeignListing]:
        """The child sessions no listed session is read with: a subagent's session is
        read with its parent, down to `Backend.child_depth` levels below a listed one.
        One whose parent is gone, one deeper than that, one on a loop of parent links
        (its own parent, or its child's child) is listed on its own."""
        depth = self.backend.child_depth if self.backend is not None else 0
        parent_of = {c.meta.id: c.meta.parent for c in children}
        tops = {f.meta.id for f in found}
        tops |= {c.meta.id for c in children if c.meta.parent not in tops | parent_of.keys()}

        def read_with_a_top(child: ForeignListing) -> bool:
            above = child.meta.parent
            for _ in range(depth):
                if above in tops:
                    return True
                above = parent_of.get(above) if above is not None else None
            return False

        return [c for c in children if c.meta.id in tops or not read_with_a_top(c)]

    def _scan_all(
        self, items: builtins.list[Located]
    ) -> dict[str, tuple[ForeignMeta, int] | BaseException]:
        """Listing metadata of `items` read now (an error for one that cannot be read);
        in forked worker processes when that pays (`_workers_for`)."""
        if self.backend is not None:
            found = self.backend.scan_many(items)
            for path, result in found.items():
                if not isinstance(result, BaseException):
                    self._summarise_listed(path, result[0])
            return found
        jobs = [(item.path, item.size) for item in items]
        workers = _workers_for(jobs, self.fs)
        paths = [path for path, _ in jobs]
        if workers > 1:
            try:
                read = map_forked(partial(_read_in_worker, self), jobs, lambda job: job[1], workers)
                return dict(zip(paths, read, strict=True))
            except Exception:  # a broken pool, no fork, no /dev/shm: read here instead
                pass
        return dict(zip(paths, _read_batch(self, jobs), strict=True))

    def _read_one(self, path: str, size: int) -> tuple[ForeignMeta, int] | BaseException:
        """A Claude Code or Codex file's listing record, the file read once: what its
        records say, and the summary of the session they make."""
        try:
            transcript = read_transcript(path, self.fs)
        except (OSError, SessionTreeError) as exc:
            return exc
        records = transcript.records
        meta = claude_meta(path, records) if self.agent == "claude" else codex_meta(path, records)
        if meta.listed or meta.parent:
            try:
                session = self._session_of(transcript, subagents=False)
            except (OSError, SessionTreeError, ValueError):
                return meta, size
            _summarise(meta, session)
        return meta, size

    def _summarise_listed(self, path: str, meta: ForeignMeta) -> None:
        """Give a Gemini CLI, Copilot CLI or OpenCode session's scan the summary of
        the session read whole (a file the reader cannot read keeps the scan's)."""
        if meta.listed or meta.parent:
            try:
                session = self.read(path, subagents=False)
            except (OSError, SessionTreeError, ValueError):
                return
            _summarise(meta, session)

    def _dump(self, meta: ForeignMeta, size: int) -> object:
        # Claude Code and Codex records are the meta alone, as before; the others keep
        # the size a scan found (a database session has no file to stat).
        return meta.dump() if self.backend is None else {"meta": meta.dump(), "size": size}

    def _load_cached(self, value: object, item: Located) -> tuple[ForeignMeta, int]:
        if self.backend is None:
            return ForeignMeta.load(value), item.size
        if not isinstance(value, dict) or not isinstance(value.get("size"), int):
            raise ValueError("bad cached listing record")
        return ForeignMeta.load(value.get("meta")), value["size"]

    def find(self, arg: str) -> builtins.list[ForeignListing]:
        """Sessions whose id or file name starts with `arg` (case-insensitive); an exact
        id or file name alone when there is one."""
        needle = arg.lower()
        for suffix in (".jsonl", ".json"):
            if needle.endswith(suffix):
                needle = needle[: -len(suffix)]
        exact: list[ForeignListing] = []
        prefix: list[ForeignListing] = []
        for item in self.list():
            stem = self.stem(item.path).lower()
            ids = (item.meta.id.lower(), stem)
            if needle in ids:
                exact.append(item)
            elif any(i.startswith(needle) for i in ids):
                prefix.append(item)
        return exact or prefix


PARALLEL_MIN_FILES = 8
"""Fewer files than this to read whole are read in this process (see `_workers_for`)."""
PARALLEL_MIN_BYTES = 8 << 20
MAX_WORKERS = 4

_Job = tuple[str, int]
"""A file to list: its path and size."""
_Read = tuple[ForeignMeta, int] | BaseException


def _workers_for(jobs: builtins.list[_Job], files: Files) -> int:
    """How many processes to read `jobs` with (1: in this process).

    A listing reads each new session whole, converting it as `show` does (tens of MB/s,
    the converting held under the GIL: threads gain nothing), so a cold listing of a
    large store uses every core: forked processes, as the listing of this host's
    sessions does (`listing._scan`). Forking is only safe while this process runs no
    other thread, and only pays for files of this host, enough of them, with cores to
    spare: on cores other work keeps busy (a load average at or above their number) the
    workers only take turns with it, and the listing took longer than in one process
    (measured: 300 Claude Code files, 140 MB, 2 cores at a load average of 7 and of 18:
    5.4 s against 5.0 s, 10.5 s against 8.2 s).
    """
    if files is not HOST_FILES or not can_fork():
        return 1
    if len(jobs) < PARALLEL_MIN_FILES or sum(size for _, size in jobs) < PARALLEL_MIN_BYTES:
        return 1
    cores = os.cpu_count() or 1
    idle = cores - int(os.getloadavg()[0])  # this listing counts in the load: 1 core
    return max(1, min(MAX_WORKERS, cores, idle, len(jobs) // 4))


def _read_batch(store: ForeignStore, jobs: builtins.list[_Job]) -> builtins.list[_Read]:
    return [store._read_one(path, size) for path, size in jobs]


def _read_in_worker(store: ForeignStore, jobs: builtins.list[_Job]) -> builtins.list[_Read]:
    # An error goes back pickled: one whose class takes other arguments than its
    # message (NotAForeignSessionError) would not unpickle, so it goes as its base.
    return [
        r
        if not isinstance(r, BaseException) or isinstance(r, OSError)
        else SessionTreeError(str(r))
        for r in _read_batch(store, jobs)
    ]


def require_store_exists(store: ForeignStore) -> None:
    """SessionTreeError unless at least one of the store's roots exists."""
    if not any(store.fs.is_dir(root) for root in store.roots):
        where = ", ".join(store.roots)
        raise SessionTreeError(f"no {store.name} sessions found (looked in {where})")


def _summarise(meta: ForeignMeta, session: ForeignSession) -> None:
    """Give `meta` the title, first prompt and message count of the session as it is
    read (`session.title_parts`, `session.message_count`): what `show`, the exports and
    the web page say of it, counted over the whole file."""
    title, first = title_parts(session.manager)
    meta.title = title
    meta.title_source = session.name_source if title else None
    meta.first_message = clean_title(first)  # one line, as the scans kept it
    meta.message_count = message_count(session.manager)
    meta.exact_count = True


def _not_a_file(error: BaseException) -> bool:
    """Whether the error is `read_fd`'s for a FIFO (socket, device) named like a session."""
    return isinstance(error, OSError) and str(error.strerror).endswith("not a regular file")


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return str(exc.strerror)
    return str(exc) or type(exc).__name__
