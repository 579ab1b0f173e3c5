"""The `sessiontree` entry point: the root group, error handling, `main`.

Each command parses arguments, calls the library, renders the result (rich for
people, `--json` for scripts). Errors a user can cause (unknown session, bad
file, failed write) become one line on stderr and a documented exit code,
never a traceback; see `errors.py` for the codes.

The commands are listed in `registry.py` and imported when one runs (the root group
here builds each on first use), and the global options (`options.py`) are taken before
or after the command, their values converted by `coercion.py`: this module and those
are all `sessiontree --help` and `--version` load of the CLI.
"""

from __future__ import annotations

import errno
import gc
import importlib
import inspect
import os
import sys
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any

import typer
import typer.main
from typer.core import TyperCommand

from sessiontree.cli.errors import (
    EXIT_AMBIGUOUS,
    EXIT_ERROR,
    EXIT_USAGE,
    CliError,
    ambiguous_message,
    error_text,
)
from sessiontree.cli.options import Command, Group
from sessiontree.cli.registry import COMMANDS, PANELS
from sessiontree.errors import AmbiguousSessionError, SessionTreeError

__all__ = ["LazyGroup", "app", "load_command", "main"]


def _error(message: str, code: int) -> typer.Exit:
    from rich.text import Text

    from sessiontree.cli.common import err_console

    # One line, whatever the message (a database driver's may span several).
    message = " ".join(part.strip() for part in message.splitlines() if part.strip())
    err_console.print(Text(f"sessiontree: error: {message}"), soft_wrap=True)
    return typer.Exit(code)


def _bad_parameter(exc: Any) -> str:
    """`-f pdf`: "--format/-f: 'pdf' is not one of md, html, jsonl (see ... --help)"."""
    param = getattr(exc, "param", None)
    opts = list(getattr(param, "opts", None) or [])
    if param is not None and getattr(param, "param_type_name", "") == "argument":
        name = str(getattr(param, "human_readable_name", "") or getattr(param, "name", "value"))
    else:
        name = "/".join(opts) or str(getattr(exc, "param_hint", None) or "value")
    ctx = getattr(exc, "ctx", None)
    command = ctx.command_path if ctx is not None else "sessiontree"
    shown = name.upper() if name.isidentifier() else name
    return f"{shown}: {_what_is_wrong(exc)} (see {command} --help)"


def _what_is_wrong(exc: Any) -> str:
    """What is wrong with a value, in the CLI's words (`coercion.py` says them)."""
    if type(exc).__name__ == "MissingParameter":
        return "missing"
    return str(exc.message or "").rstrip(".") or "missing"


def load_command(name: str) -> Any:
    """Import command `name`'s module and build its click command (typer, as usual), its
    help the registry's line and then the function's docstring."""
    entry = COMMANDS[name]
    module = importlib.import_module(f"{__package__}.{entry.module}")
    target = getattr(module, entry.attribute)
    builder = typer.Typer(add_completion=False, rich_markup_mode=None)
    if isinstance(target, typer.Typer):
        builder.add_typer(target, name=name, help=entry.help)
    else:
        body = inspect.getdoc(target)
        help_text = entry.help if not body else f"{entry.help}\n\n{body}"
        builder.command(name, cls=Command, help=help_text)(target)
    command = typer.main.get_group(builder).commands[name]
    if not isinstance(command, Command | Group):
        # Without these classes the command would not take the global options.
        raise TypeError(f"command {name!r} is a {type(command).__name__}, not a cli Command")
    # What the imports made (modules, classes, typer's and pydantic's tables) lives as
    # long as the process: kept out of the collector's sight, a command that builds
    # thousands of listings is not slowed by rescans of it (a tenth of a search).
    gc.freeze()
    return command


class _Commands(MutableMapping[str, Any]):
    """The root's commands by name: every command of the registry, each built on first use."""

    def __init__(self, built: Mapping[str, Any]) -> None:
        self._built = dict(built)

    def built(self, name: str) -> Any | None:
        """The command `name` if it has been built, without building it."""
        return self._built.get(name)

    def __getitem__(self, name: str) -> Any:
        command = self._built.get(name)
        if command is None:
            if name not in COMMANDS:
                raise KeyError(name)
            command = self._built[name] = load_command(name)
        return command

    def __setitem__(self, name: str, command: Any) -> None:
        self._built[name] = command

    def __delitem__(self, name: str) -> None:
        if name in COMMANDS:
            raise TypeError(f"command {name!r} is in the registry and cannot be removed")
        del self._built[name]

    def __iter__(self) -> Iterator[str]:
        yield from COMMANDS
        yield from (name for name in self._built if name not in COMMANDS)

    def __len__(self) -> int:
        return len(COMMANDS) + sum(1 for name in self._built if name not in COMMANDS)


class LazyGroup(Group):
    """The root group: lists the registry's commands, builds one when it is used."""

    takes_version = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lazy = _Commands(self.commands)
        self.commands = self._lazy

    def list_commands(self, ctx: Any) -> list[str]:
        return list(self._lazy)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        return self._lazy.get(cmd_name)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """The command list of `--help` under the registry's headings, from its lines:
        builds no command."""
        shown: list[tuple[str, Any]] = []
        for name in self.list_commands(ctx):
            command = self._lazy.built(name)
            if command is None:
                command = TyperCommand(name, help=COMMANDS[name].help)
            if not command.hidden:
                shown.append((name, command))
        if not shown:
            return
        # As click and typer lay it out: the help cut to the width left by the longest name.
        widest = max(len(name) for name, _ in shown)
        limit = formatter.width - 6 - widest
        panels: dict[str, list[tuple[str, str]]] = {panel: [] for panel in PANELS}
        for name, command in shown:
            entry = COMMANDS.get(name)
            panel = entry.panel if entry is not None else "Commands"
            # Padded to the widest name: every heading's lines start their help in one column.
            row = (name.ljust(widest), command.get_short_help_str(limit))
            panels.setdefault(panel, []).append(row)
        for panel, rows in panels.items():
            if rows:
                with formatter.section(panel):
                    formatter.write_dl(rows)


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
    """Run the command line (`sessiontree.cli.main` starts it once it finds the extra)."""
    try:
        app()
    except BrokenPipeError:
        # Output piped into `head` and the like: stop quietly, like other CLI tools.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        raise SystemExit(141) from None
    except KeyboardInterrupt:
        raise SystemExit(130) from None
