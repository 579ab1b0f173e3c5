"""The session tree: nodes with resolved labels, built iteratively."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._gc import gc_paused
from .entries import generate_entry_id, iso_now, parse_iso_ms

__all__ = ["SessionTreeNode", "branch_with_labels", "build_tree", "path_to_root"]


@dataclass(slots=True, eq=False)
class SessionTreeNode:
    """One entry in the tree with its children (oldest first) and resolved label."""

    entry: dict[str, Any]
    children: list[SessionTreeNode] = field(default_factory=list)
    label: str | None = None


def build_tree(
    entries: Sequence[dict[str, Any]], labels: Mapping[str, str]
) -> list[SessionTreeNode]:
    """Roots of the tree; orphans and self-parented entries become roots.

    Children are sorted by timestamp, stably (same-millisecond entries keep file
    order; an unparseable timestamp sorts last). Entries in a parent cycle are
    reachable from no root, as in the reference. Iterative: 100,000-deep works.
    """
    with gc_paused():
        return _build_tree(entries, labels)


def _build_tree(
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
    inf = float("inf")

    def sort_key(n: SessionTreeNode) -> float:
        ms = parse_iso_ms(n.entry.get("timestamp"))
        return inf if ms is None else ms

    for parent in multi:
        parent.children.sort(key=sort_key)
    return roots


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
