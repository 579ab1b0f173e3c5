"""Background work that steps aside while a person waits.

A long pass in a background thread (the web app's first search index of a big store)
shares the interpreter with the requests a person is waiting for, and takes half of
it. `Foreground` counts the requests in flight; the background pass, run in
`stepping_aside(foreground)`, reaches `pause_point()` between pieces of its work and
waits there while any request runs (a while at most each time, so a steady stream of
requests slows it down without stopping it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["Foreground", "pause_point", "stepping_aside"]

_PAUSE: ContextVar[Callable[[], None] | None] = ContextVar("sessiontree_pause", default=None)


class Foreground:
    """How many requests a person waits for are running now."""

    def __init__(self, most_seconds: float = 2.0) -> None:
        self._cond = threading.Condition()
        self._busy = 0
        self.most_seconds = most_seconds
        """The longest one pause lasts."""

    @contextmanager
    def working(self) -> Iterator[None]:
        """A request a person waits for runs inside this."""
        with self._cond:
            self._busy += 1
        try:
            yield
        finally:
            with self._cond:
                self._busy -= 1
                if not self._busy:
                    self._cond.notify_all()

    @property
    def busy(self) -> bool:
        return self._busy > 0

    def pause(self) -> None:
        """Wait while a request runs (at most `most_seconds`)."""
        if not self._busy:  # the common case: no lock taken
            return
        with self._cond:
            self._cond.wait_for(lambda: not self._busy, timeout=self.most_seconds)


@contextmanager
def stepping_aside(foreground: Foreground) -> Iterator[None]:
    """Work done inside this (in this thread) pauses at `pause_point` for `foreground`."""
    token = _PAUSE.set(foreground.pause)
    try:
        yield
    finally:
        _PAUSE.reset(token)


def pause_point() -> None:
    """Where a long pass may step aside (nothing happens outside `stepping_aside`)."""
    pause = _PAUSE.get()
    if pause is not None:
        pause()
