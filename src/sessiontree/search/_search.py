"""Read-only full-text search over session files and over the prompt history.

`search` finds the entries whose text (`export.entry_text`: messages, thinking,
tool calls and results, summaries, extension messages, labels) contains a
substring (case-insensitive by default) or matches a regular expression, and
returns one hit per entry with a snippet, newest first. It asks the content
index (`sessiontree.search._content_index`, refreshed first) for the entries holding
the words of the query's literal text (`_terms`), then verifies each candidate against
its line in the session file, so the index never changes what is found, only
how fast. A PostgreSQL store has an index of its own in its database (`_pg_index`),
asked the same way, its candidates' lines read in the same pass. Where the index
cannot answer (a literal shorter than three characters, or whose words are too short
or too common to narrow the search, no index, files it could not bring up to date)
those files are scanned, and `SearchResult.notes` says so.

`search_sessions` (`_scan`) is that scan: file by file, in file order; a file
that cannot be read is skipped and named in the notes. The query's matcher is
`_query`'s, the hits and snippets `_hits`'.
"""

from __future__ import annotations

import heapq
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from sessiontree._util.env import agent_dir_or_default
from sessiontree._util.gcpause import gc_paused
from sessiontree.format import Entry, loads_object
from sessiontree.listing._marks import Stat
from sessiontree.search._content_index import Candidate, ContentIndex, Refreshed
from sessiontree.search._hits import Filters, SearchHit, entry_hit
from sessiontree.search._index_rows import (
    MIN_QUERY_CHARS,
    SessionSource,
    index_text,
)
from sessiontree.search._query import Matcher, make_matcher
from sessiontree.search._scan import scan_sources
from sessiontree.search._verdict import Source, source_paths
from sessiontree.storage import HostFilesystem, SessionStorage, default_storage, read_range

if TYPE_CHECKING:
    from sessiontree.search._pg_index import PostgresIndex

__all__ = ["SearchResult", "search"]


@dataclass(slots=True)
class SearchResult:
    """Hits (newest first where the index answered) and how they were found."""

    hits: list[SearchHit]
    mode: Literal["index", "scan", "mixed"]
    """index: every file through the index; scan: every file read; mixed: both."""
    notes: list[str] = field(default_factory=list)
    """Why files were scanned instead of asking the index."""
    scanned: int = 0
    """Files scanned."""
    refreshed: Refreshed | None = None


def search(
    sources: Iterable[str | SessionSource],
    query: str,
    *,
    regex: bool = False,
    case_sensitive: bool = False,
    roles: Iterable[str] | None = None,
    since: int | None = None,
    until: int | None = None,
    limit: int | None = None,
    storage: SessionStorage | None = None,
    agent_dir: str | None = None,
    use_index: bool = True,
    index_progress: Callable[[int, int], None] | None = None,
    listed: Iterable[Stat] | None = None,
) -> SearchResult:
    """Entries of `sources` whose text contains `query` (or matches it with `regex`).

    With the index: newest first (by entry time). `roles` keeps those roles only;
    `since`/`until` (epoch ms, inclusive) entries with a time in that range. The
    index lives in `agent_dir`'s cache (default: the agent dir in effect) and is
    used for the agent dir's files only (a `HostFilesystem` storage); a PostgreSQL
    store's own index is used for its files; other stores are scanned.
    `index_progress(bytes_done, bytes_total)` reports a refresh. `listed`: the stats a
    listing took of the sources' files a moment before (`listing.ListingRows.stats`),
    which the index's refresh takes instead of a stat of each.
    Raises SessionTreeError for a bad regular expression.
    """
    # The sources, the index's rows of every file and the hits all live until the
    # answer: the cyclic collector would only rescan them (nothing here makes cycles).
    with gc_paused():
        return _search(
            sources,
            query,
            regex,
            case_sensitive,
            roles,
            since,
            until,
            limit,
            storage,
            agent_dir,
            use_index,
            index_progress,
            listed,
        )


def _search(
    sources: Iterable[str | SessionSource],
    query: str,
    regex: bool,
    case_sensitive: bool,
    roles: Iterable[str] | None,
    since: int | None,
    until: int | None,
    limit: int | None,
    storage: SessionStorage | None,
    agent_dir: str | None,
    use_index: bool,
    index_progress: Callable[[int, int], None] | None,
    listed: Iterable[Stat] | None,
) -> SearchResult:
    matcher = make_matcher(query, regex, case_sensitive)
    # Paths stay paths: an object per file is made only for a file that is read.
    srcs: list[Source] = list(sources)
    filters = Filters(frozenset(roles) if roles is not None else None, since, until)
    storage = default_storage(storage)
    if not query:
        return SearchResult([], "index")
    literals = _literals(matcher)
    notes: list[str] = []
    index: ContentIndex | None = None
    # Our sessions in a database (another agent's, read by a loader, are not indexed there).
    ours = any(isinstance(s, str) or s.load is None for s in srcs)
    database = None
    if use_index and matcher.literals and ours and "sessiontree.storage.postgres" in sys.modules:
        # Only a store in PostgreSQL has an index there, and its package is loaded once
        # such a store is opened: a file store's search does not load that index.
        from sessiontree.search._pg_index import postgres_index

        database = postgres_index(storage)
    if database is not None:
        return _in_database(
            database, _objects(srcs), matcher, filters, storage, limit, notes, index_progress
        )
    if not use_index:
        notes.append("the index was not asked (--no-index)")
    elif not isinstance(storage, HostFilesystem):
        notes.append("the store is not the agent dir's files: every session was read")
    elif not literals:
        what = "regular expression" if regex else "search text"
        notes.append(
            f"the {what} has no literal text of {MIN_QUERY_CHARS}+ characters: "
            "every session was read"
        )
    else:
        index = ContentIndex.open(agent_dir_or_default(agent_dir))
        if index is None:
            notes.append(
                "every session was read in full (no content index here: it cannot be "
                "opened or created), which gives the same answers, more slowly"
            )
    if index is None or not literals:
        return _scanned(_objects(srcs), matcher, filters, storage, limit, notes)
    answered = index.answer(
        lambda index: _indexed(
            index, srcs, listed, matcher, literals, filters, storage, limit, notes, index_progress
        )
    )
    if answered is not None:
        return answered
    notes.append("the content index could not be read: every session was read")
    return _scanned(_objects(srcs), matcher, filters, storage, limit, notes)


def _objects(sources: Iterable[Source]) -> list[SessionSource]:
    return [SessionSource(s) if isinstance(s, str) else s for s in sources]


def _scanned(
    sources: list[SessionSource],
    matcher: Matcher,
    filters: Filters,
    storage: SessionStorage,
    limit: int | None,
    notes: list[str],
) -> SearchResult:
    """Every file read; hits newest first, as the index answers (file order for ties)."""
    hits = _read(sources, matcher, filters, storage, notes)
    return SearchResult(hits[:limit], "scan", notes, scanned=len(sources))


def _read(
    sources: list[SessionSource],
    matcher: Matcher,
    filters: Filters,
    storage: SessionStorage,
    notes: list[str],
) -> list[SearchHit]:
    """The hits of `sources` read now, in `_order`; the files that could not be read
    are named in `notes`."""
    skipped: list[tuple[str, str]] = []
    hits = sorted(scan_sources(sources, matcher, filters, storage, skipped=skipped), key=_order)
    if skipped:
        named = "; ".join(f"{path} ({why})" for path, why in skipped)
        notes.append(f"{len(skipped)} file(s) could not be read and were skipped: {named}")
    return hits


def _literals(matcher: Matcher) -> list[str]:
    """The texts every match's (indexed) text holds: each long enough literal, as the
    index holds text."""
    folded = (index_text(literal) for literal in matcher.literals)
    return list(dict.fromkeys(t for t in folded if len(t) >= MIN_QUERY_CHARS))


def _indexed(
    index: ContentIndex,
    sources: list[Source],
    listed: Iterable[Stat] | None,
    matcher: Matcher,
    literals: list[str],
    filters: Filters,
    storage: SessionStorage,
    limit: int | None,
    notes: list[str],
    progress: Callable[[int, int], None] | None,
) -> SearchResult:
    refreshed = index.refresh(sources, listed=listed, storage=storage, progress=progress)
    match = index.match(literals)
    if match is None:
        notes.append(
            "the search text's words are too short or too common for the index to narrow "
            "the search: every session was read"
        )
        read = _read(_objects(sources), matcher, filters, storage, notes)
        return SearchResult(read[:limit], "scan", notes, scanned=len(sources), refreshed=refreshed)
    paths = source_paths(sources)
    stale = set(refreshed.stale)
    held, files = index.covering([p for p in paths if p not in stale] if stale else paths)
    uncovered = _objects(s for s, p in zip(sources, paths, strict=True) if p not in held)
    # Files the index does not hold as they are now: read them (a vanished file is
    # skipped there and named, as any file that cannot be read).
    scanned = _read(uncovered, matcher, filters, storage, notes)
    if refreshed.stale:
        notes.append(
            f"{len(refreshed.stale)} file(s) the index could not bring up to date were read"
        )
    loaded: dict[str, tuple[Entry | None, Sequence[Entry]]] = {}
    verified = _verify(
        index.candidates(
            match,
            files=files,
            roles=sorted(filters.roles) if filters.roles is not None else None,
            since=filters.since,
            until=filters.until,
        ),
        matcher,
        filters,
        storage,
        sources,
        loaded,
    )
    merged = heapq.merge(_in_time_order(verified), scanned, key=_order)
    hits: list[SearchHit] = []
    for hit in merged:
        hits.append(hit)
        if limit is not None and len(hits) >= limit:
            break
    mode: Literal["index", "mixed"] = "mixed" if uncovered else "index"
    return SearchResult(hits, mode, notes, scanned=len(uncovered), refreshed=refreshed)


def _in_database(
    index: PostgresIndex,
    sources: list[SessionSource],
    matcher: Matcher,
    filters: Filters,
    storage: SessionStorage,
    limit: int | None,
    notes: list[str],
    progress: Callable[[int, int], None] | None,
) -> SearchResult:
    """`_indexed` for a PostgreSQL store: its own index (`_pg_index`) refreshed and
    asked, the files it does not hold read."""
    try:
        refreshed, files, _ = index.refresh(sources, progress)
    except OSError as exc:  # no privilege to write it, a newer sessiontree's tables
        notes.append(f"the database's search index cannot be used ({exc}): every session was read")
        return _scanned(sources, matcher, filters, storage, limit, notes)
    held = set(files.values())
    uncovered = [s for s in sources if s.path not in held]
    scanned = _read(uncovered, matcher, filters, storage, notes)
    if refreshed.stale:
        notes.append(
            f"{len(refreshed.stale)} file(s) the index could not bring up to date were read"
        )
    hits: list[SearchHit] = []
    with closing(index.hits(files, matcher, filters)) as verified:
        for hit in heapq.merge(_in_time_order(verified), scanned, key=_order):
            hits.append(hit)
            if limit is not None and len(hits) >= limit:
                break
    mode: Literal["index", "mixed"] = "mixed" if uncovered else "index"
    return SearchResult(hits, mode, notes, scanned=len(uncovered), refreshed=refreshed)


def _time(hit: SearchHit) -> int:
    return hit.timestamp if hit.timestamp is not None else -1


def _order(hit: SearchHit) -> tuple[int, str, int]:
    """Hits are listed newest first; entries of the same millisecond by path and line."""
    return -_time(hit), hit.path, hit.line


def _in_time_order(keyed: Iterator[tuple[int, SearchHit]]) -> Iterator[SearchHit]:
    """Hits in `_order` from hits in key order. A key is at or after its entry's time
    and every later key is smaller, so a hit held back can go once the keys pass it."""
    held: list[tuple[tuple[int, str, int], SearchHit]] = []
    for key, hit in keyed:
        heapq.heappush(held, (_order(hit), hit))
        while held and -held[0][0][0] > key:
            yield heapq.heappop(held)[1]
    while held:
        yield heapq.heappop(held)[1]


def _verify(
    candidates: Iterator[Candidate],
    matcher: Matcher,
    filters: Filters,
    storage: SessionStorage,
    sources: list[Source],
    loaded: dict[str, tuple[Entry | None, Sequence[Entry]]],
) -> Iterator[tuple[int, SearchHit]]:
    """The candidates whose entry, read again from its file, matches."""
    loaders = {s.path: s.load for s in sources if not isinstance(s, str) and s.load is not None}
    for candidate in candidates:
        entry = _candidate_entry(candidate, storage, loaders, loaded)
        if entry is None:
            continue
        if candidate.entry_id is not None and entry.get("id") != candidate.entry_id:
            continue  # the file changed since the refresh
        hit = entry_hit(
            candidate.path, candidate.session_id, entry, candidate.line, matcher, filters
        )
        if hit is not None:
            yield candidate.key, hit


def _candidate_entry(
    candidate: Candidate,
    storage: SessionStorage,
    loaders: dict[str, Any],
    loaded: dict[str, tuple[Entry | None, Sequence[Entry]]],
) -> Entry | None:
    if candidate.offset < 0:
        load = loaders.get(candidate.path)
        if load is None:
            return None
        if candidate.path not in loaded:
            try:
                loaded[candidate.path] = load(candidate.path)
            except Exception:
                loaded[candidate.path] = (None, [])
        entries = loaded[candidate.path][1]
        if not 0 < candidate.line <= len(entries):
            return None
        value: Any = entries[candidate.line - 1]
        return value if isinstance(value, dict) else None
    try:
        raw = read_range(storage, candidate.path, candidate.offset, candidate.length)
    except OSError:
        return None
    if len(raw) != candidate.length:
        return None
    return loads_object(raw)
