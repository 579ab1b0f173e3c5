"""Usage reports: tokens and cost by day, week, month, session, project and 5-hour block.

One library for `sessiontree usage`, `sessiontree stats` and the web viewer:

1. `load_usage(sources)` gets every assistant message's usage (`UsageRecord`)
   per session file, from the content index (`sessiontree.search`, refreshed
   first: only what was appended since is read) with the import markers from the
   listing cache (`listing.import_records`); for a PostgreSQL store from its own
   index in the database (markers included); for other stores by reading the files.
2. `count_once(sessions)` applies the de-duplication rules, so that each reply
   is counted once however many files repeat it:

   * **R1 duplicated lines**: within a file an entry id counts once (the first
     line holding it); branches share their common prefix physically, so
     every branch's replies count and the prefix counts once.
   * **R2 split replies**: within a file, assistant messages that carry the same
     `responseId` (another agent's reply written as several lines) are one
     reply: the one with the most tokens counts (the first of equals).
   * **R3 forks**: a session whose header names a parent (`parentSession`, a
     path or a session id) repeats the parent's entries. Parents are followed
     up to the first session without a visible parent; that one, or the id of
     the parent it names when that file is gone, is the line of descent. A
     reply whose entry id and time an earlier session of the same line (a
     parent before its forks) already holds is a copy and not counted again.
   * **R4 imports**: a session holding a `foreign_session_import` marker
     (`custom` entry) copied another agent's session `sourceId`. Its copied
     replies are those before the marker, or for markers of version 2+ those
     whose id the marker lists in `sourceExtraEntryIds` or (Codex) starts
     with `codex-`. When the source itself is visible (a session whose id is
     `sourceId`), it counts and every import's copied replies do not; else the
     import with the most copied replies counts them (the oldest of equals).
     Replies added after the import always count.
   * **R5 copies of a session**: one session read from several files (another
     machine's copy shown here by a sync beside this machine's own, the same
     transcript in two stores) counts each reply once: a reply whose entry id and
     time an earlier file of the same session id already holds is not counted again
     (this machine's stores come first, so their file counts).

3. `price(replies)` resolves each kept reply's cost with `sessiontree.reports._pricing`:
   a recorded cost stays; a reply with tokens but no recorded cost (absent, or
   0 for a model the table prices) gets the table's estimate, marked so.
4. `report(...)` groups by period, session or project (optionally per model)
   within `since`/`until` in a time zone; `blocks(...)` cuts 5-hour blocks.

**Blocks.** Replies in time order; a block starts at its first reply's time
rounded down to the full hour (UTC) and lasts 5 hours. A reply at or after the
block's end starts a new block (so does one 5 hours or more after the previous
reply, which is past the end too).
The time between one block's end and the next one's start is a gap. A block is
active while now is before its end. Its burn rate is its tokens per minute and
cost per hour between its first and last reply; the projection extends that
rate to the block's end.
"""

from __future__ import annotations

import os
import sqlite3
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta, tzinfo
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from sessiontree._util.fs import not_regular
from sessiontree.format import (
    ImportMarker,
    UsageRecord,
    UsageTotals,
    file_session_id,
    parse_time,
    time_zone,
)
from sessiontree.layout import StoreParts
from sessiontree.listing import import_markers, import_records
from sessiontree.reports._pricing import PriceTable, price_table
from sessiontree.search import ContentIndex, IndexedFile, SessionSource, read_source
from sessiontree.storage import HostFilesystem, SessionStorage

if TYPE_CHECKING:
    from sessiontree.search import PostgresIndex

__all__ = [
    "BLOCK_HOURS",
    "Block",
    "Reply",
    "Report",
    "ReportKind",
    "SessionUsage",
    "Totals",
    "UsageData",
    "blocks",
    "count_once",
    "counted_once",
    "load_usage",
    "parse_time",
    "price",
    "priced",
    "report",
    "time_zone",
]

BLOCK_HOURS = 5
_HOUR_MS = 3_600_000
_BLOCK_MS = BLOCK_HOURS * _HOUR_MS

ReportKind = Literal["daily", "weekly", "monthly", "session", "project"]


# ---------------------------------------------------------------------------- loading


@dataclass(slots=True)
class SessionUsage:
    """One session file's usage records, as read."""

    file: IndexedFile
    records: list[UsageRecord]
    """Empty while `rows` holds them (`load_usage(..., lazy=True)`): `records_of` reads them."""
    imports: list[ImportMarker]
    rows: IndexRows | None = None

    @property
    def path(self) -> str:
        return self.file.path

    @property
    def project(self) -> str:
        """The session's cwd (its project), else its directory."""
        return self.file.cwd or os.path.dirname(self.file.path)


@dataclass(slots=True)
class UsageData:
    """Every session's usage, and how it was obtained."""

    sessions: list[SessionUsage]
    """Every readable file (sessions and not: `file.valid` tells)."""
    notes: list[str] = field(default_factory=list)
    indexed: bool = False


class IndexRows:
    """A content index's usage rows, read a batch of sessions at a time once the index
    answered (`load_usage(..., lazy=True)`), so a report holds a batch's records, not the
    store's. A session the index no longer answers for is read from its file."""

    def __init__(self, parts: StoreParts) -> None:
        self._agent_dir = parts.agent_dir
        self._storage = parts.storage
        self._index: ContentIndex | None = None
        self._broken = False

    def records(self, sessions: Sequence[SessionUsage]) -> dict[int, list[UsageRecord]]:
        """Each session's records by its file id."""
        out: dict[int, list[UsageRecord]] = {}
        if not self._broken:
            try:
                if self._index is None:
                    self._index = ContentIndex.open(self._agent_dir, create=False)
                if self._index is not None:
                    out = self._index.usage_records_of({s.file.id: s.path for s in sessions})
            except sqlite3.Error:
                self.close()
            self._broken = self._index is None
        for session in sessions:
            if session.file.id not in out:  # the index lost it since it was listed
                read = _read_all([SessionSource(session.path)], self._storage)
                out[session.file.id] = read[0].records if read else []
        return out

    def close(self) -> None:
        if self._index is not None:
            self._index.close()
            self._index = None


def load_usage(
    sources: Iterable[str | SessionSource],
    parts: StoreParts,
    *,
    use_index: bool = True,
    progress: Callable[[int, int], None] | None = None,
    lazy: bool = False,
) -> UsageData:
    """Usage records of `sources` (from the content index when the store is the
    agent dir's files; files the index cannot cover are read directly). `lazy`: the
    index's sessions are left for `counted_once` to read a batch at a time."""
    srcs = [s if isinstance(s, SessionSource) else SessionSource(s) for s in sources]
    storage = parts.storage
    notes: list[str] = []
    index = None
    ours = any(s.load is None for s in srcs)  # another agent's are not indexed in a database
    database = None
    if use_index and ours and "sessiontree.storage.postgres" in sys.modules:
        # Only a store in PostgreSQL has an index there, and its package is loaded once
        # such a store is opened: a file store's report loads neither that index nor
        # the search modules it uses.
        from sessiontree.search import postgres_index

        database = postgres_index(storage)
    if database is not None:
        return _from_database(database, srcs, notes, progress)
    if use_index and isinstance(storage, HostFilesystem):
        index = ContentIndex.open(parts.agent_dir)
        if index is None:
            notes.append(
                "every session was read in full (no content index here: it cannot be "
                "opened or created), which gives the same answers, more slowly"
            )
    if index is not None:
        answered = index.answer(
            lambda index: _from_index(index, srcs, parts, notes, progress, lazy)
        )
        if answered is not None:
            return answered
        notes.append("the content index could not be read: every session was read")
    return UsageData(_read_all(srcs, storage, notes), notes, False)


def _from_index(
    index: ContentIndex,
    sources: list[SessionSource],
    parts: StoreParts,
    notes: list[str],
    progress: Callable[[int, int], None] | None,
    lazy: bool = False,
) -> UsageData:
    storage = parts.storage
    # The import records live in the listing cache (`listing.import_records`), one place
    # for them; the sessions of other formats (loaded) hold none. Read before the
    # refresh, whose names the index holds after it: the two passes' peaks do not add up.
    found = import_records([s.path for s in sources if s.load is None], parts, cache=True)
    # Reports cover the whole store: files deleted since are forgotten here.
    refreshed = index.refresh(sources, storage=storage, progress=progress, prune=True)
    stale = set(refreshed.stale)
    wanted = {s.path for s in sources if s.path not in stale}
    files = index.files(wanted)
    rows = IndexRows(parts) if lazy else None
    records = index.usage_records([f.id for f in files]) if rows is None else {}
    sessions = [
        SessionUsage(f, records.get(f.id, []), import_markers(found.get(f.path, ())), rows)
        for f in files
    ]
    held = {f.path for f in files}
    rest = [s for s in sources if s.path not in held]
    if refreshed.stale:
        notes.append(
            f"{len(refreshed.stale)} file(s) the index could not bring up to date were read"
        )
    sessions += _read_all(rest, storage, notes)
    return UsageData(sessions, notes, True)


def _from_database(
    index: PostgresIndex,
    sources: list[SessionSource],
    notes: list[str],
    progress: Callable[[int, int], None] | None,
) -> UsageData:
    """`_from_index` for a PostgreSQL store: its own index in the database (the import
    markers too), the files it does not hold read."""
    try:
        refreshed, covered, _ = index.refresh(sources, progress)
    except OSError as exc:  # no privilege to write it, a newer sessiontree's tables
        notes.append(f"the database's search index cannot be used ({exc}): every session was read")
        return UsageData(_read_all(sources, index.storage, notes), notes, False)
    files, records, markers = index.usage(covered)
    sessions = [SessionUsage(f, records.get(f.id, []), markers.get(f.id, [])) for f in files]
    held = {f.path for f in files}
    if refreshed.stale:
        notes.append(
            f"{len(refreshed.stale)} file(s) the index could not bring up to date were read"
        )
    sessions += _read_all([s for s in sources if s.path not in held], index.storage, notes)
    return UsageData(sessions, notes, True)


def _read_all(
    sources: Sequence[SessionSource], storage: SessionStorage, notes: list[str] | None = None
) -> list[SessionUsage]:
    """The usage of each source read now; one that cannot be read is no session here,
    and a FIFO (device) put where a listed session was is named in `notes`."""
    out = []
    for source in sources:
        try:
            info, records, markers = read_source(source, storage)
        except Exception as exc:  # unreadable (or a loader that failed): not a session here
            what = not_regular(exc)
            if what is not None and notes is not None:
                notes.append(f"{source.path}: {what}; passed over")
            continue
        out.append(SessionUsage(info, records, markers))
    return out


# ---------------------------------------------------------------------------- counting once


class Reply(NamedTuple):
    """A reply counted once, with its cost resolved."""

    session: SessionUsage
    record: UsageRecord
    cost: float
    estimated: bool
    """The cost comes from the price table (the file records none)."""
    unpriced: bool
    """Tokens but no cost recorded, and a model the table does not know."""

    @property
    def model(self) -> str:
        return f"{self.record.provider}/{self.record.model}"


@dataclass(slots=True)
class Duplicates:
    """How many records each rule left out."""

    repeated_lines: int = 0
    split_replies: int = 0
    fork_copies: int = 0
    import_copies: int = 0
    session_copies: int = 0

    def to_json(self) -> dict[str, int]:
        return {
            "repeatedLines": self.repeated_lines,
            "splitReplies": self.split_replies,
            "forkCopies": self.fork_copies,
            "importCopies": self.import_copies,
            "sessionCopies": self.session_copies,
        }


def count_once(
    sessions: Sequence[SessionUsage],
) -> tuple[list[tuple[SessionUsage, UsageRecord]], Duplicates]:
    """The records to count (rules R1-R5 of the module docstring), and what was left out."""
    dups = Duplicates()
    return list(counted_once(sessions, dups)), dups


_BATCH = 2000
"""Sessions whose records `counted_once` reads at a time."""


def counted_once(
    sessions: Sequence[SessionUsage], dups: Duplicates
) -> Iterator[tuple[SessionUsage, UsageRecord]]:
    """`count_once`, a session at a time (`dups` complete once it is exhausted): the
    records of sessions loaded lazily are read a batch at a time and not kept."""
    valid = _one_per_file([s for s in sessions if s.file.valid])
    try:
        # R4 needs the records of the importing sessions (few) before the rest is counted.
        importing = [i for i, s in enumerate(valid) if s.imports]
        kept = {i: _within_file(records, dups) for i, records in _records_of(valid, importing)}
        _imports(valid, kept, dups)
        seen_by_root: dict[tuple[str, object], set[tuple[str, int | None]]] = {}
        order, roots = _ancestors_first(valid)
        members: dict[tuple[str, object], int] = {}
        for root in roots.values():
            members[root] = members.get(root, 0) + 1
        copies = _SessionCopies(valid, dups)
        for index, records in _records_of(valid, order, kept):
            session = valid[index]
            records = kept.pop(index) if index in kept else _within_file(records, dups)
            root = roots[index]
            if members[root] == 1:  # nobody else in this line of descent: nothing to copy
                yield from copies.kept(session, records)
                continue
            seen = seen_by_root.setdefault(root, set())
            for record in records:
                if record.entry_id is not None:
                    key = (record.entry_id, record.timestamp)
                    if key in seen:
                        dups.fork_copies += 1
                        continue
                    seen.add(key)
                yield from copies.kept(session, (record,))
    finally:
        for rows in {id(s.rows): s.rows for s in valid if s.rows is not None}.values():
            rows.close()


def _records_of(
    sessions: list[SessionUsage], indexes: list[int], known: dict[int, Any] | None = None
) -> Iterator[tuple[int, list[UsageRecord]]]:
    """Each of `indexes` with its session's records, in that order; those lazily loaded
    read a batch at a time (none for those in `known`: their records are at hand)."""
    for start in range(0, len(indexes), _BATCH):
        batch = indexes[start : start + _BATCH]
        lazy: dict[int, tuple[IndexRows, list[SessionUsage]]] = {}
        for i in batch:
            rows = sessions[i].rows
            if rows is not None and (known is None or i not in known):
                lazy.setdefault(id(rows), (rows, []))[1].append(sessions[i])
        read: dict[tuple[int, int], list[UsageRecord]] = {}
        for key, (rows, wanted) in lazy.items():
            for file_id, records in rows.records(wanted).items():
                read[(key, file_id)] = records
        for i in batch:
            session = sessions[i]
            if session.rows is None or (known is not None and i in known):
                yield i, session.records
            else:
                yield i, read[(id(session.rows), session.file.id)]


class _SessionCopies:
    """R5: a reply of a session read from several files counted from the first only."""

    def __init__(self, sessions: list[SessionUsage], dups: Duplicates) -> None:
        files: dict[str, int] = {}
        for session in sessions:
            if session.file.session_id is not None:
                files[session.file.session_id] = files.get(session.file.session_id, 0) + 1
        self._several = {sid for sid, n in files.items() if n > 1}
        self._first: dict[tuple[str, str, int | None], str] = {}
        self._dups = dups

    def kept(
        self, session: SessionUsage, records: Iterable[UsageRecord]
    ) -> Iterator[tuple[SessionUsage, UsageRecord]]:
        sid = session.file.session_id
        if sid is None or sid not in self._several:  # the usual stores: one file a session
            for record in records:
                yield session, record
            return
        for record in records:
            if record.entry_id is not None:
                key = (sid, record.entry_id, record.timestamp)
                holder = self._first.setdefault(key, session.path)
                if holder != session.path:
                    self._dups.session_copies += 1
                    continue
            yield session, record


def _one_per_file(sessions: list[SessionUsage]) -> list[SessionUsage]:
    """Each file of this host once: a session read under a second name (a symlink in a
    store to a file of it, or of another store) is the same replies. A path that is no
    file here (a database's) is kept as it is."""
    seen: set[tuple[int, int]] = set()
    kept = []
    for session in sessions:
        try:
            st = os.stat(session.path)
        except (OSError, ValueError):
            kept.append(session)
            continue
        if (st.st_dev, st.st_ino) in seen:
            continue
        seen.add((st.st_dev, st.st_ino))
        kept.append(session)
    return kept


def _within_file(records: list[UsageRecord], dups: Duplicates) -> list[UsageRecord]:
    """R1 (an entry id once) and R2 (a response id once, the fullest)."""
    distinct = {r.entry_id for r in records}
    if len(distinct) == len(records) and all(r.response_id is None for r in records):
        return records  # the usual file: nothing repeated
    ids: set[str] = set()
    first: list[UsageRecord] = []
    for record in records:
        if record.entry_id is not None:
            if record.entry_id in ids:
                dups.repeated_lines += 1
                continue
            ids.add(record.entry_id)
        first.append(record)
    best: dict[str, int] = {}
    for position, record in enumerate(first):
        if record.response_id is None:
            continue
        at = best.get(record.response_id)
        if at is None or record.tokens > first[at].tokens:
            best[record.response_id] = position
    out = []
    for position, record in enumerate(first):
        if record.response_id is not None and best[record.response_id] != position:
            dups.split_replies += 1
            continue
        out.append(record)
    return out


def _copied(session: SessionUsage, marker: ImportMarker, records: list[UsageRecord]) -> set[int]:
    """Positions in `records` of the replies the import copied from its source."""
    if marker.version >= 2:
        extra = set(marker.extra_ids)
        return {
            i
            for i, r in enumerate(records)
            if r.entry_id is not None
            and (
                r.entry_id in extra
                or (marker.source == "codex" and r.entry_id.startswith("codex-"))
            )
        }
    return {i for i, r in enumerate(records) if r.line < marker.line}


def _imports(
    sessions: list[SessionUsage], kept: dict[int, list[UsageRecord]], dups: Duplicates
) -> None:
    """R4: drop copied replies of every import but the one that counts them."""
    holders: dict[str, list[tuple[int, set[int]]]] = {}
    for index, session in enumerate(sessions):
        last: dict[str, ImportMarker] = {}
        for marker in session.imports:
            last[marker.source_id] = marker  # the latest marker of a source decides
        for source_id, marker in last.items():
            holders.setdefault(source_id, []).append((index, _copied(session, marker, kept[index])))
    if not holders:
        return
    by_id: dict[str, list[int]] = {}
    for index, session in enumerate(sessions):
        if session.file.session_id is not None:
            by_id.setdefault(session.file.session_id, []).append(index)
    for source_id, imports in holders.items():
        importing = {index for index, _ in imports}
        source_visible = any(i not in importing for i in by_id.get(source_id, []))
        owner = None
        if not source_visible:
            owner = max(
                imports,
                key=lambda item: (
                    len(item[1]),
                    -(sessions[item[0]].file.created or 0),
                    sessions[item[0]].path,
                ),
            )[0]
        for index, copied in imports:
            if index == owner or not copied:
                continue
            dups.import_copies += len(copied)
            kept[index] = [r for i, r in enumerate(kept[index]) if i not in copied]


def _parents(sessions: list[SessionUsage]) -> list[int | None]:
    """Each session's visible parent (index), by path or by session id."""
    by_path = {os.path.abspath(s.path): i for i, s in enumerate(sessions)}
    by_id: dict[str, int] = {}
    for i, s in enumerate(sessions):
        if s.file.session_id is not None:
            by_id.setdefault(s.file.session_id, i)
    out: list[int | None] = []
    for i, s in enumerate(sessions):
        parent = s.file.parent
        found = None
        if parent:
            found = by_path.get(os.path.abspath(parent)) if os.path.isabs(parent) else None
            if found is None:
                found = by_id.get(parent)
        out.append(found if found != i else None)
    return out


def _reference_id(parent: str) -> str:
    """The session id a `parentSession` names: an id, or a path `<time>_<id>.jsonl`."""
    name = os.path.basename(parent)
    if name.endswith(".jsonl") and "_" in name:
        return file_session_id(name[: -len(".jsonl")]) or parent
    return parent


def _ancestors_first(
    sessions: list[SessionUsage],
) -> tuple[list[int], dict[int, tuple[str, object]]]:
    """Session indexes with every visible parent before its forks, and each one's line
    of descent: its first ancestor without a visible parent, or, when that one names a
    parent nobody can see (deleted), that parent's id, so its forks still share what
    they copied from it. A cycle is cut where it closes."""
    parents = _parents(sessions)
    order: list[int] = []
    roots: dict[int, tuple[str, object]] = {}
    state = [0] * len(sessions)  # 0 new, 1 on the current chain, 2 placed
    for start in range(len(sessions)):
        chain = []
        node: int | None = start
        while node is not None and state[node] == 0:
            state[node] = 1
            chain.append(node)
            node = parents[node]
        root: tuple[str, object]
        if node is not None and state[node] == 2:
            root = roots[node]
        elif node is None and chain:
            top = chain[-1]
            missing = sessions[top].file.parent
            root = ("ref", _reference_id(missing)) if missing else ("session", top)
        else:
            root = ("session", chain[-1] if chain else start)
        for n in reversed(chain):
            state[n] = 2
            roots[n] = root
            order.append(n)
    return order, roots


# ---------------------------------------------------------------------------- pricing


def price(
    counted: Iterable[tuple[SessionUsage, UsageRecord]], table: PriceTable | None = None
) -> list[Reply]:
    """Each counted record with its cost: recorded, else estimated from the table."""
    return list(priced(counted, table))


def priced(
    counted: Iterable[tuple[SessionUsage, UsageRecord]], table: PriceTable | None = None
) -> Iterator[Reply]:
    """`price`, a reply at a time."""
    table = table if table is not None else price_table()
    for session, r in counted:
        yield Reply(session, r, *price_record(r, table))


def price_record(r: UsageRecord, table: PriceTable) -> tuple[float, bool, bool]:
    """(cost, estimated, unpriced) of one reply: what `price` says of it."""
    cost = r.cost
    if cost is not None and cost < 0:
        cost = None  # no reply earns money: a negative cost is none recorded (as a count's 0)
    estimated = unpriced = False
    if (cost is None or cost == 0) and r.tokens > 0:
        quote = table.quote(
            r.provider,
            r.model,
            r.timestamp,
            r.input,
            r.output,
            r.cache_read,
            r.cache_write,
            r.cache_write_1h,
        )
        if quote is None:
            unpriced = cost is None  # a recorded 0 for a model the table lacks stays
        elif quote.cost > 0:
            cost, estimated = quote.cost, True
        else:
            cost = 0.0  # the table prices it at 0: local or free
    return cost or 0.0, estimated, unpriced


def within_session(records: list[UsageRecord]) -> list[UsageRecord]:
    """The replies of one session counted once (rules R1 and R2)."""
    return _within_file(records, Duplicates())


# ---------------------------------------------------------------------------- totals


@dataclass(slots=True)
class Totals(UsageTotals):
    """Summed replies: `UsageTotals` (whose `cost` here is recorded plus estimated), what
    of it was estimated, and the time span."""

    estimated_cost: float = 0.0
    estimated_messages: int = 0
    unpriced_messages: int = 0
    first: int | None = None
    last: int | None = None

    @property
    def total_tokens(self) -> int:
        return self.input + self.output + self.cache_read + self.cache_write

    def add(self, reply: Reply) -> None:
        self.add_priced(reply.record, reply.cost, reply.estimated, reply.unpriced)

    def add_priced(self, r: UsageRecord, cost: float, estimated: bool, unpriced: bool) -> None:
        """Add one reply, priced (`price_record`)."""
        self.messages += 1
        self.input += r.input
        self.output += r.output
        self.cache_read += r.cache_read
        self.cache_write += r.cache_write
        self.cost += cost
        if estimated:
            self.estimated_cost += cost
            self.estimated_messages += 1
        if unpriced:
            self.unpriced_messages += 1
        if r.timestamp is not None:
            self.first = r.timestamp if self.first is None else min(self.first, r.timestamp)
            self.last = r.timestamp if self.last is None else max(self.last, r.timestamp)

    def merge(self, other: UsageTotals) -> None:
        UsageTotals.merge(self, other)
        if not isinstance(other, Totals):
            return
        self.estimated_cost += other.estimated_cost
        self.estimated_messages += other.estimated_messages
        self.unpriced_messages += other.unpriced_messages
        for ms in (other.first, other.last):
            if ms is not None:
                self.first = ms if self.first is None else min(self.first, ms)
                self.last = ms if self.last is None else max(self.last, ms)

    def to_json(self) -> dict[str, Any]:
        return {
            "messages": self.messages,
            "input": self.input,
            "output": self.output,
            "cacheRead": self.cache_read,
            "cacheWrite": self.cache_write,
            "totalTokens": self.total_tokens,
            "cost": round(self.cost, 10),
            "recordedCost": round(self.cost - self.estimated_cost, 10),
            "estimatedCost": round(self.estimated_cost, 10),
            "estimatedMessages": self.estimated_messages,
            "unpricedMessages": self.unpriced_messages,
        }


@dataclass(slots=True)
class Row:
    """One row of a report: a period, session or project."""

    key: str
    totals: Totals = field(default_factory=Totals)
    models: dict[str, Totals] = field(default_factory=dict)
    session: SessionUsage | None = None


@dataclass(slots=True)
class Report:
    kind: ReportKind
    rows: list[Row]
    totals: Totals
    duplicates: Duplicates
    time_zone: str
    prices: dict[str, str | None]


def _local(ms: int, tz: tzinfo) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz)


def _period_key(kind: ReportKind, ms: int | None, tz: tzinfo) -> str:
    if ms is None:
        return "unknown"
    try:
        moment = _local(ms, tz)
    except (OverflowError, OSError, ValueError):
        return "unknown"
    if kind == "daily":
        return moment.strftime("%Y-%m-%d")
    if kind == "monthly":
        return moment.strftime("%Y-%m")
    monday: date = moment.date() - timedelta(days=moment.weekday())
    return monday.isoformat()


def in_range(reply: Reply, since: int | None, until: int | None) -> bool:
    if since is None and until is None:
        return True
    ts = reply.record.timestamp
    if ts is None:
        return False
    return (since is None or ts >= since) and (until is None or ts <= until)


def report(
    replies: Iterable[Reply],
    kind: ReportKind,
    *,
    tz: tzinfo = UTC,
    tz_name: str = "UTC",
    since: int | None = None,
    until: int | None = None,
    projects: Iterable[str] | None = None,
    duplicates: Duplicates | None = None,
    table: PriceTable | None = None,
) -> Report:
    """Totals per period (daily/weekly/monthly, keys in `tz`), session or project,
    each with per-model totals, for replies in [since, until] (epoch ms) and in
    `projects` (cwds) when given. Periods and projects ascend; sessions by last use."""
    table = table if table is not None else price_table()
    wanted = set(projects) if projects is not None else None
    rows: dict[str, Row] = {}
    totals = Totals()
    cells: dict[tuple[str, str, str], Totals] = {}  # (row key, provider, model)
    sessions: dict[str, SessionUsage] = {}
    keys: dict[int | None, str] = {}  # period of each quarter hour (zones move by those)
    for reply in replies:
        record = reply.record
        ts = record.timestamp
        if (since is not None or until is not None) and not in_range(reply, since, until):
            continue
        if wanted is not None and reply.session.project not in wanted:
            continue
        if kind == "session":
            key = reply.session.path
            sessions[key] = reply.session
        elif kind == "project":
            key = reply.session.project
        else:
            quarter = ts // 900_000 if ts is not None else None
            found = keys.get(quarter)
            if found is None:
                found = keys[quarter] = _period_key(kind, ts, tz)
            key = found
        cell = cells.get((key, record.provider, record.model))
        if cell is None:
            cell = cells[(key, record.provider, record.model)] = Totals()
        cell.add(reply)
    for (key, provider, model), cell in cells.items():
        row = rows.get(key)
        if row is None:
            row = rows[key] = Row(key, session=sessions.get(key))
        row.totals.merge(cell)
        row.models[f"{provider}/{model}"] = cell
        totals.merge(cell)
    if kind == "session":
        ordered = sorted(rows.values(), key=lambda r: (r.totals.last or 0, r.key))
    else:
        ordered = [rows[k] for k in sorted(rows)]
    return Report(
        kind,
        ordered,
        totals,
        duplicates or Duplicates(),
        tz_name,
        table.described(),
    )


# ---------------------------------------------------------------------------- blocks


@dataclass(slots=True)
class Block:
    """A 5-hour block (see the module docstring), or the gap between two."""

    start: int
    end: int
    gap: bool = False
    totals: Totals = field(default_factory=Totals)
    models: dict[str, Totals] = field(default_factory=dict)

    def active(self, now_ms: int) -> bool:
        return not self.gap and self.start <= now_ms < self.end

    def burn_rate(self) -> tuple[float, float] | None:
        """(tokens per minute, USD per hour) between the first and the last reply;
        None when they are less than a minute apart."""
        t = self.totals
        if t.first is None or t.last is None or t.last - t.first < 60_000:
            return None
        minutes = (t.last - t.first) / 60_000
        return t.total_tokens / minutes, t.cost / minutes * 60

    def projection(self, now_ms: int) -> tuple[int, float] | None:
        """(tokens, USD) at the block's end if the burn rate holds (active blocks)."""
        rate = self.burn_rate()
        if rate is None or not self.active(now_ms):
            return None
        minutes = max(0.0, (self.end - now_ms) / 60_000)
        return (
            int(self.totals.total_tokens + rate[0] * minutes),
            self.totals.cost + rate[1] / 60 * minutes,
        )


def blocks(
    replies: Sequence[Reply],
    *,
    since: int | None = None,
    until: int | None = None,
    projects: Iterable[str] | None = None,
) -> list[Block]:
    """The 5-hour blocks of the replies (with a time), gaps between them, oldest first."""
    wanted = set(projects) if projects is not None else None
    timed = sorted(
        (
            r
            for r in replies
            if r.record.timestamp is not None
            and in_range(r, since, until)
            and (wanted is None or r.session.project in wanted)
        ),
        key=lambda r: r.record.timestamp or 0,
    )
    out: list[Block] = []
    current: Block | None = None
    for reply in timed:
        ts = reply.record.timestamp
        assert ts is not None
        # 5 hours after the previous reply is past the block's end too.
        if current is None or ts >= current.end:
            start = ts - ts % _HOUR_MS
            if current is not None and start > current.end:
                out.append(Block(current.end, start, gap=True))
            current = Block(start, start + _BLOCK_MS)
            out.append(current)
        current.totals.add(reply)
        current.models.setdefault(reply.model, Totals()).add(reply)
    return out
