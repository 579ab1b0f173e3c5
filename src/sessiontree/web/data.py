"""Everything the web app asks of the store besides single sessions: the listing, search
and usage. One module, so that the backends can change here alone.

* The listing is the store's (`Store.list`: the persistent listing cache, so a warm
  store costs one `stat` per file) plus each file's size.
* Search is the store's (`Store.search`): the content index where it can answer, a scan
  where it cannot; the outcome says which and why. A Claude Code or Codex store goes
  through the content index of this agent's dir (`foreign.storage.index_view`).
* Usage (cost and tokens per day, model, project and session) is the usage library
  (`sessiontree.reports._usage`: each reply counted once, unrecorded costs estimated and
  marked), computed in a background thread so no page waits for it.

Several stores (`serve` with no store named: every store found) are read as one: each
listed, searched and read for usage through its own storage and index, the rows merged
newest first, each row naming its store by a key the server made (`store_keys`); usage
counts each reply once across them all, as `Store.replies_of` does.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sessiontree._util.foreground import Foreground, stepping_aside
from sessiontree.errors import SessionTreeError
from sessiontree.foreign.storage import index_view
from sessiontree.format import SHORT_TITLE_CHARS, shown_title, utc_day
from sessiontree.listing import SessionInfo
from sessiontree.reports import _usage as usage_report
from sessiontree.search import merge_store_hits
from sessiontree.storage import SessionStorage
from sessiontree.store import Store

__all__ = [
    "Data",
    "Hit",
    "SearchOutcome",
    "SessionRow",
    "Tally",
    "UsageSnapshot",
    "handle_of",
    "store_keys",
]

log = logging.getLogger("sessiontree")


def handle_of(kind: str, path: str) -> str:
    """A short name for a path that the server issues and resolves itself: requests
    name sessions and projects by handle, never by path."""
    digest = hashlib.sha256(kind.encode() + b"\0" + os.fsencode(path)).hexdigest()
    return digest[:20]


# ---------------------------------------------------------------------------- listing


@dataclass(frozen=True, slots=True)
class SessionRow:
    """One session of the listing."""

    handle: str
    path: str
    id: str
    cwd: str
    project: str
    """The directory holding the file (a project's session dir)."""
    title: str | None
    first_message: str
    message_count: int
    size: int
    created: datetime
    modified: datetime
    parent_session_path: str | None
    store: str = ""
    """The key of the session's store (`Data.stores`)."""

    @property
    def shown_title(self) -> str:
        """The title the session is shown by (`format.shown_title`), shortened."""
        return shown_title(self.title, self.first_message, self.id, SHORT_TITLE_CHARS)


def store_keys(stores: Sequence[Store]) -> dict[str, Store]:
    """Each store by a key for URLs and badges: its agent (`pi`, `claude`, ...), with
    `-2`, `-3`... when several stores are of one agent."""
    keyed: dict[str, Store] = {}
    for store in stores:
        key, n = store.agent, 1
        while key in keyed:
            n += 1
            key = f"{store.agent}-{n}"
        keyed[key] = store
    return keyed


def _size(info: SessionInfo, storage: SessionStorage) -> int:
    if info.size >= 0:  # the listing's, when it knows it (no stat then)
        return info.size
    try:
        return storage.stat(info.path).size
    except (OSError, ValueError):
        return 0


# ---------------------------------------------------------------------------- search


@dataclass(frozen=True, slots=True)
class Hit:
    path: str
    session_id: str
    entry_id: str | None
    role: str
    before: str
    match: str
    after: str
    timestamp: int | None
    store: str = ""
    """The key of the store searched."""


@dataclass(slots=True)
class SearchOutcome:
    hits: list[Hit]
    mode: str
    """index | scan | mixed: how the sessions were searched."""
    notes: list[str]
    more: bool
    """More hits exist than `hits` holds."""


def _hit(raw: Any, store: str) -> Hit:
    return Hit(
        raw.path,
        raw.session_id,
        raw.entry_id,
        raw.role,
        raw.before,
        raw.match,
        raw.after,
        getattr(raw, "timestamp", None),
        store,
    )


# ---------------------------------------------------------------------------- usage


Tally = usage_report.Totals
"""Summed assistant replies (the usage library's own totals)."""


@dataclass(slots=True)
class UsageSnapshot:
    """Usage over the sessions read so far."""

    by_day: dict[str, Tally] = field(default_factory=dict)
    """UTC days."""
    by_model: dict[str, Tally] = field(default_factory=dict)
    by_project: dict[str, Tally] = field(default_factory=dict)
    """Keyed by the project's session dir (`SessionRow.project`)."""
    by_session: dict[str, Tally] = field(default_factory=dict)
    """Keyed by handle (`SessionRow.handle`)."""
    by_store: dict[str, Tally] = field(default_factory=dict)
    """Keyed by store key (`SessionRow.store`)."""
    total: Tally = field(default_factory=Tally)
    by_day_model: dict[tuple[str, str], Tally] = field(default_factory=dict)
    """(UTC day, model): what a range of days sums per model."""
    by_day_project: dict[tuple[str, str], Tally] = field(default_factory=dict)
    by_day_store: dict[tuple[str, str], Tally] = field(default_factory=dict)
    sessions_read: int = 0
    sessions_total: int = 0
    source: str = ""
    notes: list[str] = field(default_factory=list)
    estimates: bool = False
    """Whether costs may include estimates (the usage library prices unrecorded costs)."""
    complete: bool = False
    taken: float = 0.0

    def add(
        self, day: str, model: str, project: str, row: SessionRow, reply: usage_report.Reply
    ) -> None:
        for table, key in (
            (self.by_day, day),
            (self.by_model, model),
            (self.by_project, project),
            (self.by_session, row.handle),
            (self.by_store, row.store),
        ):
            table.setdefault(key, Tally()).add(reply)
        self.by_day_model.setdefault((day, model), Tally()).add(reply)
        self.by_day_project.setdefault((day, project), Tally()).add(reply)
        self.by_day_store.setdefault((day, row.store), Tally()).add(reply)
        self.total.add(reply)

    def within(self, first: str | None) -> UsageSnapshot:
        """The usage of the days from `first` (YYYY-MM-DD, UTC) on; None: every day (the
        replies without a time too). Totals, models, projects and stores sum those days
        alone."""
        if first is None:
            return self
        out = dataclasses.replace(
            self,
            by_day={},
            by_model={},
            by_project={},
            by_session={},
            by_store={},
            total=Tally(),
        )
        for day, tally in self.by_day.items():
            if day != "unknown" and day >= first:
                out.by_day[day] = tally
                out.total.merge(tally)
        for pairs, target in (
            (self.by_day_model, out.by_model),
            (self.by_day_project, out.by_project),
            (self.by_day_store, out.by_store),
        ):
            for (day, key), tally in pairs.items():
                if day != "unknown" and day >= first:
                    target.setdefault(key, Tally()).merge(tally)
        return out


class _Usage:
    """Usage from the usage library (over each store's content index where it can be used)."""

    source = "the content index"

    def __init__(self, stores: dict[str, Store], use_index: bool) -> None:
        self.stores = stores
        self.use_index = use_index

    def compute(self, rows: Sequence[SessionRow], publish: Callable[[UsageSnapshot], None]) -> None:
        lib = usage_report
        by_store: dict[str, list[SessionRow]] = {}
        for row in rows:
            by_store.setdefault(row.store, []).append(row)
        sessions: list[usage_report.SessionUsage] = []
        notes: list[str] = []
        indexed = True
        row_of: dict[int, SessionRow] = {}
        for key, store_rows in by_store.items():
            store = self.stores[key]
            view = index_view(store.parts, [row.path for row in store_rows])
            data = lib.load_usage(view.sources, view.parts, use_index=self.use_index)
            paths = {row.path: row for row in store_rows}
            for session in data.sessions:
                listed = paths.get(session.path)
                if listed is not None:
                    row_of[id(session)] = listed
            sessions += data.sessions
            notes += data.notes
            indexed = indexed and data.indexed
        # Counted once across every store: an import in one of a session another holds
        # is not counted again (`Store.replies_of`).
        counted, _duplicates = lib.count_once(sessions)
        replies = lib.price(counted)
        snap = UsageSnapshot(
            sessions_total=len(rows),
            sessions_read=len(rows),
            source=self.source if indexed else "each session file (the index was not used)",
            notes=[
                *notes,
                "each reply counted once (forks and imports do not count copied replies again"
                + (", across the stores too)" if len(by_store) > 1 else ")"),
            ],
            estimates=True,
        )
        for reply in replies:
            owner = row_of.get(id(reply.session))
            if owner is None:
                continue
            day = utc_day(reply.record.timestamp)
            snap.add(day, reply.model, owner.project, owner, reply)
        for row in rows:  # sessions without a reply cost nothing (rather than unknown)
            snap.by_session.setdefault(row.handle, Tally())
        if snap.total.estimated_cost:
            snap.notes.append("costs marked ~ include estimates from a price table")
        snap.complete = True
        publish(snap)


class _UsageWorker:
    """Computes usage snapshots in one background thread, for the latest listing asked."""

    def __init__(self, backend: _Usage, foreground: Foreground) -> None:
        self.foreground = foreground
        """The requests a person waits for: the computation steps aside for them."""
        self.backend = backend
        self.cond = threading.Condition()
        self.snapshot: UsageSnapshot | None = None
        self.wanted: tuple[tuple[str, str, int, float], ...] | None = None
        self.rows: list[SessionRow] = []
        self.done_for: tuple[tuple[str, str, int, float], ...] | None = None
        self.error: str | None = None
        self.thread: threading.Thread | None = None
        self.stopped = False

    def request(self, rows: Sequence[SessionRow]) -> None:
        key = tuple((r.store, r.path, r.size, r.modified.timestamp()) for r in rows)
        with self.cond:
            if key == self.wanted:
                return
            self.wanted, self.rows = key, list(rows)
            if self.thread is None:
                self.thread = threading.Thread(
                    target=self._run, name="sessiontree-usage", daemon=True
                )
                self.thread.start()
            self.cond.notify_all()

    def _publish(self, snap: UsageSnapshot) -> None:
        snap.taken = time.time()
        with self.cond:
            self.snapshot = snap
            self.cond.notify_all()

    def _run(self) -> None:
        while True:
            with self.cond:
                while not self.stopped and self.wanted == self.done_for:
                    self.cond.wait()
                if self.stopped:
                    return
                key, rows = self.wanted, self.rows
            try:
                with stepping_aside(self.foreground):
                    self.backend.compute(rows, self._publish)
                self.error = None
            except Exception as exc:  # reported on the page; the next request retries
                log.warning("usage could not be computed: %s", exc)
                self.error = str(exc) or type(exc).__name__
            with self.cond:
                self.done_for = key
                self.cond.notify_all()

    def wait(self, timeout: float) -> UsageSnapshot | None:
        """The latest snapshot, waiting up to `timeout` s for one of the listing asked."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while self.done_for != self.wanted and not self.stopped:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.cond.wait(left)
            return self.snapshot

    def stop(self) -> None:
        with self.cond:
            self.stopped = True
            self.cond.notify_all()


# ---------------------------------------------------------------------------- facade


class Data:
    """The stores as the web app sees them, as one (thread-safe)."""

    def __init__(self, stores: Store | Sequence[Store], *, use_index: bool = True) -> None:
        listed = [stores] if isinstance(stores, Store) else list(stores)
        if not listed:
            raise ValueError("the web app needs a store")
        self.stores = store_keys(listed)
        """Each store by its key (the first: the store named, or the default one)."""
        self.store = listed[0]
        self.use_index = use_index
        self._lock = threading.Lock()
        self._rows: dict[str, SessionRow] = {}
        self._projects: dict[str, str] = {}
        self.skipped: dict[str, str] = {}
        """Stores (by key) the last listing could not read, and why."""
        self.foreground = Foreground()
        """Requests a person waits for (session pages): background passes step aside."""
        self._usage = _UsageWorker(_Usage(self.stores, use_index), self.foreground)

    @property
    def several(self) -> bool:
        """Whether more than one store is served (rows then show theirs)."""
        return len(self.stores) > 1

    def sessions(self) -> list[SessionRow]:
        """Every session of the stores, newest first (and the handles that name them).

        The first store's error is raised; another store that cannot be listed is
        passed over (`skipped` says why)."""
        with self._lock:
            rows: list[SessionRow] = []
            handles: set[str] = set()
            skipped: dict[str, str] = {}
            for number, (key, store) in enumerate(self.stores.items()):
                try:
                    infos = store.list()
                except (OSError, SessionTreeError) as exc:
                    if number == 0:
                        raise
                    skipped[key] = str(exc) or type(exc).__name__
                    if self.skipped.get(key) != skipped[key]:  # said once, not per page
                        log.warning("%s: skipped: %s", store.location, exc)
                    continue
                storage = store.storage
                for info in infos:
                    handle = handle_of("s", info.path)
                    if handle in handles:  # the same path in two stores (never one file)
                        handle = handle_of("s", key + "\0" + info.path)
                    handles.add(handle)
                    rows.append(
                        SessionRow(
                            handle,
                            info.path,
                            info.id,
                            info.cwd,
                            os.path.dirname(info.path),
                            info.title,
                            info.first_message,
                            info.message_count,
                            _size(info, storage),
                            info.created,
                            info.modified,
                            info.parent_session_path,
                            key,
                        )
                    )
            if self.several:
                rows.sort(key=lambda row: row.modified, reverse=True)
            self._rows = {row.handle: row for row in rows}
            self._projects = {handle_of("p", row.project): row.project for row in rows}
            self.skipped = skipped
        self._usage.request(rows)
        return rows

    def rows(self) -> list[SessionRow]:
        """The sessions of the latest listing (without listing again)."""
        return list(self._rows.values())

    def session(self, handle: str) -> SessionRow | None:
        """The session a handle names (listing again once when it is not known yet)."""
        row = self._rows.get(handle)
        if row is None:
            self.sessions()
            row = self._rows.get(handle)
        return row

    def store_of(self, row: SessionRow) -> Store:
        """The store a row was listed from (a row made elsewhere: the first store)."""
        return self.stores.get(row.store, self.store)

    def project(self, handle: str) -> str | None:
        """The session dir a project handle names."""
        directory = self._projects.get(handle)
        if directory is None:
            self.sessions()
            directory = self._projects.get(handle)
        return directory

    def search(
        self,
        query: str,
        rows: Iterable[SessionRow],
        limit: int = 200,
        *,
        regex: bool = False,
        roles: list[str] | None = None,
        since: int | None = None,
        until: int | None = None,
    ) -> SearchOutcome:
        """Entries (and titles) of the sessions of `rows` whose text holds `query`
        (case-insensitive; with `regex`, matches it), up to `limit` hits; `roles`,
        `since`/`until` (epoch ms) as the CLI's. Each store is searched through its own
        index; the hits of several are merged, titles first, then newest first."""
        by_store: dict[str, list[str]] = {}
        for row in rows:
            by_store.setdefault(row.store, []).append(row.path)
        groups: list[list[Hit]] = []
        notes: list[str] = []
        modes: list[str] = []
        for key, paths in by_store.items():
            result = self.stores[key].search(
                query,
                sessions=paths,
                limit=limit + 1,
                use_index=self.use_index,
                regex=regex,
                roles=roles,
                since=since,
                until=until,
            )
            groups.append([_hit(h, key) for h in result.hits])
            notes += result.notes
            modes.append(str(result.mode))
        hits, mode = merge_store_hits(groups, modes)
        return SearchOutcome(hits[:limit], mode, notes, len(hits) > limit)

    def usage(self, wait: float = 0.0) -> tuple[UsageSnapshot | None, str | None]:
        """The latest usage snapshot (None before the first one) and the last error."""
        if self._usage.wanted is None:
            self.sessions()
        return self._usage.wait(wait), self._usage.error

    def close(self) -> None:
        self._usage.stop()
