"""`TreeShape`: a session's tree without its entries, for pages that show a little of
a big session (a viewer asks for the shape, then for the entries it shows).

The shape is drawn from what the entry index holds beside every entry (id, parent,
kind, position), so a session loaded index first reads no line for it; only the
entries asked for by position are read (`entries`), and the lines of the siblings
under a branch point, whose timestamps order them (not kept read: they may be most of
the session). Positions are the entries' places in the file and never move, so a
position stays good for the life of the manager (but for `create_branched_session` of
a session in memory, which replaces its entries).

It is the tree `get_tree` builds: orphans and entries that name themselves as parent
are roots, entries in a parent cycle are reachable from no root, children are in file
order and then by timestamp, stably (an unparseable one last), and a label belongs to
the last entry with its target id; an empty parentId names the entry with the empty
id, if any (as the reference's getTree). `path` follows parents as `get_branch` does
(which stops at an empty parentId).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Container, Sequence
from itertools import compress
from typing import Any, Protocol

from sessiontree.format import Entry, parse_iso_ms

__all__ = ["ShapeSource", "TreeShape"]


class ShapeSource(Protocol):
    """What a shape reads through (the entry index)."""

    def read_at(self, positions: Sequence[int]) -> list[Entry | None]: ...

    def timestamps_at(self, positions: Sequence[int]) -> list[Any]: ...

    def path_at(self, position: int) -> list[int]: ...


class TreeShape:
    """The tree of a session as positions (see the module doc).

    `ids`, `kinds` and `parents` hold every position in file order (`parents[p]` is
    the parent's position, -1 for a root); `present` says which positions hold an
    entry (a line found not to be one holds none and is in no list). `roots`,
    `children` and `labels` are by position; `leaf` is the leaf's position (as of the
    last `get_tree_shape`: the leaf moves without the tree changing).
    """

    __slots__ = (
        "_children",
        "_roots",
        "_source",
        "ids",
        "kinds",
        "labels",
        "leaf",
        "parents",
        "position",
        "present",
        "size",
    )

    def __init__(
        self,
        source: ShapeSource,
        ids: list[Any],
        kinds: list[Any],
        parents: list[int],
        present: bytearray,
        position: dict[str, int],
        labels: dict[int, str],
        leaf: int | None,
    ) -> None:
        self._source = source
        self.ids = ids
        self.kinds = kinds
        self.parents = parents
        self.present = present
        self.position = position
        """Entry id -> position of the last entry with that id."""
        self.labels = labels
        self.leaf = leaf
        self.size = present.count(1)
        """How many entries the session has."""
        self._children: dict[int, list[int]] | None = None
        self._roots: list[int] = []

    # ------------------------------------------------------------------ the tree

    def _link(self) -> dict[int, list[int]]:
        """The links off the chain: a session is mostly one long chain (each entry the
        child of the one before it), which `children` reads from `parents` directly;
        the rest (roots, branches, entries after a jump back) are kept here, and
        the children of every branch point ordered once."""
        links = self._children
        if links is None:
            present, parents = self.present, self.parents
            odd = [p for p, q in enumerate(parents) if q != p - 1 or not p]  # a fast pass
            roots: list[int] = []
            links = {}
            for p in odd:
                if not present[p]:
                    continue
                q = parents[p]
                if q < 0:
                    roots.append(p)
                    continue
                kids = links.get(q)
                if kids is None:
                    kids = links[q] = []
                    if q + 1 < len(parents) and parents[q + 1] == q:
                        kids.append(q + 1)  # its child on the chain
                kids.append(p)
            for kids in links.values():
                kids.sort()  # file order (a child may come before its chained sibling)
            self._order(links)
            self._children, self._roots = links, roots
        return links

    def _order(self, links: dict[int, list[int]]) -> None:
        """Siblings by timestamp, stably: their lines are read for it (not kept: the
        siblings may be most of a session)."""
        multi = [q for q, kids in links.items() if len(kids) > 1]
        wanted = [p for q in multi for p in links[q]]
        stamps: dict[int, float] = {}
        inf = float("inf")
        for p, stamp in zip(wanted, self._source.timestamps_at(wanted), strict=True):
            ms = parse_iso_ms(stamp)
            stamps[p] = inf if ms is None else ms
        for q in multi:
            links[q].sort(key=stamps.__getitem__)

    @property
    def roots(self) -> list[int]:
        """Positions of the roots, in file order."""
        self._link()
        return self._roots

    def children(self, p: int) -> Sequence[int]:
        """Positions of the children of `p`, oldest first."""
        kids = self._link().get(p)
        if kids is not None:
            return kids
        parents = self.parents
        return (p + 1,) if p + 1 < len(parents) and parents[p + 1] == p else ()

    def run(self, p: int, marks: Container[int]) -> tuple[int, int]:
        """Down the chain of single children from `p`'s only child: the first entry
        that has not exactly one child or is in `marks`, and how many were passed."""
        links, parents = self._link(), self.parents
        last = len(parents) - 1
        (q,) = self.children(p)
        passed = 0
        while q not in marks:
            kids = links.get(q)
            if kids is not None:
                if len(kids) != 1:
                    break
                q = kids[0]
            elif q < last and parents[q + 1] == q:
                q += 1
            else:
                break  # no child: a tip
            passed += 1
        return q, passed

    def tips(self) -> list[int]:
        """Positions of the entries without children, in file order."""
        links = self._link()
        present, parents = self.present, self.parents
        # Entries whose next one is no child of theirs (builtins over the whole list);
        # of those, the ones with no child off the chain either.
        chained = bytearray(map(operator.eq, parents[1:], range(len(parents) - 1)))
        chained.append(0)
        ends = compress(range(len(parents)), map(operator.not_, chained))
        return [p for p in ends if present[p] and p not in links]

    def path(self, p: int) -> list[int]:
        """Positions from the root to `p`, as `get_branch` follows parents."""
        return self._source.path_at(p)

    # ------------------------------------------------------------------ entries

    def entries(self, positions: Sequence[int]) -> list[Entry | None]:
        """The entries at `positions` (read if they were not: adjacent lines in one
        read); None where a line turned out not to be an entry."""
        return self._source.read_at(positions)

    def entry(self, p: int) -> Entry | None:
        return self._source.read_at((p,))[0]

    def of_kind(self, kind: str) -> list[int]:
        """Positions of the entries of one kind, in file order."""
        present = self.present
        return [p for p, k in enumerate(self.kinds) if k == kind and present[p]]

    def first(self, positions: Sequence[int], test: Callable[[Entry], bool]) -> Entry | None:
        """The first entry at `positions` that passes `test`, reading in small batches."""
        start, batch = 0, 8
        while start < len(positions):
            for entry in self.entries(positions[start : start + batch]):
                if entry is not None and test(entry):
                    return entry
            start, batch = start + batch, min(batch * 2, 256)
        return None
