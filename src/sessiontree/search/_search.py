"""Read-only full-text search over session files and over the prompt history.

`search` finds the entries whose text (`export.entry_text`: messages, thinking,
tool calls and results, summaries, extension messages, labels) contains a
substring (case-insensitive by default) or matches a regular expression, and
returns one hit per entry with a snippet, newest first. It asks the content
index (`sessiontree.search._content_index`, refreshed first) for the entries holding
every trigram of the query's literal text, then verifies each candidate against
its line in the session file, so the index never changes what is found, only
how fast. Where the index cannot answer (a literal shorter than three
characters, no index, files it could not bring up to date) those files are
scanned, and `SearchResult.notes` says so.

`search_sessions` is that scan: file by file, in file order. A line whose raw
bytes cannot hold the query is not parsed (`_prefilter` says why that never
hides a match), so a scan costs little more than reading the files.

`read_history` (from `sessiontree.history._history`, where its one query lives) reads
`history.db` without writing to it, unlike `HistoryStorage.open`.
"""

from __future__ import annotations

import heapq
import os
import re
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar

from sessiontree._util.cachedb import is_locked
from sessiontree._util.env import agent_dir_or_default
from sessiontree.errors import SessionTreeError
from sessiontree.format import (
    Entry,
    entry_role,
    entry_text,
    head_kind,
    iter_jsonl_bytes,
    loads_line,
    loads_object,
    parse_iso_ms,
)
from sessiontree.history import read_history
from sessiontree.search._content_index import Candidate, ContentIndex, Refreshed
from sessiontree.search._index_rows import (
    MIN_QUERY_CHARS,
    SessionSource,
    index_text,
    query_trigrams,
)
from sessiontree.storage import (
    HostFilesystem,
    SessionStorage,
    default_storage,
    read_chunks,
    read_range,
)

__all__ = [
    "RegexTimeoutError",
    "SearchHit",
    "SearchResult",
    "merge_store_hits",
    "nested_repeat",
    "read_history",
    "regex_literals",
    "regex_time_limit",
    "search",
    "search_sessions",
    "snippet",
    "title_hits",
]

Progress = Callable[[str], None]


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
    out = [_SPACES.sub(" ", piece) for piece in pieces]
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


# Characters that end a run of "plain" characters (see `_prefilter`): every character
# JSON may write as a short escape (quote, backslash, slash, controls), every character
# entry_text puts around or between the pieces it copies from the entry, and those
# that never stand for themselves in the raw bytes (surrogates, U+FFFD from invalid UTF-8).
_RUN = re.compile(r"""[^\x00-\x1f"\\/\[\]{}:,'$>\ud800-\udfff\ufffd]+""")
# Text entry_text makes up rather than copies, as whole runs: `[image]`, str() and
# json.dumps() of non-strings (Python spellings, reformatted numbers).
_MADE_UP: tuple[str, ...] = ("image", "None", "True", "False", "true", "false", "null")
_MADE_UP += ("NaN", "nan", "-Infinity", "-inf")
_MADE_UP_FOLDED = tuple(dict.fromkeys(word.casefold() for word in _MADE_UP))
_NUMBER_CHARS = frozenset("0123456789.e+-")
# What follows the backslash of an escape that repr() writes for a character the raw
# line may hold as it is (\x7f, \xa0, \u2028, \U000e0001).
_ESCAPE_TAIL = re.compile("[uUxX]?[0-9a-fA-F]{0,8}")
# A regex finds these two bytes ~3x faster than `in` (backslashes are frequent).
_UNICODE_ESCAPE = re.compile(rb"\\u").search
_SHORT_BF = re.compile(rb"\\[bf]").search  # an alternation with DEL would scan 10x slower


def _anchors(needle: str, case_sensitive: bool, repr_escapes: bool = True) -> list[str]:
    """Pieces of `needle` that the raw bytes of a matching line must contain (see `_prefilter`).

    `repr_escapes=False`: for a line whose text can hold no repr() escape.
    """
    made_up = _MADE_UP if case_sensitive else _MADE_UP_FOLDED
    anchors: list[str] = []
    for run in _RUN.finditer(needle):
        text = run.group()
        after = needle[run.start() - 1] if run.start() else ""
        if text[0] == " ":
            text = text[1:]  # may be the space after "$", ">", "]", ":" or ","
        elif repr_escapes and after in ("", "\\"):
            # May begin inside an escape that repr() wrote: drop the longest prefix
            # that could be the tail of one.
            cut = _ESCAPE_TAIL.match(text)
            text = text[cut.end() if cut is not None else 0 :]
        if not text or all(c in _NUMBER_CHARS for c in text):
            continue
        if any(text in word for word in made_up):
            continue  # could lie wholly in made-up text
        anchors.append(text)
    return sorted(set(anchors), key=len, reverse=True)


def _prefilter(query: str, case_sensitive: bool = False) -> _Prefilter:
    """A test on a line's raw bytes that is true for every line `query` can match.

    The match runs on `entry_text(entry)` (casefolded unless `case_sensitive`),
    call it T. Why the test never rejects a line that matches:

    1. T is made of pieces copied from strings in the entry (text, thinking,
       command, output, summary, label, task, model, tool name, the keys and
       strings inside tool arguments) and of made-up text: "$ ", ">>> ", "[image]",
       "[" and "] " around a tool name, the "\\n" between blocks, json.dumps() of
       tool arguments (`{"k": v}` with spaces, its own escapes and spelling of
       numbers) and str() of non-strings (None, True, 1e+100, reprs of lists).
    2. Cut T into runs at the characters `_RUN` excludes. A run never holds
       parts of two pieces, as entry_text always puts an excluded character
       between two pieces, and between a piece and made-up text, except that a
       made-up space (after "$", ">", "]", ":" or ",") may start a run. So a run
       is, after that space: (a) inside one copied piece; (b) made-up: one of
       `_MADE_UP` or a number; (c) an escape repr() wrote after a backslash
       (xHH, uHHHH, UHHHHHHHH), then copied text. The other escapes json.dumps()
       and repr() write are the raw line's own (\\n \\t \\r, json.dumps' \\b \\f:
       JSON must escape those characters, as \\uXXXX or so), stand for characters
       JSON must write as \\uXXXX (point 4), or end at an excluded character.
    3. Cut the (casefolded) query the same way. Each query run is a whole run of
       T, but the first may start and the last may end inside one. So a query
       run, less a leading space, that is not in a made-up word or a number is
       in case (a) or (c); (c) needs a backslash before it, or it is the first
       run: then the longest prefix that could end an escape is dropped. What is
       left (an anchor) lies inside one copied piece. repr() escapes \\b, \\f (short
       escapes in JSON), DEL and non-ASCII characters only: when dropping leaves
       no anchor, a line holding none of those keeps the whole runs.
    4. A copied piece without excluded characters is in the raw line as UTF-8,
       unless a character of it was written as \\uXXXX: any writer may do that
       to any character, so a line holding the bytes `\\u` is always parsed.
       Short escapes stand for excluded characters only; invalid UTF-8 becomes
       U+FFFD, which is excluded.
    5. casefold() maps each character on its own, so casefold(piece) lies in
       casefold(decoded line); for an ASCII line that is line.lower(), and an
       ASCII anchor in line.lower() is in the casefolded line.

    A query with no anchor (only digits, `image`, `add`, punctuation) parses
    every line.
    """
    needle = query if case_sensitive else query.casefold()
    anchors = _anchors(needle, case_sensitive)
    whole = _anchors(needle, case_sensitive, repr_escapes=False)
    if anchors or not whole:
        return _Prefilter(_unescaped_test(anchors, case_sensitive))
    # Only the escape tails left nothing ("add", "cafe"): keep the whole anchors for
    # lines whose text can hold no repr() escape, the usual case.
    test = _unescaped_test(whole, case_sensitive)
    return _Prefilter(lambda raw: test(raw) or _may_hold_repr_escapes(raw))


def _may_hold_repr_escapes(raw: bytes) -> bool:
    """Whether str() of a value in this line (no `\\u`) may write \\xHH, \\uHHHH or \\UHHHHHHHH.

    repr() writes those for \\b, \\f (JSON: short escapes), DEL and non-ASCII
    characters; \\t \\n \\r as the raw line does.
    """
    return not raw.isascii() or b"\x7f" in raw or _SHORT_BF(raw) is not None


@dataclass(frozen=True, slots=True)
class _Prefilter:
    """`_prefilter`'s test; `unescaped` alone is enough for a line without `\\u`."""

    unescaped: Callable[[bytes], bool]

    def __call__(self, raw: bytes) -> bool:
        return self.unescaped(raw) or _UNICODE_ESCAPE(raw) is not None


def _unescaped_test(anchors: list[str], case_sensitive: bool) -> Callable[[bytes], bool]:
    """Whether a line holding no `\\u` may match: it contains every anchor."""
    if not anchors:
        return lambda raw: True
    encoded = [anchor.encode() for anchor in anchors]
    # The longest anchor first and alone: most lines fail it, and cheaply.
    first, rest = encoded[0], encoded[1:]
    if case_sensitive:
        return lambda raw: first in raw and all(anchor in raw for anchor in rest)

    def folded(raw: bytes) -> bool:
        # casefold() maps a few non-ASCII letters to ASCII ("ß" -> "ss", Kelvin "K" -> "k");
        # an ASCII line casefolds to ASCII.
        if raw.isascii():
            return False
        text = raw.decode("utf-8", "replace").casefold()
        return all(anchor in text for anchor in anchors)

    if not first.isascii() or not all(anchor.isascii() for anchor in rest):
        return folded

    def ascii_anchors(raw: bytes) -> bool:
        lowered = raw.lower()
        if first in lowered and all(anchor in lowered for anchor in rest):
            return True
        return folded(raw)

    return ascii_anchors


class _EscapeWatch:
    """Passes a file's chunks through, noting once any of them holds the bytes `\\u`."""

    __slots__ = ("_chunks", "seen")

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = chunks
        self.seen = False

    def __iter__(self) -> Iterator[bytes]:
        last = b""
        for chunk in self._chunks:
            if not self.seen and (
                _UNICODE_ESCAPE(chunk) is not None or (last == b"\\" and chunk[:1] == b"u")
            ):
                self.seen = True
            if chunk:
                last = chunk[-1:]
            yield chunk


# ---------------------------------------------------------------------------- matching


class _Matcher(Protocol):
    literals: list[str]
    """Texts every matching entry text holds (as is, or up to case when insensitive)."""

    def find(self, text: str) -> tuple[int, int] | None: ...

    def prefilter(self) -> Callable[[bytes], bool] | None: ...


class _Substring:
    def __init__(self, query: str, case_sensitive: bool) -> None:
        self.query = query
        self.case_sensitive = case_sensitive
        self.needle = query if case_sensitive else query.casefold()
        self.literals = [query]

    def find(self, text: str) -> tuple[int, int] | None:
        haystack = text if self.case_sensitive else text.casefold()
        start = haystack.find(self.needle)
        if start < 0:
            return None
        end = start + len(self.needle)
        if len(haystack) == len(text):
            return start, end  # every character folded to one: offsets are the text's
        return _unfold_span(text, start, end)

    def prefilter(self) -> _Prefilter:
        return _prefilter(self.query, self.case_sensitive)


def _unfold_span(text: str, start: int, end: int) -> tuple[int, int]:
    """The span of `text` whose casefolded form covers `casefold(text)[start:end]`.

    casefold() maps each character on its own, to one or more characters (ß -> ss,
    ﬁ -> fi, İ -> i̇): a match that begins or ends inside one character's folded form
    takes that whole character.
    """
    folded = 0
    first = last = len(text)
    for i, char in enumerate(text):
        size = len(char.casefold())
        if first == len(text) and folded + size > start:
            first = i
        if folded + size >= end:
            last = i + 1
            break
        folded += size
    return first, max(last, first)


# Under IGNORECASE `re` matches a letter to every character of its case class, e.g.
# "i" to "ı" and "İ", whose casefold differs from "i"'s: only ASCII characters other
# than "i"/"I" are kept as literal text (test_search_index proves the set).
_CASE_SAFE = frozenset(chr(c) for c in range(128)) - {"i", "I"}


def _parse(pattern: str, flags: int = 0) -> tuple[Any, Any] | None:
    """re's parse tree of `pattern` and re's opcode constants (None: a pattern re
    refuses, or a Python without re's parser, where the checks below find nothing)."""
    try:
        from re import _constants, _parser  # type: ignore[attr-defined]
    except ImportError:  # pragma: no cover - a Python without the parser
        return None
    try:
        return _parser.parse(pattern, flags), _constants
    except re.error:
        return None


def _inner(arg: Any) -> list[Any]:
    """The sub-patterns inside one parsed item's argument (a group's, a repeat's body,
    a branch's alternatives)."""
    parts = [arg] if hasattr(arg, "data") else arg if isinstance(arg, (list, tuple)) else []
    inner: list[Any] = []
    for part in parts:
        if hasattr(part, "data"):
            inner.append(part)
        elif isinstance(part, list) and all(hasattr(p, "data") for p in part):
            inner += part
    return inner


def nested_repeat(pattern: str) -> bool:
    """Whether `pattern` repeats something that itself repeats or alternates, as
    `(x+x+)+y` or `(a|aa)*b`: Python's backtracking engine can take exponential time
    on such a pattern (`(x+x+)+y` on 30 x's: hours), and nothing interrupts it. Not
    every slow pattern (`x*x*x*y` is polynomial), the common catastrophic kind."""
    found = _parse(pattern)
    if found is None:
        return False
    parsed, c = found
    BRANCH, MAX_REPEAT, MIN_REPEAT = c.BRANCH, c.MAX_REPEAT, c.MIN_REPEAT

    def walk(items: Any, inside: bool) -> bool:
        for op, arg in items:
            if op in (MAX_REPEAT, MIN_REPEAT) and arg[1] > 1:
                if inside or walk(arg[2], True):
                    return True
            elif op is BRANCH:
                if inside or any(walk(branch, inside) for branch in arg[1]):
                    return True
            elif isinstance(arg, (list, tuple)):
                for part in arg:
                    if hasattr(part, "data") or isinstance(part, list):
                        if walk(part, inside):
                            return True
        return False

    return walk(parsed, False)


def regex_literals(pattern: str | re.Pattern[str]) -> list[str]:
    """Runs of literal text every match of `pattern` contains (possibly none).

    Only literals at the top level of the pattern count (none inside groups,
    alternations or repeats); under IGNORECASE, only characters whose every
    case-insensitive match casefolds alike (`_CASE_SAFE`).
    """
    if isinstance(pattern, re.Pattern):
        found = _parse(pattern.pattern, pattern.flags)
    else:
        found = _parse(pattern)
    if found is None:
        return []
    parsed, c = found
    LITERAL = c.LITERAL
    ignorecase = bool(parsed.state.flags & re.IGNORECASE)
    runs: list[str] = []
    current: list[str] = []
    for op, arg in parsed:
        char = chr(arg) if op is LITERAL else None
        if char is not None and (not ignorecase or char in _CASE_SAFE):
            current.append(char)
            continue
        if current:
            runs.append("".join(current))
            current = []
    if current:
        runs.append("".join(current))
    return runs


_DEADLINE: ContextVar[tuple[float, float] | None] = ContextVar(
    "sessiontree_regex_deadline", default=None
)


class RegexTimeoutError(SessionTreeError):
    """A regular expression took longer to match than `regex_time_limit` allows."""


@contextmanager
def regex_time_limit(seconds: float) -> Iterator[None]:
    """Searches run in this context (`search_sessions`, a generator: iterated in it)
    stop matching regular expressions after `seconds` in all (`RegexTimeoutError`).
    Python's `re` backtracks without a bound (`x*x*x*x*y` on a long line is polynomial,
    `(x+x+)+y` exponential) and nothing interrupts it, so these searches match with the
    `regex` package, which takes a time limit (the same syntax and matches as `re` in
    its VERSION0 mode). A pattern `regex` does not read (`a{i`, `[[::]]`: literal text
    to `re`) or whose repeats `regex` would unroll past `_UNROLLED_LIMIT` items (memory:
    `x{1000000000}`) or holds more than `_LITERAL_RUN_LIMIT` characters in a row (time
    outside the limit) is refused (SessionTreeError) rather than matched without a bound.
    Without that package installed, matching is unbounded, as outside this context."""
    token = _DEADLINE.set((time.monotonic() + seconds, seconds))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


_UNROLLED_LIMIT = 100_000
"""How many pattern items a bounded regular expression may repeat, in all (see `_Regex`)."""


def _unrolled_size(pattern: str, flags: int) -> int:
    """The items `pattern` must match, its repeats' minimum counts unrolled (a run of
    literals counted a character at a time: at most what `regex` builds)."""
    found = _parse(pattern, flags)
    if found is None:
        return 0
    parsed, c = found
    repeats = (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT)

    def size(items: Any) -> int:
        total = 0
        for op, arg in items:
            if op in repeats:
                total += max(arg[0], 1) * size(arg[2])
                continue
            total += 1 + sum(size(part) for part in _inner(arg))
        return total

    return size(parsed)


_LITERAL_RUN_LIMIT = 1000
"""The longest run of characters in a row a bounded regular expression may hold (see
`_Regex`)."""


def _literal_run(pattern: str, flags: int) -> int:
    """The most single characters (literals, sets) `pattern` holds in a row, groups
    without a number taken as their contents, as `regex` joins them into one string."""
    found = _parse(pattern, flags)
    if found is None:
        return 0
    parsed, c = found
    SUBPATTERN = c.SUBPATTERN
    single = (c.LITERAL, c.NOT_LITERAL, c.IN)

    def flat(items: Any) -> Iterator[tuple[Any, Any]]:
        for op, arg in items:
            if op is SUBPATTERN and arg[0] is None:
                yield from flat(arg[-1])
            else:
                yield op, arg

    def longest(items: Any) -> int:
        most = run = 0
        for op, arg in flat(items):
            if op in single:
                run += 1
                most = max(most, run)
                continue
            run = 0
            most = max([most, *(longest(part) for part in _inner(arg))])
        return most

    return longest(parsed)


class _Regex:
    def __init__(self, pattern: str, case_sensitive: bool) -> None:
        flags = 0 if case_sensitive else re.IGNORECASE
        try:
            self.rx = re.compile(pattern, flags)
        except re.error as exc:
            raise SessionTreeError(f"bad regular expression {pattern!r}: {exc}") from None
        self.literals = regex_literals(self.rx)
        self.limit = _DEADLINE.get()
        self.timed: Any = None
        if self.limit is not None:
            try:
                import regex as bounded
            except ImportError:  # not installed: unbounded, as the context's doc says
                return
            if _unrolled_size(pattern, flags) > _UNROLLED_LIMIT:
                # `regex` unrolls what a repeat must match (~270 bytes each time):
                # x{1000000000} took all the memory there was, before any time limit.
                raise SessionTreeError(
                    f"the regular expression {pattern!r} repeats more than"
                    f" {_UNROLLED_LIMIT:,} times in all; write fewer repeats (x+ for x{{200000,}})"
                )
            if _literal_run(pattern, flags) > _LITERAL_RUN_LIMIT:
                # `regex` builds its table for a string to find in time that grows as its
                # cube, on the first search and outside the time limit: 4,000 characters in
                # a row took 17 s, 16,000 (a long URL) would take most of an hour.
                raise SessionTreeError(
                    f"the regular expression holds more than {_LITERAL_RUN_LIMIT:,}"
                    " characters in a row; search for a shorter part of the text"
                )
            try:
                self.timed = bounded.compile(pattern, bounded.VERSION0 | flags)
            except Exception as exc:
                # A pattern `regex` reads otherwise than `re` (a{i, [[::]]): matching it
                # with `re` would be unbounded, what this context is there to prevent.
                raise SessionTreeError(
                    f"the regular expression {pattern!r} cannot be matched within a time"
                    f" limit ({exc}); escape a literal {{ or [ (\\{{, \\[)"
                ) from None

    def find(self, text: str) -> tuple[int, int] | None:
        if self.timed is None or self.limit is None:
            found = self.rx.search(text)
        else:
            deadline, seconds = self.limit
            try:
                found = self.timed.search(text, timeout=max(deadline - time.monotonic(), 0.0))
            except TimeoutError:
                raise RegexTimeoutError(
                    f"the regular expression {self.rx.pattern!r} took more than"
                    f" {seconds:g} s to match; a pattern with fewer repeats of what may be"
                    " anything (.*, x*) runs fast"
                ) from None
        return found.span() if found is not None else None

    def prefilter(self) -> None:
        return None


def _matcher(query: str, regex: bool, case_sensitive: bool) -> _Matcher:
    return _Regex(query, case_sensitive) if regex else _Substring(query, case_sensitive)


@dataclass(frozen=True, slots=True)
class _Filters:
    roles: frozenset[str] | None = None
    since: int | None = None
    until: int | None = None

    def time_ok(self, ts: int | None) -> bool:
        if self.since is None and self.until is None:
            return True
        if ts is None:
            return False
        return (self.since is None or ts >= self.since) and (self.until is None or ts <= self.until)


def _entry_hit(
    path: str,
    session_id: str,
    entry: Entry,
    number: int,
    matcher: _Matcher,
    filters: _Filters,
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
    matcher = _matcher(query, regex, case_sensitive)
    filters = _Filters(None, since, until)
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


# ---------------------------------------------------------------------------- scanning


def search_sessions(
    paths: Iterable[str],
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
) -> Iterator[SearchHit]:
    """Scan: yield entries containing `query` (matching it with `regex`), file by
    file, in file order; `roles`, `since`/`until` (epoch ms) filter.

    Files that cannot be read or are not sessions are skipped.
    """
    if not query:
        return
    storage = default_storage(storage)
    matcher = _matcher(query, regex, case_sensitive)
    filters = _Filters(frozenset(roles) if roles is not None else None, since, until)
    found = 0
    for path in paths:
        if progress is not None:
            progress(path)
        try:
            hits = list(_search_file(path, matcher, filters, storage))
        except OSError:
            continue
        for hit in hits:
            yield hit
            found += 1
            if limit is not None and found >= limit:
                return


def _search_file(
    path: str, matcher: _Matcher, filters: _Filters, storage: SessionStorage
) -> Iterator[SearchHit]:
    session_id: str | None = None
    may_match = matcher.prefilter()
    # Until a chunk holds `\u`, no line read so far does: the cheaper test is enough.
    chunks = _EscapeWatch(read_chunks(storage, path))
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
        if isinstance(may_match, _Prefilter) and not (
            may_match(raw) if chunks.seen else may_match.unescaped(raw)
        ):
            continue
        entry = loads_object(raw)
        if entry is None:
            continue
        hit = _entry_hit(path, session_id, entry, number, matcher, filters)
        if hit is not None:
            yield hit


# ---------------------------------------------------------------------------- with the index


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
) -> SearchResult:
    """Entries of `sources` whose text contains `query` (or matches it with `regex`).

    With the index: newest first (by entry time). `roles` keeps those roles only;
    `since`/`until` (epoch ms, inclusive) entries with a time in that range. The
    index lives in `agent_dir`'s cache (default: the agent dir in effect) and is
    used for the agent dir's files only (a `HostFilesystem` storage); other stores are
    scanned. `index_progress(bytes_done, bytes_total)` reports a refresh.
    Raises SessionTreeError for a bad regular expression.
    """
    matcher = _matcher(query, regex, case_sensitive)
    srcs = [s if isinstance(s, SessionSource) else SessionSource(s) for s in sources]
    filters = _Filters(frozenset(roles) if roles is not None else None, since, until)
    storage = default_storage(storage)
    if not query:
        return SearchResult([], "index")
    trigrams = _trigrams(matcher)
    notes: list[str] = []
    index: ContentIndex | None = None
    if not use_index:
        notes.append("the index was not asked (--no-index)")
    elif not isinstance(storage, HostFilesystem):
        notes.append("the store is not the agent dir's files: every session was read")
    elif not trigrams:
        what = "regular expression" if regex else "search text"
        notes.append(
            f"the {what} has no literal text of {MIN_QUERY_CHARS}+ characters: "
            "every session was read"
        )
    else:
        index = ContentIndex.open(agent_dir_or_default(agent_dir))
        if index is None:
            notes.append("the content index cannot be opened or created: every session was read")
    if index is None or not trigrams:
        return _scanned(srcs, matcher, filters, storage, limit, notes)
    try:
        for attempt in range(2):
            try:
                return _indexed(
                    index, srcs, matcher, trigrams, filters, storage, limit, notes, index_progress
                )
            except sqlite3.DatabaseError as exc:
                # Damaged, or tables not as this version reads them: rebuilt from the
                # files, once. A locked or read-only index is gone without.
                if is_locked(exc) or attempt or not index.reset():
                    break
    finally:
        index.close()
    notes.append("the content index could not be read: every session was read")
    return _scanned(srcs, matcher, filters, storage, limit, notes)


def _scanned(
    sources: list[SessionSource],
    matcher: _Matcher,
    filters: _Filters,
    storage: SessionStorage,
    limit: int | None,
    notes: list[str],
) -> SearchResult:
    """Every file read; hits newest first, as the index answers (file order for ties)."""
    hits = sorted(_scan(sources, matcher, filters, storage, None), key=_order)
    return SearchResult(hits[:limit], "scan", notes, scanned=len(sources))


def _trigrams(matcher: _Matcher) -> list[str]:
    """The trigrams every match's (indexed) text holds: of each long enough literal."""
    out: dict[str, None] = {}
    for literal in matcher.literals:
        if len(index_text(literal)) >= MIN_QUERY_CHARS:
            out.update(dict.fromkeys(query_trigrams(literal)))
    return list(out)


def _scan(
    sources: Sequence[SessionSource],
    matcher: _Matcher,
    filters: _Filters,
    storage: SessionStorage,
    limit: int | None,
) -> Iterator[SearchHit]:
    found = 0
    for source in sources:
        try:
            if source.load is None:
                hits = list(_search_file(source.path, matcher, filters, storage))
            else:
                hits = list(_search_loaded(source, matcher, filters))
        except RegexTimeoutError:
            raise  # the search is over, not this file
        except Exception:  # unreadable, or a loader that failed on it: skipped
            continue
        for hit in hits:
            yield hit
            found += 1
            if limit is not None and found >= limit:
                return


def _search_loaded(
    source: SessionSource, matcher: _Matcher, filters: _Filters
) -> Iterator[SearchHit]:
    assert source.load is not None
    header, entries = source.load(source.path)
    if header is None:
        return
    session_id = str(header.get("id", os.path.basename(source.path)))
    for position, entry in enumerate(entries, start=1):
        if isinstance(entry, dict):
            hit = _entry_hit(source.path, session_id, entry, position, matcher, filters)
            if hit is not None:
                yield hit


def _indexed(
    index: ContentIndex,
    sources: list[SessionSource],
    matcher: _Matcher,
    trigrams: list[str],
    filters: _Filters,
    storage: SessionStorage,
    limit: int | None,
    notes: list[str],
    progress: Callable[[int, int], None] | None,
) -> SearchResult:
    refreshed = index.refresh(sources, storage=storage, progress=progress)
    stale = set(refreshed.stale)
    ids = index.file_ids(s.path for s in sources if s.path not in stale)
    uncovered = [s for s in sources if s.path not in ids]
    # Files the index does not hold as they are now: read them (a vanished file
    # is skipped there too).
    scanned = sorted(_scan(uncovered, matcher, filters, storage, None), key=_order)
    if refreshed.stale:
        notes.append(
            f"{len(refreshed.stale)} file(s) the index could not bring up to date were read"
        )
    loaded: dict[str, tuple[Entry | None, Sequence[Entry]]] = {}
    verified = _verify(
        index.candidates(
            trigrams,
            files=None if len(ids) == index.file_count() else ids.values(),
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
    matcher: _Matcher,
    filters: _Filters,
    storage: SessionStorage,
    sources: list[SessionSource],
    loaded: dict[str, tuple[Entry | None, Sequence[Entry]]],
) -> Iterator[tuple[int, SearchHit]]:
    """The candidates whose entry, read again from its file, matches."""
    loaders = {s.path: s.load for s in sources if s.load is not None}
    for candidate in candidates:
        entry = _candidate_entry(candidate, storage, loaders, loaded)
        if entry is None:
            continue
        if candidate.entry_id is not None and entry.get("id") != candidate.entry_id:
            continue  # the file changed since the refresh
        hit = _entry_hit(
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
