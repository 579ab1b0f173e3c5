"""Small shared bases: a context manager that closes, and a writer's error state."""

from __future__ import annotations

from types import TracebackType
from typing import Self


class ClosesOnExit:
    """`with obj:` closes `obj` on exit (subclasses define `close`)."""

    __slots__ = ()

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class WriterState(ClosesOnExit):
    """The stored first error and closed flag every storage writer keeps.

    Subclasses declare the `_closed`, `_error` and `path` slots (or attributes) and call
    `_close_state()` from their `close`. (No `__slots__` here: a slotted base
    could not assign attributes its subclasses declare.)
    """

    _closed: bool
    _error: BaseException | None
    path: str

    def _check(self) -> None:
        """Raise the stored error, or ValueError once closed."""
        if self._error is not None:
            raise self._error
        if self._closed:
            raise ValueError(f"writer for {self.path} is closed")

    def _close_state(self) -> bool:
        """Mark closed; False when it already was (close is idempotent)."""
        if self._closed:
            return False
        self._closed = True
        return True

    def _raise_stored(self) -> None:
        if self._error is not None:
            raise self._error

    def get_error(self) -> BaseException | None:
        """The first error this writer hit, if any."""
        return self._error

    @property
    def closed(self) -> bool:
        """Whether `close` was called."""
        return self._closed
