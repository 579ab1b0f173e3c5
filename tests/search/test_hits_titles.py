"""`title_test` never passes over a title that `title_hits` matches."""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from sessiontree.format import clean_title
from sessiontree.search import title_hits, title_test

# Pieces clean_title treats specially (tags it drops, a command's name and arguments,
# Gemini CLI's appended files), whitespace of every kind, and letters whose casefold
# differs from their lower case or is longer than themselves.
_PIECES = st.sampled_from(
    [
        "<command-name>",
        "</command-name>",
        "<command-args>",
        "</command-args>",
        "<system-reminder>",
        "</system-reminder>",
        "<bash-input>",
        "\n--- Content from referenced files ---",
        " ",
        "\n",
        "\t",
        "\u3000",
        "ß",
        "ẞ",
        "İ",
        "ﬁ",
        "Σ",
        "ς",
    ]
)
_TEXT = st.lists(st.one_of(_PIECES, st.text(alphabet="abSsKk/-. \n", max_size=4)), max_size=12)


@example(title="Fix  the\nbug", query="the bug", case_sensitive=False)
@example(
    title="<command-name>/review</command-name><command-args>PR seven</command-args>",
    query="w P",
    case_sensitive=True,
)
@example(title="Straße", query="STRASSE", case_sensitive=False)
@given(title=_TEXT.map("".join), query=_TEXT.map("".join), case_sensitive=st.booleans())
def test_a_title_the_search_matches_passes_the_test(
    title: str, query: str, case_sensitive: bool
) -> None:
    matched = title_hits([("p", "s", clean_title(title), 0)], query, case_sensitive=case_sensitive)
    test = title_test(query, case_sensitive=case_sensitive)
    if matched and test is not None:
        assert test(title)


@given(cleaned=_TEXT.map("".join), data=st.data(), case_sensitive=st.booleans())
def test_a_part_of_a_cleaned_title_passes_the_test(
    cleaned: str, data: st.DataObject, case_sensitive: bool
) -> None:
    # Queries cut from the cleaned title itself: the ones that match, searched for.
    shown = clean_title(cleaned)
    if shown is None:
        return
    start = data.draw(st.integers(0, len(shown)))
    query = shown[start : data.draw(st.integers(start, len(shown)))]
    if not query.strip():
        return
    assert title_hits([("p", "s", shown, 0)], query, case_sensitive=case_sensitive)
    test = title_test(query, case_sensitive=case_sensitive)
    assert test is not None and test(cleaned)


def test_a_regular_expression_has_no_test() -> None:
    assert title_test("a.b", regex=True) is None
    assert title_test("   ") is None
