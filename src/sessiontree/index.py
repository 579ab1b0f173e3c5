"""`EntryIndex`: a session's entries in memory, indexed, with the leaf and the context.

It holds the entries in insertion order, the id map, the children (built on
first use: most sessions never ask), the labels in effect, the leaf pointer and
the context at the leaf, kept up to date as entries are added so an agent that
rebuilds its context every turn pays O(1) per new entry. It does no I/O and
knows nothing of files; an entry it holds is a plain dict.
"""

from __future__ import annotations

from collections.abc import Iterable

from .context import ContextBuilder, SessionContext, build_session_context
from .entries import Entry, generate_entry_id
from .errors import EntryNotFoundError
from .naming import entry_name
from .tree import SessionTreeNode, branch_with_labels, build_tree, path_to_root

__all__ = ["EntryIndex", "is_assistant_message"]


def is_assistant_message(entry: Entry) -> bool:
    """Whether the entry is a message from the assistant."""
    if entry.get("type") != "message":
        return False
    message = entry.get("message")
    return isinstance(message, dict) and message.get("role") == "assistant"


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


class EntryIndex:
    """The entries of one session and everything derived from them (see the module doc)."""

    __slots__ = (
        "_by_id",
        "_children",
        "_context",
        "_entries",
        "_has_assistant",
        "_labels",
        "_name",
        "leaf",
    )

    def __init__(self, entries: list[Entry] | None = None) -> None:
        self.leaf: str | None = None
        self.reset(entries if entries is not None else [])

    def reset(self, entries: list[Entry]) -> None:
        """Hold `entries` (taken, not copied); the leaf is the last one."""
        self._entries = entries
        by_id: dict[str, Entry] = {}
        labels: dict[str, str] = {}
        name: str | None = None
        for entry in entries:
            entry_id = entry.get("id")
            if entry_id.__class__ is str:
                by_id[entry_id] = entry
            kind = entry.get("type")
            if kind == "label":
                apply_label(entry, labels)
            elif kind == "session_info" or kind == "title_change":
                name = entry_name(entry)
        self._by_id, self._labels, self._name = by_id, labels, name
        self._children: dict[str | None, list[Entry]] | None = None
        self._has_assistant: bool | None = None  # computed on first use
        self._context: ContextBuilder | None = None
        last_id = entries[-1].get("id") if entries else None
        self.leaf = last_id if isinstance(last_id, str) else None

    def changed_in_place(self) -> None:
        """Entries were edited in place: derive everything again."""
        self.reset_keeping_leaf()

    def reset_keeping_leaf(self) -> None:
        leaf = self.leaf
        self.reset(self._entries)
        self.leaf = leaf

    # ------------------------------------------------------------------ adding

    def new_id(self) -> str:
        """A fresh entry id not used in this session."""
        return generate_entry_id(self._by_id)

    def add(self, entry: Entry) -> None:
        """Append an entry (its id new, its parent the leaf) and make it the leaf."""
        self._entries.append(entry)
        entry_id: str = entry["id"]
        self._by_id[entry_id] = entry
        if self._children is not None:
            self._children.setdefault(entry["parentId"], []).append(entry)
        kind = entry["type"]
        if kind == "label":
            apply_label(entry, self._labels)
        elif kind == "session_info" or kind == "title_change":
            self._name = entry_name(entry)
        context = self._context
        if context is not None:
            if context.leaf_id is not None and context.leaf_id == entry["parentId"]:
                context.add(entry)
            else:
                self._context = None
        self.leaf = entry_id
        if self._has_assistant is False and is_assistant_message(entry):
            self._has_assistant = True

    # ------------------------------------------------------------------ reading

    @property
    def entries(self) -> list[Entry]:
        """The entries themselves, insertion order (not a copy)."""
        return self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, entry_id: object) -> bool:
        return entry_id in self._by_id

    def get(self, entry_id: str) -> Entry | None:
        return self._by_id.get(entry_id)

    def require(self, entry_id: str) -> Entry:
        """The entry, or EntryNotFoundError."""
        entry = self._by_id.get(entry_id)
        if entry is None:
            raise EntryNotFoundError(entry_id)
        return entry

    def children(self, parent_id: str | None) -> list[Entry]:
        """Direct children of an entry (None: the roots), in insertion order."""
        children = self._children
        if children is None:
            children = {}
            for entry in self._entries:
                parent = entry.get("parentId")
                if parent is None or parent.__class__ is str:
                    children.setdefault(parent, []).append(entry)
            self._children = children
        return list(children.get(parent_id, ()))

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
            self._has_assistant = any(is_assistant_message(e) for e in self._entries)
        return self._has_assistant

    def branch(self, from_id: str | None) -> list[Entry]:
        """Entries from the root to `from_id` (default: the leaf); [] if unknown."""
        start_id = from_id if from_id is not None else self.leaf
        if start_id is None:
            return []
        return path_to_root(self._by_id, self._by_id.get(start_id))

    def branch_with_labels(self, leaf_id: str) -> list[Entry]:
        """The root -> `leaf_id` path without its label entries, then the labels in
        effect on it re-created (what a branched session keeps)."""
        path = self.branch(leaf_id)
        if not path:
            raise EntryNotFoundError(leaf_id)
        return branch_with_labels(path, self._labels)

    def tree(self) -> list[SessionTreeNode]:
        """Roots of the entry tree (orphans are roots), children oldest first."""
        return build_tree(self._entries, self._labels)

    def context(self) -> SessionContext:
        """The model context at the leaf, kept incrementally (see the module doc)."""
        leaf_id = self.leaf
        if leaf_id is None or leaf_id not in self._by_id:
            return build_session_context(self._entries, leaf_id, self._by_id)
        context = self._context
        if context is None or context.leaf_id != leaf_id:
            context = self._context = ContextBuilder.from_leaf(self._by_id, self._by_id[leaf_id])
        return context.snapshot()

    def of_type(self, *types: str) -> Iterable[Entry]:
        """The entries whose type is one of `types`, in order."""
        return (e for e in self._entries if e.get("type") in types)
