"""What a search looks for: the query as a matcher (a substring, case-insensitive by
default, or a regular expression under a time limit), the literal text any match holds
(what the index is asked for), and the prefilter that passes over a raw line that
cannot hold a match without parsing it (`_prefilter` says why that never hides one).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

from sessiontree.errors import SessionTreeError

__all__ = [
    "CASE_SAFE",
    "EscapeWatch",
    "Matcher",
    "Prefilter",
    "Regex",
    "RegexTimeoutError",
    "Substring",
    "make_matcher",
    "nested_repeat",
    "regex_literals",
    "regex_time_limit",
]


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


def _prefilter(query: str, case_sensitive: bool = False) -> Prefilter:
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
        return Prefilter(_unescaped_test(anchors, case_sensitive))
    # Only the escape tails left nothing ("add", "cafe"): keep the whole anchors for
    # lines whose text can hold no repr() escape, the usual case.
    test = _unescaped_test(whole, case_sensitive)
    return Prefilter(lambda raw: test(raw) or _may_hold_repr_escapes(raw))


def _may_hold_repr_escapes(raw: bytes) -> bool:
    """Whether str() of a value in this line (no `\\u`) may write \\xHH, \\uHHHH or \\UHHHHHHHH.

    repr() writes those for \\b, \\f (JSON: short escapes), DEL and non-ASCII
    characters; \\t \\n \\r as the raw line does.
    """
    return not raw.isascii() or b"\x7f" in raw or _SHORT_BF(raw) is not None


@dataclass(frozen=True, slots=True)
class Prefilter:
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


class EscapeWatch:
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


class Matcher(Protocol):
    literals: list[str]
    """Texts every matching entry text holds (as is, or up to case when insensitive)."""

    def find(self, text: str) -> tuple[int, int] | None: ...

    def prefilter(self) -> Callable[[bytes], bool] | None: ...


class Substring:
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

    def prefilter(self) -> Prefilter:
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
CASE_SAFE = frozenset(chr(c) for c in range(128)) - {"i", "I"}


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
    case-insensitive match casefolds alike (`CASE_SAFE`).
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
        if char is not None and (not ignorecase or char in CASE_SAFE):
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
"""How many pattern items a bounded regular expression may repeat, in all (see `Regex`)."""


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
`Regex`)."""


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


class Regex:
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


def make_matcher(query: str, regex: bool, case_sensitive: bool) -> Matcher:
    return Regex(query, case_sensitive) if regex else Substring(query, case_sensitive)
