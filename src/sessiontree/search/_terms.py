"""The content index's words: how an entry's text is cut into terms, and how a query's
literal text becomes the terms (and term prefixes) any matching entry holds.

The FTS table uses SQLite's `ascii` tokenizer on the casefolded text: a term is a
maximal run of ASCII letters and digits and non-ASCII characters, everything else
(ASCII punctuation, spaces, controls) separates terms. That rule is fixed and simple,
so `TERM` here cuts exactly as SQLite does, and the index keeps its vocabulary (each
term once, in a trigram table of its own) to find the terms that contain a piece of
a query. Words are about a sixth as many tokens as trigrams: the index builds several
times faster, and a query asks for a few terms rather than every trigram.

**Why a query's terms select a superset of the matches.** Cut a literal L into
pieces, the maximal runs of term characters. Where L occurs in a text, a piece with a
separator on both sides in L is a whole term of the text; with one on its left only,
the start of a term; on its right only, the end of one; with none, inside one.

**Long runs.** A run longer than `_WINDOW` characters (a hex digest, a paragraph of
Chinese) is indexed as windows of `_WINDOW` characters every `_STEP`, the last one
ending where the run ends: any piece up to `_STEP + 1` characters lies inside one, the
first window starts the run and the last ends it. A longer piece of a query is looked
for by its first `_STEP + 1` characters, inside a term.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Final

__all__ = [
    "MAX_TERMS",
    "Piece",
    "cut",
    "cut_all",
    "fts_text",
    "holds",
    "literal_pieces",
    "quoted",
]

# Spelled as what a term is not (ASCII other than letters and digits): the same
# characters as [0-9a-zA-Z\x80-\U0010ffff], whose range over the whole of Unicode `re`
# takes 13 ms to compile, at every import of a search.
_TERM_CHAR = "[^\x00-/:-@[-`{-\x7f]"
TERM: Final = re.compile(_TERM_CHAR + "+")
"""A term as SQLite's `ascii` tokenizer cuts one (ASCII letters folded there, and
already here: the text is casefolded)."""
_WINDOW = 128
_STEP = 64
_LONG = re.compile(_TERM_CHAR + "{" + str(_WINDOW + 1) + ",}")
MAX_TERMS: Final = 5000
"""A piece inside more terms than this does not narrow the search (`ContentIndex`)."""
MIN_PIECE: Final = 3
"""A piece shorter than this is only looked for when it is a whole term."""

Piece = tuple[str, str]
"""(kind, text): kind is `term` (a whole term), `prefix` (a term starts with it),
`suffix` (a term ends with it) or `inside` (a term contains it)."""


def _windows(match: re.Match[str]) -> str:
    run = match.group()
    starts = [*range(0, len(run) - _WINDOW, _STEP), len(run) - _WINDOW]
    return " ".join(run[s : s + _WINDOW] for s in starts)


def fts_text(text: str) -> str:
    """What the FTS table is given for `text` (casefolded): the text, its long runs as
    windows (see the module docstring)."""
    if len(text) <= _WINDOW or _LONG.search(text) is None:
        return text
    return _LONG.sub(_windows, text)


# ASCII bytes other than letters and digits as spaces: a text's UTF-8 split at spaces
# gives its terms (a non-ASCII character's bytes are all 0x80 or more), twice as fast
# as `TERM.findall`.
_SEPARATORS = bytes(c if c >= 0x80 or chr(c).isalnum() else 0x20 for c in range(256))


def cut(text: str) -> tuple[str, list[bytes]]:
    """`fts_text(text)` and its terms, UTF-8 encoded (the text searched for long runs
    only when it has one)."""
    terms = text.encode("utf-8").translate(_SEPARATORS).split()
    if terms and max(map(len, terms)) > _WINDOW:  # bytes: at least as many as characters
        text = fts_text(text)
        terms = text.encode("utf-8").translate(_SEPARATORS).split()
    return text, terms


def cut_all(texts: list[str]) -> tuple[list[str], list[bytes]]:
    """`cut` of each of `texts` (a file's): their `fts_text`s and all their terms, in
    one pass over them all when none has a long run (joined by a space, a separator,
    they cut into the same terms as one by one)."""
    terms = " ".join(texts).encode("utf-8").translate(_SEPARATORS).split()
    if not terms or max(map(len, terms)) <= _WINDOW:
        return texts, terms
    cut_texts: list[str] = []
    terms = []
    for text in texts:
        indexed, words = cut(text)
        cut_texts.append(indexed)
        terms += words
    return cut_texts, terms


def literal_pieces(literal: str) -> list[Piece]:
    """The pieces of `literal` (casefolded as the index holds text) that any text
    containing it holds, each as the term it must be part of (see the module
    docstring); pieces too short to narrow a search are left out."""
    pieces: list[Piece] = []
    for match in TERM.finditer(literal):
        left, right = match.start() > 0, match.end() < len(literal)
        text = match.group()
        if len(text) > _STEP + 1:
            pieces.append(("inside", text[: _STEP + 1]))
            continue
        kind = "term" if left and right else "prefix" if left else "suffix" if right else "inside"
        if kind == "term" or len(text) >= MIN_PIECE:
            pieces.append((kind, text))
    return pieces


def holds(kind: str, piece: str) -> Callable[[str], bool]:
    """Whether a term of the vocabulary holds `piece` as `kind` says."""
    if kind == "suffix":
        return lambda term: term.endswith(piece)
    if kind == "prefix":
        return lambda term: term.startswith(piece)
    return lambda term: piece in term


def quoted(terms: Iterable[str]) -> list[str]:
    """Terms as FTS5 strings."""
    return ['"' + t.replace('"', '""') + '"' for t in terms]
