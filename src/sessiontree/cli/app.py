"""The `sessiontree` entry point: the root group, error handling, `main`.

Each command parses arguments, calls the library, renders the result (rich for
people, `--json` for scripts). Errors a user can cause (unknown session, bad
file, failed write) become one line on stderr and a documented exit code,
never a traceback; see `errors.py` for the codes.

The commands are listed in `registry.py` and imported when one runs, and the global
options (`options.py`) are taken before or after the command: this module and those
two are all `sessiontree --help` and `--version` load of the CLI.
"""

from __future__ import annotations

import errno
import os
import sys
from typing import Any

import typer

from sessiontree.cli.errors import (
    EXIT_AMBIGUOUS,
    EXIT_ERROR,
    EXIT_USAGE,
    CliError,
    ambiguous_message,
    error_text,
)
from sessiontree.cli.registry import LazyGroup
from sessiontree.errors import AmbiguousSessionError, SessionTreeError

__all__ = ["app", "main"]


def _error(message: str, code: int) -> typer.Exit:
    from rich.text import Text

    from sessiontree.cli.common import err_console

    # One line, whatever the message (a database driver's may span several).
    message = " ".join(part.strip() for part in message.splitlines() if part.strip())
    err_console.print(Text(f"sessiontree: error: {message}"), soft_wrap=True)
    return typer.Exit(code)


def _bad_parameter(exc: Any) -> str:
    """`-f pdf`: "--format/-f: 'pdf' is not one of md, html, jsonl (see ... --help)"."""
    import re

    param = getattr(exc, "param", None)
    opts = list(getattr(param, "opts", None) or [])
    if param is not None and getattr(param, "param_type_name", "") == "argument":
        name = str(getattr(param, "human_readable_name", "") or getattr(param, "name", "value"))
    else:
        name = "/".join(opts) or str(getattr(exc, "param_hint", None) or "value")
    message = re.sub(r"^Value error, ", "", str(exc.message or "")).rstrip(".")
    if type(exc).__name__ == "MissingParameter" or not message:
        message = "missing"
    elif message.startswith("Input should be a valid integer"):
        message = "not a whole number"
    elif message.startswith("Input should be "):
        message = "should be " + message[len("Input should be ") :]
    choice = re.fullmatch(r"('[^']*') is not one of (.*)", message)
    if choice is not None:
        message = f"{choice.group(1)} is not one of " + choice.group(2).replace("'", "")
    ctx = getattr(exc, "ctx", None)
    command = ctx.command_path if ctx is not None else "sessiontree"
    return f"{name.upper() if name.isidentifier() else name}: {message} (see {command} --help)"


class _Group(LazyGroup):
    """Turns user errors raised by any command into one stderr line and an exit code."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except typer.BadParameter as exc:
            raise _error(_bad_parameter(exc), EXIT_USAGE) from None
        except CliError as exc:
            raise _error(exc.message, exc.code) from None
        except AmbiguousSessionError as exc:
            raise _error(ambiguous_message(exc.arg, exc.candidates), EXIT_AMBIGUOUS) from None
        except SessionTreeError as exc:
            raise _error(str(exc), EXIT_ERROR) from None
        except OSError as exc:
            if exc.errno == errno.EPIPE:
                raise  # the reader went away (`| head`): the toolkit exits quietly
            raise _error(error_text(exc), EXIT_ERROR) from None


app = typer.Typer(
    name="sessiontree",
    cls=_Group,
    help="Inspect, search, export, repair and migrate coding-agent session stores.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


@app.callback()
def _root() -> None:
    """Inspect, search, export, repair and migrate coding-agent session stores."""
    # The global options are the group's (options.py); each command settles them.


def main() -> None:
    """Console-script entry point (also `python -m sessiontree`)."""
    try:
        app()
    except BrokenPipeError:
        # Output piped into `head` and the like: stop quietly, like other CLI tools.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        raise SystemExit(141) from None
    except KeyboardInterrupt:
        raise SystemExit(130) from None
