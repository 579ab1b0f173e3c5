"""Listings: `list_sessions`, `list_all_sessions` and the `SessionInfo` they return.

Listing a store of thousands of sessions must not read thousands of files, so every
scan result is cached by file identity (`_marks.stat_identity`): in process for every
storage (a repeated listing only stats the files), and on disk for the host
filesystem (`_cache`), so that a fresh process lists an unchanged store without
opening a single session file. A file that only grew is scanned from its last complete
line on (`_scan`). A backend that keeps the metadata as it writes (PostgreSQL) is
asked instead of scanned.
"""

from __future__ import annotations

import errno
import functools
import heapq
import itertools
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from operator import itemgetter
from typing import TYPE_CHECKING, Any, overload

import orjson

from sessiontree._util.gcpause import gc_paused
from sessiontree.layout import (
    StoreParts,
    get_default_session_dir,
    home_relative_dir_name,
    is_safe_name,
)
from sessiontree.listing._cache import (
    CACHE_DB_NAME,
    DirCache,
    DirRecords,
    MetaDB,
    cache_lock,
    memory_cache,
)
from sessiontree.listing._marks import Stat, read_start_ns, stat_dirs
from sessiontree.storage import (
    HostFilesystem,
    SessionIndexStorage,
    SessionStorage,
    directory_tree,
)

# What reads files (the scanner, its fold and worker processes, the change planner) is
# imported where a file is read: a fresh process listing unchanged directories from
# their kept rows imports none of it.
if TYPE_CHECKING:
    from sessiontree.listing._scan import Record

__all__ = [
    "NO_MESSAGES",
    "KeptRows",
    "ListingRows",
    "RowHandle",
    "SessionInfo",
    "list_all_sessions",
    "list_rows",
    "list_sessions",
]

NO_MESSAGES = "(no messages)"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)

# ---------------------------------------------------------------------------- SessionInfo


def _read_text(storage: SessionStorage, path: str, size: int) -> str:
    """A session's user/assistant texts, joined by a space (`all_messages_text`)."""
    from sessiontree.listing._scan import scan_file

    texts: list[str] = []
    try:
        scan_file(storage, path, size, None, texts)
    except OSError:
        return ""
    return " ".join(texts)


class _LazyText:
    """The descriptor behind `SessionInfo.all_messages_text`.

    It holds a string, or the storage to read it from (once, on first access: the
    file at the info's `path`, up to its `size`). Assignment goes through `__set__`,
    so the frozen dataclass's `__init__` accepts either.
    """

    def __set_name__(self, owner: type, name: str) -> None:
        self._attr = "_" + name

    @overload
    def __get__(self, obj: None, objtype: type | None = None) -> _LazyText: ...
    @overload
    def __get__(self, obj: object, objtype: type | None = None) -> str: ...
    def __get__(self, obj: object | None, objtype: type | None = None) -> str | _LazyText:
        if obj is None:
            return self
        fields = obj.__dict__
        value = fields.get(self._attr, "")
        if not isinstance(value, str):
            value = fields[self._attr] = _read_text(value, fields["path"], fields["size"])
        return value

    def __set__(self, obj: object, value: str | SessionStorage | _LazyText) -> None:
        # The dataclass passes the descriptor itself as the default value.
        obj.__dict__[self._attr] = "" if value is self else value


@dataclass(frozen=True)
class SessionInfo:
    """Metadata of one session file, as listings return it.

    `all_messages_text` (every user/assistant text, joined by a space as both peers do) is read
    from the file on first access when the listing came from the cache; it takes
    no part in equality or repr.
    """

    path: str
    id: str
    cwd: str
    title: str | None
    parent_session_path: str | None
    created: datetime
    modified: datetime
    message_count: int
    first_message: str
    all_messages_text: _LazyText = field(default=_LazyText(), compare=False, repr=False)
    size: int = field(default=-1, compare=False, repr=False)
    """The file's size in bytes when it was listed (-1: not known to this listing)."""

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_all_messages_text"] = self.all_messages_text  # never pickle a loader
        return state


def _from_ms(ms: int | None, fallback: datetime) -> datetime:
    if ms is None:
        return fallback
    try:
        return _from_us(ms * 1000)
    except OverflowError:
        return fallback


_EXACT_FLOAT_US = 2**32 * 1_000_000
"""Below this many microseconds since 1970, a float's seconds round to the exact
microsecond (its error is under half of one)."""
_from_timestamp = datetime.fromtimestamp


def _from_us(us: int) -> datetime:
    """The UTC time `us` microseconds after 1970 (fromtimestamp: 4x faster than adding
    a timedelta, where exact)."""
    if 0 <= us < _EXACT_FLOAT_US:
        return _from_timestamp(us / 1e6, UTC)
    return EPOCH + timedelta(microseconds=us)


def _new_info(
    storage: SessionStorage,
    path: str,
    size: int,
    session_id: str,
    cwd: str | None,
    title: str | None,
    parent: str | None,
    created_ms: int | None,
    modified: datetime,
    messages: int,
    first: str | None,
) -> SessionInfo:
    created = _from_ms(created_ms, modified)
    return _info(
        storage, path, size, session_id, cwd, title, parent, created, modified, messages, first
    )


def _info(
    storage: SessionStorage,
    path: str,
    size: int,
    session_id: str,
    cwd: str | None,
    title: str | None,
    parent: str | None,
    created: datetime,
    modified: datetime,
    messages: int,
    first: str | None,
) -> SessionInfo:
    # What SessionInfo(...) does, minus ten object.__setattr__ calls: a fresh
    # process builds thousands of these from the cache.
    info: SessionInfo = object.__new__(SessionInfo)
    info.__dict__.update(
        path=path,
        id=session_id,
        cwd=cwd or "",
        title=title,
        parent_session_path=parent,
        created=created,
        modified=modified,
        message_count=messages,
        first_message=first or NO_MESSAGES,
        _all_messages_text=storage,
        size=size,
    )
    return info


def session_info(rec: Record, path: str, storage: SessionStorage) -> SessionInfo | None:
    """The listing of the file `rec` scanned (None: not a session); built once."""
    if not rec.built:
        from sessiontree.format import SESSION

        fold = rec.final
        rec.info = (
            _new_info(
                storage,
                path,
                rec.size,
                fold.header_id or "",
                fold.cwd,
                fold.title(),
                fold.parent_session,
                rec.created_ms,
                _from_us(rec.mtime_ns // 1000),
                fold.messages,
                fold.first_message,
            )
            if fold.state == SESSION
            else None
        )
        rec.built = True
    return rec.info if isinstance(rec.info, SessionInfo) else None


# ---------------------------------------------------------------------------- listing core


def _project_dirs(root: str, storage: SessionStorage) -> list[str]:
    if isinstance(storage, HostFilesystem):
        try:
            with os.scandir(root) as entries:
                return sorted(e.path for e in entries if e.is_dir())
        except OSError:
            return []
    try:
        return directory_tree(storage, "listing every project").list_dirs(root)
    except OSError:
        return []


def collect(directories: list[str], parts: StoreParts, *, cache: bool = True) -> list[SessionInfo]:
    """Every valid session in `directories`, newest modified first (`cache=False`: every
    file scanned, every cache left alone)."""
    # A listing allocates a record, a fold and a SessionInfo per file, and all of them
    # survive it: the cyclic collector would rescan them again and again (measured: a
    # third of a fresh process's listing of 10,000 sessions). Nothing here makes cycles.
    with gc_paused():
        return _collect(directories, parts, cache).infos()


def collect_rows(directories: list[str], parts: StoreParts, *, cache: bool = True) -> ListingRows:
    """`collect`'s sessions as rows whose `SessionInfo` is built when asked for."""
    with gc_paused():
        return _collect(directories, parts, cache)


def _collect(directories: list[str], parts: StoreParts, cache: bool) -> ListingRows:
    storage = parts.storage
    seen: set[str] = set()
    dirs = []
    for d in directories:
        d = os.path.abspath(d)
        if d not in seen:
            seen.add(d)
            dirs.append(d)
    if isinstance(storage, SessionIndexStorage):  # [storage index] no session file is read
        return ListingRows(_collect_indexed(dirs, storage), storage, by_mtime=False)
    now_ns = read_start_ns()  # before any file is read: see `stat_identity`
    listing = stat_dirs(dirs, storage, now_ns)
    memory = memory_cache(storage) if cache else None
    keeps_on_disk = cache and isinstance(storage, HostFilesystem)
    # A directory whose files all stat as at its last listing has that listing's rows:
    # in process, else in the on-disk cache (one blob for the directory).
    kept_rows: dict[str, list[_Row] | KeptRows] = {}
    first_seen: set[str] = set()  # dirs this process lists for the first time
    if memory is not None:
        with cache_lock():
            for d, stats in listing.items():
                known = memory.get(d)
                if known is not None and known.listed == stats:
                    kept_rows[d] = known.ordered
        if keeps_on_disk:
            first_seen = {d for d in dirs if d not in kept_rows and d not in memory}
        if first_seen:
            kept_rows.update(_rows_on_disk(parts, first_seen, listing, memory))
    if len(kept_rows) == len(dirs):  # every directory as it was: no file to read
        return _listing_of(dirs, kept_rows, storage, listing)
    from sessiontree.listing._changes import plan_changes
    from sessiontree.listing._scan import scan_jobs

    records: dict[str, Record | None] = {}
    # The in-process records first, then the on-disk rows of the files they miss
    # (`plan_changes` both times); the rest is scanned, from the old end when it grew.
    misses: list[tuple[str, Stat, Record | None]] = []
    forgotten: dict[str, list[str]] = {}  # dir -> paths of its records whose file is gone
    with cache_lock():
        for d, stats in listing.items():
            if d in kept_rows:
                continue
            known = memory.get(d) if memory is not None else None
            plan = plan_changes(stats, known or {})
            for s, kept in plan.unchanged:
                records[s[0]] = kept
            misses += [(d, s, old) for s, old in plan.to_read]
            forgotten[d] = plan.gone
    db = None
    if keeps_on_disk and misses:
        db = MetaDB(parts.agent_dir)
    fresh: list[tuple[str, str, Record]] = []  # (dir, path, record) loaded or scanned now
    stale_db: list[str] = []
    if db is not None:
        miss_dirs = sorted({d for d, _, _ in misses})
        stored = db.fetch(miss_dirs)
        in_memory = {s[0]: rec for _, s, rec in misses}
        where = {s[0]: d for d, s, _ in misses}
        on_disk = plan_changes(
            (s for _, s, _ in misses),
            stored,
            listed={s[0] for d in miss_dirs for s in listing[d]},
        )
        stale_db = on_disk.gone
        for s, row in on_disk.unchanged:
            records[s[0]] = row
            fresh.append((where[s[0]], s[0], row))
        # A changed file resumes from the newer of its two records (the in-process one).
        misses = [(where[s[0]], s, _newer(in_memory[s[0]], old)) for s, old in on_disk.to_read]
    scanned: list[tuple[str, Record]] = []
    results = scan_jobs([(s, rec) for _, s, rec in misses], storage)
    for (d, s, _), rec in zip(misses, results, strict=True):
        records[s[0]] = rec
        if rec is not None:
            fresh.append((d, s[0], rec))
            scanned.append((s[0], rec))
    if db is not None and (scanned or stale_db):
        db.store(scanned, stale_db)
    if memory is not None:
        _remember(memory, forgotten, fresh)
    # The on-disk row of a directory is written by the first listing of it in a process
    # (the CLI's every one), not again as a long-running process sees it change.
    to_keep: list[tuple[str, bytes, bytes]] = []  # dir's listing, for the next process
    for d in dirs:
        if d not in kept_rows:
            rows = kept_rows[d] = _dir_rows(listing[d], records, storage)
            if memory is not None and _keep_rows(memory, d, listing[d], rows) and d in first_seen:
                keep = dump_rows(listing[d], rows)
                if keep is not None:
                    to_keep.append((d, *keep))
    if to_keep:
        MetaDB(parts.agent_dir).store_dir_rows(to_keep)
    return _listing_of(dirs, kept_rows, storage, listing)


def _listing_of(
    dirs: list[str],
    rows_of: dict[str, list[_Row] | KeptRows],
    storage: SessionStorage,
    stats: dict[str, list[Stat]],
) -> ListingRows:
    """The listing of `dirs`, each one's rows given (`rows_of`), its files stat'ed as
    `stats` say."""
    ordered: list[_Row] = []
    runs: list[KeptRows] = []
    for d in dirs:
        rows = rows_of[d]
        if isinstance(rows, KeptRows):
            runs.append(rows)
        else:
            ordered += rows
    if len(dirs) > 1:
        ordered.sort(reverse=True)  # paths differ: the infos themselves are never compared
    return ListingRows(ordered, storage, runs=runs, stats=stats)


def _newer(in_memory: Record | None, on_disk: Record | None) -> Record | None:
    """The record a changed file's scan may resume from: this process's, else the disk's."""
    return in_memory if in_memory is not None else on_disk


def _remember(
    memory: DirCache,
    forgotten: dict[str, list[str]],
    fresh: list[tuple[str, str, Record]],
) -> None:
    """Keep this listing in the in-process cache (files gone from a dir are forgotten)."""
    with cache_lock():
        for d, gone in forgotten.items():
            known = memory.get(d)
            if known is None:
                known = memory[d] = DirRecords()
            known.listed = None
            for p in gone:
                known.pop(p, None)
        for d, p, rec in fresh:
            memory[d][p] = rec


_Row = list[Any]
"""A listed session as it sorts: [mtime_ns, created (microseconds since 1970), path,
its info] (newest first)."""


def _created_us(info: SessionInfo) -> int:
    return (info.created - EPOCH) // _MICROSECOND


class KeptRows:
    """A directory's sessions as the on-disk cache kept them (`dump_rows`), newest first:
    each one's file (an index into the directory's stats, which are as they were kept:
    its path, size and mtime are the stat's), created time and id, its info built when
    asked for, from the rest of its row (read for the directory when the first of them
    is)."""

    __slots__ = (
        "_details",
        "_every_info",
        "_files",
        "_infos",
        "created",
        "forget",
        "ids",
        "order",
        "stats",
        "storage",
    )

    def __init__(
        self,
        stats: list[Stat],
        columns: tuple[list[int], list[int], list[str]],
        details: memoryview,
        storage: SessionStorage,
    ) -> None:
        self.stats = stats
        self.order, self.created, self.ids = columns
        self._files: list[Stat] | None = None
        self._details: memoryview | list[list[Any]] | None = details
        self._infos: list[SessionInfo | None] | None = None
        self._every_info = False
        """Whether `infos` built them all (none of `_infos` is None)."""
        self.storage = storage
        self.forget: Callable[[], bool] | None = None
        """Drops the kept rows (on disk and in process, every directory's), for a row
        found forged."""

    def __len__(self) -> int:
        return len(self.order)

    def files(self) -> list[Stat]:
        """The stat of each row's file, in the rows' order."""
        files = self._files
        if files is None:
            files = self._files = list(map(self.stats.__getitem__, self.order))
        return files

    def keys(self, run: int) -> Iterator[tuple[int, int, str, int, int]]:
        """(mtime_ns, created, path, `run`, row) of each row, in order."""
        files = self.files()
        return zip(
            map(_MTIME, files),
            self.created,
            map(_PATH, files),
            itertools.repeat(run),
            itertools.count(),
        )

    def info(self, i: int) -> SessionInfo:
        infos = self._infos
        if infos is None:
            infos = self._infos = [None] * len(self.order)
        info = infos[i]
        if info is None:
            info = infos[i] = self._build(i)
        return info

    def _build(self, i: int) -> SessionInfo:
        details = self.details()
        path, size, mtime_ns = self.files()[i][:3]
        if details is None:  # not as `dump_rows` wrote it: the file itself is read
            try:
                return _scanned_info(self.storage, path)
            except _NoSession:
                # The kept columns named a file that is no session: the row was made by
                # no listing, and would fail every listing after this one. Dropped, the
                # next listing reads the directory's files.
                dropped = self.forget is not None and self.forget()
                raise OSError(
                    errno.EIO,
                    "its listing cache row is damaged, and it is no session "
                    + (
                        "(the row is dropped: list again)"
                        if dropped
                        else f"(delete {CACHE_DB_NAME} in the agent dir and list again)"
                    ),
                    path,
                ) from None
        cwd, title, parent, messages, first = details[i]
        created_us = self.created[i]
        modified = _from_us(mtime_ns // 1000)
        created = modified if created_us == mtime_ns // 1000 else _from_us(created_us)
        sid = self.ids[i]
        return _info(
            self.storage, path, size, sid, cwd, title, parent, created, modified, messages, first
        )

    def details(self) -> list[list[Any]] | None:
        """The rest of each row (None: not as `dump_rows` wrote it), read once."""
        details = self._details
        if isinstance(details, memoryview):
            details = self._details = _details_of(details, len(self.order))
        return details

    def infos(self) -> list[SessionInfo]:
        """Every row's info, in order (`info` of each, in one loop: a listing of the
        whole store builds thousands)."""
        n = len(self.order)
        built = self._infos
        if self._every_info:  # a repeated listing
            return list(built)  # type: ignore[arg-type]
        details = self.details()
        if details is None or built is not None:
            return [self.info(i) for i in range(n)]
        storage, new, set_fields = self.storage, object.__new__, object.__setattr__
        from_us, no_messages = _from_us, NO_MESSAGES
        infos: list[SessionInfo] = []
        add = infos.append
        for (path, size, mtime_ns, _, _), created_us, sid, (
            cwd,
            title,
            parent,
            messages,
            first,
        ) in zip(self.files(), self.created, self.ids, details, strict=True):
            modified = from_us(mtime_ns // 1000)
            info = new(SessionInfo)
            # `_info`'s fields, as one dict: the dataclass is frozen.
            set_fields(
                info,
                "__dict__",
                {
                    "path": path,
                    "id": sid,
                    "cwd": cwd or "",
                    "title": title,
                    "parent_session_path": parent,
                    "created": modified if created_us == mtime_ns // 1000 else from_us(created_us),
                    "modified": modified,
                    "message_count": messages,
                    "first_message": first or no_messages,
                    "_all_messages_text": storage,
                    "size": size,
                },
            )
            add(info)
        self._infos = list(infos)
        self._every_info = True
        return infos

    def rows(self) -> list[_Row]:
        """Every row, its info built."""
        return [
            [s[2], created_us, s[0], info]
            for s, created_us, info in zip(self.files(), self.created, self.infos(), strict=True)
        ]


_PATH = itemgetter(0)
_MTIME = itemgetter(2)


def _details_of(view: memoryview, n: int) -> list[list[Any]] | None:
    """The rest of each row (`dump_rows`), None when it is not as written."""
    try:
        details = orjson.loads(view)
    except ValueError:
        return None
    if type(details) is not list or len(details) != n:
        return None
    texts = {str, type(None)}
    if not all(
        type(row) is list
        and len(row) == _DETAILS
        and type(row[3]) is int
        and type(row[0]) in texts
        and type(row[1]) in texts
        and type(row[2]) in texts
        and type(row[4]) in texts
        for row in details
    ):
        return None  # valid JSON of other kinds (a damaged blob) is no row of ours either
    return details


def _scanned_info(storage: SessionStorage, path: str) -> SessionInfo:
    """A session's info read from its file (its kept row is damaged)."""
    from sessiontree.listing._scan import rescan

    st = storage.stat(path)
    rec = rescan(storage, (path, st.size, st.mtime_ns or int(st.mtime_ms * 1e6), st.ino, 0), None)
    info = session_info(rec, path, storage) if rec is not None else None
    if info is None:
        raise _NoSession(path)
    return info


class _NoSession(Exception):
    """A file a kept row named is no session (`_scanned_info`)."""


RowHandle = tuple[int, int]
"""A row of a `ListingRows`, as `newest_first` names it."""


class ListingRows:
    """A listing's sessions, newest modified first, each's `SessionInfo` built when first
    asked for: a page of a long listing builds the infos of its rows only."""

    __slots__ = ("_by_mtime", "_rows", "_runs", "_storage", "stats")

    def __init__(
        self,
        rows: list[_Row],
        storage: SessionStorage,
        *,
        runs: list[KeptRows] | None = None,
        by_mtime: bool = True,
        stats: dict[str, list[Stat]] | None = None,
    ) -> None:
        self.stats = stats
        """Each directory's files as the listing stat'ed them (`stat_dir`: sessions and
        the files that are none), for a reader of the files that would stat them
        again (the content index's refresh); None: no stat of them was taken."""
        self._rows = rows
        self._runs = runs or []
        """Directories as the on-disk cache kept them, merged with `rows` when asked for."""
        self._storage = storage
        self._by_mtime = by_mtime
        """Whether each row is modified at its mtime's microsecond (the files' rows): then
        they are in the order of their `modified` already."""

    def __len__(self) -> int:
        return len(self._rows) + sum(len(run) for run in self._runs)

    def info(self, handle: RowHandle) -> SessionInfo:
        """The info of a row `newest_first` gave."""
        run, i = handle
        return self._rows[i][3] if run < 0 else self._runs[run].info(i)

    def paths(self, handles: Iterable[RowHandle]) -> list[str]:
        """The paths of the rows `handles` (of `newest_first`), without building infos."""
        rows = self._rows
        kept = [run.files() for run in self._runs]
        out: list[str] = []
        add = out.append
        for run, i in handles:
            add(rows[i][3].path if run < 0 else kept[run][i][0])
        return out

    def titled(
        self, handles: Iterable[RowHandle], may_match: Callable[[str], bool] | None = None
    ) -> Iterator[tuple[str, str, Any, datetime]]:
        """(path, id, title, modified) of the rows `handles` (of `newest_first`) with a
        title, as their infos have them, without building the infos of kept rows: a
        search looks at every title. `may_match`: a test of the title that is true of
        every title a search can match (the others are passed over)."""
        rows, runs = self._rows, self._runs
        details = [run.details() for run in runs]
        for run, i in handles:
            kept = details[run] if run >= 0 else None
            if kept is None:
                info = rows[i][3] if run < 0 else runs[run].info(i)
                title = info.title
                if title is not None and (may_match is None or may_match(title)):
                    yield info.path, info.id, title, info.modified
                continue
            title = kept[i][1]
            if title is not None and (may_match is None or may_match(title)):
                one = runs[run]
                path, _, mtime_ns = one.files()[i][:3]
                yield path, one.ids[i], title, _from_us(mtime_ns // 1000)

    def infos(self) -> list[SessionInfo]:
        with gc_paused():  # as `collect`: thousands of infos, all surviving
            rows = self._rows
            if not rows and len(self._runs) == 1:  # one directory: in order already
                return self._runs[0].infos()
            if self._runs:
                rows = rows + [row for run in self._runs for row in run.rows()]
                rows.sort(reverse=True)  # paths differ: the infos are never compared
            return [row[3] for row in rows]

    def ids(self) -> list[str]:
        """Each session's id (in no particular order), without building its info."""
        found = [row[3].id for row in self._rows]
        for run in self._runs:
            found += run.ids
        return found

    def newest_first(self) -> Iterator[tuple[int, RowHandle]]:
        """(`modified` in microseconds since 1970, row) of each row, newest first, those
        modified at the same microsecond in `infos`' order (a stable sort's), taken as
        they are asked for: without building an info where the rows are the files'."""
        rows = self._rows
        if not self._by_mtime:
            modified = [(row[3].modified - EPOCH) // _MICROSECOND for row in rows]
            ordered = sorted(range(len(modified)), key=modified.__getitem__, reverse=True)
            return iter([(modified[i], (-1, i)) for i in ordered])
        keys: list[Iterator[tuple[int, int, str, int, int]]] = [
            run.keys(n) for n, run in enumerate(self._runs)
        ]
        keys.append((row[0], row[1], row[2], -1, i) for i, row in enumerate(rows))
        # Each run is in the listing's order (mtime, created, path: newest first), and
        # no two rows have one path: merged, they are in the order `infos` sorts them.
        merged = heapq.merge(*keys, reverse=True) if len(keys) > 1 else keys[0]
        return ((mtime_ns // 1000, (run, i)) for mtime_ns, _, _, run, i in merged)


def _dir_rows(
    stats: list[Stat], records: dict[str, Record | None], storage: SessionStorage
) -> list[_Row]:
    """The rows of one directory's files, newest first."""
    rows: list[_Row] = []
    for s in stats:
        found = records.get(s[0])
        if found is not None:
            info = session_info(found, s[0], storage)
            if info is not None:
                rows.append([found.mtime_ns, _created_us(info), s[0], info])
    rows.sort(reverse=True)  # paths differ: the infos themselves are never compared
    return rows


def _keep_rows(memory: DirCache, d: str, stats: list[Stat], rows: list[_Row]) -> bool:
    """Remember `d`'s rows for a listing that finds its files as `stats` again: only
    when each file has a record that a stat alike would trust (`Record.same_as`)."""
    with cache_lock():
        known = memory.get(d)
        if known is None:
            return False
        for s in stats:
            rec = known.get(s[0])
            if rec is None or not rec.same_as(s):
                return False
        known.listed = stats
        known.ordered = rows
    return True


def _rows_on_disk(
    parts: StoreParts, dirs: set[str], listing: dict[str, list[Stat]], memory: DirCache
) -> dict[str, KeptRows]:
    """The rows of those of `dirs` whose files stat as at the listing the on-disk cache
    kept of them (`load_rows`), remembered in process too."""
    found: dict[str, KeptRows] = {}
    for d, (stats, blob) in MetaDB(parts.agent_dir).fetch_dir_rows(dirs).items():
        rows = load_rows(listing[d], stats, blob, parts.storage)
        if rows is not None:
            rows.forget = functools.partial(_forget_kept, parts.agent_dir, memory)
            found[d] = rows
    with cache_lock():
        for d, rows in found.items():
            known = memory.get(d)
            if known is None:
                known = memory[d] = DirRecords()
            known.listed = listing[d]
            known.ordered = rows
    return found


def _forget_kept(agent_dir: str, memory: DirCache) -> bool:
    """Drop every directory's kept rows, on disk and in process: a row no listing made
    puts the others of its file in doubt too (and one listing meets one of them).
    Whether the file's were dropped."""
    with cache_lock():
        for known in memory.values():
            known.listed = None
            known.ordered = []
    return MetaDB(agent_dir).forget_dir_rows()


_KEPT_FORMAT = 3
"""`dump_rows`'s layout: one written another way is not read (the directory is listed
file by file, and kept again)."""
_DETAILS = 5
"""The fields of a row's rest: cwd, title, parent, messages, first message."""


def dump_stats(stats: list[Stat]) -> bytes | None:
    """A directory's files' identities as the on-disk cache keeps them: compared as
    bytes with those of a later listing, never decoded (None: a name is no UTF-8).

    The bytes themselves, not a digest of them: a file whose size, mtime, inode or
    ctime changed is always seen, as no two listings of different stats encode alike."""
    # orjson, not serialize_entry_bytes: identities are 64-bit integers, which the
    # peers' JSON (doubles) would round.
    try:
        return orjson.dumps(stats)
    except TypeError:  # a lone surrogate: such a directory is listed file by file
        return None


def dump_rows(stats: list[Stat], rows: list[_Row]) -> tuple[bytes, bytes] | None:
    """A directory's listing as the on-disk cache keeps it: its files' identities
    (`dump_stats`), and its sessions (newest first) in columns: the index of each one's
    file in those identities, its created time and its id, then a line with the rest
    of each session's row, read only when an info of it is built (None: a text or name
    is no UTF-8)."""
    kept = dump_stats(stats)
    if kept is None:
        return None
    where = {s[0]: k for k, s in enumerate(stats)}
    try:
        head = orjson.dumps(
            [
                _KEPT_FORMAT,
                [where[path] for _, _, path, _ in rows],
                [created_us for _, created_us, _, _ in rows],
                [i.id for _, _, _, i in rows],
            ]
        )
        rest = orjson.dumps(
            [
                [i.cwd, i.title, i.parent_session_path, i.message_count, i.first_message]
                for _, _, _, i in rows
            ]
        )
    except TypeError:  # a lone surrogate: such a directory is listed file by file
        return None
    return kept, head + b"\n" + rest  # orjson writes no newline of its own


def load_rows(
    stats: list[Stat], kept: bytes, blob: bytes, storage: SessionStorage
) -> KeptRows | None:
    """The rows `dump_rows` kept, when the directory's files are still as it found them
    (`stats` encode as `kept` did); None when they are not, or the blob is not one it
    wrote. The rest of each row is read when the first info of the directory is built
    (`KeptRows`)."""
    if type(kept) is not bytes or type(blob) is not bytes or dump_stats(stats) != kept:
        return None
    end = blob.find(b"\n")
    try:
        fmt, order, created, ids = orjson.loads(memoryview(blob)[:end] if end >= 0 else b"")
        if fmt != _KEPT_FORMAT or type(order) is not list:
            return None
        if not len(order) == len(created) == len(ids) <= len(stats):
            return None
        if not ({*map(type, order), *map(type, created)} <= {int} and {*map(type, ids)} <= {str}):
            return None
        if order and (min(order) < 0 or max(order) >= len(stats) or len(set(order)) < len(order)):
            return None  # each row a file of the directory, none twice
        # Each time as a datetime, checked now (OverflowError), not when it is built.
        if created and not (0 <= min(created) and max(created) < _EXACT_FLOAT_US):
            for t in created:
                _from_us(t)
    except (ValueError, TypeError, OverflowError):
        return None
    return KeptRows(stats, (order, created, ids), memoryview(blob)[end + 1 :], storage)


# [storage index] A backend that keeps each session's metadata up to date as it
# writes (SessionIndexStorage: PostgreSQL, by the same fold) answers listings from
# it, one query per directory.
def _collect_indexed(dirs: list[str], storage: SessionIndexStorage) -> list[_Row]:
    from sessiontree.format import parse_iso_ms

    ordered: list[_Row] = []
    for d in dirs:
        try:
            metas = storage.list_session_meta(d)
        except OSError:
            continue
        for m in metas:
            if not m.valid or m.id is None:
                continue
            info = _new_info(
                storage,  # type: ignore[arg-type]
                m.path,
                m.size,
                m.id,
                m.cwd,
                m.title,
                m.parent_session,
                parse_iso_ms(m.created),
                m.mtime,
                m.message_count,
                m.first_message,
            )
            ordered.append([m.mtime_ns, _created_us(info), m.path, info])
    ordered.sort(key=lambda t: (t[0], t[1], t[2]), reverse=True)
    return ordered


def local_dirs(cwd: str, parts: StoreParts, session_dir: str | None = None) -> list[str]:
    """The directories that hold `cwd`'s sessions (`session_dir` alone when given)."""
    if session_dir is not None:
        return [session_dir]
    dirs = [get_default_session_dir(cwd, parts.agent_dir)]
    newer = home_relative_dir_name(cwd)
    if newer is not None and is_safe_name(newer):
        candidate = os.path.join(parts.sessions_dir, newer)
        if candidate != dirs[0] and parts.storage.exists(candidate):
            dirs.append(candidate)
    return dirs


def list_sessions(
    cwd: str, parts: StoreParts, *, session_dir: str | None = None, cache: bool = True
) -> list[SessionInfo]:
    """The sessions of `cwd`'s project, newest modified first.

    Reads `<agent dir>/sessions/--<cwd>--` and, when it exists, the directory
    newer TypeScript agents use for the same cwd; with `session_dir`, only that
    directory. Files without a valid header are skipped. `cache=False` scans
    every file and leaves every cache alone.
    """
    return collect(local_dirs(cwd, parts, session_dir), parts, cache=cache)


def list_all_sessions(parts: StoreParts, *, cache: bool = True) -> list[SessionInfo]:
    """The sessions of every project directory under `<agent dir>/sessions`, newest first."""
    return collect(_project_dirs(parts.sessions_dir, parts.storage), parts, cache=cache)


def list_rows(cwd: str | None, parts: StoreParts) -> ListingRows:
    """`list_sessions(cwd)` (None: `list_all_sessions`) as rows whose infos are built
    when asked for."""
    if cwd is None:
        return collect_rows(_project_dirs(parts.sessions_dir, parts.storage), parts)
    return collect_rows(local_dirs(cwd, parts), parts)
