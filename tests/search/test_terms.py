from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sessiontree.search._index_rows import index_text
from sessiontree.search._terms import TERM, cut, cut_all, fts_text, holds, literal_pieces
from tests.search.test_content_index import entry_line, found, lines_of, write


@pytest.fixture
def store(agent_dir: Path) -> Path:
    agent_dir.mkdir(parents=True, exist_ok=True)
    return agent_dir / "sessions" / "--p--"


def test_a_literal_is_cut_into_the_terms_any_text_holding_it_holds() -> None:
    assert literal_pieces("foo bar-baz") == [("suffix", "foo"), ("term", "bar"), ("prefix", "baz")]
    assert literal_pieces("ompac") == [("inside", "ompac")]
    # Too short to narrow, unless a whole term.
    assert literal_pieces("a.b") == []
    assert literal_pieces("x.b.y") == [("term", "b")]


@given(
    text=st.text(st.sampled_from("ab1 _.-é€\x00Kß") | st.characters(), max_size=400),
    cut_at=st.tuples(st.integers(0, 400), st.integers(0, 400)),
)
def test_every_piece_of_a_substring_is_held_by_a_term_of_the_text(
    text: str, cut_at: tuple[int, int]
) -> None:
    folded = index_text(text)
    start, end = sorted(cut_at)
    literal = folded[start:end]
    terms = {t.decode() for t in cut(folded)[1]}
    for kind, piece in literal_pieces(literal):
        if kind == "term":
            assert piece in terms
        else:
            assert any(holds(kind, piece)(term) for term in terms)


def test_a_long_run_is_indexed_as_windows_holding_every_short_piece_of_it() -> None:
    run = "".join(random.Random(1).choice("0123456789abcdef") for _ in range(300))
    terms = TERM.findall(fts_text(f"sha {run} end"))
    assert terms[0] == "sha" and terms[-1] == "end"
    windows = terms[1:-1]
    assert windows[0] == run[:128] and windows[-1] == run[-128:]
    assert all(len(w) == 128 for w in windows)
    assert all(any(run[i : i + 65] in w for w in windows) for i in range(len(run) - 64))
    for text in (
        f"sha {run} end",
        "short words only",
        "",
        "x" * 128,
        "é" * 129,
        "é" * 100,
        "a_b\x1fc\x00d€e",
    ):
        indexed, terms = cut(text)
        assert indexed == fts_text(text)
        assert [t.decode() for t in terms] == TERM.findall(indexed)


def test_the_index_finds_any_piece_of_a_long_run(store: Path, agent_dir: Path) -> None:
    run = "".join(random.Random(2).choice("0123456789abcdef") for _ in range(500))
    path = write(store / "s.jsonl", entry_line(1, f"digest {run}."), entry_line(2, "other"))
    for start, size in ((0, 10), (60, 10), (63, 70), (130, 200), (490, 10), (0, 500)):
        result = found([path], run[start : start + size], agent_dir)
        assert result.mode == "index" and lines_of(result) == {(path, 2)}
    for query in (f"est {run}.", f"est {run[:90]}", f"{run[-90:]}."):
        assert lines_of(found([path], query, agent_dir)) == {(path, 2)}


def test_a_piece_inside_too_many_words_reads_every_session(store: Path, agent_dir: Path) -> None:
    words = [f"w{n:05d}zzq" for n in range(5100)]
    path = write(store / "s.jsonl", entry_line(1, " ".join(words)), entry_line(2, "no"))
    result = found([path], "zzq", agent_dir)
    assert result.mode == "scan" and lines_of(result) == {(path, 2)}
    assert any("too short or too common" in note for note in result.notes)
    # A rarer piece narrows it through the index.
    assert found([path], "w00007zz", agent_dir).mode == "index"


def test_a_term_is_made_of_the_characters_of_sqlites_ascii_tokenizer() -> None:
    """`TERM`, spelled as what a term is not, takes every character but ASCII other
    than letters and digits: the class [0-9a-zA-Z\\x80-\\U0010ffff], over all of Unicode."""
    every = "".join(map(chr, range(0x110000)))
    spelled = re.compile("[0-9a-zA-Z\x80-\U0010ffff]+")
    assert [m.span() for m in TERM.finditer(every)] == [m.span() for m in spelled.finditer(every)]


_PIECE = st.one_of(
    st.text(alphabet=st.sampled_from("ab9 .-\u00e9\u4e2d\n"), max_size=20),
    st.sampled_from(["x" * 129, "\u4e2d" * 50, "ab" * 100, "9" * 128]),  # long runs, or nearly
)


@given(texts=st.lists(st.lists(_PIECE, max_size=6).map("".join), max_size=8))
def test_a_files_texts_cut_at_once_are_cut_as_one_by_one(texts: list[str]) -> None:
    cut_texts, terms = cut_all(texts)
    one_by_one = [cut(text) for text in texts]
    assert cut_texts == [indexed for indexed, _ in one_by_one]
    assert terms == [term for _, words in one_by_one for term in words]
