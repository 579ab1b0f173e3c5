"""Regenerate the command reference in docs/cli.md from `--help` of every command.

    .venv/bin/python scripts/gen_cli_docs.py          # rewrite docs/cli.md
    .venv/bin/python scripts/gen_cli_docs.py --check  # exit 1 if docs/cli.md is stale

The reference is the part of docs/cli.md between the two marker lines below; the prose
around it is written by hand. Every command and sub-command is asked for its help in
this process, at a fixed width with colours off, whatever the terminal or the
environment says, so the file comes out the same on every machine (sqlite-utils keeps
its CLI reference from drifting the same way, with cog). `tests/project/test_docs.py` runs it
and fails when the file differs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from typer.main import get_command
from typer.testing import CliRunner

REPO = Path(__file__).resolve().parents[1]
CLI_DOC = REPO / "docs" / "cli.md"
BEGIN = "<!-- BEGIN GENERATED: scripts/gen_cli_docs.py (do not edit by hand) -->"
END = "<!-- END GENERATED -->"
FIX = ".venv/bin/python scripts/gen_cli_docs.py"
WIDTH = 80
ENV: dict[str, str | None] = {
    # What a terminal could change in the help: its width and colours. The store
    # variables are cleared too, so that nothing of the machine shows.
    "COLUMNS": str(WIDTH),
    "LINES": "24",
    "TERM": "dumb",
    "NO_COLOR": "1",
    "FORCE_COLOR": None,
    "CLICOLOR_FORCE": None,
    "PI_CODING_AGENT_DIR": None,
    "SESSIONTREE_STORE": None,
}


def commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """The path of every command under `command` (itself first), depth first, in
    `--help` order. (Typer carries its own copy of click, so a group is known by what it
    does, not by its class.)"""
    yield path
    if hasattr(command, "list_commands"):
        ctx = command.context_class(command, info_name=" ".join(("sessiontree", *path)))
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                yield from commands(sub, (*path, name))


def help_text(path: tuple[str, ...]) -> str:
    """What `sessiontree PATH --help` prints, at WIDTH columns without colour."""
    from sessiontree.cli import app

    result = CliRunner().invoke(
        app,
        [*path, "--help"],
        prog_name="sessiontree",
        env=ENV,
        color=False,
        terminal_width=WIDTH,
        catch_exceptions=False,
    )
    if result.exit_code != 0:
        raise RuntimeError(f"sessiontree {' '.join(path)} --help exited {result.exit_code}")
    # Trailing spaces are the formatter's padding, nothing a reader sees.
    return "\n".join(line.rstrip() for line in result.output.strip("\n").splitlines())


def reference() -> str:
    """The generated part of docs/cli.md: one section per command, its help verbatim."""
    from sessiontree.cli import app

    parts: list[str] = []
    for path in commands(get_command(app)):
        title = " ".join(("sessiontree", *path))
        parts.append(f"### `{title}`\n\n```text\n{help_text(path)}\n```\n")
    return "\n".join(parts)


def updated(document: str, generated: str) -> str:
    """`document` with the text between the markers replaced by `generated`."""
    head, begin, rest = document.partition(BEGIN + "\n")
    _old, end, tail = rest.partition(END)
    if not begin or not end:
        raise ValueError(f"{CLI_DOC} lacks the marker lines {BEGIN!r} and {END!r}")
    return f"{head}{begin}\n{generated}\n{end}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/cli.md is stale")
    args = parser.parse_args(argv)
    document = CLI_DOC.read_text(encoding="utf-8")
    new = updated(document, reference())
    if args.check:
        if new != document:
            print(f"{CLI_DOC.relative_to(REPO)} is out of date; run: {FIX}", file=sys.stderr)
            return 1
        return 0
    if new != document:
        CLI_DOC.write_text(new, encoding="utf-8")
        print(f"Wrote {CLI_DOC.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
