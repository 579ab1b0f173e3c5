"""Every command of `sessiontree`: its name, where it lives, and the line `--help` shows.

The root group lists the commands from here and imports a command's module only when
that command runs or its help is asked for (click's "lazy group"): `sessiontree --help`
and `--version` load no command, so none of what the commands use (Jinja2, the content
index, the foreign readers, the web app, PostgreSQL) either. The line kept here is the
first sentence of the command's help; a test checks the two agree.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any, Final

import typer
import typer.main
from typer.core import TyperCommand

from sessiontree.cli.options import Command, Group

__all__ = ["COMMANDS", "CommandEntry", "LazyGroup", "load_command"]


@dataclass(frozen=True)
class CommandEntry:
    """Where a command lives: `module` (in `sessiontree.cli`) and its `attribute`, a
    function (a command) or a `typer.Typer` (a group); `help`: its one-line help."""

    module: str
    attribute: str
    help: str


COMMANDS: Final[Mapping[str, CommandEntry]] = {
    # In the order `sessiontree --help` lists them.
    "demo": CommandEntry(
        "demo",
        "demo_command",
        "Build a branched demo session in a temporary agent dir and show it.",
    ),
    "list": CommandEntry(
        "commands_inspect",
        "list_command",
        "List sessions, newest first: this directory's project, or every project with --all.",
    ),
    "show": CommandEntry(
        "commands_inspect",
        "show_command",
        "Header, entry counts, branches and leaf, models, token usage and cost, labels.",
    ),
    "tree": CommandEntry(
        "commands_inspect",
        "tree_command",
        "The entry tree: roles, one-line previews, labels, the current leaf marked.",
    ),
    "context": CommandEntry(
        "commands_inspect",
        "context_command",
        "The context the model sees at the leaf (or --leaf), as text or JSON.",
    ),
    "search": CommandEntry(
        "commands_inspect",
        "search_command",
        "Full-text search across session contents: newest hits first, with a snippet each.",
    ),
    "history": CommandEntry(
        "commands_inspect",
        "history_command",
        "The prompt history (history.db), newest first; opened read-only.",
    ),
    "stats": CommandEntry(
        "commands_inspect",
        "stats_command",
        "Store-wide figures: sessions, bytes, blobs, tokens and cost per model and per day.",
    ),
    "resume": CommandEntry(
        "commands_manage",
        "resume_command",
        "Print the path of the session ARG names (for shell integration).",
    ),
    "rename": CommandEntry(
        "commands_manage",
        "rename_command",
        "Set a session's title (a user title, which later automatic titles do not replace).",
    ),
    "rm": CommandEntry(
        "commands_manage", "rm_command", "Delete a session file and its artifacts directory."
    ),
    "fork": CommandEntry(
        "commands_manage",
        "fork_command",
        "Copy a session into a new one (new id; parentSession names the source).",
    ),
    "extract": CommandEntry(
        "commands_manage",
        "extract_command",
        "Write the root -> --leaf path (with its labels) as a new session.",
    ),
    "export": CommandEntry(
        "commands_manage",
        "export_command",
        "Export the path to the leaf as Markdown or JSONL, or the whole tree as one HTML file.",
    ),
    "migrate": CommandEntry(
        "commands_manage",
        "migrate_command",
        "Bring session files to the current format version (v3), atomically.",
    ),
    "import-files": CommandEntry(
        "commands_manage",
        "import_files_command",
        "Copy an agent dir's sessions/ and blobs/ into the --store database, byte for byte.",
    ),
    "export-files": CommandEntry(
        "commands_manage",
        "export_files_command",
        "Copy the --store database's sessions and blobs into an agent dir, byte for byte.",
    ),
    "verify": CommandEntry(
        "commands_integrity",
        "verify_command",
        "Check session files for damage; exit 1 when a problem is found.",
    ),
    "repair": CommandEntry(
        "commands_integrity",
        "repair_command",
        "Write a repaired copy of a session next to it, reporting every change.",
    ),
    "gc": CommandEntry(
        "commands_integrity",
        "gc_command",
        "Find blobs that no session references; --delete removes them.",
    ),
    "serve": CommandEntry(
        "commands_serve",
        "serve_command",
        "Browse the store in a web browser: projects, sessions, branches, search, usage.",
    ),
    "import": CommandEntry(
        "commands_foreign",
        "import_command",
        "Copy another agent's session into this agent's store as a new v3 session.",
    ),
    "stores": CommandEntry(
        "commands_archive",
        "stores_command",
        "Every agent store on this machine, with its sessions and size.",
    ),
    "archive": CommandEntry(
        "commands_archive",
        "archive_command",
        "Keep a copy of every session of every agent store found, so that no cleanup loses one.",
    ),
    "restore": CommandEntry(
        "commands_archive",
        "restore_command",
        "Write an archived session back where its agent looks for it, or under --to.",
    ),
    "usage": CommandEntry(
        "commands_usage",
        "usage_app",
        "Token usage and cost: daily, weekly, monthly, per session or project, 5-hour blocks.",
    ),
}


def load_command(name: str) -> Any:
    """Import command `name`'s module and build its click command (typer, as usual)."""
    entry = COMMANDS[name]
    module = importlib.import_module(f"{__package__}.{entry.module}")
    target = getattr(module, entry.attribute)
    builder = typer.Typer(add_completion=False, rich_markup_mode=None)
    if isinstance(target, typer.Typer):
        builder.add_typer(target, name=name)
    else:
        builder.command(name, cls=Command)(target)
    command = typer.main.get_group(builder).commands[name]
    if not isinstance(command, Command | Group):
        # Without these classes the command would not take the global options.
        raise TypeError(f"command {name!r} is a {type(command).__name__}, not a cli Command")
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
        """The command list of `--help`, from the registry's lines: builds no command."""
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
        limit = formatter.width - 6 - max(len(name) for name, _ in shown)
        rows = [(name, command.get_short_help_str(limit)) for name, command in shown]
        with formatter.section("Commands"):
            formatter.write_dl(rows)
