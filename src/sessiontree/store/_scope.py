"""The sessions a search looks in: their paths, in the listing's order, and the titles
of those that have one (a matching title is a hit of role `title`).

A search of every session of a big store builds no `SessionInfo` of a session without
a title: its rows give the paths, and the titles are in the listing's kept rows (only
a titled session's info is built, for its id and time).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sessiontree.format import clean_title
from sessiontree.listing import ListingRows, RowHandle, SessionInfo
from sessiontree.listing._marks import Stat

if TYPE_CHECKING:
    from sessiontree.store._store import Store

__all__ = ["SearchScope", "TitleRow"]

_Titled = tuple[str, str, Any, datetime]
"""(path, session id, title as listed, modified) of a session with a title."""
TitleTest = Callable[[str], bool]
"""True of every title (as listed) a search can match (`search.title_test`)."""
TitleRow = tuple[str, str, str | None, int]
"""(path, session id, title, modified ms): what `search.title_hits` reads of a session."""


class SearchScope:
    """The paths a search reads (the listing's order) and, when asked, the title rows
    of those with a title (the same order); `stats`: the listing's stats of the files,
    when it took them (the index's refresh then stats none again)."""

    __slots__ = ("_titles", "paths", "stats")

    def __init__(
        self,
        paths: list[str],
        titles: Callable[[TitleTest | None], Iterator[_Titled]],
        stats: Iterable[Stat] | None = None,
    ) -> None:
        self.paths = paths
        self._titles = titles
        self.stats = stats

    def titles(self, may_match: TitleTest | None = None) -> Iterator[TitleRow]:
        """The title rows; `may_match` (`search.title_test`) passes over, before any
        of its work, a session whose title the search cannot match."""
        return (
            (path, sid, clean_title(title), int(modified.timestamp() * 1000))
            for path, sid, title, modified in self._titles(may_match)
        )

    @classmethod
    def of_infos(cls, infos: Sequence[SessionInfo]) -> SearchScope:
        return cls([info.path for info in infos], lambda test: _titled(infos, test))

    @classmethod
    def of_rows(cls, rows: ListingRows, handles: list[RowHandle]) -> SearchScope:
        """The rows `handles` (of `rows.newest_first`): a row without a title is
        passed over (`title_hits` would be), and no kept row's info is built."""
        stats = [s for d in rows.stats.values() for s in d] if rows.stats is not None else None
        return cls(rows.paths(handles), lambda test: rows.titled(handles, test), stats)

    @classmethod
    def of(cls, store: Store, sessions: Sequence[str] | Sequence[SessionInfo]) -> SearchScope:
        """Paths, or the listings of the sessions (whose titles are then searched as
        listed, without listing the store again); paths' titles from the store's listing."""
        infos = [s for s in sessions if isinstance(s, SessionInfo)]
        if len(infos) == len(sessions):
            return cls.of_infos(infos)
        paths = [s if isinstance(s, str) else s.path for s in sessions]

        def listed() -> list[SessionInfo]:
            wanted = set(paths)
            return [s for s in store.list(None) if s.path in wanted]

        return cls(paths, lambda test: _titled(listed(), test))


def _titled(infos: Iterable[SessionInfo], may_match: TitleTest | None) -> Iterator[_Titled]:
    return (
        (i.path, i.id, i.title, i.modified)
        for i in infos
        if i.title is not None and (may_match is None or may_match(i.title))
    )
