"""Shared CLI plumbing: consoles, errors and exit codes, JSON output, the store,
session lookup, progress.

Everything printed for people goes through `console` / `err_console`, whose
every segment of text passes `render.terminal_safe` on its way out: session
text (titles, previews, labels, paths, cwds) cannot drive the terminal, and
markup in it is never interpreted. `--json` output bypasses them, unchanged.

Exit codes (`errors.py`): 0 success, 1 error (unknown session, unreadable file,
problems found by `verify`), 2 usage error, 3 ambiguous session prefix.

The store (`--store` / `$SESSIONTREE_STORE`) is opened on first use by
`current_storage()`, once per invocation, and closed when the command ends;
without one it is the agent dir's files, as always.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer
from rich.console import Console, ConsoleOptions, RenderableType
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TransferSpeedColumn,
)
from rich.segment import Segment
from rich.text import Text

# Re-exported: the commands take them from here with the rest of the plumbing.
from sessiontree.cli.errors import EXIT_AMBIGUOUS as EXIT_AMBIGUOUS
from sessiontree.cli.errors import EXIT_ERROR as EXIT_ERROR
from sessiontree.cli.errors import EXIT_OK as EXIT_OK
from sessiontree.cli.errors import EXIT_USAGE as EXIT_USAGE
from sessiontree.cli.errors import CliError as CliError
from sessiontree.cli.errors import ambiguous_message as ambiguous_message
from sessiontree.cli.errors import error_text as error_text
from sessiontree.cli.render import terminal_safe, terminal_safe_text
from sessiontree.errors import AmbiguousSessionError
from sessiontree.format import serialize_entry
from sessiontree.layout import blob_store_for as agent_blob_store_for
from sessiontree.layout import get_agent_dir
from sessiontree.listing import resolve_resumable_session
from sessiontree.maintenance import close_store, open_store, session_files
from sessiontree.session import SessionManager
from sessiontree.storage import BlobStoreLike, FileSessionStorage, SessionStorage, is_stored_file

SCHEMA_VERSION = 1
"""`schemaVersion` of every `--json` document this CLI prints."""


class _TerminalConsole(Console):
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


console: Console = _TerminalConsole()
err_console: Console = _TerminalConsole(stderr=True)

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON (see docs/cli.md) instead.")]
SessionArg = Annotated[
    str,
    typer.Argument(
        help="A session file path, a session-id prefix or a file-name prefix.",
        show_default=False,
    ),
]


def agent_dir() -> str:
    """The agent dir in effect (`--agent-dir`, else `$PI_CODING_AGENT_DIR`, else the default).

    Chosen once per invocation and passed down to the library as `agent_dir=`: the
    CLI never writes it into the environment.
    """
    if _invocation is not None:
        return _invocation.agent_dir
    return get_agent_dir()


class _Invocation:
    """The store of one command-line invocation: opened on first use, closed at its end."""

    def __init__(
        self,
        url: str | None,
        storage: SessionStorage | None = None,
        agent_dir: str | None = None,
        command: str | None = None,
    ) -> None:
        self.url = url or None
        self._storage: SessionStorage | None = storage
        self.agent_dir = agent_dir if agent_dir is not None else get_agent_dir()
        self.command = command

    def storage(self) -> SessionStorage:
        if self._storage is None:
            if self.url is None:
                self._storage = FileSessionStorage()
            else:
                self._storage = open_store(self.url, agent_dir=self.agent_dir)
        return self._storage

    def close(self) -> None:
        global _invocation
        if _invocation is self:
            _invocation = None
        storage, self._storage = self._storage, None
        if storage is not None:
            close_store(storage)


_invocation: _Invocation | None = None


class _LogToConsole(logging.Handler):
    """The library's warnings (a bad blob reference, a failed save) as `sessiontree:
    warning: ...` lines on `err_console`, so they are made terminal-safe like the rest."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = f"sessiontree: {record.levelname.lower()}: {record.getMessage()}"
            err_console.print(Text(message), soft_wrap=True)
        except Exception:  # a logging handler must not raise
            self.handleError(record)


def begin_invocation(
    ctx: typer.Context,
    url: str | None,
    storage: SessionStorage | None = None,
    agent_dir: str | None = None,
) -> None:
    """Use the database at `url` (`--store`; None: the files), or `storage` (another
    agent's store, read-only), and the agent dir `agent_dir` (None: the configured
    one), until the command ends."""
    global _invocation
    invocation = _Invocation(url, storage, agent_dir, ctx.invoked_subcommand)
    _invocation = invocation
    ctx.call_on_close(invocation.close)
    logger = logging.getLogger("sessiontree")
    handler = _LogToConsole(logging.WARNING)
    logger.addHandler(handler)
    ctx.call_on_close(lambda: logger.removeHandler(handler))


def invoked_command() -> str | None:
    """The name of the command this invocation runs."""
    return _invocation.command if _invocation is not None else None


def adopt_storage(storage: SessionStorage) -> None:
    """Read from `storage` for the rest of this invocation (another agent's session
    file, given by its path)."""
    if _invocation is not None:
        _invocation._storage = storage


def current_storage() -> SessionStorage:
    """The storage of this invocation: the database `--store` names, else the files.

    Opened on first use (commands that need no store never connect) and closed
    when the command ends.
    """
    if _invocation is None:
        return FileSessionStorage()
    return _invocation.storage()


def is_file_store(storage: SessionStorage | None = None) -> bool:
    """Whether the store in effect (or `storage`) is the agent dir's files."""
    return isinstance(storage if storage is not None else current_storage(), FileSessionStorage)


def blob_store_for(path: str) -> BlobStoreLike:
    """The blob store of the session at `path` in the store in effect (one rule:
    `sessiontree.layout._agent_dir.blob_store_for`)."""
    return agent_blob_store_for(path, current_storage(), agent_dir())


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


def _looks_like_path(arg: str) -> bool:
    return os.sep in arg or (os.altsep is not None and os.altsep in arg) or arg.endswith(".jsonl")


def _stored_kind(storage: SessionStorage, path: str) -> str | None:
    """'file', 'dir' or None (missing, or outside a database store's root)."""
    if isinstance(storage, FileSessionStorage):
        return "file" if os.path.isfile(path) else "dir" if os.path.isdir(path) else None
    try:
        if is_stored_file(storage, path):
            return "file"
        return "dir" if storage.exists(path) else None
    except ValueError:  # a path outside the store's root names nothing in it
        return None


def stored_session_path(arg: str) -> str | None:
    """`arg` as the path of a file in the store in effect (absolute), else None."""
    path = os.path.abspath(os.path.expanduser(arg))
    return path if _stored_kind(current_storage(), path) == "file" else None


def resolve_session(arg: str) -> str:
    """A session file path from a path, a session-id prefix or a file-name prefix.

    Raises CliError (exit 1) when nothing matches, (exit 3) when several do.
    """
    storage = current_storage()
    path = os.path.abspath(os.path.expanduser(arg))
    kind = _stored_kind(storage, path)
    if kind != "dir" and is_file_store(storage):
        from sessiontree.cli.commands_foreign import read_in_place  # it imports this module

        if read_in_place(path):  # another agent's session file: read in place
            return path
    if kind == "file":
        return path
    if _looks_like_path(arg):
        if kind == "dir":
            raise CliError(f"{arg}: is a directory, not a session file")
        where = "" if is_file_store(storage) else " in the store"
        raise CliError(f"{arg}: no such session file{where}")
    try:
        match = resolve_resumable_session(arg, os.getcwd(), storage=storage, agent_dir=agent_dir())
    except AmbiguousSessionError as exc:
        raise CliError(ambiguous_message(arg, exc.candidates), EXIT_AMBIGUOUS) from None
    if match is None:
        raise CliError(f"no session matches {arg!r} (in this project or any other)")
    return str(match.session.path)


def open_read_only(path: str) -> SessionManager:
    """Open a session without writing anything (no migration rewrite, breadcrumb, or file)."""
    return SessionManager.open(
        path,
        storage=current_storage(),
        read_only=True,
        blob_store=blob_store_for(path),
        agent_dir=agent_dir(),
    )


def open_writable(path: str) -> SessionManager:
    """Open a session for a command that changes it."""
    return SessionManager.open(
        path,
        storage=current_storage(),
        blob_store=blob_store_for(path),
        breadcrumb=False,
        agent_dir=agent_dir(),
    )


def select_files(paths: list[str] | None, all_projects: bool) -> list[str]:
    """Files for multi-file commands: PATHS (each resolved), else `--all`, else this project."""
    if paths:
        if all_projects:
            raise CliError("give PATHS or --all, not both", EXIT_USAGE)
        return [resolve_session(p) for p in paths]
    storage = current_storage()
    if all_projects:
        return session_files(agent_dir(), storage=storage)
    return session_files(agent_dir(), cwd=os.getcwd(), storage=storage)


@contextmanager
def progress(description: str, total: int | None) -> Iterator[Callable[[str], None]]:
    """A progress bar on stderr while a long operation runs, only on a terminal."""
    if not sys.stderr.isatty():
        yield lambda _path: None
        return
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


def human_size(size: int | float) -> str:
    """1536 -> '1.5 KB'."""
    value = float(size)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(value) < 1024 or unit == "TB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TB"  # pragma: no cover
