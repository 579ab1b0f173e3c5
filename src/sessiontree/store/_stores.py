"""`Stores`: several stores read as one value (the command line and the web app, when no
option names a store, read every store `find_stores` finds).

Each store is listed, searched and read for usage through its own storage and content
index; the rows are merged newest first, each naming its store by a key (its agent,
`@<machine>` for another machine's sessions shown here by a sync, `-2`, `-3`... when
several stores are of one agent). Usage and stats count each reply
once across them all (`replies_of`): an import in one store of a session another
holds is not counted again.

The first store is the one named (or the default one): its error is the caller's.
Another store that cannot be read is passed over, and `skipped` says which and why,
once per store however many times it failed. A search's own errors (a bad regular
expression) are the caller's whatever the store.
"""

from __future__ import annotations

import builtins
import heapq
import itertools
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from sessiontree._util.gcpause import gc_paused
from sessiontree.errors import SessionTreeError
from sessiontree.format import shown_title
from sessiontree.listing import ListingRows, RowHandle, SessionInfo
from sessiontree.store._replies import StreamedReplies, stream_replies_of
from sessiontree.store._scope import SearchScope
from sessiontree.store._store import (
    Moment,
    PricedReplies,
    Progress,
    Store,
    _ms,
    made_by,
    replies_of,
    report_of_replies,
)

if TYPE_CHECKING:
    from sessiontree.reports import Report, ReportKind, StoreStats
    from sessiontree.search import SearchHit

__all__ = [
    "ListedSession",
    "ListingPage",
    "SessionFilter",
    "Skipped",
    "StoreHit",
    "Stores",
    "StoresSearch",
    "StoresStats",
]

_T = TypeVar("_T")
_READ_ERRORS = (OSError, SessionTreeError)
"""What reading a store raises when the store, not the request, is at fault."""


@dataclass(frozen=True, slots=True)
class Skipped:
    """A store that could not be read, passed over."""

    store: str
    """Its key in `Stores`."""
    location: str
    reason: str


@dataclass(frozen=True, slots=True)
class ListedSession:
    """One session of a `Stores` listing, with the store it was listed from."""

    info: SessionInfo
    store: str
    """The key of its store in `Stores`."""
    agent: str
    """Its store's agent (pi, claude, codex, ...)."""
    size: int
    """The file's bytes (the listing's, else its storage's; 0 when it cannot be read)."""
    machine: str | None = None
    """The machine it was made on when another's (its store's `machine`), else None."""

    @property
    def made_by(self) -> str:
        """Its agent, and the machine when another: `claude`, `claude@laptop`."""
        return made_by(self.agent, self.machine)


@dataclass(frozen=True, slots=True)
class ListingPage:
    """The first sessions of a `Stores` listing, and what the whole of it says of the
    rest: what a page of `sessiontree list` shows."""

    total: int
    """How many sessions the whole listing has."""
    sessions: builtins.list[ListedSession]
    """Its first sessions, newest modified first (all of them with no limit)."""
    made_by: frozenset[str]
    """Who made its sessions (`ListedSession.made_by`)."""
    every_id: Callable[[], builtins.list[str]] = field(repr=False, compare=False)
    """The id of every session of the listing (in no particular order), worked out when
    asked for (a table's short ids need them, JSON does not)."""

    @classmethod
    def of(cls, listed: builtins.list[ListedSession], limit: int | None = None) -> ListingPage:
        """The page of the first `limit` (None: all) of a whole listing."""
        return cls(
            len(listed),
            listed[:limit] if limit is not None else listed,
            frozenset(one.made_by for one in listed),
            lambda: [one.info.id for one in listed],
        )


def _folded(text: str | None) -> str:
    """`text` with each run of whitespace one space, case folded: what a filter compares."""
    return " ".join((text or "").split()).casefold()


@dataclass(frozen=True, slots=True)
class SessionFilter:
    """Which sessions of a listing are wanted; None: any."""

    text: str | None = None
    """Contained in the shown title, the first message, the project dir or the id
    (case-insensitive, each run of whitespace as one space)."""
    since: int | None = None
    """Modified from this time (epoch ms)."""
    until: int | None = None
    """Modified up to this time (epoch ms)."""
    agent: str | None = None
    store: str | None = None
    """A store key."""

    def admits(self, listed: ListedSession) -> bool:
        if self.store is not None and listed.store != self.store:
            return False
        if self.agent is not None and listed.agent != self.agent:
            return False
        info = listed.info
        modified = int(info.modified.timestamp() * 1000)
        if self.since is not None and modified < self.since:
            return False
        if self.until is not None and modified > self.until:
            return False
        needle = _folded(self.text)
        if not needle:
            return True
        fields = (shown_title(info.title, info.first_message, info.id), info.first_message)
        return any(needle in _folded(f) for f in (*fields, info.id, info.cwd))

    def apply(self, listed: Iterable[ListedSession]) -> list[ListedSession]:
        if self == _ANY:  # the usual listing: nothing to look at per session
            return list(listed)
        return [one for one in listed if self.admits(one)]


_ANY = SessionFilter()


@dataclass(frozen=True, slots=True)
class StoreHit:
    """A search hit and the store it was found in."""

    store: str
    hit: SearchHit

    @property
    def role(self) -> str:
        return self.hit.role

    @property
    def timestamp(self) -> int | None:
        return self.hit.timestamp


@dataclass(slots=True)
class StoresSearch:
    """What `Stores.search` found: hits (titles first, then newest first)."""

    hits: list[StoreHit]
    mode: str
    """index | scan | mixed: how the sessions were searched."""
    notes: list[str]
    _sessions: list[ListedSession] | Callable[[], list[ListedSession]]

    @property
    def sessions(self) -> list[ListedSession]:
        """The sessions searched (as `Stores.list` lists them; built when first asked
        for: a search's JSON names none of them)."""
        if callable(self._sessions):
            self._sessions = self._sessions()
        return self._sessions


@dataclass(slots=True)
class StoresStats:
    """Each store's own figures (as `Store.stats` of it alone) and their total."""

    per_store: list[tuple[str, StoreStats]]
    """(store key, its figures), the stores that could be read."""
    total: StoreStats
    """Counts summed; usage counted once across the stores (`replies_of`)."""


def _size(info: SessionInfo, store: Store) -> int:
    if info.size >= 0:  # the listing's, when it knows it (no stat then)
        return info.size
    try:
        return store.storage.stat(info.path).size
    except (OSError, ValueError):
        return 0


def _sessions_of(store: Store) -> tuple[str, ...]:
    """What tells two stores that hold the same sessions: files (ours or another
    agent's) by their dir's real path, a database by its URL and root."""
    if store.is_files or store._foreign is not None:
        return ("files", os.path.realpath(store.agent_dir))
    if store._url is not None:
        return ("database", store._url, store.agent_dir)
    return ("storage", str(id(store.storage)), store.agent_dir)


def _listed(key: str, store: Store, info: SessionInfo) -> ListedSession:
    return ListedSession(info, key, store.agent, _size(info, store), store.machine)


def _newest_first(listings: Iterable[ListingRows]) -> Iterator[tuple[int, RowHandle]]:
    """(listing, row) of the rows of `listings` in `Stores.list`'s order: newest modified
    first, those modified at the same microsecond in the order they come (listing by
    listing, each's own order), as the stable sort of their concatenation has them;
    each listing's rows taken as they are asked for."""
    keyed = [_keyed(n, rows.newest_first()) for n, rows in enumerate(listings)]
    for _, n, i in heapq.merge(*keyed):
        yield n, i


def _keyed(n: int, rows: Iterator[tuple[int, RowHandle]]) -> Iterator[tuple[int, int, RowHandle]]:
    for modified, i in rows:
        yield -modified, n, i


class Stores(Mapping[str, Store]):
    """Several stores as one: each by its key (`stores["claude"]`), the first the one
    named (or the default one); a store given again (the same dir under another name)
    is left out."""

    def __init__(self, stores: Iterable[Store]) -> None:
        keyed: dict[str, Store] = {}
        seen: set[tuple[str, ...]] = set()
        for store in stores:
            same = _sessions_of(store)
            if same in seen:
                continue  # its sessions are read already: listed, found, counted once
            seen.add(same)
            base = made_by(store.agent, store.machine)  # another machine's: `claude@laptop`
            key, n = base, 1
            while key in keyed:
                n += 1
                key = f"{base}-{n}"
            keyed[key] = store
        if not keyed:
            raise ValueError("Stores needs a store")
        self._stores = keyed
        self._first = next(iter(keyed))
        self._skipped: dict[str, Skipped] = {}
        self._skipped_lock = threading.Lock()  # the web app's usage thread reads too

    def __getitem__(self, key: str) -> Store:
        return self._stores[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._stores)

    def __len__(self) -> int:
        return len(self._stores)

    def __repr__(self) -> str:
        return f"Stores({', '.join(self._stores)})"

    @property
    def first(self) -> Store:
        """The store named, or the default one: its errors are the caller's."""
        return self._stores[self._first]

    @property
    def skipped(self) -> builtins.list[Skipped]:
        """The stores passed over (each once), and why: the latest failure of each."""
        with self._skipped_lock:
            return builtins.list(self._skipped.values())

    @property
    def readable(self) -> builtins.list[Store]:
        """The stores not passed over (so far)."""
        with self._skipped_lock:
            return [store for key, store in self._stores.items() if key not in self._skipped]

    def _skip(self, key: str, exc: Exception) -> None:
        if key == self._first:
            raise exc
        location = self._stores[key].location
        with self._skipped_lock:
            self._skipped[key] = Skipped(key, location, str(exc) or type(exc).__name__)

    def _each(
        self, agent: str | None, store: str | None, read: Callable[[Store], _T]
    ) -> Iterator[tuple[str, Store, _T]]:
        """(key, store, `read` of it) of each store (`store`'s, those of `agent`; None:
        any); a store it fails on is passed over, one it reads is no longer."""
        for key, one in self._stores.items():
            if store not in (None, key) or agent not in (None, one.agent):
                continue
            try:
                got = read(one)
            except _READ_ERRORS as exc:
                self._skip(key, exc)
                continue
            with self._skipped_lock:
                self._skipped.pop(key, None)
            yield key, one, got

    def _key_of(self, store: Store) -> str:
        return next(key for key, one in self._stores.items() if one is store)

    # ------------------------------------------------------------------ reading

    def list(
        self,
        cwd: str | os.PathLike[str] | None = None,
        *,
        text: str | None = None,
        since: Moment | None = None,
        until: Moment | None = None,
        agent: str | None = None,
        store: str | None = None,
    ) -> builtins.list[ListedSession]:
        """The sessions of `cwd`'s project (None: of every project) in every store (or
        `store`'s, the stores of `agent`), newest modified first, those `text`,
        `since`, `until` admit (`SessionFilter`). A store listed again after it was
        passed over is no longer `skipped`."""
        # The cyclic collector paused, as in the listing itself: a row per session, all
        # surviving, would have it scan the listing again and again (measured: 100,000
        # sessions took 0.7 s here instead of 0.15 s).
        with gc_paused():
            return self._list(cwd, text, since, until, agent, store)

    def _list(
        self,
        cwd: str | os.PathLike[str] | None,
        text: str | None,
        since: Moment | None,
        until: Moment | None,
        agent: str | None,
        store: str | None,
    ) -> builtins.list[ListedSession]:
        where = SessionFilter(text, _ms(since, end=False), _ms(until, end=True), agent, store)
        found: builtins.list[ListedSession] = []
        for key, one, infos in self._each(agent, store, lambda one: one.list(cwd)):
            found += where.apply(
                ListedSession(i, key, one.agent, _size(i, one), one.machine) for i in infos
            )
        found.sort(key=lambda listed: listed.info.modified, reverse=True)
        return found

    def list_page(
        self,
        cwd: str | os.PathLike[str] | None = None,
        *,
        limit: int,
        text: str | None = None,
        since: Moment | None = None,
        until: Moment | None = None,
        agent: str | None = None,
        store: str | None = None,
    ) -> ListingPage:
        """The first `limit` sessions of `list` (the same arguments), its total, and
        every id in it: without a filter on the sessions (`text`, `since`, `until`),
        only the shown sessions' infos are built (each store's listing is in order
        already: they are merged as `list` sorts them)."""
        where = SessionFilter(text, _ms(since, end=False), _ms(until, end=True), agent, store)
        if _folded(where.text) or where.since is not None or where.until is not None:
            return ListingPage.of(
                self.list(cwd, text=text, since=since, until=until, agent=agent, store=store), limit
            )
        with gc_paused():
            return self._page(cwd, limit, agent, store)

    def _page(
        self, cwd: str | os.PathLike[str] | None, limit: int, agent: str | None, store: str | None
    ) -> ListingPage:
        listed = self._each(agent, store, lambda one: one._list_rows(cwd))
        parts = [(key, one, rows) for key, one, rows in listed if len(rows)]
        sessions = []
        for n, i in itertools.islice(_newest_first([rows for _, _, rows in parts]), limit):
            key, one, rows = parts[n]
            info = rows.info(i)
            sessions.append(ListedSession(info, key, one.agent, _size(info, one), one.machine))
        return ListingPage(
            sum(len(rows) for _, _, rows in parts),
            sessions,
            frozenset(made_by(one.agent, one.machine) for _, one, _ in parts),
            lambda: [sid for _, _, rows in parts for sid in rows.ids()],
        )

    def search(
        self,
        query: str,
        *,
        cwd: str | os.PathLike[str] | None = None,
        sessions: Iterable[ListedSession] | None = None,
        regex: bool = False,
        case_sensitive: bool = False,
        roles: Iterable[str] | None = None,
        since: Moment | None = None,
        until: Moment | None = None,
        limit: int | None = None,
        use_index: bool = True,
        progress: Progress | None = None,
    ) -> StoresSearch:
        """`Store.search` of each store over its sessions of `sessions` (None: of `cwd`'s
        project, None: every project), the hits merged: titles first, then newest first,
        at most `limit`. A store other than the first that fails to be read (OSError) is
        passed over, as in `list`."""
        from sessiontree.search import merge_store_hits

        scope: builtins.list[ListedSession] | Callable[[], builtins.list[ListedSession]]
        listings: dict[str, SearchScope]
        if sessions is not None:
            scope = builtins.list(sessions)
            infos: dict[str, builtins.list[SessionInfo]] = {}
            for listed in scope:
                infos.setdefault(listed.store, []).append(listed.info)
            listings = {key: SearchScope.of_infos(wanted) for key, wanted in infos.items()}
        else:
            scope, listings = self._scopes(cwd)
        groups: builtins.list[builtins.list[StoreHit]] = []
        modes: builtins.list[str] = []
        notes: builtins.list[str] = []
        role_list = builtins.list(roles) if roles is not None else None
        for key, wanted in listings.items():
            # Their listings, not their paths: the titles are searched as listed here.
            try:
                result = self._stores[key]._search(
                    query,
                    wanted,
                    regex=regex,
                    case_sensitive=case_sensitive,
                    roles=role_list,
                    since=since,
                    until=until,
                    limit=limit,
                    use_index=use_index,
                    progress=progress,
                )
            except OSError as exc:  # the store's fault; the query's are SessionTreeErrors
                self._skip(key, exc)
                continue
            groups.append([StoreHit(key, hit) for hit in result.hits])
            modes.append(result.mode)
            notes += result.notes
        hits, mode = merge_store_hits(groups, modes)
        return StoresSearch(hits[:limit] if limit is not None else hits, mode, notes, scope)

    def _scopes(
        self, cwd: str | os.PathLike[str] | None
    ) -> tuple[Callable[[], builtins.list[ListedSession]], dict[str, SearchScope]]:
        """`search`'s sessions of `list(cwd)` without building their infos: (the listing,
        built when asked for; each store's rows, the stores in the order their sessions
        first come in the listing)."""
        with gc_paused():
            parts = [(k, one, rows) for k, one, rows in self._each_rows(cwd) if len(rows)]
            ordered = [[h for _, h in rows.newest_first()] for _, _, rows in parts]
        # `list` sorts every store's sessions by `modified`, stably: a store's first
        # session there is its newest, the first store's on a tie.
        firsts = [(-next(rows.newest_first())[0], n) for n, (_, _, rows) in enumerate(parts)]
        scopes = {
            parts[n][0]: SearchScope.of_rows(parts[n][2], ordered[n]) for _, n in sorted(firsts)
        }

        def listed() -> builtins.list[ListedSession]:
            with gc_paused():
                merged = _newest_first([rows for _, _, rows in parts])
                return [_listed(parts[n][0], parts[n][1], parts[n][2].info(i)) for n, i in merged]

        return listed, scopes

    def _each_rows(
        self, cwd: str | os.PathLike[str] | None
    ) -> Iterator[tuple[str, Store, ListingRows]]:
        return self._each(None, None, lambda one: one._list_rows(cwd))

    def replies(self, *, use_index: bool = True, progress: Progress | None = None) -> PricedReplies:
        """Every assistant reply of the stores, counted once across them all, priced
        (`replies_of`); a store that cannot be read is passed over."""
        return replies_of(
            self.readable,
            use_index=use_index,
            progress=progress,
            skip=lambda store, exc: self._skip(self._key_of(store), exc),
        )

    def stream_replies(
        self, *, use_index: bool = True, progress: Progress | None = None
    ) -> StreamedReplies:
        """`replies`, one at a time (`stream_replies_of`): what a report sums as they
        come, holding a batch of sessions' records at a time."""
        return stream_replies_of(
            self.readable,
            use_index=use_index,
            progress=progress,
            skip=lambda store, exc: self._skip(self._key_of(store), exc),
        )

    def usage(
        self,
        period: ReportKind = "daily",
        *,
        since: Moment | None = None,
        until: Moment | None = None,
        projects: Iterable[str | os.PathLike[str]] | None = None,
        tz: str | None = None,
        use_index: bool = True,
        progress: Progress | None = None,
    ) -> Report:
        """`Store.usage` of the stores as one (each reply counted once across them)."""
        return report_of_replies(
            lambda: self.stream_replies(use_index=use_index, progress=progress),
            period,
            since=since,
            until=until,
            projects=projects,
            tz=tz,
        )

    def stats(
        self, cwd: str | os.PathLike[str] | None = None, *, progress: Progress | None = None
    ) -> StoresStats:
        """`Store.stats` of each store and their total: counts summed, usage counted
        once across the stores (as `usage` counts it)."""
        from sessiontree.reports import StoreStats, Totals

        per: builtins.list[tuple[str, StoreStats]] = []
        for key, store in self._stores.items():
            try:
                per.append((key, store.stats(cwd, progress=progress)))
            except _READ_ERRORS as exc:
                self._skip(key, exc)
        if len(per) == 1:
            return StoresStats(per, per[0][1])
        total = StoreStats()
        scope: set[str] = set()
        summed = ("sessions", "invalid", "bytes", "entries", "projects", "blobs", "blob_bytes")
        for key, stats in per:
            for name in summed:
                setattr(total, name, getattr(total, name) + getattr(stats, name))
            total.prices = total.prices or stats.prices
            total.passed_over += stats.passed_over
            scope.update(self._stores[key].files(cwd, nested=False))
        priced = replies_of([self._stores[key] for key, _ in per], progress=progress)
        from sessiontree.format import utc_day  # the statistics', not a listing's

        total.duplicates = priced.duplicates
        for reply in priced.replies:
            if reply.session.path not in scope:
                continue
            total.usage.add(reply)
            total.by_model.setdefault(reply.model, Totals()).add(reply)
            total.by_day.setdefault(utc_day(reply.record.timestamp), Totals()).add(reply)
        return StoresStats(per, total)
