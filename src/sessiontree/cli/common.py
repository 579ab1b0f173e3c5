"""Shared CLI plumbing: consoles, errors and exit codes, JSON output, the store,
session lookup, progress.

Everything printed for people goes through `console` / `err_console`, whose
every segment of text passes `render.terminal_safe` on its way out: session
text (titles, previews, labels, paths, cwds) cannot drive the terminal, and
markup in it is never interpreted. `--json` output bypasses them, unchanged.

Exit codes (`errors.py`): 0 success, 1 error (unknown session, unreadable file,
problems found by `verify`), 2 usage error, 3 ambiguous session prefix.

The store of an invocation (`current_store()`: a `Store` built once from `--store`,
`--agent-dir`, `--agent` or `$SESSIONTREE_STORE`) is closed when the command ends; a
database is connected to only by the commands that use it.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any

import typer

# Re-exported: the commands take them from here with the rest of the plumbing.
from sessiontree.cli.errors import EXIT_AMBIGUOUS as EXIT_AMBIGUOUS
from sessiontree.cli.errors import EXIT_ERROR as EXIT_ERROR
from sessiontree.cli.errors import EXIT_OK as EXIT_OK
from sessiontree.cli.errors import EXIT_USAGE as EXIT_USAGE
from sessiontree.cli.errors import CliError as CliError
from sessiontree.cli.errors import ambiguous_message as ambiguous_message
from sessiontree.cli.errors import error_text as error_text
from sessiontree.cli.registry import writes_store
from sessiontree.cli.render import terminal_safe
from sessiontree.errors import AmbiguousSessionError, SessionNotFoundError
from sessiontree.format import serialize_entry
from sessiontree.store import Store, Stores

if TYPE_CHECKING:
    from rich.progress import Progress

    from sessiontree.cli.console import TerminalConsole
    from sessiontree.session import SessionManager

    console: TerminalConsole
    err_console: TerminalConsole

SCHEMA_VERSION = 1
"""`schemaVersion` of every `--json` document this CLI prints."""


def __getattr__(name: str) -> Any:
    """`console` and `err_console`, from `console.py` when first asked for (PEP 562): a
    command that prints only JSON or bytes never imports rich for them."""
    if name in ("console", "err_console"):
        import sessiontree.cli.console as consoles

        return getattr(consoles, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON (see docs/cli.md) instead.")]
SessionArg = Annotated[
    str,
    typer.Argument(
        help="A session file path, a session-id prefix or a file-name prefix.",
        show_default=False,
    ),
]


class _Invocation:
    """The store of one command-line invocation (and any it moved to), closed at its end."""

    def __init__(self, store: Store, command: str | None = None, found: bool = False) -> None:
        self.store = store
        self.opened = [store]
        self.command = command
        self.found = found
        """Whether no option or variable named the store: every store found is read."""
        self.others: list[Store] | None = None
        self.read: list[Stores] = []
        """The stores read as one (`all_stores`): what they passed over is said at the end."""

    def close(self) -> None:
        global _invocation
        if _invocation is self:
            _invocation = None
        _note_skipped(self.read)
        opened, self.opened = self.opened, []
        for store in opened:
            store.close()


_invocation: _Invocation | None = None


def _stderr_line(line: str, style: str = "") -> None:
    """One line on `err_console`, made terminal-safe and never wrapped (rich is
    imported here, by the first command that says something on stderr)."""
    from rich.text import Text

    from sessiontree.cli.console import err_console

    err_console.print(Text(line, style=style), soft_wrap=True)


class _LogToConsole(logging.Handler):
    """The library's warnings (a bad blob reference, a failed save) as `sessiontree:
    warning: ...` lines on `err_console`, so they are made terminal-safe like the rest."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            _stderr_line(f"sessiontree: {record.levelname.lower()}: {record.getMessage()}")
        except Exception:  # a logging handler must not raise
            self.handleError(record)


def begin_invocation(
    ctx: typer.Context, store: Store, *, found: bool = False, others: list[Store] | None = None
) -> None:
    """Work on `store` until the command ends (then it is closed). `found`: no option
    or variable named it: the commands that read also read every other store found
    (`other_stores`), and one that writes needs this one to be the only pi-format store."""
    global _invocation
    command = ctx.invoked_subcommand
    if found and writes_store(command):
        from sessiontree.store import find_stores

        native = [f for f in find_stores() if f.native]
        if len(native) > 1:
            store.close()
            where = ", ".join(f"{f.name} ({f.home})" for f in native)
            raise CliError(
                f"`{command}` writes to one store, and several are here: {where}; name one "
                "with --agent-dir, --agent or --store",
                EXIT_USAGE,
            )
    invocation = _Invocation(store, command, found)
    if others is not None:  # an archive's stores: read together, as the ones found are
        invocation.others = list(others)
        invocation.opened.extend(others)
    _invocation = invocation
    ctx.call_on_close(invocation.close)
    logger = logging.getLogger("sessiontree")
    handler = _LogToConsole(logging.WARNING)
    logger.addHandler(handler)
    ctx.call_on_close(lambda: logger.removeHandler(handler))


def invoked_command() -> str | None:
    """The name of the command this invocation runs."""
    return _invocation.command if _invocation is not None else None


def other_stores() -> list[Store]:
    """The other stores found on this machine when no option named one (each opened
    once per invocation, closed with it); [] when the store was named. A store that
    cannot be opened is passed over with a warning naming it."""
    invocation = _invocation
    if invocation is None:
        return []
    if invocation.others is None and not invocation.found:
        return []
    if invocation.others is None:
        from sessiontree.errors import SessionTreeError
        from sessiontree.store import find_stores

        here = os.path.realpath(invocation.store.agent_dir)
        others: list[Store] = []
        for found in find_stores():
            if os.path.realpath(found.home) == here:
                continue
            try:
                others.append(found.open())
            except (OSError, SessionTreeError) as exc:
                logging.getLogger("sessiontree").warning("%s: skipped: %s", found.home, exc)
        invocation.others = others
        invocation.opened.extend(others)
    return list(invocation.others)


def all_stores(*, existing: bool = False) -> Stores:
    """The store of this invocation and, when no option named one, every other store
    found (`other_stores`), read as one; a store passed over while reading them is said
    once, in a note, as the command ends. `existing`: a default dir that does not exist
    is left out when other stores were found."""
    stores = [current_store(), *other_stores()]
    if existing and len(stores) > 1 and not os.path.isdir(stores[0].agent_dir):
        stores.pop(0)
    read = Stores(stores)
    if _invocation is not None:
        _invocation.read.append(read)
    return read


def print_notes(notes: Iterable[str]) -> None:
    """`sessiontree: note: ...` on stderr, each note once however many stores gave it."""
    for note in dict.fromkeys(notes):
        _stderr_line(f"sessiontree: note: {note}", style="dim")


def _note_skipped(read: list[Stores]) -> None:
    """One note naming each store passed over (however often it failed) and why."""
    skipped = {s.location: s for stores in read for s in stores.skipped}
    if skipped:
        said = "; ".join(f"{s.store} at {s.location}: {s.reason}" for s in skipped.values())
        _stderr_line(f"sessiontree: note: skipped {said}", style="dim")


def current_store() -> Store:
    """The store of this invocation: the one the global options name (`--store`,
    `--agent-dir`, `--agent`, `$SESSIONTREE_STORE`), chosen once as it starts."""
    if _invocation is None:
        raise RuntimeError("no command is running: the store is chosen as one starts")
    return _invocation.store


def adopt_store(store: Store) -> None:
    """Work on `store` for the rest of this invocation (another agent's session file,
    given by its path), closing it with the others at the end."""
    if _invocation is not None:
        _invocation.opened.append(store)
        _invocation.store = store


def emit_json(payload: dict[str, Any]) -> None:
    """Print one JSON document (with `schemaVersion` first) on stdout."""
    document = {"schemaVersion": SCHEMA_VERSION, **payload}
    sys.stdout.write(serialize_entry(document) + "\n")
    sys.stdout.flush()


def stdout_is_terminal() -> bool:
    """Whether stdout is a terminal (people read it) rather than a pipe or file."""
    isatty = getattr(sys.stdout, "isatty", None)
    return bool(callable(isatty) and isatty())


def _write_stdout(data: bytes) -> None:
    sys.stdout.flush()
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is not None:
        buffer.write(data)
        buffer.flush()
    else:
        sys.stdout.write(data.decode("utf-8", "surrogateescape"))
        sys.stdout.flush()


def write_document(data: bytes) -> None:
    """Write an export (Markdown, HTML, JSONL) on stdout: its exact bytes into a pipe or
    file; on a terminal, made terminal-safe (as `ls` escapes names only for a terminal)."""
    if stdout_is_terminal():
        data = terminal_safe(data.decode("utf-8", "surrogateescape")).encode("utf-8")
    _write_stdout(data)


def echo_path(path: str | None) -> None:
    """Print a path for scripts (`resume`, `fork`, `extract`): its exact bytes into a pipe
    (a non-UTF-8 name too), made terminal-safe on a terminal."""
    write_document(os.fsencode(path or "") + b"\n")


def resolve_session(arg: str) -> str:
    """A session file path from a path, a session-id prefix or a file-name prefix.

    Raises CliError (exit 1) when nothing matches, (exit 3) when several do.
    """
    store = current_store()
    if store.is_files:
        path = os.path.abspath(os.path.expanduser(arg))
        # A file, or a file's `<file>/<id>` (an OpenCode database's session): only then
        # can it be another agent's session (an id prefix loads no foreign format).
        if os.path.isfile(path) or os.path.isfile(os.path.dirname(path)):
            # Another agent's session file: this invocation reads it in place (imported
            # here: the foreign formats are not loaded for a command that names no path).
            from sessiontree.cli.foreign_stores import in_place_store

            in_place = in_place_store(path, invoked_command(), store.agent_dir)
            if in_place is not None:
                adopt_store(in_place)
                return path
    try:
        return store.resolve(arg)
    except SessionNotFoundError as exc:
        if not store.is_files:
            # A file outside the store `--agent` names (an `opencode export` document, a
            # copy of a rollout): read in place, as it is without `--agent`.
            from sessiontree.cli.foreign_stores import in_place_store

            path = os.path.abspath(os.path.expanduser(arg))
            in_place = in_place_store(path, invoked_command(), store.agent_dir)
            if in_place is not None:
                adopt_store(in_place)
                return path
        for other in other_stores():  # no store named: the others found are looked in too
            try:
                path = other.resolve(arg)
            except SessionNotFoundError:
                continue
            except AmbiguousSessionError as again:
                raise CliError(ambiguous_message(arg, again.candidates), EXIT_AMBIGUOUS) from None
            adopt_store(other)
            return path
        raise CliError(str(exc)) from None
    except AmbiguousSessionError as exc:
        raise CliError(ambiguous_message(arg, exc.candidates), EXIT_AMBIGUOUS) from None


def open_read_only(path: str) -> SessionManager:
    """Open a session (a path `resolve_session` gave) without writing anything (no
    migration rewrite, breadcrumb, or file)."""
    return current_store().session(path, read_only=True)


def open_writable(path: str) -> SessionManager:
    """Open a session (a path `resolve_session` gave) for a command that changes it."""
    return current_store().session(path, breadcrumb=False)


def select_files(paths: list[str] | None, all_projects: bool) -> list[str]:
    """Files for multi-file commands: PATHS (each resolved), else `--all`, else this project."""
    if paths:
        if all_projects:
            raise CliError("give PATHS or --all, not both", EXIT_USAGE)
        return [resolve_session(p) for p in paths]
    passed_over: list[tuple[str, str]] = []
    files = current_store().files(None if all_projects else os.getcwd(), passed_over=passed_over)
    warn_passed_over(passed_over)
    return files


def warn_passed_over(passed_over: list[tuple[str, str]]) -> None:
    """A warning for each FIFO (socket, device) named like a session that was not read."""
    for path, what in passed_over:
        _stderr_line(f"sessiontree: warning: {path}: {what}; passed over")


@contextmanager
def progress(description: str, total: int | None) -> Iterator[Callable[[str], None]]:
    """A progress bar on stderr while a long operation runs, only on a terminal."""
    if not sys.stderr.isatty():
        yield lambda _path: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn

    from sessiontree.cli.console import err_console

    columns: list[Any] = [SpinnerColumn(), TextColumn("{task.description}")]
    if total is not None:
        columns += [BarColumn(), MofNCompleteColumn()]
    with Progress(*columns, console=err_console, transient=True) as bar:
        task = bar.add_task(description, total=total)

        def advance(_path: str) -> None:
            bar.advance(task)

        yield advance


@contextmanager
def byte_progress(
    description: str, threshold: int = 8 << 20
) -> Iterator[Callable[[int, int], None]]:
    """A progress bar (bytes, speed) on stderr for a long read, only on a terminal and
    only once the work is `threshold` bytes or more (a refresh of a few files shows none)."""
    if not sys.stderr.isatty():
        yield lambda _done, _total: None
        return
    bar: Progress | None = None
    task: Any = None

    def update(done: int, total: int) -> None:
        nonlocal bar, task
        if bar is None:
            if total < threshold:
                return
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                Progress,
                SpinnerColumn,
                TextColumn,
                TransferSpeedColumn,
            )

            from sessiontree.cli.console import err_console

            bar = Progress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                BarColumn(),
                DownloadColumn(),
                TransferSpeedColumn(),
                console=err_console,
                transient=True,
            )
            bar.start()
            task = bar.add_task(description, total=total)
        bar.update(task, completed=done)

    try:
        yield update
    finally:
        if bar is not None:
            bar.stop()
