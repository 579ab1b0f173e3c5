"""Where Claude Code and Codex keep their sessions, and listing them.

* **Claude Code**: `<config dir>/projects/<project>/<session uuid>.jsonl`. The config
  dirs are `$CLAUDE_CONFIG_DIR` (several may be given, comma-separated), else
  `~/.claude` and `~/.config/claude`. Subagent transcripts live beside their
  session (`<session uuid>/subagents/`) and are not listed on their own.
* **Codex**: `$CODEX_HOME` (default `~/.codex`), rollouts under `sessions/YYYY/MM/DD/`
  and `archived_sessions/`; thread names in `session_index.jsonl`.

`ForeignStore.list()` reads a window at each end of each file (`listing`), never a
whole transcript, and keeps what it found in the persistent listing cache of the
agent dir it is given, so a second listing only stats the files.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Iterator
from dataclasses import dataclass, field

from ..discovery import same_identity, stat_identity
from ..errors import SessionTreeError
from ._cache import Identity, IdentityCache
from ._model import ForeignSession, Source
from ._records import read_transcript
from .claude import read_claude_session
from .codex import read_codex_session
from .listing import ForeignMeta, scan_claude, scan_codex

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

FOREIGN_AGENTS: tuple[Source, ...] = ("claude", "codex")
AGENTS = ("claude", "codex", "pi", "omp", "xcsh")
_NATIVE_DIRS = {"pi": (".pi", "agent"), "omp": (".omp", "agent"), "xcsh": (".xcsh", "agent")}
AGENT_NAMES = {"claude": "Claude Code", "codex": "Codex"}


def native_agent_dir(agent: str) -> str:
    """The default agent dir of pi, oh-my-pi or xcsh."""
    return os.path.join(os.path.expanduser("~"), *_NATIVE_DIRS[agent])


def claude_config_dirs() -> list[str]:
    """Claude Code's config dirs: `$CLAUDE_CONFIG_DIR` (comma-separated), else the defaults."""
    env = os.environ.get("CLAUDE_CONFIG_DIR", "")
    dirs = [os.path.abspath(os.path.expanduser(d.strip())) for d in env.split(",") if d.strip()]
    if dirs:
        return list(dict.fromkeys(dirs))
    home = os.path.expanduser("~")
    return [os.path.join(home, ".claude"), os.path.join(home, ".config", "claude")]


def codex_home() -> str:
    """`$CODEX_HOME`, else `~/.codex`."""
    env = os.environ.get("CODEX_HOME")
    return os.path.abspath(os.path.expanduser(env)) if env else os.path.expanduser("~/.codex")


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
    return None


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

    @classmethod
    def default(cls, agent: Source, cache_dir: str | None = None) -> ForeignStore:
        """The store at the agent's default location (see the module doc)."""
        if agent == "claude":
            homes = claude_config_dirs()
            roots = tuple(os.path.join(h, "projects") for h in homes)
            existing = [h for h in homes if os.path.isdir(os.path.join(h, "projects"))]
            home = existing[0] if existing else homes[0]
            return cls(agent, home, roots, cache_dir)
        return cls.at(agent, codex_home(), cache_dir)

    @classmethod
    def at(cls, agent: Source, path: str, cache_dir: str | None = None) -> ForeignStore:
        """The store in `path` (a Claude Code config or projects dir; a Codex home)."""
        path = os.path.abspath(os.path.expanduser(path))
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

    @property
    def name(self) -> str:
        return AGENT_NAMES[self.agent]

    # ------------------------------------------------------------------ files

    def owns(self, path: str) -> bool:
        """Whether `path` lies in one of the store's roots."""
        path = os.path.abspath(path)
        return any(path.startswith(os.path.join(root, "")) for root in self.roots)

    def files(self) -> builtins.list[str]:
        """Every session file of the store (subagent transcripts not included)."""
        return sorted(self._iter_files())

    def _iter_files(self) -> Iterator[str]:
        if self.agent == "claude":
            for root in self.roots:
                try:
                    projects = sorted(os.scandir(root), key=lambda e: e.name)
                except OSError:
                    continue
                for project in projects:
                    if not project.is_dir() or project.name.startswith("."):
                        continue
                    try:
                        with os.scandir(project.path) as entries:
                            for entry in entries:
                                if (
                                    entry.name.endswith(".jsonl")
                                    and not entry.name.startswith((".", "agent-"))
                                    and entry.is_file()
                                ):
                                    yield entry.path
                    except OSError:
                        continue
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
        if self.agent == "claude":
            return read_claude_session(path, subagents=subagents)
        rollout = read_codex_session(path)
        if rollout.name is None:
            title = self.titles().get(rollout.source_id.lower())
            if title:
                rollout.manager.set_session_name(title, "auto")
                rollout.name = title
        return rollout

    def scan(self, path: str, size: int) -> ForeignMeta:
        if self.agent == "claude":
            return scan_claude(path, size)
        return scan_codex(path, size, self.titles())

    def list(self, paths: builtins.list[str] | None = None) -> builtins.list[ForeignListing]:
        """Listing records of the store's sessions (or of `paths`), newest modified first.

        Reads a window at each end of a file, once per file identity: the results are
        kept in the listing cache of `cache_dir` (default: none).
        """
        stats: list[tuple[str, os.stat_result]] = []
        for path in self.files() if paths is None else paths:
            try:
                stats.append((path, os.stat(path)))
            except OSError:
                continue
        cache = IdentityCache(self.cache_dir, "foreign_files")
        cached = cache.fetch(p for p, _ in stats) if self.cache_dir else {}
        found: list[ForeignListing] = []
        fresh: list[tuple[str, Identity, object]] = []
        for path, st in stats:
            identity: Identity = stat_identity(st)
            meta: ForeignMeta | None = None
            hit = cached.get(path)
            if hit is not None and same_identity(tuple(hit[0]), identity):
                try:
                    meta = ForeignMeta.load(hit[1])
                except (ValueError, TypeError):
                    meta = None
            if meta is None:
                try:
                    meta = self.scan(path, st.st_size)
                except OSError:
                    continue
                fresh.append((path, identity, meta.dump()))
            if meta.listed:
                found.append(ForeignListing(path, st.st_size, st.st_mtime_ns, st.st_ino, meta))
        if fresh:
            cache.store(fresh)
        found.sort(key=lambda f: (f.mtime_ns, f.path), reverse=True)
        return found

    def find(self, arg: str) -> builtins.list[ForeignListing]:
        """Sessions whose id or file name starts with `arg` (case-insensitive); an exact
        id or file name alone when there is one."""
        needle = arg.lower()
        if needle.endswith(".jsonl"):
            needle = needle[: -len(".jsonl")]
        exact: list[ForeignListing] = []
        prefix: list[ForeignListing] = []
        for item in self.list():
            stem = os.path.basename(item.path).lower()
            stem = stem[: -len(".jsonl")] if stem.endswith(".jsonl") else stem
            ids = (item.meta.id.lower(), stem)
            if needle in ids:
                exact.append(item)
            elif any(i.startswith(needle) for i in ids):
                prefix.append(item)
        return exact or prefix


def require_store_exists(store: ForeignStore) -> None:
    """SessionTreeError unless at least one of the store's roots exists."""
    if not any(os.path.isdir(root) for root in store.roots):
        where = ", ".join(store.roots)
        raise SessionTreeError(f"no {store.name} sessions found (looked in {where})")
