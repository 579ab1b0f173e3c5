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

import operator
from collections.abc import Callable, Iterable
from itertools import compress, repeat
from typing import Any, Final, cast

from sessiontree.errors import EntryNotFoundError
from sessiontree.format import (
    SETTING_KINDS,
    ContextBuilder,
    Entry,
    SessionContext,
    SessionTreeNode,
    assistant_model,
    branch_as_pi,
    branch_with_labels,
    build_session_context,
    build_tree,
    entry_name,
    generate_entry_id,
    model_setting,
)
from sessiontree.layout import BlobCarry
from sessiontree.session._entry_records import CHANGED, SKIPPED, EntryRecords
from sessiontree.session._line_index import ASSISTANT, PREFIX_FORM, IndexedLines
from sessiontree.session._line_source import LineSource
from sessiontree.session._session_chunks import SessionChunks
from sessiontree.session._shape import TreeShape
from sessiontree.storage import BlobStoreLike

__all__ = [
    "EntryIndex",
    "is_assistant_message",
    "is_conversation_message",
]


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


class EntryIndex(EntryRecords):
    """The entries of one session and everything derived from them (see the module doc)."""

    __slots__ = (
        "_children",
        "_context",
        "_has_assistant",
        "_labels",
        "_name",
        "_ppos",
        "_shape",
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

    # ------------------------------------------------------------------ reading

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
                    if (parent is None or parent.__class__ is str) and entries[p] is not SKIPPED:
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
            present = bytearray(e is not SKIPPED for e in entries)
        else:
            present = bytearray(b"\x01") * len(entries)
        labels = {pos[t]: label for t, label in self._labels.items() if t in pos}
        return TreeShape(
            self, list(ids), list(self._kinds), tree_parents, present, dict(pos), labels, None
        )

    def path_at(self, position: int) -> list[int]:
        """Positions from the root to `position`, following parents (nothing read)."""
        if not 0 <= position < len(self._entries) or self._entries[position] is SKIPPED:
            return []
        return self._path(position)

    def on_path(self, entry_id: str) -> bool:
        """Whether `entry_id` is on the path from the root to the leaf (nothing read)."""
        leaf = self.leaf
        p = self._pos.get(leaf) if leaf is not None else None
        if p is None:
            return False
        ids = self._ids
        return any(ids[q] == entry_id for q in self._path(p))

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

    # ------------------------------------------------------------------ files

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
