"""Another agent's store seen through the `SessionStorage` protocol, read-only.

This is how the CLI's reading commands (`list`, `show`, `tree`, `context`,
`export`, `search`, `stats`) work on those stores unchanged: every session file
reads as the v3 session its reader builds (a header with the source's session
id and start time, then the entries, the leaf last), so the loader, the search
and the statistics see an ordinary session at the file's real path. Listings
come from `list_session_meta` (the `SessionIndexStorage` capability), which reads
only the ends of each file (`listing`). The store appears under
`<home>/sessions/--<cwd>--/` as an agent dir's sessions do, one directory per
working directory the sessions were recorded in. Every write raises.

`index_view` is how `search`, `usage` and `stats` (and the web app) reach such a
store: through the content index of this agent's dir (the one that keeps the
listing cache), each session read by its reader (`SessionSource.load`), so they
are indexed as our files are; with no such dir, every session is scanned. What a
reader knows of a session's usage beyond its entries (`ForeignSession.extra_usage`:
a Claude Code transcript's inline sidechain replies, 1-hour cache writes) reaches the
usage rows beside them (`SessionSource.extra`), never the session's entries. A
database's transcripts (`ForeignStore.on_storage`) are read by their reader and
never indexed: the content index keeps this host's files.
"""

from __future__ import annotations

import errno
import fnmatch
import logging
import os
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from sessiontree._util.fs import name_problem
from sessiontree.errors import SessionTreeError
from sessiontree.foreign._model import ForeignSession, NotAForeignSessionError
from sessiontree.foreign._records import iso
from sessiontree.foreign.store import ForeignListing, ForeignStore
from sessiontree.format import Entry, ExtraUsage, loads_line, serialize_entry_bytes
from sessiontree.layout import StoreParts, encode_session_dir_name
from sessiontree.listing import same_identity
from sessiontree.search import SessionSource
from sessiontree.storage import (
    FileSessionStorage,
    SessionMeta,
    SessionStorageWriter,
    StorageStat,
)

__all__ = ["ForeignStorage", "IndexView", "index_view", "session_bytes"]

log = logging.getLogger("sessiontree")

_VIEWS_KEPT = 4
_Extra = Callable[[], ExtraUsage]
"""A session's `ForeignSession.extra_usage_of`: kept with its view, run when asked."""


def session_bytes(session: ForeignSession, parent_session: str | None = None) -> bytes:
    """The session as a v3 file: header, entries in source order, the leaf moved last
    (a reader takes the last entry as the leaf; the leaf has no children, so moving
    it changes no branch)."""
    manager = session.manager
    entries = manager.get_entries()
    leaf = manager.get_leaf_id()
    ordered: list[Entry] = [e for e in entries if e.get("id") != leaf]
    ordered += [e for e in entries if e.get("id") == leaf]
    lines = [serialize_entry_bytes(session.header(parent_session))]
    lines += [serialize_entry_bytes(e) for e in ordered]
    return b"\n".join(lines) + b"\n"


class ForeignStorage:
    """`SessionStorage` + `SessionIndexStorage` over a `ForeignStore` (see the module doc)."""

    def __init__(self, store: ForeignStore) -> None:
        self.store = store
        self.sessions_root = os.path.join(store.home, "sessions")
        self._views: OrderedDict[str, tuple[tuple[int, int, int, int], bytes, _Extra]] = (
            OrderedDict()
        )
        self._listing: list[ForeignListing] | None = None

    def __repr__(self) -> str:
        return f"ForeignStorage({self.store.agent}, {self.store.home!r})"

    def close(self) -> None:
        """Release what the store's files are read through (`close_storage` calls it)."""
        self.store.close()

    # ------------------------------------------------------------------ layout

    def _all(self) -> list[ForeignListing]:
        if self._listing is None:
            self._listing = self.store.list()
        return self._listing

    def _dir_of(self, item: ForeignListing) -> str:
        return os.path.join(self.sessions_root, encode_session_dir_name(item.meta.cwd or "/"))

    def _virtual(self, directory: str) -> bool:
        """A `--<cwd>--` directory (a Codex home's real `sessions/2025` is not one)."""
        directory = os.path.normpath(directory)
        parent, name = os.path.split(directory)
        return parent == os.path.normpath(self.sessions_root) and name.startswith("--")

    def _is_session_file(self, path: str) -> bool:
        return self.store.is_session(path)

    def identity(self, path: str) -> tuple[int, int, int, int]:
        """(size, mtime_ns, ino, ctime_ns), or what stands for them, of a session:
        changes when it does (the content index's `SessionSource.identity`)."""
        located = self.store.locate_path(os.path.abspath(path))
        if located is None or not self.store.owns(located.path):
            raise FileNotFoundError(2, "No such session file", path)
        return located.identity

    def _in(self, directory: str | None) -> list[ForeignListing]:
        items = self._all()
        if directory is None:
            return items
        directory = os.path.normpath(os.path.abspath(directory))
        if self._virtual(directory):
            return [i for i in items if self._dir_of(i) == directory]
        return [i for i in items if os.path.dirname(i.path) == directory]

    # ------------------------------------------------------------------ reading

    def _view(self, path: str) -> bytes:
        return self._read(path)[0]

    def extra_usage(self, path: str) -> ExtraUsage:
        """The usage of the session at `path` beyond its entries (a `SessionSource.extra`:
        asked after its entries, it reads nothing again); none for a file that is not a
        session."""
        try:
            return self._read(path)[1]()
        except OSError:
            return ExtraUsage()

    def _read(self, path: str) -> tuple[bytes, _Extra]:
        path = os.path.abspath(path)
        identity = self.identity(path)
        kept = self._views.get(path)
        if kept is not None and same_identity(kept[0], identity):
            self._views.move_to_end(path)
            return kept[1], kept[2]
        try:
            session = self.store.read(path, subagents=False)
        except NotAForeignSessionError:
            # An OSError, as for any unreadable file: search and stats pass over it.
            raise OSError(errno.EINVAL, f"not a {self.store.name} session file", path) from None
        if session.damaged:
            shown = ", ".join(str(d) for d in session.damaged[:3])
            more = f" and {len(session.damaged) - 3} more" if len(session.damaged) > 3 else ""
            log.warning("%s: skipped %s%s", path, shown, more)
        parent = None
        if session.parent_source_id:
            parent = session.parent_source_id
            name = f"{parent}.jsonl"
            if name_problem(name) is None:  # the source's text names no other directory
                sibling = os.path.join(os.path.dirname(path), name)
                parent = sibling if self.store.fs.stat(sibling) is not None else parent
        data = session_bytes(session, parent)
        self._views[path] = (identity, data, session.extra_usage_of)
        while len(self._views) > _VIEWS_KEPT:
            self._views.popitem(last=False)
        return data, session.extra_usage_of

    def entries(self, path: str) -> tuple[Entry | None, list[Entry]]:
        """The session at `path` as this storage shows it: (header, entries), or
        (None, []) for a file that is not a session (a content-index `Loader`)."""
        try:
            data = self._view(path)
        except OSError as exc:
            if exc.errno == errno.EINVAL:
                return None, []
            raise
        values: list[Entry] = []
        for line in data.split(b"\n"):
            if line:
                values.append(loads_line(line))
        return (values[0], values[1:]) if values else (None, [])

    def exists(self, path: str) -> bool:
        path = os.path.normpath(os.path.abspath(path))
        if path in (os.path.normpath(self.store.home), os.path.normpath(self.sessions_root)):
            return True
        if self._virtual(path):
            return bool(self._in(path))
        if self._is_session_file(path):
            return True
        if self.store.fs.is_dir(path):
            return self.store.owns(path) or path in self.store.roots
        # An OpenCode database is a directory of sessions here.
        return self.store.owns(path) and bool(self.store.sessions_in(path))

    def stat(self, path: str) -> StorageStat:
        path = os.path.abspath(path)
        located = self.store.locate_path(path)
        if located is None or not self.store.owns(path):
            raise FileNotFoundError(2, "No such session file", path)
        size = located.size
        if size < 0 and self.store.backend is not None:
            size = self.store.backend.size(path)  # a database session: its rows' bytes
        return StorageStat(
            size=max(size, 0),
            mtime=datetime.fromtimestamp(located.mtime_ns / 1e9, UTC),
            mtime_ms=located.mtime_ns / 1e6,
            mtime_ns=located.mtime_ns,
            ino=located.ino,
            nlink=1,
        )

    def list_files(self, dir: str, pattern: str) -> list[str]:
        directory = os.path.normpath(os.path.abspath(dir))
        if self._virtual(directory):
            paths = [i.path for i in self._in(directory)]
        else:
            # A real directory: every transcript in it (a subagent's too, by its path);
            # an OpenCode database file: its sessions.
            paths = [p for p in self.store.sessions_in(directory) if self.store.owns(p)]
        return sorted(p for p in paths if _matches(p, pattern))

    def list_dirs(self, dir: str) -> list[str]:
        if os.path.normpath(os.path.abspath(dir)) == os.path.normpath(self.sessions_root):
            return sorted({self._dir_of(i) for i in self._all()})
        return []

    def view_size(self, path: str) -> int:
        """The length in bytes of the session as this storage shows it (in pi's format),
        which `read_bytes_range` offsets count in; `stat().size` is the transcript's."""
        return len(self._view(path))

    def read_text(self, path: str) -> str:
        return self._view(path).decode("utf-8", "surrogateescape")

    def read_text_prefix(self, path: str, max_bytes: int) -> str:
        return self._view(path)[:max_bytes].decode("utf-8", "ignore")

    def iter_chunks(self, path: str, chunk_size: int = 1 << 20) -> Iterator[bytes]:
        data = self._view(path)
        for start in range(0, len(data), chunk_size):
            yield data[start : start + chunk_size]

    def read_bytes_range(self, path: str, offset: int, length: int) -> bytes:
        data = self._view(path)
        if offset < 0:
            offset = max(len(data) + offset, 0)
        return data[offset : offset + length]

    def list_session_meta(
        self, dir: str | None = None, *, with_text: bool = False
    ) -> list[SessionMeta]:
        """Listing metadata from the ends of each file (never whole transcripts)."""
        metas = []
        for item in sorted(self._in(dir), key=lambda i: i.path):
            meta = item.meta
            st_mtime = item.mtime_ns / 1e9
            metas.append(
                SessionMeta(
                    path=item.path,
                    size=item.size,
                    line_count=0,
                    mtime=datetime.fromtimestamp(st_mtime, UTC),
                    mtime_ns=item.mtime_ns,
                    valid=True,
                    ino=item.ino,
                    id=meta.id,
                    cwd=meta.cwd,
                    title=meta.title,
                    title_source=meta.title_source,
                    parent_session=meta.parent,
                    created=iso(meta.created_ms) if meta.created_ms is not None else None,
                    message_count=meta.message_count,
                    first_message=meta.first_message,
                    last_activity_ms=meta.last_activity_ms,
                )
            )
        return metas

    # ------------------------------------------------------------------ writing

    def _refuse(self, path: str) -> SessionTreeError:
        return SessionTreeError(
            f"{path}: the {self.store.name} store is read-only here "
            "(`sessiontree import` copies a session into this agent's store)"
        )

    def ensure_dir(self, path: str) -> None:
        raise self._refuse(path)

    def write_text(self, path: str, content: str) -> None:
        raise self._refuse(path)

    def rename(self, path: str, new_path: str) -> None:
        raise self._refuse(path)

    def unlink(self, path: str) -> None:
        raise self._refuse(path)

    def open_writer(self, path: str, flags: str = "a") -> SessionStorageWriter:
        raise self._refuse(path)

    def write_atomic(self, path: str, chunks: Iterable[bytes]) -> StorageStat | None:
        raise self._refuse(path)

    def fsync_dir(self, path: str) -> None:
        raise self._refuse(path)

    def remove_tree(self, path: str) -> None:
        raise self._refuse(path)


def _matches(path: str, pattern: str) -> bool:
    """Whether a session's name matches `pattern`; a session not named `*.jsonl` (a
    Gemini CLI `.json`, an OpenCode database's) matches as if it were."""
    name = os.path.basename(path)
    if fnmatch.fnmatchcase(name, pattern):
        return True
    return not name.endswith(".jsonl") and fnmatch.fnmatchcase(name + ".jsonl", pattern)


@dataclass(frozen=True, slots=True)
class IndexView:
    """Where `search`, `load_usage` and `store_stats` find a store's sessions."""

    sources: list[str | SessionSource]
    parts: StoreParts
    """The storage to read them through and the agent dir whose content index is used."""


def index_view(parts: StoreParts, paths: Sequence[str]) -> IndexView:
    """`paths` of the store as the content index reads them (see the module doc).

    Our own stores are returned as they are. A Claude Code or Codex store's sessions
    become sources read by their reader, indexed in the content index of the agent
    dir that keeps the store's listing cache (never in the other agent's directory);
    without one they stay paths of the foreign storage, which are scanned. Each
    source brings the usage its reader knows beyond the entries (`extra_usage`).
    """
    storage = parts.storage
    if not isinstance(storage, ForeignStorage):
        return IndexView(list(paths), parts)
    cache = storage.store.cache_dir
    kind = storage.store.agent
    if not storage.store.fs.on_host:
        # A database's transcripts: read by their reader, never indexed (the content
        # index keeps this host's files, as for a database's own sessions).
        sources: list[str | SessionSource] = [
            SessionSource(
                path,
                load=storage.entries,
                kind=kind,
                identity=storage.identity,
                extra=storage.extra_usage,
            )
            for path in paths
        ]
        return IndexView(sources, parts)
    if cache is None:
        return IndexView([SessionSource(path, extra=storage.extra_usage) for path in paths], parts)
    identity = storage.identity if storage.store.backend is not None else None
    sources = [
        SessionSource(
            path, load=storage.entries, kind=kind, identity=identity, extra=storage.extra_usage
        )
        for path in paths
    ]
    return IndexView(sources, StoreParts(FileSessionStorage(), cache))
