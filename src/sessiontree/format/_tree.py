"""The session tree: nodes with resolved labels, built iteratively."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from sessiontree._util.gcpause import gc_paused
from sessiontree.format._entries import generate_entry_id, iso_now, parse_iso_ms

__all__ = ["SessionTreeNode", "branch_with_labels", "build_tree", "path_to_root"]


@dataclass(slots=True, eq=False)
class SessionTreeNode:
    """One entry in the tree with its children (oldest first) and resolved label."""

    entry: dict[str, Any]
    children: list[SessionTreeNode] = field(default_factory=list)
    label: str | None = None


def build_tree(
    entries: Sequence[dict[str, Any]],
    labels: Mapping[str, str],
    *,
    ids: Sequence[Any] | None = None,
    parents: Sequence[Any] | None = None,
    position: Mapping[str, int] | None = None,
) -> list[SessionTreeNode]:
    """Roots of the tree; orphans and self-parented entries become roots.

    Children are sorted by timestamp, stably (same-millisecond entries keep file
    order; an unparseable timestamp sorts last). Entries in a parent cycle are
    reachable from no root, as in the reference. Iterative: 100,000-deep works.

    An index that already holds each entry's `id` and `parentId` (`ids`, `parents`)
    and the position of the last entry with each string id (`position`) may pass
    them, which saves reading every entry.
    """
    with gc_paused():
        if (
            ids is not None
            and parents is not None
            and position is not None
            and len(position) == len(ids) == len(parents) == len(entries)
        ):
            # As many string ids as entries: every id is a string, none twice.
            return _build_tree_indexed(entries, ids, parents, position, labels)
        return _build_tree(entries, labels)


_STR: Final = frozenset({str})
_Odd = list[tuple[int, "SessionTreeNode", Any]]
"""The entries not linked by the chain pass: (position, node, parent id)."""


def _build_tree(
    entries: Sequence[dict[str, Any]], labels: Mapping[str, str]
) -> list[SessionTreeNode]:
    """One pass over the entries, linking each to the entry before it when that is
    its parent (what appends write: a session is mostly one long chain), then one
    id -> position map built by a builtin for the rest. Duplicated or non-string
    ids take `_build_tree_general` instead."""
    node_cls = SessionTreeNode
    new = object.__new__
    nodes: list[SessionTreeNode] = []
    add = nodes.append
    ids: list[Any] = []
    add_id = ids.append
    odd: _Odd = []
    add_odd = odd.append
    prev_id: Any = None
    prev_children: list[SessionTreeNode] = []
    for entry in entries:
        # The dataclass's __init__ is a Python call per node: the slots are set here.
        node = new(node_cls)
        node.entry = entry
        children: list[SessionTreeNode] = []
        node.children = children
        node.label = None
        entry_id = entry.get("id")
        parent_id = entry.get("parentId")
        if parent_id.__class__ is str and parent_id == prev_id:
            prev_children.append(node)  # right once the ids prove unique, below
        else:
            add_odd((len(nodes), node, parent_id))
        add(node)
        add_id(entry_id)
        prev_id, prev_children = entry_id, children
    try:
        position = dict(zip(ids, range(len(ids)), strict=True))
    except TypeError:  # an unhashable id
        return _build_tree_general(entries, labels)
    if len(position) != len(ids) or not _STR.issuperset(map(type, ids)):
        return _build_tree_general(entries, labels)
    return _link_the_rest(nodes, odd, position, labels)


def _build_tree_indexed(
    entries: Sequence[dict[str, Any]],
    ids: Sequence[Any],
    parents: Sequence[Any],
    position: Mapping[str, int],
    labels: Mapping[str, str],
) -> list[SessionTreeNode]:
    """`_build_tree` on ids known unique, from the index's lists: no entry is read."""
    node_cls = SessionTreeNode
    new = object.__new__
    nodes: list[SessionTreeNode] = []
    add = nodes.append
    odd: _Odd = []
    add_odd = odd.append
    prev_id: Any = None
    prev_children: list[SessionTreeNode] = []
    for entry, entry_id, parent_id in zip(entries, ids, parents, strict=True):
        node = new(node_cls)
        node.entry = entry
        children: list[SessionTreeNode] = []
        node.children = children
        node.label = None
        if parent_id.__class__ is str and parent_id == prev_id:
            prev_children.append(node)
        else:
            add_odd((len(nodes), node, parent_id))
        add(node)
        prev_id, prev_children = entry_id, children
    return _link_the_rest(nodes, odd, position, labels)


def _link_the_rest(
    nodes: list[SessionTreeNode],
    odd: _Odd,
    position: Mapping[str, int],
    labels: Mapping[str, str],
) -> list[SessionTreeNode]:
    """Labels, roots and the children off the chain, once the ids are known unique
    (so the entry before a node, named as its parent, is its parent)."""
    for target, label in labels.items():
        at = position.get(target)
        if at is not None:
            nodes[at].label = label
    roots: list[SessionTreeNode] = []
    odd_at: dict[int, int] = {}  # id(node) -> position, for the nodes off the chain
    multi: dict[int, SessionTreeNode] = {}  # position -> parent with more than one child
    for at, node, parent_id in odd:
        odd_at[id(node)] = at
        parent_at = position.get(parent_id) if parent_id.__class__ is str else None
        if parent_at is None or parent_at == at:  # orphan, root or self-parented
            roots.append(node)
            continue
        parent = nodes[parent_at]
        if parent.children:
            multi[parent_at] = parent
        parent.children.append(node)
    inf = float("inf")
    for parent_at, parent in multi.items():
        # File order, then timestamp, stably. A child off the chain knows its
        # position; a parent's one chain child is the entry right after it.
        chain_at = parent_at + 1

        def key(n: SessionTreeNode, chain_at: int = chain_at) -> tuple[float, int]:
            ms = parse_iso_ms(n.entry.get("timestamp"))
            return (inf if ms is None else ms, odd_at.get(id(n), chain_at))

        parent.children.sort(key=key)
    return roots


def _build_tree_general(
    entries: Sequence[dict[str, Any]], labels: Mapping[str, str]
) -> list[SessionTreeNode]:
    node_cls = SessionTreeNode
    nodes = [node_cls(e, [], None) for e in entries]
    # Only string ids index (a hostile file may carry lists or objects as ids).
    by_id = {i: n for n in nodes if (i := n.entry.get("id")).__class__ is str}
    for target, label in labels.items():
        node = by_id.get(target)
        if node is not None:
            node.label = label
    roots: list[SessionTreeNode] = []
    add_root = roots.append
    find = by_id.get
    multi: list[SessionTreeNode] = []  # parents with more than one child, to sort
    for node in nodes:
        parent_id = node.entry.get("parentId")
        # Ids are strings; anything else (hostile or broken files) cannot name a parent.
        parent = find(parent_id) if parent_id.__class__ is str else None
        if parent is None or parent is node or parent_id == node.entry.get("id"):
            add_root(node)
            continue
        children = parent.children
        children.append(node)
        if len(children) == 2:
            multi.append(parent)
    _sort_children(multi)
    return roots


def _sort_children(parents: Iterable[SessionTreeNode]) -> None:
    """Children by timestamp, stably; an unparseable timestamp sorts last."""
    inf = float("inf")

    def sort_key(n: SessionTreeNode) -> float:
        ms = parse_iso_ms(n.entry.get("timestamp"))
        return inf if ms is None else ms

    for parent in parents:
        parent.children.sort(key=sort_key)


def path_to_root(
    by_id: Mapping[Any, dict[str, Any]], leaf: dict[str, Any] | None
) -> list[dict[str, Any]]:
    """Entries from the root to `leaf`, following `parentId`; stops at a cycle."""
    path: list[dict[str, Any]] = []
    append = path.append
    get = by_id.get
    limit = len(by_id) + 1
    current = leaf
    while current is not None:
        append(current)
        parent_id = current.get("parentId")
        if not parent_id or parent_id.__class__ is not str:
            break
        current = get(parent_id)
        if len(path) > limit:
            # More steps than entries: a parent cycle. Redo the walk with a seen-set.
            return _path_to_root_checked(get, leaf)
    path.reverse()
    return path


def _path_to_root_checked(
    get: Callable[[Any], dict[str, Any] | None], leaf: dict[str, Any] | None
) -> list[dict[str, Any]]:
    path: list[dict[str, Any]] = []
    seen: set[int] = set()
    current = leaf
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        path.append(current)
        parent_id = current.get("parentId")
        current = get(parent_id) if parent_id and parent_id.__class__ is str else None
    path.reverse()
    return path


def branch_with_labels(
    path: Sequence[dict[str, Any]], labels: Mapping[str, str]
) -> list[dict[str, Any]]:
    """A root->leaf path as a branched session keeps it: label entries dropped, then
    one fresh label entry per label in effect on a kept entry, chained after the path.

    Entries of `path` are returned as they are (not copied); label entries are new.
    """
    kept = [e for e in path if e.get("type") != "label"]
    kept_ids = {e.get("id") for e in kept}
    used: set[str] = {i for i in kept_ids if isinstance(i, str)}
    out = list(kept)
    parent = kept[-1].get("id") if kept else None
    for target, label in labels.items():
        if target not in kept_ids:
            continue
        label_id = generate_entry_id(used)
        used.add(label_id)
        out.append(
            {
                "type": "label",
                "id": label_id,
                "parentId": parent,
                "timestamp": iso_now(),
                "targetId": target,
                "label": label,
            }
        )
        parent = label_id
    return out


def branch_as_pi(
    path: Sequence[dict[str, Any]],
    labels: Mapping[str, str],
    label_times: Mapping[str, Any],
) -> list[dict[str, Any]]:
    """A root->leaf path as pi (1.6) keeps it in a branched session: label entries
    dropped and every kept entry re-linked to the kept entry before it (the first
    becomes a root), so that no entry names a parent the new file lacks; a
    compaction whose `firstKeptEntryId` was a dropped label keeps from the entry that
    took the label's place. Then one label entry per label in effect on a kept entry,
    with the timestamp of the label entry that set it (`label_times`), chained after
    the path.

    Kept entries are shallow copies (key order kept); label entries are new.
    """
    out: list[dict[str, Any]] = []
    replacement: dict[Any, Any] = {}  # a dropped label's id -> the entry after it
    pending: list[Any] = []
    parent: Any = None
    for entry in path:
        entry_id = entry.get("id")
        if entry.get("type") == "label":
            pending.append(entry_id)
            continue
        for label_id in pending:
            replacement[label_id] = entry_id
        pending.clear()
        kept = {**entry, "parentId": parent}
        if entry.get("type") == "compaction" and "firstKeptEntryId" in entry:
            first = entry["firstKeptEntryId"]
            if first != entry_id:
                kept["firstKeptEntryId"] = replacement.get(first, first)
        out.append(kept)
        parent = entry_id
    kept_ids = {e.get("id") for e in out}
    used: set[str] = {i for i in kept_ids if isinstance(i, str)}
    for target, label in labels.items():
        if target not in kept_ids:
            continue
        label_id = generate_entry_id(used)
        used.add(label_id)
        label_entry: dict[str, Any] = {"type": "label", "id": label_id, "parentId": parent}
        timestamp = label_times.get(target)
        if timestamp is not None:
            label_entry["timestamp"] = timestamp
        label_entry["targetId"] = target
        label_entry["label"] = label
        out.append(label_entry)
        parent = label_id
    return out
