"""Shared CLI plumbing: consoles, errors and exit codes, JSON output, session lookup, progress.

Exit codes: 0 success, 1 error (unknown session, unreadable file, problems
found by `verify`), 2 usage error (typer's), 3 ambiguous session prefix.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn

from ..blobs import BlobStore
from ..check import blob_dir_for
from ..discovery import resolve_resumable_session
from ..errors import AmbiguousSessionError
from ..jsonl import serialize_entry
from ..maintenance import session_files
from ..manager import SessionManager
from ..paths import get_agent_dir

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_AMBIGUOUS = 3

SCHEMA_VERSION = 1
"""`schemaVersion` of every `--json` document this CLI prints."""

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON (see README) instead.")]
SessionArg = Annotated[
    str,
    typer.Argument(
        help="A session file path, a session-id prefix or a file-name prefix.",
        show_default=False,
    ),
]


class CliError(Exception):
    """A user error: printed as one line on stderr, then exit with `code`."""

    def __init__(self, message: str, code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def agent_dir() -> str:
    """The agent dir in effect (`--agent-dir`, else `$PI_CODING_AGENT_DIR`, else the default)."""
    return get_agent_dir()


def blob_store_for(path: str) -> BlobStore:
    """The blob store of the store that holds `path`."""
    return BlobStore(blob_dir_for(path))


def emit_json(payload: dict[str, Any]) -> None:
    """Print one JSON document (with `schemaVersion` first) on stdout."""
    document = {"schemaVersion": SCHEMA_VERSION, **payload}
    sys.stdout.write(serialize_entry(document) + "\n")
    sys.stdout.flush()


def _looks_like_path(arg: str) -> bool:
    return os.sep in arg or (os.altsep is not None and os.altsep in arg) or arg.endswith(".jsonl")


def resolve_session(arg: str) -> str:
    """A session file path from a path, a session-id prefix or a file-name prefix.

    Raises CliError (exit 1) when nothing matches, (exit 3) when several do.
    """
    expanded = os.path.expanduser(arg)
    if os.path.isfile(expanded):
        return os.path.abspath(expanded)
    if _looks_like_path(arg):
        if os.path.isdir(expanded):
            raise CliError(f"{arg}: is a directory, not a session file")
        raise CliError(f"{arg}: no such session file")
    try:
        match = resolve_resumable_session(arg, os.getcwd())
    except AmbiguousSessionError as exc:
        raise CliError(ambiguous_message(arg, exc.candidates), EXIT_AMBIGUOUS) from None
    if match is None:
        raise CliError(f"no session matches {arg!r} (in this project or any other)")
    return str(match.session.path)


def ambiguous_message(arg: str, candidates: list[Any]) -> str:
    names = ", ".join(os.path.basename(str(c.path)) for c in candidates[:5])
    more = f" and {len(candidates) - 5} more" if len(candidates) > 5 else ""
    return f"{arg!r} matches {len(candidates)} sessions ({names}{more}); give a longer prefix"


def open_read_only(path: str) -> SessionManager:
    """Open a session without writing anything (no migration rewrite, breadcrumb, or file)."""
    return SessionManager.open(path, read_only=True, blob_store=blob_store_for(path))


def open_writable(path: str) -> SessionManager:
    """Open a session for a command that changes it."""
    return SessionManager.open(path, blob_store=blob_store_for(path), breadcrumb=False)


def select_files(paths: list[str] | None, all_projects: bool) -> list[str]:
    """Files for multi-file commands: PATHS (each resolved), else `--all`, else this project."""
    if paths:
        if all_projects:
            raise CliError("give PATHS or --all, not both", EXIT_USAGE)
        return [resolve_session(p) for p in paths]
    if all_projects:
        return session_files(agent_dir())
    return session_files(agent_dir(), cwd=os.getcwd())


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


def human_size(size: int | float) -> str:
    """1536 -> '1.5 KB'."""
    value = float(size)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(value) < 1024 or unit == "TB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TB"  # pragma: no cover
