"""Fitting tables to the terminal: which column gets how many cells, and values shortened
to them (a path cut in the middle, a model name without its provider and date).

The rule every table follows: a value is never wrapped over lines and no column is
ever zero cells wide. Numbers are shown whole; what people read (a title, a label)
takes the spare width; columns that help less (a project, a bar) give up width
first, then are left out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rich.cells import cell_len, set_cell_size

__all__ = ["Column", "cut_end", "fit_widths", "middle_cut", "short_model"]

GAP = 3
"""Cells between two columns of a table drawn without edges (` │ `)."""


@dataclass(frozen=True, slots=True)
class Column:
    """What a column needs: its widest cell, the least it may shrink to, whether it may
    be left out."""

    natural: int
    """Its widest cell (header included)."""
    least: int | None = None
    """Shrinkable to this many cells (its values shortened); None: always shown whole."""
    optional: bool = False
    """Left out when the table cannot fit with it (at its least)."""
    takes_spare: bool = False
    """Grows past `natural` with the width nobody else needs (a title, a label)."""
    most: int | None = None
    """Grows to at most this many cells (None: as far as the terminal goes)."""


def fit_widths(width: int, columns: list[Column], give_order: list[int]) -> list[int | None]:
    """Each column's width in a table `width` cells wide (None: left out).

    Columns start at their natural width; while the table is too wide, the ones in
    `give_order` give up width in turn: each shrinks to its least, then, when it is
    optional and the table is still too wide, is left out. Spare width goes to the
    columns that take it. A table still too wide keeps every column at its least (the
    terminal wraps the line, but no value is cut to nothing).
    """
    widths: list[int | None] = [c.natural for c in columns]

    def over() -> int:
        shown = [w for w in widths if w is not None]
        return sum(shown) + GAP * (len(shown) - 1) - width

    for index in give_order:
        current = widths[index]
        if over() <= 0 or current is None:
            break
        least = columns[index].least
        if least is not None:
            widths[index] = max(least, current - over())
        if over() > 0 and columns[index].optional:
            widths[index] = None
    # Spare width goes to the takers in their order, each up to its most.
    spare = -over()
    for index, column in enumerate(columns):
        current = widths[index]
        if spare <= 0 or not column.takes_spare or current is None:
            continue
        grown = current + spare if column.most is None else max(current, column.most)
        grown = min(grown, current + spare)
        spare -= grown - current
        widths[index] = grown
    return widths


def cut_end(text: str, width: int) -> str:
    """`text` in `width` cells, its end replaced by `…` when longer."""
    if cell_len(text) <= width:
        return text
    return set_cell_size(text, max(0, width - 1)) + "…" if width > 0 else ""


def middle_cut(text: str, width: int) -> str:
    """`text` in `width` cells, cut in the middle (`/home/…/project`) when longer: both
    ends of a path or a name say more than either alone."""
    if cell_len(text) <= width:
        return text
    if width <= 1:
        return "…"[:width]
    right = (width - 1) // 2
    left = width - 1 - right
    tail = set_cell_size(text[::-1], right)[::-1]
    return set_cell_size(text, left) + "…" + tail


_PROVIDER = re.compile(r"^[A-Za-z0-9._-]+/")
_DATE = re.compile(r"-(?:20\d{6}|\d{4}-\d{2}-\d{2}|latest|preview-\d{2}-\d{2})$")


def short_model(name: str) -> str:
    """A model's name as a table shows it: no provider (`anthropic/`) and no release
    date (`-20250514`); `--json` keeps the full name."""
    return _DATE.sub("", _PROVIDER.sub("", name)) or name
