"""Every reply of several stores counted once and priced: as a list (`replies_of`), or
streamed (`stream_replies_of`) so a report sums them as they come and holds a batch of
sessions' records at a time, not the store's."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sessiontree.errors import SessionTreeError

if TYPE_CHECKING:
    from sessiontree.reports import Duplicates, Reply
    from sessiontree.store._store import Store

__all__ = ["PricedReplies", "StreamedReplies", "replies_of", "stream_replies_of"]

Progress = Callable[[int, int], None]


@dataclass(slots=True)
class PricedReplies:
    """Every assistant reply of the store counted once and priced (`Store.replies`)."""

    replies: list[Reply]
    duplicates: Duplicates
    """What was left out as a copy of a reply counted elsewhere."""
    notes: list[str] = field(default_factory=list)
    """Why sessions were read instead of taken from the content index."""
    indexed: bool = True
    """Whether the content index answered for every store (else files were read)."""


@dataclass(slots=True)
class StreamedReplies:
    """`PricedReplies` whose replies come one at a time, once: `duplicates` is complete
    when they are exhausted (notes and `indexed` are at once)."""

    replies: Iterator[Reply]
    duplicates: Duplicates
    notes: list[str] = field(default_factory=list)
    indexed: bool = True


def stream_replies_of(
    stores: Sequence[Store],
    *,
    use_index: bool = True,
    progress: Progress | None = None,
    skip: Callable[[Store, Exception], None] | None = None,
) -> StreamedReplies:
    """`replies_of`, streamed: the sessions are listed now, their records read and
    counted as the replies are taken."""
    from sessiontree.reports import Duplicates, counted_once, load_usage, priced

    sessions: builtins.list[Any] = []
    notes: builtins.list[str] = []
    indexed = True
    for store in stores:
        passed_over: builtins.list[tuple[str, str]] = []
        try:
            paths = store.files(nested=False, passed_over=passed_over)
            sources, view = store._view(paths)
            data = load_usage(sources, view, use_index=use_index, progress=progress, lazy=True)
        except (OSError, SessionTreeError) as exc:
            if skip is None:
                raise
            skip(store, exc)
            continue
        notes += [f"{path}: {what}; passed over" for path, what in passed_over]
        sessions += data.sessions
        notes += data.notes
        indexed = indexed and data.indexed
    duplicates = Duplicates()
    return StreamedReplies(priced(counted_once(sessions, duplicates)), duplicates, notes, indexed)


def replies_of(
    stores: Sequence[Store],
    *,
    use_index: bool = True,
    progress: Progress | None = None,
    skip: Callable[[Store, Exception], None] | None = None,
) -> PricedReplies:
    """Every assistant reply of several stores, counted once across them all (an import
    in one store of a session another store holds is not counted again) and priced:
    `Store.replies` of their union. A store that cannot be read raises, or with `skip`
    is handed to it and left out (`Stores` passes it over)."""
    streamed = stream_replies_of(stores, use_index=use_index, progress=progress, skip=skip)
    return PricedReplies(
        builtins.list(streamed.replies), streamed.duplicates, streamed.notes, streamed.indexed
    )
