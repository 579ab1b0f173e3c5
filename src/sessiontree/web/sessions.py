"""Open sessions for the web app: a small cache of read-only managers, the views of a
session page (one slice of the active path, the tree, the leaf choices), and the tail
that follows a file's appends for the live view.

Only the public `SessionManager` API is used (`open(read_only=True)`, `get_branch`,
`get_tree`, `get_entry`, `get_children`, `get_labels`, ...), so other readers and
index-first loads slot in underneath. A session page still asks for every entry (the
tree, the tips and the whole active path), so a session is read whole when it is first
opened here, however the manager loads it; the page of a big one says so
(`load_note`). Nothing here writes.
"""

from __future__ import annotations

import base64
import binascii
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from sessiontree.export import (
    HtmlEntry,
    NavItem,
    entry_images,
    html_entry,
    is_raster_image,
    leaf_choice_text,
    nav_items,
)
from sessiontree.foreign.storage import ForeignStorage
from sessiontree.format import Entry, SessionTreeNode, loads_line
from sessiontree.session import SessionManager
from sessiontree.storage import SessionStorage, parse_blob_ref, read_range
from sessiontree.store import Store

__all__ = [
    "NAV_FULL",
    "PATH_CHUNK",
    "TEXT_LIMIT",
    "Change",
    "OpenSession",
    "PathSlice",
    "SessionCache",
    "Tail",
    "image_bytes",
    "load_note",
]

PATH_CHUNK = 100
"""Entries of the active path a page holds at first; earlier ones load on demand."""
TEXT_LIMIT = 4000
"""Characters of one block a page holds; the rest loads on demand."""
PAGE_READS_EVERYTHING = True
"""Whether a session page needs every entry of its session (it does: `get_tree` for the
tree, `get_entries` for the tips and counts, `get_branch` for the whole active path),
which turns an index-first load into a whole read. Clear it when the page asks only for
what it shows, and the pages stop saying so."""
WHOLE_READ_NOTE_BYTES = 8 << 20
"""Sessions of at least this size say on their page that they were read whole."""
NAV_FULL = 400
"""Sessions with up to this many entries show every entry in the tree; larger ones
show the entries that shape it (roots, branch points and their children, tips,
labelled entries, compactions, branch summaries) and count the runs between."""
_RASTER_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


@dataclass(frozen=True, slots=True)
class Mark:
    """What a `stat` says about a file: enough to tell it changed."""

    size: int
    mtime_ns: int
    ino: int


def _mark(storage: SessionStorage, path: str) -> Mark:
    """The file's mark. Its size is in the bytes the storage reads: for another agent's
    session, its pi-format view (whose length is not the transcript's), so that the
    page's offset and the tail's reads count the same bytes."""
    st = storage.stat(path)
    size = storage.view_size(path) if isinstance(storage, ForeignStorage) else st.size
    return Mark(size, st.mtime_ns or int(st.mtime_ms * 1_000_000), st.ino)


def sniff_image(data: bytes) -> str | None:
    """The MIME type of a PNG, JPEG, GIF or WebP image, None for anything else."""
    for magic, mime in _RASTER_MAGIC:
        if data.startswith(magic):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def image_bytes(block: dict[str, Any]) -> tuple[bytes, str] | None:
    """(bytes, MIME type) of an image block holding base64 of a raster image whose
    bytes are what its type says; None otherwise (never SVG, never HTML)."""
    if not is_raster_image(block):
        return None
    try:
        data = base64.b64decode("".join(str(block["data"]).split()), validate=True)
    except (binascii.Error, ValueError):
        return None
    mime = sniff_image(data)
    return (data, mime) if mime is not None else None


# ---------------------------------------------------------------------------- open sessions


@dataclass(slots=True)
class OpenSession:
    """A session opened read-only, as of `mark` (a stat taken before it was read)."""

    handle: str
    path: str
    sm: SessionManager
    mark: Mark
    lock: threading.Lock = field(default_factory=threading.Lock)
    load_seconds: float = 0.0
    """How long opening it and reading what its pages need took."""
    _tips: list[Entry] | None = None
    _tree: list[SessionTreeNode] | None = None

    def leaf(self, wanted: str | None) -> Entry | None:
        """The entry `wanted` names, else the session's own leaf."""
        if wanted:
            entry = self.sm.get_entry(wanted)
            if entry is not None:
                return entry
        leaf = self.sm.get_leaf_id()
        return self.sm.get_entry(leaf) if leaf is not None else None

    def tips(self) -> list[Entry]:
        """Entries without children: where the branches end."""
        if self._tips is None:
            entries = self.sm.get_entries()
            parents = {e.get("parentId") for e in entries}
            self._tips = [e for e in entries if e.get("id") not in parents]
        return self._tips

    def tree(self) -> list[SessionTreeNode]:
        """The entry tree (built once: the session does not change while it is open)."""
        if self._tree is None:
            self._tree = self.sm.get_tree()
        return self._tree


class SessionCache:
    """Read-only managers of recently viewed sessions, reopened when their file changes.

    Holds at most `max_sessions` sessions and about `max_bytes` of files; the least
    recently used go first.
    """

    def __init__(
        self,
        store: Store,
        *,
        max_sessions: int = 6,
        max_bytes: int = 600 << 20,
    ) -> None:
        self.store = store
        self.storage = store.storage
        self.agent_dir = store.agent_dir
        self.max_sessions = max_sessions
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._open: OrderedDict[str, OpenSession] = OrderedDict()
        self._loading: dict[str, threading.Lock] = {}

    def get(self, handle: str, path: str) -> OpenSession:
        """The session at `path`, as it is now (OSError, SessionTreeError when it
        cannot be read)."""
        mark = _mark(self.storage, path)
        with self._lock:
            cached = self._open.get(path)
            if cached is not None and cached.mark == mark:
                self._open.move_to_end(path)
                return cached
            loading = self._loading.setdefault(path, threading.Lock())
        with loading:  # one load per file at a time; others wait and share it
            with self._lock:
                cached = self._open.get(path)
                if cached is not None and cached.mark == mark:
                    return cached
            mark = _mark(self.storage, path)
            started = time.perf_counter()
            sm = SessionManager.open(
                path,
                storage=self.storage,
                read_only=True,
                blob_store=self.store.blobs_for(path),
                agent_dir=self.agent_dir,
            )
            session = OpenSession(handle, path, sm, mark)
            if PAGE_READS_EVERYTHING:
                try:
                    session.tree()  # what the page reads anyway, here, so it is timed
                    session.tips()
                except BaseException:
                    sm.close()
                    raise
            session.load_seconds = time.perf_counter() - started
            with self._lock:
                old = self._open.pop(path, None)
                self._open[path] = session
                self._evict()
            if old is not None:
                old.sm.close()  # a read-only manager stays readable after close
            return session

    def _evict(self) -> None:
        total = sum(s.mark.size for s in self._open.values())
        while len(self._open) > 1 and (
            len(self._open) > self.max_sessions or total > self.max_bytes
        ):
            _, session = self._open.popitem(last=False)
            total -= session.mark.size
            session.sm.close()

    def close(self) -> None:
        with self._lock:
            for session in self._open.values():
                session.sm.close()
            self._open.clear()


def load_note(session: OpenSession) -> str | None:
    """What the page of a big session says about how it was read (None: nothing to say)."""
    if not PAGE_READS_EVERYTHING or session.mark.size < WHOLE_READ_NOTE_BYTES:
        return None
    return (
        f"To draw this page the server read every entry of this file"
        f" ({session.mark.size / (1 << 20):,.1f} MB) in {session.load_seconds:.2f} s, and keeps"
        " them in memory while it is open: the page needs the whole tree and the whole"
        " active path, so reading only the entries shown is not there yet, even where the"
        " session is loaded index first. The page holds the last entries of one path; the"
        " rest comes on demand."
    )


# ---------------------------------------------------------------------------- page views

ImageUrl = Callable[[Entry, int, dict[str, Any]], str | None]


def image_url_for(handle: str) -> ImageUrl:
    """Image URLs of a session's entries: images held in the entry by their place in
    it, images still referenced by a valid blob hash from the blob store."""

    def url(entry: Entry, number: int, block: dict[str, Any]) -> str | None:
        data = block.get("data")
        entry_id = entry.get("id")
        if isinstance(data, str) and data.startswith("blob:"):
            digest = parse_blob_ref(data)
            return f"/blob/{digest}?s={handle}" if digest is not None else None
        if is_raster_image(block) and isinstance(entry_id, str):
            return f"/s/{handle}/img/{number}?entry={quote(entry_id, safe='')}"
        return None

    return url


def render_entries(session: OpenSession, entries: list[Entry], start: int = 0) -> list[HtmlEntry]:
    labels = session.sm.get_labels()
    url = image_url_for(session.handle)
    return [
        html_entry(e, start + i, labels, image_src=url, limit=TEXT_LIMIT)
        for i, e in enumerate(entries)
    ]


@dataclass(slots=True)
class PathSlice:
    """Part of the root -> leaf path: `entries` follow `earlier` entries not sent."""

    leaf: Entry | None
    length: int
    earlier: int
    entries: list[HtmlEntry]
    ids: list[str]


def path_slice(
    session: OpenSession,
    leaf: Entry | None,
    *,
    after: str | None = None,
    before: str | None = None,
    limit: int = PATH_CHUNK,
) -> PathSlice:
    """At most `limit` entries of the path to `leaf`: its end; or the ones following
    entry `after`; or the ones right before entry `before`."""
    path = session.sm.get_branch(leaf["id"]) if leaf is not None else []
    ids = [str(e.get("id", "")) for e in path]
    stop = len(path)
    start = max(0, stop - limit)
    if before is not None and before in ids:
        stop = ids.index(before)
        start = max(0, stop - limit)
    elif after is not None and after in ids:
        first = ids.index(after) + 1
        if stop - first <= limit:
            start = first
    chosen = path[start:stop]
    return PathSlice(leaf, len(path), start, render_entries(session, chosen, start), ids)


def branch_around(session: OpenSession, entry_id: str) -> tuple[Entry, PathSlice] | None:
    """The whole branch an entry is on, for a search hit: its newest tip (following the
    newest child down from the entry) and a slice of the path that shows the entry and
    everything after it (None when the entry is unknown or too far from its tip, where
    the path to the entry alone is shown)."""
    sm = session.sm
    entry = sm.get_entry(entry_id)
    if entry is None:
        return None
    tip = entry
    seen = {entry_id}
    while True:
        children = sm.get_children(str(tip.get("id")))
        if not children or str(children[-1].get("id")) in seen:
            break
        tip = children[-1]
        seen.add(str(tip.get("id")))
    part = path_slice(session, tip)
    if entry_id in part.ids[part.earlier :]:
        return tip, part
    index = part.ids.index(entry_id)
    if part.length - index > 4 * PATH_CHUNK:
        return None
    start = max(0, index - 2)  # two entries of context before the hit
    return tip, path_slice(session, tip, limit=part.length - start)


def _keeps(session: OpenSession, leaf_id: str | None) -> Callable[[SessionTreeNode, Any], bool]:
    def keep(node: SessionTreeNode, parent: SessionTreeNode | None) -> bool:
        entry = node.entry
        return (
            parent is None
            or len(node.children) != 1
            or len(parent.children) > 1
            or node.label is not None
            or entry.get("type") in ("compaction", "branch_summary")
            or entry.get("id") == leaf_id
        )

    return keep


def nav(session: OpenSession, leaf: Entry | None, path_ids: list[str]) -> list[NavItem]:
    """The tree's tokens, the path to `leaf` (`path_ids`) marked."""
    leaf_id = leaf.get("id") if leaf is not None else None
    keep = None if len(session.sm.get_entries()) <= NAV_FULL else _keeps(session, leaf_id)
    return nav_items(session.tree(), lambda _e: None, set(path_ids), keep=keep)


def leaf_choices(session: OpenSession, leaf: Entry | None) -> list[dict[str, Any]]:
    """The branch tips (and the shown leaf when it is not one) for the leaf picker."""
    choices = list(session.tips())
    if leaf is not None and not any(e is leaf for e in choices):
        choices.append(leaf)
    leaf_id = leaf.get("id") if leaf is not None else None
    return [
        {
            "value": str(e.get("id")),
            "selected": e.get("id") == leaf_id,
            "text": leaf_choice_text(session.sm, e),
        }
        for e in choices
    ]


def find_image(session: OpenSession, entry_id: str, number: int) -> dict[str, Any] | None:
    entry = session.sm.get_entry(entry_id)
    if entry is None:
        return None
    images = entry_images(entry)
    return images[number] if 0 <= number < len(images) else None


# ---------------------------------------------------------------------------- live tail


@dataclass(slots=True)
class Change:
    """What a tail saw: new entries, or a file that was not only appended to."""

    entries: list[Entry]
    rewritten: bool = False


class Tail:
    """Follows appends to a session file from byte `offset`: a `stat` per poll, and
    only the appended bytes read.

    The change detection of the listing cache: a file counts as appended to when it
    is the same file (inode), longer, and the bytes just before the old end are
    unchanged; anything else is a rewrite, which ends the tail.
    """

    CHECK = 64

    def __init__(self, storage: SessionStorage, path: str, offset: int) -> None:
        self.storage = storage
        self.path = path
        self.offset = offset
        self.mark: Mark | None = None
        self.edge = b""
        self.rewritten = False

    def _start(self) -> bool:
        try:
            now = _mark(self.storage, self.path)
            if now.size < self.offset:
                return False
            # Not `now`: bytes appended before the first poll are read by it.
            self.mark = Mark(-1, -1, now.ino)
            lead = min(self.CHECK, self.offset)
            self.edge = read_range(self.storage, self.path, self.offset - lead, lead)
        except (OSError, ValueError):
            return False
        return len(self.edge) == lead

    def _ended(self) -> Change:
        self.rewritten = True
        return Change([], True)

    def poll(self) -> Change:
        """New complete entries since the last poll (none when the file is as it was)."""
        if self.rewritten:
            return Change([], True)
        if self.mark is None:
            if not self._start():
                return self._ended()
        assert self.mark is not None
        try:
            now = _mark(self.storage, self.path)
        except (OSError, ValueError):
            return self._ended()
        if now == self.mark and now.size == self.offset:
            return Change([])
        if now.ino != self.mark.ino or now.size < self.offset:
            return self._ended()
        if now == self.mark:
            return Change([])  # the rest of a line still being written: not yet
        self.mark = now
        if now.size == self.offset:
            return Change([])
        lead = len(self.edge)
        try:
            data = read_range(
                self.storage, self.path, self.offset - lead, lead + now.size - self.offset
            )
        except (OSError, ValueError):
            return self._ended()
        if data[:lead] != self.edge:
            return self._ended()
        body = data[lead:]
        end = body.rfind(b"\n") + 1
        if end == 0:
            return Change([])
        complete = body[:end]
        self.offset += end
        self.edge = (self.edge + complete)[-self.CHECK :]
        return Change(list(_entries(complete)))


def _entries(data: bytes) -> Iterator[Entry]:
    for raw in data.split(b"\n"):
        if not raw.strip():
            continue
        try:
            value = loads_line(raw)
        except (ValueError, UnicodeError):
            continue
        if isinstance(value, dict) and value.get("type") != "session":
            if isinstance(value.get("id"), str):
                yield value
