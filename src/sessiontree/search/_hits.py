"""Hits: one entry (or session title) that matches, with its snippet; the filters of a
search (roles, time range); the hits of several stores as one store's."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from sessiontree.format import Entry, entry_role, entry_text, parse_iso_ms
from sessiontree.search._query import Matcher, make_matcher

__all__ = [
    "Filters",
    "SearchHit",
    "entry_hit",
    "merge_store_hits",
    "snippet",
    "title_hits",
    "title_test",
]


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One entry whose text contains the query."""

    path: str
    session_id: str
    entry_id: str | None
    """None in v1 files, whose entries get ids only when loaded."""
    line: int
    role: str
    before: str
    match: str
    after: str
    timestamp: int | None = None
    """The entry's time (epoch ms), None when it has none."""

    @property
    def snippet(self) -> str:
        return self.before + self.match + self.after


def _oneline(text: str) -> str:
    return " ".join(text.split())


_SPACES = re.compile(r"\s+")
_ESCAPE = re.compile(r'\\(["\\/nrt])')
_UNESCAPED = {'"': '"', "\\": "\\", "/": "/", "n": "\n", "r": "\r", "t": "\t"}


def _unescape(text: str) -> str:
    """JSON's escapes as the characters they stand for. An entry's text holds tool
    arguments and some tools' output as JSON (Codex keeps a shell call's output as a
    JSON document), where a newline reads as `\\n` and a quote as `\\"`; a snippet
    shows them as the text does. (A lone backslash followed by n in plain text, as in
    a Windows path, reads as a space too: rare in a snippet, and harmless there.)"""
    return _ESCAPE.sub(lambda m: _UNESCAPED[m.group(1)], text) if "\\" in text else text


def snippet(text: str, start: int, end: int, width: int = 100) -> tuple[str, str, str]:
    """(before, match, after) around `text[start:end]`, ~`width` chars.

    Every run of whitespace, in the window, is one space, including a run that
    crosses an edge of the match (it stays on the side where it begins), so
    `before + match + after` reads as the text does and `match` is the matched text
    with its whitespace collapsed, never shifted.
    """
    context = max(10, (width - (end - start)) // 2)
    lo, hi = max(0, start - context), min(len(text), end + context)
    pieces = [text[lo:start], text[start:end], text[end:hi]]
    out = [_SPACES.sub(" ", _unescape(piece)) for piece in pieces]
    # A run split by an edge of the match: one space, on the side it begins.
    for i in (0, 1):
        if out[i].endswith(" "):
            j = i + 1
            while j < 3 and out[j].startswith(" "):
                out[j] = out[j][1:]
                if out[j]:
                    break
                j += 1
    before, match, after = out
    if lo > 0:
        before = "…" + before.lstrip()
    elif not match.strip() or before.strip():
        before = before.lstrip()
    else:
        before = before.strip()
    if hi < len(text):
        after = after.rstrip() + "…"
    else:
        after = after.rstrip()
    return before, match, after


@dataclass(frozen=True, slots=True)
class Filters:
    roles: frozenset[str] | None = None
    since: int | None = None
    until: int | None = None

    def time_ok(self, ts: int | None) -> bool:
        if self.since is None and self.until is None:
            return True
        if ts is None:
            return False
        return (self.since is None or ts >= self.since) and (self.until is None or ts <= self.until)


def entry_hit(
    path: str,
    session_id: str,
    entry: Entry,
    number: int,
    matcher: Matcher,
    filters: Filters,
) -> SearchHit | None:
    """The hit for one parsed entry, or None when it does not match."""
    role = entry_role(entry)
    if filters.roles is not None and role not in filters.roles:
        return None
    ts = parse_iso_ms(entry.get("timestamp"))
    if not filters.time_ok(ts):
        return None
    text = entry_text(entry)  # deep tool arguments included (export handles them)
    span = matcher.find(text)
    if span is None:
        return None
    before, match, after = snippet(text, span[0], span[1])
    entry_id = entry.get("id")
    return SearchHit(
        path,
        session_id,
        entry_id if isinstance(entry_id, str) else None,
        number,
        role,
        before,
        match,
        after,
        ts,
    )


def title_test(
    query: str, *, case_sensitive: bool = False, regex: bool = False
) -> Callable[[str], bool] | None:
    """A test of a session's title as listed (before `format.clean_title`) that is true
    of every title `title_hits` can match: each whitespace-free part of a substring
    query is in it (as `Substring` folds case). None: no test (a regular expression).

    Why none is missed: `clean_title` keeps parts of the title (a prefix, a command's
    name and arguments, the text around tags it drops) joined by single spaces, so
    each run of non-space characters of the cleaned title is in the title itself; a
    part of the query holds no whitespace, so where the query matches, each part of it
    lies in one such run. Casefolding maps each character on its own and never makes
    whitespace of one that is not, so the same holds of the casefolded texts."""
    if regex:
        return None
    parts = (query if case_sensitive else query.casefold()).split()
    if not parts:
        return None
    if case_sensitive:
        return lambda title: all(part in title for part in parts)
    if len(parts) == 1:
        part = parts[0]
        return lambda title: part in title.casefold()
    return lambda title: all(part in title.casefold() for part in parts)


def title_hits(
    titles: Iterable[tuple[str, str, str | None, int | None]],
    query: str,
    *,
    case_sensitive: bool = False,
    regex: bool = False,
    roles: Iterable[str] | None = None,
    since: int | None = None,
    until: int | None = None,
) -> list[SearchHit]:
    """Hits on session titles: for each (path, session id, title, modified ms) whose
    title matches, a hit of role `title` (no entry; line 0), matched as entries are.
    `roles` without `title` finds none; `since`/`until` apply to the modified time."""
    if not query or (roles is not None and "title" not in set(roles)):
        return []
    matcher = make_matcher(query, regex, case_sensitive)
    filters = Filters(None, since, until)
    hits = []
    for path, session_id, title, modified in titles:
        if not title or not filters.time_ok(modified):
            continue
        span = matcher.find(title)
        if span is None:
            continue
        before, match, after = snippet(title, span[0], span[1])
        hits.append(SearchHit(path, session_id, None, 0, "title", before, match, after, modified))
    return hits


class _Ranked(Protocol):
    @property
    def role(self) -> str: ...
    @property
    def timestamp(self) -> int | None: ...


_R = TypeVar("_R", bound=_Ranked)


def merge_store_hits(groups: Sequence[Sequence[_R]], modes: Iterable[str]) -> tuple[list[_R], str]:
    """The hits of several stores' searches as one store's search gives them (titles
    first, then newest first; one group keeps its order), and their one mode (`mixed`
    when they differ; `index` when there was none)."""
    hits = [hit for group in groups for hit in group]
    if len(groups) > 1:
        hits.sort(key=lambda h: (h.role != "title", -(h.timestamp or 0)))
    distinct = set(modes)
    mode = distinct.pop() if len(distinct) == 1 else "mixed" if distinct else "index"
    return hits, mode
