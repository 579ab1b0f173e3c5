"""The consoles everything printed for people goes through: rich's, made terminal-safe.

Its own module so that rich is imported by a command that prints for people only
(`common.console` and `common.err_console` are these, imported when first asked for).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.console import Console, ConsoleOptions, RenderableType
from rich.segment import Segment
from rich.text import Text

from sessiontree.cli.render import terminal_safe, terminal_safe_text

__all__ = ["TerminalConsole", "console", "err_console"]


class TerminalConsole(Console):
    """A console whose output cannot drive the terminal: the one choke point.

    Every renderable passes `render` (tables and trees render each cell through
    it): text and strings are made terminal-safe there, before they are laid out,
    so wrapping counts the escapes; and every segment of text that comes out is
    passed through `terminal_safe` again, whatever produced it. Control segments
    are the console's own (progress bars' cursor moves) and pass. Markup and emoji
    codes are off, so a `str` prints as typed, too.
    """

    def __init__(self, *, stderr: bool = False) -> None:
        super().__init__(stderr=stderr, highlight=False, markup=False, emoji=False)

    def writes_to_terminal(self) -> bool:
        """Whether its stream is a terminal (people read it), not a pipe or a file."""
        isatty = getattr(self.file, "isatty", None)
        return bool(callable(isatty) and isatty())

    def print(self, *objects: Any, soft_wrap: bool | None = None, **options: Any) -> None:
        # To a pipe or a file (read by scripts) a line is never broken to a width: a
        # path or a name stays whole on its line. Tables keep their own layout.
        if soft_wrap is None and not self.writes_to_terminal():
            soft_wrap = True
        super().print(*objects, soft_wrap=soft_wrap, **options)

    def render(
        self, renderable: RenderableType, options: ConsoleOptions | None = None
    ) -> Iterable[Segment]:
        if isinstance(renderable, str):
            renderable = terminal_safe(renderable)
        elif isinstance(renderable, Text):
            renderable = terminal_safe_text(renderable)
        for segment in super().render(renderable, options):
            if segment.control or not segment.text:
                yield segment
            else:
                yield Segment(terminal_safe(segment.text), segment.style)


console: TerminalConsole = TerminalConsole()
err_console: TerminalConsole = TerminalConsole(stderr=True)
