"""`EntryIndex`: a session's entries, indexed, with the leaf and the context.

It holds every entry by position, in file order, with its id, parent and kind
beside it, the labels in effect, the session's latest name, the leaf pointer and
the context at the leaf (kept up to date as entries are added, so an agent that
rebuilds its context every turn pays O(1) per new entry).

An entry is a plain dict once it has been asked for. A big session loaded index
first (`reset_lines`) holds its messages and other big lines by position only,
and reads them back from the file it was loaded from (`LineSource`, a handle
pinned to those bytes) when they are first asked for: `get_entry`, `get_children`,
`get_branch` read what they return; the context reads the path from its last
compaction's first kept entry on (plus the assistant messages that name the
model); `get_tree`, `entries` and usage sums read everything. What was read stays
read, so the dict a caller holds is the one `rewrite_entries` writes. A rewrite
copies the bytes of every line read from the file and not edited since (the
contract: in-place edits are followed by `rewrite_entries`, which marks them)
instead of serializing it again, unless its store's writers would write it otherwise (a
line pi wrote, in xcsh's or oh-my-pi's store: see `SessionChunks`).

A line that looked like an entry at index time but does not parse when read is
dropped then (logged), as the full loader drops it; one whose id or parent turn
out other than its prefix said (a writer that repeats a key) is indexed again by
what it holds. Either way the derived state (children, path, context) is rebuilt.
The index does no I/O of its own beyond reading its source.
"""

from __future__ import annotations

import logging
import operator
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from itertools import compress, repeat
from typing import Any, Final, cast

from sessiontree._util.gcpause import gc_paused
from sessiontree.errors import EntryNotFoundError, SessionWriteConflictError
from sessiontree.format import (
    SETTING_KINDS,
    USAGE_KINDS,
    ContextBuilder,
    Entry,
    SessionContext,
    SessionTreeNode,
    allow_deep_nesting,
    assistant_model,
    branch_as_pi,
    branch_with_labels,
    build_session_context,
    build_tree,
    counted_usage,
    entry_name,
    generate_entry_id,
    loads_object,
    model_setting,
)
from sessiontree.layout import BlobCarry
from sessiontree.session._line_index import (
    ASSISTANT,
    PREFIX_FORM,
    IndexedLines,
    match_prefix,
    refs_in,
)
from sessiontree.session._persistence import (
    entry_line,
    may_persist_otherwise,
    resolve_blob_refs,
)
from sessiontree.session._shape import TreeShape
from sessiontree.storage import BlobStoreLike, PinnedFile

__all__ = [
    "EntryIndex",
    "LineSource",
    "SessionChunks",
    "is_assistant_message",
    "is_conversation_message",
]

_REF_MARK: Final = b"blob:sha256:"

log = logging.getLogger("sessiontree")

_READ_BYTES: Final = 8 << 20
"""The most one read of adjacent lines fetches at once."""
_BATCH_BYTES: Final = 1 << 20
CHANGED: Final = 4
"""Flag: an entry read from the file that was edited in place since (`rewrite_entries`)
or found other than its prefix said: a rewrite serializes it instead of copying its line."""
_SKIP: Final[dict[str, Any]] = {}
"""Stands for a line found not to be an entry when it was read (dropped)."""
_NAME_KINDS: Final = ("session_info", "title_change")
_STR_ONLY: Final = frozenset({str})


def is_assistant_message(entry: Entry) -> bool:
    """Whether the entry is a message from the assistant."""
    if entry.get("type") != "message":
        return False
    message = entry.get("message")
    return isinstance(message, dict) and message.get("role") == "assistant"


def is_conversation_message(entry: Entry) -> bool:
    """Whether the entry is a user or assistant message."""
    if entry.get("type") != "message":
        return False
    message = entry.get("message")
    return isinstance(message, dict) and message.get("role") in ("user", "assistant")


def apply_label(entry: Entry, labels: dict[str, str]) -> None:
    """Fold a label entry into the labels in effect, with the reference's Map
    semantics: re-setting keeps the position, clearing deletes."""
    target = entry.get("targetId")
    if isinstance(target, str):
        label = entry.get("label")
        if isinstance(label, str) and label:
            labels[target] = label
        else:
            labels.pop(target, None)


def _flags_of(entry: Entry) -> int:
    return ASSISTANT if is_assistant_message(entry) else 0


def _sets_default_model(entry: Entry) -> bool:
    kind = entry.get("type")
    if kind == "message":
        message = entry.get("message")
        return message.__class__ is dict and assistant_model(message) is not None
    if kind == "model_change":
        setting = model_setting(entry)
        return setting is not None and setting[0] == "default"
    return False


class LineSource:
    """Where an index reads the lines it holds by position: a pinned file, and where
    each line is in it (positions past `len(offsets)` are never read: they were
    added in memory)."""

    __slots__ = ("blobs", "lengths", "offsets", "path", "pinned")

    def __init__(
        self,
        pinned: PinnedFile,
        offsets: array[int],
        lengths: array[int],
        blobs: BlobStoreLike,
        path: str,
    ) -> None:
        self.pinned = pinned
        self.offsets = offsets
        self.lengths = lengths
        self.blobs = blobs
        self.path = path

    def runs(self, positions: Iterable[int]) -> Iterator[tuple[int, list[int]]]:
        """Sorted positions grouped into runs of lines adjacent in the file, each at
        most `_READ_BYTES` (one line may be longer): (start offset, positions)."""
        offsets, lengths = self.offsets, self.lengths
        run: list[int] = []
        start = end = 0
        for p in sorted(positions):
            off = offsets[p]
            if run and off == end + 1 and off + lengths[p] - start <= _READ_BYTES:
                run.append(p)
                end = off + lengths[p]
                continue
            if run:
                yield start, run
            run, start, end = [p], off, off + lengths[p]
        if run:
            yield start, run

    def read(self, start: int, run: list[int]) -> bytes:
        last = run[-1]
        return self.pinned.pread(start, self.offsets[last] + self.lengths[last] - start)


class EntryIndex:
    """The entries of one session and everything derived from them (see the module doc)."""

    __slots__ = (
        "_children",
        "_context",
        "_dropped",
        "_dropped_here",
        "_entries",
        "_file_refs",
        "_flags",
        "_has_assistant",
        "_ids",
        "_kinds",
        "_labels",
        "_lazy",
        "_name",
        "_parents",
        "_pos",
        "_ppos",
        "_shape",
        "_source",
        "leaf",
    )

    def __init__(self, entries: list[Entry] | None = None) -> None:
        self.leaf: str | None = None
        self._source: LineSource | None = None
        self.reset(entries if entries is not None else [])

    # ------------------------------------------------------------------ loading

    def reset(
        self,
        entries: list[Entry],
        refs: Iterable[str] = (),
    ) -> None:
        """Hold `entries` (taken, not copied); the leaf is the last one. `refs`: the
        blobs they name as refs."""
        self._use_source(None)
        self._file_refs: set[str] | None = set(refs)
        self._entries: list[Entry | None] = cast("list[Entry | None]", entries)
        self._ids = [e.get("id") for e in entries]
        self._parents = [e.get("parentId") for e in entries]
        self._kinds = [e.get("type") for e in entries]
        self._flags = bytearray(_flags_of(e) for e in entries)
        self._lazy = self._dropped = self._dropped_here = 0
        self._derive()
        self._leaf_at_end()

    def reset_lines(self, lines: IndexedLines, source: LineSource) -> None:
        """Hold the entries of a file indexed by `line_index` (read from `source`
        when asked for); the leaf is the last one."""
        self._use_source(source)
        self._file_refs = lines.refs
        self._entries = lines.entries
        self._ids, self._parents, self._kinds = lines.ids, lines.parents, lines.kinds
        self._flags = lines.flags
        self._lazy = lines.entries.count(None)
        self._dropped = self._dropped_here = 0
        self._derive()
        self._read_last()
        self._leaf_at_end()

    @property
    def file_refs(self) -> set[str]:
        """Blobs named by refs that only the file, or the entries as refs, hold: every
        ref an index-first pass saw (its unread lines' images are only in the file), the
        refs entries kept as refs (snapcompact frames, a blob missing when read). What a
        writable manager pins (`SessionManager._hold_file_refs`); a copy inherits them.
        A read-only pass leaves them out; they are looked for in the file when asked."""
        refs = self._file_refs
        if refs is None:
            source = self._source
            refs = self._file_refs = refs_in(source.pinned) if source is not None else set()
        return refs

    @file_refs.setter
    def file_refs(self, refs: set[str]) -> None:
        self._file_refs = refs

    def _use_source(self, source: LineSource | None) -> None:
        old, self._source = self._source, source
        if old is not None and (source is None or source.pinned is not old.pinned):
            old.pinned.close()

    def _read_last(self) -> None:
        """Read the last line that holds an entry: the full loader's leaf is the last
        line that parses, and a line indexed by its prefix may not (a write cut short
        just after an inner `}`, or another writer's entry glued to it). Lines found
        not to parse are dropped, as the full loader drops them; the line found is
        most often on the context's path, which reads it anyway."""
        entries = self._entries
        end, batch = len(entries), 1
        while end > 0:
            # The last line first, then ever more before it: a file that ends in many
            # damaged lines is rebuilt (one `_derive` per batch) a few times, not per line.
            start = max(0, end - batch)
            self._read(range(start, end))  # each read, dropped, or indexed by what it holds
            if any(entries[p] is not _SKIP for p in range(start, end)):
                return
            end, batch = start, batch * 2

    def _leaf_at_end(self) -> None:
        """The leaf is the last entry (none when its id is not a string)."""
        entries = self._entries
        p = len(entries) - 1
        while p >= 0 and entries[p] is _SKIP:
            p -= 1
        last_id = self._ids[p] if p >= 0 else None
        self.leaf = last_id if isinstance(last_id, str) else None

    def _derive(self) -> None:
        """Everything derived from the records: id map, labels, name; caches dropped."""
        ids = self._ids
        pos: dict[str, int]
        if _STR_ONLY.issuperset(map(type, ids)):
            pos = dict(zip(cast("list[str]", ids), range(len(ids)), strict=True))  # last wins
        else:
            pos = {}
            for p, entry_id in enumerate(ids):
                if entry_id.__class__ is str:
                    pos[entry_id] = p
        self._pos = pos
        labels: dict[str, str] = {}
        name: str | None = None
        entries, kinds = self._entries, self._kinds
        for p, kind in enumerate(kinds):
            if kind == "label" or kind == "session_info" or kind == "title_change":
                entry = entries[p]
                if entry is None:
                    continue  # a kind the index keeps is never lazy; a corrected one is read
                if kind == "label":
                    apply_label(entry, labels)
                else:
                    name = entry_name(entry)
        self._labels, self._name = labels, name
        self._children: dict[Any, list[int]] | None = None
        self._ppos: list[int] | None = None
        self._shape: TreeShape | None = None
        self._has_assistant: bool | None = None
        self._context: ContextBuilder | None = None

    def changed_in_place(self) -> None:
        """Entries were edited in place: derive everything again, keeping the leaf."""
        leaf = self.leaf
        for p, entry in enumerate(self._entries):
            if entry is not None:
                self._ids[p] = entry.get("id")
                self._parents[p] = entry.get("parentId")
                self._kinds[p] = entry.get("type")
                kept = self._flags[p] & PREFIX_FORM
                self._flags[p] = kept | _flags_of(entry) | CHANGED
        self._derive()
        self.leaf = leaf

    # ------------------------------------------------------------------ adding

    def new_id(self) -> str:
        """A fresh entry id not used in this session."""
        return generate_entry_id(self._pos)

    def add(self, entry: Entry) -> None:
        """Append an entry (its id new, its parent the leaf) and make it the leaf."""
        p = len(self._entries)
        entry_id: str = entry["id"]
        parent = entry["parentId"]
        kind = entry["type"]
        self._entries.append(entry)
        self._ids.append(entry_id)
        self._parents.append(parent)
        self._kinds.append(kind)
        flag = 0
        if kind == "message":
            message = entry.get("message")
            if message.__class__ is dict and message.get("role") == "assistant":
                flag = ASSISTANT
        self._flags.append(flag)
        if self._ppos is not None:
            self._ppos.append(self._pos.get(parent, -1) if parent else -1)
        self._shape = None
        self._pos[entry_id] = p
        if self._children is not None:
            self._children.setdefault(parent, []).append(p)
        if kind == "label":
            apply_label(entry, self._labels)
        elif kind == "session_info" or kind == "title_change":
            self._name = entry_name(entry)
        context = self._context
        if context is not None:
            if not (
                context.leaf_id is not None and context.leaf_id == parent and context.add(entry)
            ):
                self._context = None
        self.leaf = entry_id
        if flag and self._has_assistant is False:
            self._has_assistant = True

    # ------------------------------------------------------------------ reading lines

    def _entry(self, p: int) -> Entry | None:
        entry = self._entries[p]
        if entry is None and self._read((p,)):
            return None  # the line was dropped or re-indexed: look it up again
        return self._entries[p]

    def _read(self, positions: Iterable[int]) -> bool:
        """Read the lazy entries at `positions`; True when any record changed (a line
        dropped or re-indexed), which rebuilds the derived state."""
        source = self._source
        entries = self._entries
        wanted = [p for p in positions if entries[p] is None]
        if not wanted or source is None:
            return False
        if len(wanted) == 1:
            return self._read_lines(source, wanted)
        with gc_paused():
            return self._read_lines(source, wanted)

    def _read_lines(self, source: LineSource, wanted: list[int]) -> bool:
        entries = self._entries
        changed = False
        lengths, offsets = source.lengths, source.offsets
        for start, run in source.runs(wanted):
            data = source.read(start, run)
            view = memoryview(data)
            for p in run:
                lo = offsets[p] - start
                hi = lo + lengths[p]
                value = loads_object(view[lo:hi]) if hi <= len(data) else None
                if value is None:
                    log.warning(
                        "%s: the line of entry %s does not parse; it is left out",
                        source.path,
                        self._ids[p],
                    )
                    self._drop(p)
                    changed = True
                    continue
                # Walking the strings for a ref costs less than scanning the bytes for one.
                try:
                    value = resolve_blob_refs(value, source.blobs)
                except RecursionError:
                    value = allow_deep_nesting(partial(resolve_blob_refs, value, source.blobs))
                entries[p] = value
                self._lazy -= 1
                if (
                    value.get("id") != self._ids[p]
                    or value.get("parentId") != self._parents[p]
                    or value.get("type") != self._kinds[p]
                ):
                    self._ids[p] = value.get("id")
                    self._parents[p] = value.get("parentId")
                    self._kinds[p] = value.get("type")
                    self._flags[p] |= CHANGED  # its line no longer says what it holds
                    changed = True
        if changed:
            leaf = self.leaf
            self._derive()
            self.leaf = leaf if leaf in self._pos else None
        return changed

    def _drop(self, p: int) -> None:
        """A line that turned out not to be an entry: no id, no parent, no kind."""
        self._entries[p] = _SKIP
        self._ids[p] = self._parents[p] = self._kinds[p] = None
        self._flags[p] = 0
        self._lazy -= 1
        self._dropped += 1
        self._dropped_here += 1

    def _peek(self, p: int) -> Entry | None:
        """The entry at `p` without keeping it read (for sums over big sessions)."""
        entry = self._entries[p]
        if entry is not None or self._source is None:
            return entry if entry is not _SKIP else None
        source = self._source
        raw = source.pinned.pread(source.offsets[p], source.lengths[p])
        return loads_object(raw)

    def _read_all(self) -> list[Entry]:
        while self._lazy and self._read(range(len(self._entries))):
            pass
        return [e for e in self._entries if e is not _SKIP]  # type: ignore[misc]

    # ------------------------------------------------------------------ reading

    @property
    def entries(self) -> list[Entry]:
        """Every entry, insertion order (reads a lazily loaded session whole)."""
        if self._lazy or self._dropped:
            return self._read_all()
        return cast("list[Entry]", self._entries)

    def read_so_far(self) -> list[tuple[Any, Entry | None]]:
        """(id, entry) of every entry in order, the entry None where it was not read
        yet (reads nothing: for checks that must not change what is read)."""
        return [
            (entry_id, entry)
            for entry_id, entry in zip(self._ids, self._entries, strict=True)
            if entry is not _SKIP
        ]

    def is_read(self, entry_id: str) -> bool:
        """Whether the entry is held as a dict (added in memory, kept, or read)."""
        p = self._pos.get(entry_id)
        return p is not None and self._entries[p] is not None

    @property
    def pinned(self) -> PinnedFile | None:
        """The handle unread lines are read from (None: every entry is in memory)."""
        return self._source.pinned if self._source is not None and self._lazy else None

    def __len__(self) -> int:
        return len(self._entries) - self._dropped

    def __contains__(self, entry_id: object) -> bool:
        return entry_id in self._pos

    def get(self, entry_id: str) -> Entry | None:
        while True:
            p = self._pos.get(entry_id)
            if p is None:
                return None
            entry = self._entry(p)
            if entry is not None:
                return entry

    def require(self, entry_id: str) -> Entry:
        """The entry, or EntryNotFoundError."""
        entry = self.get(entry_id)
        if entry is None:
            raise EntryNotFoundError(entry_id)
        return entry

    def children(self, parent_id: str | None) -> list[Entry]:
        """Direct children of an entry (None: the roots), in insertion order."""
        while True:
            children = self._children
            if children is None:
                children = {}
                entries = self._entries
                for p, parent in enumerate(self._parents):
                    if (parent is None or parent.__class__ is str) and entries[p] is not _SKIP:
                        children.setdefault(parent, []).append(p)
                self._children = children
            positions = children.get(parent_id, ())
            if not self._read(positions):
                return [cast("Entry", self._entries[p]) for p in positions]

    def label(self, entry_id: str) -> str | None:
        return self._labels.get(entry_id)

    def labels(self) -> dict[str, str]:
        """Every label in effect: target id -> label (a copy)."""
        return dict(self._labels)

    @property
    def latest_name(self) -> str | None:
        """The latest name entry's name ("" when it cleared the name), None without one."""
        return self._name

    def has_assistant(self) -> bool:
        """Whether any entry is an assistant message."""
        if self._has_assistant is None:
            flags = self._flags
            self._has_assistant = flags.find(ASSISTANT) >= 0 or (
                flags.find(ASSISTANT | PREFIX_FORM) >= 0
            )
        return self._has_assistant

    def _parent_positions(self) -> list[int]:
        ppos = self._ppos
        if ppos is None:
            pos, parents = self._pos, self._parents
            try:
                lookup = cast("Callable[[Any, int], int]", pos.get)
                ppos = list(map(lookup, parents, repeat(-1, len(parents))))
            except TypeError:  # an unhashable parentId (a hostile file): no parent
                ppos = [pos.get(x, -1) if x.__class__ is str else -1 for x in parents]
            if "" in pos:  # an empty parentId names no parent, whatever has that id
                ppos = [-1 if x == "" else q for x, q in zip(parents, ppos, strict=True)]
            self._ppos = ppos
        return ppos

    def _path(self, p: int) -> list[int]:
        """Positions from the root to `p`, following parents; stops at a cycle."""
        ppos = self._parent_positions()
        path: list[int] = []
        append = path.append
        limit = len(ppos) + 1
        while p >= 0:
            append(p)
            p = ppos[p]
            if len(path) > limit:
                return self._path_checked(path[0])
        path.reverse()
        return path

    def _path_checked(self, p: int) -> list[int]:
        ppos = self._parent_positions()
        path: list[int] = []
        seen: set[int] = set()
        while p >= 0 and p not in seen:
            seen.add(p)
            path.append(p)
            p = ppos[p]
        path.reverse()
        return path

    def _read_path(self, entry_id: str) -> list[int]:
        """The root -> `entry_id` positions with every entry on them read ([] if unknown)."""
        while True:
            p = self._pos.get(entry_id)
            if p is None:
                return []
            path = self._path(p)
            if not self._read(path):
                return path

    def branch(self, from_id: str | None) -> list[Entry]:
        """Entries from the root to `from_id` (default: the leaf); [] if unknown."""
        start_id = from_id if from_id is not None else self.leaf
        if start_id is None:
            return []
        entries = self._entries
        return [cast("Entry", entries[p]) for p in self._read_path(start_id)]

    def branch_with_labels(self, leaf_id: str) -> list[Entry]:
        """The root -> `leaf_id` path without its label entries, then the labels in
        effect on it re-created (what a branched session keeps)."""
        path = self.branch(leaf_id)
        if not path:
            raise EntryNotFoundError(leaf_id)
        return branch_with_labels(path, self._labels)

    def branch_as_pi(self, leaf_id: str) -> list[Entry]:
        """The root -> `leaf_id` path as pi (1.6) keeps it in a branched session
        (`sessiontree.format.branch_as_pi`): re-linked where label entries were
        dropped, labels re-created with the timestamps of the entries that set them
        (reads every entry of a session loaded index first)."""
        path = self.branch(leaf_id)
        if not path:
            raise EntryNotFoundError(leaf_id)
        times: dict[str, Any] = {}
        for entry in self.entries:
            if entry.get("type") != "label":
                continue
            target = entry.get("targetId")
            if isinstance(target, str):
                label = entry.get("label")
                if isinstance(label, str) and label:
                    times[target] = entry.get("timestamp")
                else:
                    times.pop(target, None)
        return branch_as_pi(path, self._labels, times)

    def has_conversation(self) -> bool:
        """Whether any entry is a user or assistant message (what makes pi 1.6 write a
        new session's file)."""
        return self.has_assistant() or any(map(is_conversation_message, self.entries))

    def tree(self) -> list[SessionTreeNode]:
        """Roots of the entry tree (orphans are roots), children oldest first."""
        entries = self.entries
        if self._dropped:
            return build_tree(entries, self._labels)
        return build_tree(
            entries, self._labels, ids=self._ids, parents=self._parents, position=self._pos
        )

    def shape(self) -> TreeShape:
        """The tree without its entries (`TreeShape`): reads no line but the siblings
        at branch points (linked here: a sibling found damaged or other than its prefix
        said changes the tree, which is then drawn again); kept until an entry is added
        or a read changes what the index holds."""
        while True:
            shape = self._shape
            if shape is None:
                shape = self._shape = self._new_shape()
            shape.roots  # noqa: B018 (links it, reading the siblings it orders)
            if self._shape is shape:
                # The leaf moves without a new entry (`branch`, `reset_leaf`).
                leaf = self.leaf
                shape.leaf = self._pos.get(leaf) if leaf is not None else None
                return shape

    def _new_shape(self) -> TreeShape:
        ppos = self._parent_positions()
        ids, parents, entries = self._ids, self._parents, self._entries
        tree_parents = list(ppos)
        pos = self._pos
        empty = pos.get("")
        if empty is not None:
            # `get_tree` (as the reference's getTree) finds an empty parentId like any
            # other id; only a branch's walk up (`path`) stops at it.
            tree_parents = [empty if x == "" else q for x, q in zip(parents, ppos, strict=True)]
        # As `build_tree`: an entry naming its own id as parent is a root, even where
        # a later entry carries that id too.
        for p in compress(range(len(ids)), map(operator.eq, parents, ids)):
            tree_parents[p] = -1
        if self._dropped:
            present = bytearray(e is not _SKIP for e in entries)
        else:
            present = bytearray(b"\x01") * len(entries)
        labels = {pos[t]: label for t, label in self._labels.items() if t in pos}
        return TreeShape(
            self, list(ids), list(self._kinds), tree_parents, present, dict(pos), labels, None
        )

    def read_at(self, positions: Sequence[int]) -> list[Entry | None]:
        """The entries at `positions`, read if they were not; None for a line found
        not to be an entry (now or before)."""
        wanted = [p for p in positions if 0 <= p < len(self._entries)]
        while self._read(wanted):
            pass  # a line dropped or re-indexed: the others are read on the next pass
        entries = self._entries
        out: list[Entry | None] = []
        for p in positions:
            entry = entries[p] if 0 <= p < len(entries) else None
            out.append(entry if entry is not None and entry is not _SKIP else None)
        return out

    def timestamps_at(self, positions: Sequence[int]) -> list[Any]:
        """The `timestamp` of the entries at `positions` (None for a line found not to
        be an entry), without keeping the unread ones read: the siblings a shape orders
        may be most of a session. A line found damaged, or other than its prefix said,
        is read as `read_at` reads it (which changes the index)."""
        entries, source = self._entries, self._source
        stamps: dict[int, Any] = {}
        odd: list[int] = []
        unread = [p for p in positions if 0 <= p < len(entries) and entries[p] is None]
        if unread and source is not None:
            offsets, lengths = source.offsets, source.lengths
            ids, parents, kinds = self._ids, self._parents, self._kinds
            for start, run in source.runs(unread):
                data = source.read(start, run)
                view = memoryview(data)
                for p in run:
                    lo = offsets[p] - start
                    hi = lo + lengths[p]
                    value = loads_object(view[lo:hi]) if hi <= len(data) else None
                    if (
                        value is None
                        or value.get("id") != ids[p]
                        or value.get("parentId") != parents[p]
                        or value.get("type") != kinds[p]
                    ):
                        odd.append(p)
                    else:
                        stamps[p] = value.get("timestamp")
                del view
        if odd:
            self.read_at(odd)
        out: list[Any] = []
        for p in positions:
            if p in stamps:
                out.append(stamps[p])
                continue
            entry = entries[p] if 0 <= p < len(entries) else None
            ok = entry is not None and entry is not _SKIP
            out.append(entry.get("timestamp") if ok else None)  # type: ignore[union-attr]
        return out

    def path_at(self, position: int) -> list[int]:
        """Positions from the root to `position`, following parents (nothing read)."""
        if not 0 <= position < len(self._entries) or self._entries[position] is _SKIP:
            return []
        return self._path(position)

    # ------------------------------------------------------------------ context

    def context(self) -> SessionContext:
        """The model context at the leaf, kept incrementally (see the module doc)."""
        leaf_id = self.leaf
        if leaf_id is None:
            return SessionContext()
        context = self._context
        if context is None or context.leaf_id != leaf_id:
            if leaf_id not in self._pos:
                entries = self.entries
                return build_session_context(entries, leaf_id)
            context = self._context = self._build_context(leaf_id)
        return context.snapshot()

    def _build_context(self, leaf_id: str) -> ContextBuilder:
        """The context at `leaf_id` from the entries it depends on: the settings on
        the whole path, the first and the last setter of the default model, and
        everything from the last compaction's first kept entry on (read if unread)."""
        while True:
            p = self._pos.get(leaf_id)
            if p is None:
                return ContextBuilder.from_path([])
            path = self._path(p)
            start = self._kept_start(path)
            if self._lazy and self._read(path[start:]):
                continue
            setters = self._default_setters(path, start)
            if setters is None:
                continue
            entries = self._entries
            if start == 0:
                return ContextBuilder.from_path([cast("Entry", entries[q]) for q in path])
            # Before the kept entries only settings count (messages are compacted away),
            # and the two setters: the value of the default model, and its key's place.
            # A hostile line's "type" may be any JSON value: only a string can be a kind.
            kinds = self._kinds
            chosen = [
                k
                for k in range(start)
                if kinds[path[k]].__class__ is str and kinds[path[k]] in SETTING_KINDS
            ]
            if setters:
                chosen = sorted({*chosen, *setters})
            selected = [cast("Entry", entries[path[k]]) for k in chosen]
            selected.extend(cast("Entry", entries[q]) for q in path[start:])
            return ContextBuilder.from_path(selected)

    def _kept_start(self, path: list[int]) -> int:
        """Where the entries the context needs begin on `path`: its last compaction's
        first kept entry (the compaction itself when that is not before it), else 0."""
        kinds = self._kinds
        for k in range(len(path) - 1, -1, -1):
            if kinds[path[k]] == "compaction":
                compaction = self._entries[path[k]]
                first_kept = compaction.get("firstKeptEntryId") if compaction else None
                ids = self._ids
                try:
                    return [ids[q] for q in path[:k]].index(first_kept)
                except ValueError:
                    return k
        return 0

    def _default_setters(self, path: list[int], start: int) -> list[int] | None:
        """Path indexes before `start` of the default model's earliest setter and, when
        no kept entry sets it, its latest one (assistant messages read as needed);
        None when reading one changed a record."""
        entries, flags = self._entries, self._flags
        if start == 0:
            return []
        kept = reversed(path[start:])  # the last setter is most often the last assistant
        if any(_sets_default_model(cast("Entry", entries[q])) for q in kept):
            searches: list[Iterable[int]] = [range(start)]
        else:
            searches = [range(start - 1, -1, -1), range(start)]
        found: list[int] = []
        for order in searches:
            for k in order:
                q = path[k]
                entry = entries[q]
                if entry is None:
                    if not flags[q] & ASSISTANT:
                        continue
                    if self._read((q,)):
                        return None
                    entry = entries[q]
                if entry is not None and _sets_default_model(entry):
                    found.append(k)
                    break
        return found

    # ------------------------------------------------------------------ sums and files

    def counted_usages(self) -> Iterator[tuple[bool, object]]:
        """`counted_usage` of every entry that pi's totals may count, in order, without
        keeping unread ones: assistant messages, tool results holding a `usage`, and
        the `usage`, compaction and branch summary entries."""
        flags, kinds, entries = self._flags, self._kinds, self._entries
        source = self._source
        for p in range(len(entries)):
            kind = kinds[p]
            if kind == "message" and not flags[p] & ASSISTANT and entries[p] is None:
                # most messages are not tool results with a usage: looked at as bytes first
                if source is None:
                    continue
                raw = source.pinned.pread(source.offsets[p], source.lengths[p])
                if b'"toolResult"' not in raw or b'"usage"' not in raw:
                    continue
                entry = loads_object(raw)
            elif kind == "message" or kind in USAGE_KINDS:
                entry = self._peek(p)
            else:
                continue
            if entry is not None:
                counted = counted_usage(entry)
                if counted[0]:
                    yield counted

    def file_chunks(
        self,
        head: bytes,
        blobs: BlobStoreLike,
        *,
        rescue: bool = False,
        carry: BlobCarry | None = None,
        file_checked: bool = False,
        pi_form: bool = False,
    ) -> SessionChunks:
        """The whole session as file bytes (see `SessionChunks`); with `carry`, a copy
        into `carry.target` (which `blobs` must be) that takes its images along;
        `pi_form`: entries written anew as pi writes them (pi's store)."""
        return SessionChunks(self, head, blobs, rescue, carry, file_checked, pi_form)

    def use_blobs(self, blobs: BlobStoreLike) -> None:
        """Unread lines' images are now in `blobs` (the session is a copy in that store,
        or moved there)."""
        if self._source is not None:
            self._source.blobs = blobs

    def _rebase(
        self,
        pinned: PinnedFile,
        offsets: array[int],
        lengths: array[int],
        serialized: dict[int, bool],
    ) -> None:
        """The file written from `file_chunks` is now where the lines are read from
        (`serialized`: the positions whose line was written anew -> in the writers' form)."""
        source = self._source
        blobs = source.blobs if source is not None else None
        if blobs is None or len(offsets) != len(self._entries):
            pinned.close()
            return
        flags = self._flags
        for p, formed in serialized.items():
            flags[p] = (flags[p] & ASSISTANT) | (PREFIX_FORM if formed else 0)
        self._use_source(LineSource(pinned, offsets, lengths, blobs, source.path if source else ""))
        self._dropped_here = 0


class SessionChunks:
    """A whole session file from an index: `head`, then each entry's line, in batches
    of about 1 MB; the lines of the source file whose entries were never read are
    copied as they are, after checking each still holds its entry, and so are those
    read and not edited since when `file_checked` (the writer compared the whole file
    with what was read just before); added and edited entries are serialized with the
    persistence transforms (as pi writes them in pi's store, `pi_form`). In the other
    stores a line copied that oh-my-pi would write otherwise (pi wrote it: inline
    images, transient keys, strings over the limit) is written as oh-my-pi writes it;
    every line a rewrite writes is then in its store's form. A copy into another blob store
    (`carry`) passes every line it writes, copied or serialized, through
    `BlobCarry.take`, so the blobs they refer to are in that store. The blobs are
    synced before the last chunk.

    A writer that wrote these chunks as the index's own file calls `commit(pinned)`:
    the lines are then read from there. `rescue=True` (a copy made because the file
    changed) leaves out, with a warning, lines that no longer hold their entry,
    instead of raising SessionWriteConflictError.
    """

    def __init__(
        self,
        index: EntryIndex,
        head: bytes,
        blobs: BlobStoreLike,
        rescue: bool,
        carry: BlobCarry | None = None,
        file_checked: bool = False,
        pi_form: bool = False,
    ) -> None:
        assert carry is None or carry.target is blobs
        self._index = index
        self._pi_form = pi_form
        self._file_checked = file_checked
        self._head = head
        self._blobs = blobs
        self._rescue = rescue
        self._carry = carry if carry is not None and carry.carries else None
        self._written: tuple[array[int], array[int], dict[int, bool]] | None = None
        self._serialized: dict[int, bool] = {}
        """Positions written anew -> whether their line is in the writers' form."""
        self.left_out = index._dropped_here
        """Lines of the file read from that were found not to be entries: not written."""

    def __iter__(self) -> Iterator[bytes]:
        index = self._index
        entries = index._entries
        source = index._source
        offsets, lengths = array("q"), array("q")
        at = len(self._head)
        yield self._head
        batch: list[bytes] = []
        size = 0
        p, n = 0, len(entries)
        flags = index._flags
        known = len(source.offsets) if source is not None else 0  # lines in the source file
        # An entry read and unchanged is copied as its line only where the writer checked
        # first that the file is the one read, byte for byte (a rewrite, a move); else
        # (a rescue, a fork) what memory holds is written.
        trusted = self._file_checked
        serialized: dict[int, bool] = {}
        self._serialized = serialized
        while p < n:
            entry = entries[p]
            if entry is _SKIP:
                offsets.append(0)
                lengths.append(0)
                p += 1
                continue
            if entry is not None and (p >= known or not trusted or flags[p] & CHANGED):
                line = self._serialize(p)  # added in memory, or edited since it was read
                offsets.append(at)
                lengths.append(len(line) - 1)
                batch.append(line)
                size += len(line)
                at += len(line)
                p += 1
                if size >= _BATCH_BYTES:
                    yield b"".join(batch)
                    batch, size = [], 0
                continue
            q = p + 1
            while (
                q < known
                and entries[q] is not _SKIP
                and (entries[q] is None or (trusted and not flags[q] & CHANGED))
            ):
                q += 1
            if batch:
                yield b"".join(batch)
                batch, size = [], 0
            # Lines unread, or read and unchanged, go out as the file holds them, a run
            # of adjacent ones at once.
            assert source is not None
            for chunk in self._copy(source, list(range(p, q)), offsets, lengths, at):
                at += len(chunk)
                yield chunk
            p = q
        if batch:
            yield b"".join(batch)
        self._blobs.sync()
        self._written = (offsets, lengths, serialized)

    def _copy(
        self,
        source: LineSource,
        positions: list[int],
        offsets: array[int],
        lengths: array[int],
        at: int,
    ) -> Iterator[bytes]:
        """The lines at `positions` (unread, or read and unchanged) as they are in the
        source file, each checked to still hold its entry; their new offsets are
        recorded from `at`."""
        for start, run in source.runs(positions):
            data = source.read(start, run)
            if self._carry is not None:
                self._carry.take(data)
            # In pi's form a line with a ref is written anew, its images as their data
            # (pi reads no refs); in the other stores' a line not in oh-my-pi's form (pi
            # wrote it: images inline, transient keys) is written as oh-my-pi writes it;
            # the others go out as they are.
            refs = self._pi_form and _REF_MARK in data
            other = not self._pi_form and may_persist_otherwise(data)
            if (
                not refs
                and not other
                and all(
                    self._holds(data, source.offsets[p] - start, source.lengths[p], p) for p in run
                )
            ):
                for p in run:
                    offsets.append(at + source.offsets[p] - start)
                    lengths.append(source.lengths[p])
                yield data
                yield b"\n"
                at += len(data) + 1
                continue
            entries = self._index._entries
            for p in run:
                lo = source.offsets[p] - start
                length = source.lengths[p]
                if self._holds(data, lo, length, p):
                    line = data[lo : lo + length] + b"\n"
                    if refs and _REF_MARK in line:
                        line = self._pi_line(line[:-1], source.blobs, p)
                    elif other and may_persist_otherwise(line):
                        line = self._agent_line(line[:-1], p)
                elif entries[p] is not None:
                    # Changed on disk, but held in memory: written from memory.
                    line = self._serialize(p)
                else:
                    self._changed(source.path, p)
                    offsets.append(0)
                    lengths.append(0)
                    continue
                offsets.append(at)
                lengths.append(len(line) - 1)
                yield line
                at += len(line)

    def _pi_line(self, raw: bytes, blobs: BlobStoreLike, p: int) -> bytes:
        """The line `raw` (holding refs into `blobs`) as pi writes it: images as data
        (a line damaged past its prefix, which no reader takes, goes out as it is)."""
        entry = loads_object(raw)
        if not isinstance(entry, dict):
            return raw + b"\n"
        try:
            resolved = resolve_blob_refs(entry, blobs)
        except RecursionError:
            resolved = allow_deep_nesting(partial(resolve_blob_refs, entry, blobs))
        line = entry_line(resolved, self._blobs, pi_form=True)
        if self._carry is not None:
            self._carry.take(line)
        self._serialized[p] = match_prefix(line, 0, len(line) - 1) is not None
        return line

    def _agent_line(self, raw: bytes, p: int) -> bytes:
        """The line `raw` as oh-my-pi writes its entry (unchanged when it already is)."""
        entry = loads_object(raw)
        if not isinstance(entry, dict):
            return raw + b"\n"
        line = entry_line(entry, self._blobs)
        if line[:-1] == raw:
            return line
        if self._carry is not None:
            self._carry.take(line)
        self._serialized[p] = match_prefix(line, 0, len(line) - 1) is not None
        return line

    def _serialize(self, p: int) -> bytes:
        """The line of the entry at `p` (held in memory), written anew."""
        entry = cast("Entry", self._index._entries[p])
        pi_form = self._pi_form
        carry = self._carry
        # In pi's form refs are written as the images they name; in a copy, refs held
        # in memory (from `put_blob`, snapcompact frames, a blob missing when read)
        # name blobs of the source's store.
        blobs = carry.source if pi_form and carry is not None else self._blobs
        line = entry_line(entry, blobs, pi_form=pi_form)
        if carry is not None:
            carry.take(line)
        self._serialized[p] = match_prefix(line, 0, len(line) - 1) is not None
        return line

    def _changed(self, path: str, p: int) -> None:
        """The line of the entry at `p` no longer holds it: refuse, or (rescuing) leave
        it out with an error logged."""
        entry_id = self._index._ids[p]
        if not self._rescue:
            raise SessionWriteConflictError(
                path,
                f"{path}: the line of entry {entry_id} was changed on disk behind this session",
            )
        log.error(
            "%s: the line of entry %s was changed on disk; the copy leaves it out", path, entry_id
        )

    def _holds(self, data: bytes, lo: int, length: int, p: int) -> bool:
        """Whether `data[lo:lo+length]` still is the line of the entry at `p`."""
        index = self._index
        if lo + length > len(data) or (lo and data[lo - 1] != 0x0A):  # cut short, or joined
            return False
        if index._flags[p] & PREFIX_FORM:
            m = match_prefix(data, lo, lo + length)
            return m is not None and m.group(2) == str(index._ids[p]).encode("ascii")
        value = loads_object(data[lo : lo + length])
        return value is not None and value.get("id") == index._ids[p]

    def commit(self, pinned: PinnedFile) -> None:
        """These chunks were written whole as the index's file, readable by `pinned`."""
        if self._written is None:
            pinned.close()
            return
        self._index._rebase(pinned, *self._written)
