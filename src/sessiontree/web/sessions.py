"""Open sessions for the web app: a small cache of read-only managers, the views of a
session page (one slice of the active path, the tree, the leaf choices), and the tail
that follows a file's appends for the live view.

A page asks only for what it shows: the tree's shape without its entries
(`SessionManager.get_tree_shape`: ids, kinds, parents by position), then the entries
it draws (the end of one path, the tree's branch points, tips and marks, the branch
tips for the picker). A big session is loaded index first, so its page reads those
lines and no others however big the file is. Only the public `SessionManager` API is
used, so other readers slot in underneath. Nothing here writes.
"""

from __future__ import annotations

import base64
import binascii
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
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
    nav_tokens,
)
from sessiontree.foreign.storage import ForeignStorage
from sessiontree.format import Entry, entry_preview, loads_line, message_text
from sessiontree.session import SessionManager, TreeShape
from sessiontree.storage import SessionStorage, parse_blob_ref, read_range
from sessiontree.store import Store

__all__ = [
    "NAV_FULL",
    "PATH_CHUNK",
    "TEXT_LIMIT",
    "Change",
    "OpenSession",
    "PathSlice",
    "Prompt",
    "SessionCache",
    "Tail",
    "image_bytes",
    "load_note",
    "prompt_index",
]

PATH_CHUNK = 100
"""Entries of the active path a page holds at first; earlier ones load on demand."""
TEXT_LIMIT = 4000
"""Characters of one block a page holds; the rest loads on demand."""
BIG_NOTE_BYTES = 8 << 20
"""Sessions of at least this size say on their page how it shows them."""
SIBLINGS_SHOWN = 50
"""Roots, or children of one branch point, the tree draws at most: the one on the shown
path and the newest; a token counts the rest (a session of thousands of roots draws a
page of bounded size and reads only what it draws)."""
TIPS_SHOWN = 200
"""Branch tips the picker lists at most (the newest); the page counts them all."""
_MARKED_KINDS = ("compaction", "branch_summary")  # a tuple: a hostile kind may be a list
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
    _shape: TreeShape | None = None
    _tips: list[int] = field(default_factory=list)

    def leaf(self, wanted: str | None) -> Entry | None:
        """The entry `wanted` names, else the session's own leaf."""
        if wanted:
            entry = self.sm.get_entry(wanted)
            if entry is not None:
                return entry
        leaf = self.sm.get_leaf_id()
        return self.sm.get_entry(leaf) if leaf is not None else None

    def shape(self) -> TreeShape:
        """The tree without its entries (the manager keeps it; it is drawn again only
        when a read finds a line damaged or other than its prefix said, which changes
        the tree: the file does not change while it is open)."""
        shape = self.sm.get_tree_shape()
        if shape is not self._shape:
            self._shape, self._tips = shape, shape.tips()
        return shape

    def tips(self) -> list[int]:
        """Positions of the entries without children: where the branches end."""
        self.shape()
        return self._tips


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
            sm = self.store.session(path, read_only=True)
            session = OpenSession(handle, path, sm, mark)
            try:
                session.tips()  # the shape every page draws, here, so it is timed
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
    """What the page of a big session says about how it shows it (None: nothing)."""
    if session.mark.size < BIG_NOTE_BYTES:
        return None
    return (
        f"A big session ({session.mark.size / (1 << 20):,.1f} MB). This page shows the"
        " newest entries of one branch; older ones load when you ask for them, and the"
        " tree shows where the session branches."
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
    later: int = 0
    """Entries of the path after `entries`, not sent (a slice that starts at an entry
    far from the leaf: a prompt picked in the index)."""


def _position(shape: TreeShape, entry: Entry | None) -> int | None:
    """Where `entry` is in the shape (None for an id that is not a string: a hostile
    line's id may be any JSON value, an unhashable list too)."""
    entry_id = entry.get("id") if entry is not None else None
    return shape.position.get(entry_id) if isinstance(entry_id, str) else None


def _path(shape: TreeShape, entry: Entry | None) -> list[int]:
    """Positions from the root to `entry` (none read)."""
    at = _position(shape, entry)
    return shape.path(at) if at is not None else []


def path_ids(session: OpenSession, entry: Entry | None) -> list[str]:
    """Ids of the entries from the root to `entry` (none read)."""
    shape = session.shape()
    return [str(shape.ids[p]) for p in _path(shape, entry)]


def path_slice(
    session: OpenSession,
    leaf: Entry | None,
    *,
    after: str | None = None,
    before: str | None = None,
    start_at: str | None = None,
    following: str | None = None,
    limit: int = PATH_CHUNK,
) -> PathSlice:
    """At most `limit` entries of the path to `leaf`: its end; or the ones following
    entry `after` (the end when they are more); or the ones right before entry
    `before`; or the ones from entry `start_at` on (two before it for context); or
    the ones right after entry `following`. Reads only those (and again, when a line
    read turns out damaged or other than its prefix said: the path is then another)."""
    while True:
        shape = session.shape()
        path = _path(shape, leaf)
        ids = [str(shape.ids[p]) for p in path]
        stop = len(path)
        start = max(0, stop - limit)
        if before is not None and before in ids:
            stop = ids.index(before)
            start = max(0, stop - limit)
        elif after is not None and after in ids:
            first = ids.index(after) + 1
            if stop - first <= limit:
                start = first
        elif start_at is not None and start_at in ids:
            start = max(0, ids.index(start_at) - 2)
            stop = min(stop, start + limit)
        elif following is not None and following in ids:
            start = ids.index(following) + 1
            stop = min(stop, start + limit)
        chosen = [e for e in shape.entries(path[start:stop]) if e is not None]
        if session.shape() is shape:
            rendered = render_entries(session, chosen, start)
            return PathSlice(leaf, len(path), start, rendered, ids, len(path) - stop)


PROMPTS_SCANNED = 20_000
"""Entries of a path (the newest) whose prompts its index lists at most: the index
reads each message among them, so a path of millions costs a bounded read."""


@dataclass(frozen=True, slots=True)
class Prompt:
    """One user prompt of a path, as its index lists it."""

    id: str
    text: str
    time: str
    """`MM-DD HH:MM` (UTC), "" when the entry does not say."""


def prompt_index(session: OpenSession, leaf: Entry | None) -> tuple[list[Prompt], int]:
    """The user prompts on the path to `leaf`, oldest first, among its newest
    `PROMPTS_SCANNED` entries; and how many older entries were not read. Only the
    path's message entries are read (the shape knows every entry's kind)."""
    while True:
        shape = session.shape()
        path = _path(shape, leaf)
        scanned = path[-PROMPTS_SCANNED:]
        messages = [p for p in scanned if shape.kinds[p] == "message"]
        prompts = []
        for entry in shape.entries(messages):
            message = entry.get("message") if entry is not None else None
            if entry is None or not isinstance(message, dict) or message.get("role") != "user":
                continue
            text = " ".join(message_text(message).split())[:120]
            when = str(entry.get("timestamp") or "")
            time_shown = f"{when[5:10]} {when[11:16]}" if len(when) >= 16 else ""
            prompts.append(Prompt(str(entry.get("id")), text or "(no text)", time_shown))
        if session.shape() is shape:
            return prompts, len(path) - len(scanned)


def branch_around(session: OpenSession, entry_id: str) -> tuple[Entry, PathSlice] | None:
    """The whole branch an entry is on, for a search hit: its newest tip (following the
    newest child down from the entry) and a slice of the path that shows the entry and
    everything after it, or, when it is far from the tip, the entry and the next
    `PATH_CHUNK` (the page loads the rest on demand); None when the entry is unknown."""
    shape = session.shape()
    at = shape.position.get(entry_id)
    if at is None:
        return None
    tip, seen = at, {at}
    while True:
        children = shape.children(tip)
        if not children or children[-1] in seen:
            break
        tip = children[-1]
        seen.add(tip)
    tip_entry = shape.entry(tip)
    if tip_entry is None or _position(shape, tip_entry) is None:
        return None  # a tip without a string id cannot be the page's leaf
    part = path_slice(session, tip_entry)
    if entry_id in part.ids[part.earlier :]:
        return tip_entry, part
    if entry_id not in part.ids:
        return None
    index = part.ids.index(entry_id)
    if part.length - index > 4 * PATH_CHUNK:
        return tip_entry, path_slice(session, tip_entry, start_at=entry_id)
    start = max(0, index - 2)  # two entries of context before the hit
    return tip_entry, path_slice(session, tip_entry, limit=part.length - start)


def nav(session: OpenSession, leaf: Entry | None, path_ids: list[str]) -> list[NavItem]:
    """The tree's tokens, the path to `leaf` (`path_ids`) marked. Sessions with more
    than `NAV_FULL` entries show the entries that shape the tree (see `NAV_FULL`);
    only the entries shown are read."""
    while True:
        shape = session.shape()
        tokens = _nav(shape, leaf, path_ids)
        if session.shape() is shape:  # else a line read was damaged: the tree is another
            return tokens


def _nav(shape: TreeShape, leaf: Entry | None, path_ids: list[str]) -> list[NavItem]:
    on_path = set(path_ids)
    leaf_at = _position(shape, leaf)
    children, labels = shape.children, shape.labels
    if shape.size <= NAV_FULL:
        down: Callable[[int], Sequence[int]] = children
        gaps: dict[int, int] = {}
    else:
        down, gaps = _condensed(shape, leaf_at)
    path_at = {at for i in path_ids if (at := shape.position.get(i)) is not None}

    def few(kids: Sequence[int]) -> Sequence[int]:
        """At most `SIBLINGS_SHOWN` siblings: the one on the path and the newest; the
        rest stand as one token (a negative number: -1 - how many)."""
        if len(kids) <= SIBLINGS_SHOWN:
            return kids
        newest = set(kids[-(SIBLINGS_SHOWN - 1) :])
        kept = [k for k in kids if k in newest or k in path_at]
        return [-1 - (len(kids) - len(kept)), *kept]

    shown: list[int] = []

    def item(p: int, head: bool) -> NavItem:
        if p < 0:
            return NavItem("more", count=-1 - p)
        shown.append(p)
        forks = len(children(p))
        entry_id = str(shape.ids[p])
        return NavItem(
            "entry",
            None,
            entry_id,
            "",
            labels.get(p),
            forks if forks > 1 else 0,
            on_path=entry_id in on_path,
            agent_only=shape.kinds[p] == "custom",
            head=head,
        )

    tokens = nav_tokens(
        few(shape.roots),
        lambda p: few(down(p)) if p >= 0 else (),
        item,
        gap=lambda p: gaps.get(p, 0),
    )
    texts = iter(entry_preview(e, 70) if e is not None else "" for e in shape.entries(shown))
    for token in tokens:
        if token.kind == "entry":
            token.text = next(texts)
    return tokens


def _condensed(
    shape: TreeShape, leaf_at: int | None
) -> tuple[Callable[[int], Sequence[int]], dict[int, int]]:
    """The tree of the entries that shape it (see `NAV_FULL`): each one's children in
    that tree, and how many entries of a run were left out before each."""
    children = shape.children
    marks = set(shape.labels)
    marks.update(p for p, kind in enumerate(shape.kinds) if kind in _MARKED_KINDS)
    if leaf_at is not None:
        marks.add(leaf_at)
    down: dict[int, list[int]] = {}
    gaps: dict[int, int] = {}
    stack = list(shape.roots)
    while stack:
        p = stack.pop()
        kids = children(p)
        if len(kids) != 1:
            down[p] = list(kids)
            stack.extend(kids)
            continue
        q, left_out = shape.run(p, marks)  # the next entry kept: a mark, or the run's end
        down[p] = [q]
        if left_out:
            gaps[q] = left_out
        stack.append(q)
    return (lambda p: down.get(p, ())), gaps


def leaf_choices(session: OpenSession, leaf: Entry | None) -> list[dict[str, Any]]:
    """The branch tips (the newest `TIPS_SHOWN`; and the shown leaf when it is not
    one) for the leaf picker."""
    shape = session.shape()
    choices = [e for e in shape.entries(session.tips()[-TIPS_SHOWN:]) if e is not None]
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
