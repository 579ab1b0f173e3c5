"""The scan: every file read, line by line, for the entries that match.

One loop for every file a search reads (`search_sessions`: the API's scan, and the
fallback of `search` for what the index does not answer), with one rule for errors: a
file that cannot be read (an OSError, or a loader that fails on it) is skipped and
named in `skipped` with the reason; a regular expression over its time limit ends the
search (`RegexTimeoutError`). A file that is not a session is no error: it has no hits.
A line whose raw bytes cannot hold the query is not parsed (`_query.Prefilter`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator

from sessiontree.format import head_kind, iter_jsonl_bytes, loads_line, loads_object
from sessiontree.search._hits import Filters, SearchHit, entry_hit
from sessiontree.search._index_rows import SessionSource
from sessiontree.search._query import (
    EscapeWatch,
    Matcher,
    Prefilter,
    RegexTimeoutError,
    make_matcher,
)
from sessiontree.storage import SessionStorage, default_storage, read_chunks

__all__ = ["Progress", "scan_sources", "search_sessions"]

Progress = Callable[[str], None]


def search_sessions(
    paths: Iterable[str | SessionSource],
    query: str,
    *,
    case_sensitive: bool = False,
    limit: int | None = None,
    storage: SessionStorage | None = None,
    progress: Progress | None = None,
    regex: bool = False,
    roles: Iterable[str] | None = None,
    since: int | None = None,
    until: int | None = None,
    skipped: list[tuple[str, str]] | None = None,
) -> Iterator[SearchHit]:
    """Scan: yield entries containing `query` (matching it with `regex`), file by
    file, in file order; `roles`, `since`/`until` (epoch ms) filter.

    A file that is not a session has no hits; one that cannot be read is skipped and
    added to `skipped` as (path, why) when given. RegexTimeoutError (a regular
    expression over its `regex_time_limit`) ends the scan.
    """
    if not query:
        return
    matcher = make_matcher(query, regex, case_sensitive)
    filters = Filters(frozenset(roles) if roles is not None else None, since, until)
    sources = [p if isinstance(p, SessionSource) else SessionSource(p) for p in paths]
    yield from scan_sources(
        sources, matcher, filters, default_storage(storage), limit, progress, skipped
    )


def scan_sources(
    sources: Iterable[SessionSource],
    matcher: Matcher,
    filters: Filters,
    storage: SessionStorage,
    limit: int | None = None,
    progress: Progress | None = None,
    skipped: list[tuple[str, str]] | None = None,
) -> Iterator[SearchHit]:
    """The scan loop (see the module docstring for its rule on errors)."""
    found = 0
    for source in sources:
        if progress is not None:
            progress(source.path)
        try:
            if source.load is None:
                hits = list(_search_file(source.path, matcher, filters, storage))
            else:
                hits = list(_search_loaded(source, matcher, filters))
        except RegexTimeoutError:
            raise  # the search is over, not this file
        except Exception as exc:  # unreadable, or a loader that failed on it
            if skipped is not None:
                skipped.append((source.path, _why(exc)))
            continue
        for hit in hits:
            yield hit
            found += 1
            if limit is not None and found >= limit:
                return


def _why(exc: Exception) -> str:
    """What a skipped file's error says, without the path the caller names."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def _search_file(
    path: str, matcher: Matcher, filters: Filters, storage: SessionStorage
) -> Iterator[SearchHit]:
    session_id: str | None = None
    may_match = matcher.prefilter()
    # Until a chunk holds `\u`, no line read so far does: the cheaper test is enough.
    chunks = EscapeWatch(read_chunks(storage, path))
    for number, raw, _ in iter_jsonl_bytes(chunks):
        if not raw or raw.isspace():
            continue
        if session_id is None:
            try:
                value = loads_line(raw)
            except (ValueError, UnicodeError):
                continue
            if not isinstance(value, dict):
                continue  # not an object: skipped, as the loader does
            kind = head_kind(value, number == 1)
            if kind == "slot":
                continue
            if kind == "invalid":
                return
            session_id = str(value["id"])
            continue
        if isinstance(may_match, Prefilter) and not (
            may_match(raw) if chunks.seen else may_match.unescaped(raw)
        ):
            continue
        entry = loads_object(raw)
        if entry is None:
            continue
        hit = entry_hit(path, session_id, entry, number, matcher, filters)
        if hit is not None:
            yield hit


def _search_loaded(
    source: SessionSource, matcher: Matcher, filters: Filters
) -> Iterator[SearchHit]:
    assert source.load is not None
    header, entries = source.load(source.path)
    if header is None:
        return
    session_id = str(header.get("id", os.path.basename(source.path)))
    for position, entry in enumerate(entries, start=1):
        if isinstance(entry, dict):
            hit = entry_hit(source.path, session_id, entry, position, matcher, filters)
            if hit is not None:
                yield hit
