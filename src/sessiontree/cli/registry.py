"""Every command of `sessiontree`, once: its name, where it lives, its help line, what
it does to the store, and the heading `--help` lists it under.

The root group (`app.py`) lists the commands from here and imports a command's module
only when that command runs or its help is asked for (click's "lazy group"):
`sessiontree --help` and `--version` load no command, so none of what the commands use
(Jinja2, the content index, the foreign readers, the web app, PostgreSQL) either. The
line is written here only: a command's help is this line, then its function's docstring.

Nothing but the standard library: the global options (`options.py`) and the foreign
stores (`foreign_stores.py`) ask it what a command does without loading a command.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

__all__ = [
    "COMMANDS",
    "PANELS",
    "Access",
    "CommandEntry",
    "only_reads",
    "reading_commands",
    "writes_store",
]


class Access(enum.Enum):
    """What a command does to the store of the invocation."""

    READS = "reads"
    """Reads its sessions and nothing else: runs on another agent's store (which
    sessiontree only reads), on an archive, on a session file read in place."""
    KEEPS = "keeps"
    """Changes none of its sessions (writes its own files, or elsewhere), yet works on
    this agent's stores only."""
    WRITES = "writes"
    """Changes its sessions: when no option names a store and several are found, the
    command is refused rather than guess which one."""


@dataclass(frozen=True)
class CommandEntry:
    """Where a command lives: `module` (in `sessiontree.cli`) and its `attribute`, a
    function (a command) or a `typer.Typer` (a group). `help`: the first paragraph of its
    help (`--help` lists its first sentence); `access`: what it does to the store;
    `panel`: the heading `sessiontree --help` lists it under."""

    module: str
    attribute: str
    help: str
    access: Access
    panel: str


PANELS: Final = ("Inspect", "Search and report", "Maintain", "Move between stores", "Serve")
"""The headings of `sessiontree --help`, in order; each lists its commands in the
order of `COMMANDS`."""

_INSPECT, _REPORT, _MAINTAIN, _MOVE, _SERVE = PANELS
_READS, _KEEPS, _WRITES = Access.READS, Access.KEEPS, Access.WRITES

COMMANDS: Final[Mapping[str, CommandEntry]] = {
    # In the order `sessiontree --help` lists them, heading by heading.
    "demo": CommandEntry(
        "demo",
        "demo_command",
        "Build a branched demo session in a temporary agent dir and show it.",
        _KEEPS,
        _INSPECT,
    ),
    "list": CommandEntry(
        "commands_inspect",
        "list_command",
        "List sessions, newest first: this directory's project, or every project with --all.",
        _READS,
        _INSPECT,
    ),
    "show": CommandEntry(
        "commands_inspect",
        "show_command",
        "Header, entry counts, branches and leaf, models, token usage and cost, labels.",
        _READS,
        _INSPECT,
    ),
    "tree": CommandEntry(
        "commands_inspect",
        "tree_command",
        "The entry tree: roles, one-line previews, labels, the current leaf marked.",
        _READS,
        _INSPECT,
    ),
    "context": CommandEntry(
        "commands_inspect",
        "context_command",
        "The context the model sees at the leaf (or --leaf), as text or JSON.",
        _READS,
        _INSPECT,
    ),
    "resume": CommandEntry(
        "commands_manage",
        "resume_command",
        "Print the path of the session ARG names (for shell integration).",
        _READS,
        _INSPECT,
    ),
    "search": CommandEntry(
        "commands_search",
        "search_command",
        "Full-text search across session contents: newest hits first, with a snippet each.",
        _READS,
        _REPORT,
    ),
    "history": CommandEntry(
        "commands_inspect",
        "history_command",
        "The prompt history (history.db), newest first; opened read-only.",
        _KEEPS,
        _REPORT,
    ),
    "stats": CommandEntry(
        "commands_inspect",
        "stats_command",
        "Store-wide figures: sessions, bytes, blobs, tokens and cost per model and per day.",
        _READS,
        _REPORT,
    ),
    "usage": CommandEntry(
        "commands_usage",
        "usage_app",
        "Token usage and cost: daily, weekly, monthly, per session or project, 5-hour blocks.",
        _READS,
        _REPORT,
    ),
    "rename": CommandEntry(
        "commands_manage",
        "rename_command",
        "Set a session's title (a user title, which later automatic titles do not replace).",
        _WRITES,
        _MAINTAIN,
    ),
    "rm": CommandEntry(
        "commands_manage",
        "rm_command",
        "Delete a session file and its artifacts directory.",
        _WRITES,
        _MAINTAIN,
    ),
    "fork": CommandEntry(
        "commands_manage",
        "fork_command",
        "Copy a session into a new one (new id; parentSession names the source). Prints its path.",
        _WRITES,
        _MAINTAIN,
    ),
    "extract": CommandEntry(
        "commands_manage",
        "extract_command",
        "Write the root -> --leaf path (with its labels) as a new session. Prints its path.",
        _WRITES,
        _MAINTAIN,
    ),
    "migrate": CommandEntry(
        "commands_manage",
        "migrate_command",
        "Bring session files to the current format version (v3), atomically.",
        _WRITES,
        _MAINTAIN,
    ),
    "verify": CommandEntry(
        "commands_integrity",
        "verify_command",
        "Check session files for damage; exit 1 when a problem is found.",
        _KEEPS,
        _MAINTAIN,
    ),
    "repair": CommandEntry(
        "commands_integrity",
        "repair_command",
        "Write a repaired copy of a session next to it, reporting every change.",
        _WRITES,
        _MAINTAIN,
    ),
    "gc": CommandEntry(
        "commands_integrity",
        "gc_command",
        "Find blobs that no session references; --delete removes them.",
        _WRITES,
        _MAINTAIN,
    ),
    "export": CommandEntry(
        "commands_manage",
        "export_command",
        "Export the path to the leaf as Markdown or JSONL, or the whole tree as one HTML file.",
        _READS,
        _MOVE,
    ),
    "import": CommandEntry(
        "commands_foreign",
        "import_command",
        "Copy another agent's session into this agent's store as a new v3 session.",
        _WRITES,
        _MOVE,
    ),
    "import-files": CommandEntry(
        "commands_manage",
        "import_files_command",
        "Copy an agent dir's sessions/ and blobs/ into the --store database, byte for byte.",
        _KEEPS,
        _MOVE,
    ),
    "export-files": CommandEntry(
        "commands_manage",
        "export_files_command",
        "Copy the --store database's sessions and blobs into an agent dir, byte for byte.",
        _KEEPS,
        _MOVE,
    ),
    "stores": CommandEntry(
        "commands_archive",
        "stores_command",
        "Every agent store on this machine, with its sessions and size.",
        _KEEPS,
        _MOVE,
    ),
    "archive": CommandEntry(
        "commands_archive",
        "archive_command",
        "Keep a copy of every session of every agent store found, so that no cleanup loses one.",
        _KEEPS,
        _MOVE,
    ),
    "restore": CommandEntry(
        "commands_archive",
        "restore_command",
        "Write an archived session back where its agent looks for it, or under --to.",
        _KEEPS,
        _MOVE,
    ),
    "sync": CommandEntry(
        "commands_sync",
        "sync_command",
        "Sync this machine's xcsh, oh-my-pi and pi sessions both ways through a shared dir or "
        "database.",
        _KEEPS,
        _MOVE,
    ),
    "serve": CommandEntry(
        "commands_serve",
        "serve_command",
        "Browse the store in a web browser: projects, sessions, branches, search, usage.",
        _READS,
        _SERVE,
    ),
}


def reading_commands() -> list[str]:
    """The commands that only read the store, sorted (as messages name them)."""
    return sorted(name for name, entry in COMMANDS.items() if entry.access is Access.READS)


def _access(command: str | None) -> Access | None:
    entry = COMMANDS.get(command) if command is not None else None
    return entry.access if entry is not None else None


def only_reads(command: str | None) -> bool:
    """Whether `command` only reads the store (no command: not known to)."""
    return _access(command) is Access.READS


def writes_store(command: str | None) -> bool:
    """Whether `command` changes sessions of the invocation's store (no command: no)."""
    return _access(command) is Access.WRITES
