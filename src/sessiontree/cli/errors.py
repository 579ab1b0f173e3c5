"""Exit codes and the user error of the CLI; no imports beyond the standard library,
so the entry point can catch them without loading a command.

Exit codes: 0 success, 1 error (unknown session, unreadable file, problems found by
`verify`), 2 usage error, 3 ambiguous session prefix.
"""

from __future__ import annotations

import os
from typing import Any

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_AMBIGUOUS = 3


class CliError(Exception):
    """A user error: printed as one line on stderr, then exit with `code`."""

    def __init__(self, message: str, code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def error_text(exc: BaseException) -> str:
    """An exception as one line for people: `path: reason` for an OSError."""
    if isinstance(exc, OSError) and exc.filename and exc.strerror:
        return f"{exc.filename}: {exc.strerror}"
    return str(exc) or type(exc).__name__


def ambiguous_message(arg: str, candidates: list[Any]) -> str:
    names = ", ".join(os.path.basename(str(c.path)) for c in candidates[:5])
    more = f" and {len(candidates) - 5} more" if len(candidates) > 5 else ""
    return f"{arg!r} matches {len(candidates)} sessions ({names}{more}); give a longer prefix"
