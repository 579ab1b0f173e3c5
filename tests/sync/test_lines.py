"""Lines as a sync sees them: keys, and parents placed before their children without
moving lines that were in order already."""

from __future__ import annotations

from sessiontree.sync._lines import HEADER_KEY, TITLE_KEY, Line, parse_line, topological
from tests.sync_support import header, message


def _keys(lines: list[Line]) -> list[str]:
    return [line.key for line in lines]


def test_lines_in_order_keep_it_and_a_child_waits_for_its_parent() -> None:
    def at(key: str, parent: str | None) -> Line:
        return Line(b"", key, parent)

    in_order = [at("a", "x"), at("b", "a"), at("y", "x"), at("c", "b")]
    assert _keys(topological(in_order, {"x"})) == ["a", "b", "y", "c"]
    child_first = [at("c", "b"), at("y", "x"), at("b", "x")]
    assert _keys(topological(child_first, {"x"})) == ["y", "b", "c"]
    cycle = [at("p", "q"), at("q", "p")]
    assert sorted(_keys(topological(cycle, set()))) == ["p", "q"]


def test_keys_of_header_title_slot_and_entries() -> None:
    from sessiontree.format import title_slot_line

    assert parse_line(header("s1"), False) is not None
    assert parse_line(header("s1"), False).key == HEADER_KEY  # type: ignore[union-attr]
    slot = title_slot_line("t", "auto", "2026-12-01T10:00:00.000Z")
    assert parse_line(slot, True).key == TITLE_KEY  # type: ignore[union-attr]
    assert parse_line(slot, False) is None  # a title slot only as line 1
    assert parse_line(message("e1", "p", "x"), False) == Line(
        message("e1", "p", "x"), "e1", "p", kind="message"
    )
    assert parse_line(b'{"type":"message"}\n', False) is None
    assert parse_line(b"not json\n", False) is None
