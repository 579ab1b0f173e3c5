"""The names a hub is built of, checked before any of them touches a path.

A hub is shared by machines that do not trust each other's files: every name read from
it (a machine, an agent, a project dir, a session file) is checked here, as every other
import checks the names it is given, and one that fails is skipped and named, never
joined to a local path.
"""

from __future__ import annotations

import re
import socket
from typing import Final

from sessiontree.errors import SessionTreeError
from sessiontree.layout import is_safe_name

__all__ = [
    "SYNCED_AGENTS",
    "HubNameError",
    "check_machine_name",
    "default_machine_name",
    "is_project_dir_name",
    "is_session_file_name",
]

SYNCED_AGENTS: Final = ("xcsh", "omp", "pi")
"""The pi-format agents whose stores sync both ways (their names as `stores` gives them)."""

_MACHINE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_SESSION_FILE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:+-]{0,250}\.jsonl")


class HubNameError(SessionTreeError, ValueError):
    """A name given for, or read from, a hub is not one sessiontree will use."""


def check_machine_name(name: str) -> str:
    """`name` if it can name a machine in a hub: 1-64 letters, digits, `.`, `_` and
    `-`, starting with a letter or digit (so never `.`, `..` or a hidden name)."""
    if not _MACHINE.fullmatch(name) or name in {".", ".."}:
        raise HubNameError(
            f"{name!r} cannot name a machine: use 1-64 letters, digits, '.', '_' or '-',"
            " starting with a letter or digit"
        )
    return name


def default_machine_name() -> str:
    """This machine's name in a hub when none is given: its host name up to the first
    dot, with any character a machine name cannot hold made a `-`."""
    host = socket.gethostname().split(".", 1)[0] or "machine"
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "-", host).lstrip("._-")[:64]
    return cleaned or "machine"


def is_project_dir_name(name: str) -> bool:
    """Whether `name` can be a project dir of a pi-format store (`--<cwd>--`): one path
    component, not hidden."""
    return is_safe_name(name) and not name.startswith(".")


def is_session_file_name(name: str) -> bool:
    """Whether `name` can be a pi-format session file's name inside a project dir: no
    separator, no leading dot, ends in `.jsonl` (pi's `<timestamp>_<id>.jsonl`)."""
    return bool(_SESSION_FILE.fullmatch(name)) and is_safe_name(name)
