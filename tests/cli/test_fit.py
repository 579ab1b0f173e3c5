"""Fitting tables to the terminal: widths given up in order, never a zero-width column,
values shortened rather than wrapped."""

from __future__ import annotations

from sessiontree.cli.fit import Column, cut_end, fit_widths, middle_cut, short_model


def test_the_spare_width_goes_to_the_reader_column() -> None:
    widths = fit_widths(80, [Column(10), Column(8), Column(20, takes_spare=True)], [])
    assert widths == [10, 8, 80 - 10 - 8 - 6]


def test_an_optional_column_shrinks_then_is_left_out_before_the_title_shrinks() -> None:
    columns = [
        Column(40),
        Column(26, least=8, optional=True),
        Column(24, least=16, takes_spare=True),
    ]
    # Room for the project at its least: it is cut, the title keeps what it wants.
    assert fit_widths(83, columns, [1, 2]) == [40, 13, 24]
    # No room for it at its least: left out, and the title takes the width back.
    assert fit_widths(70, columns, [1, 2]) == [40, None, 27]
    # Narrower still: the title shrinks to its least and no further.
    assert fit_widths(50, columns, [1, 2]) == [40, None, 16]


def test_a_taker_grows_to_its_most_and_the_next_takes_the_rest() -> None:
    columns = [
        Column(10, takes_spare=True, most=30),
        Column(5),
        Column(8, optional=True, takes_spare=True, most=24),
    ]
    assert fit_widths(60, columns, [2, 0]) == [30, 5, 19]
    assert fit_widths(200, columns, [2, 0]) == [30, 5, 24]
    assert fit_widths(24, columns, [2, 0]) == [16, 5, None]


def test_values_are_cut_not_wrapped() -> None:
    assert cut_end("Make the homepage faster", 10) == "Make the …"
    assert middle_cut("/home/someone/work/sessiontree", 16) == "/home/so…iontree"
    assert middle_cut("short", 16) == "short"
    assert cut_end("Übersicht 🚀 der Woche", 13) == "Übersicht 🚀…"
    assert cut_end("Übersicht 🚀 der Woche", 12) == "Übersicht  …"  # no half emoji


def test_model_names_lose_their_provider_and_date() -> None:
    assert short_model("anthropic/claude-sonnet-4-20250514") == "claude-sonnet-4"
    assert short_model("openai/gpt-5.1-codex") == "gpt-5.1-codex"
    assert short_model("github-copilot/claude-sonnet-4.6") == "claude-sonnet-4.6"
    assert short_model("unknown") == "unknown"
    # only a provider's name is taken off: an odd name is shown whole
    assert short_model("openrouter/qwen/qwen3-coder:free") == "qwen/qwen3-coder:free"
    assert short_model("p [x/y]/m") == "p [x/y]/m"
