"""Where other agents' files go in a hub, and the check each such path read from a hub
passes before any part of it touches a local path.

A file of another agent's store is kept at `foreign/<machine>/<agent>/<path under
that agent's store home>`: the same relative path on every machine, so a view of it
(`<view root>/<machine>/<agent>/<path>`) is a store that agent's reader reads. Only
the dirs each agent keeps its sessions in (`find_stores`' roots) may be named there,
and an OpenCode database's session only as the document the archive makes of it
(`export/<database>/<session id>.json`).
"""

from __future__ import annotations

import re
from typing import Final

from sessiontree.layout import is_safe_name
from sessiontree.sync._names import HubNameError, check_machine_name

__all__ = [
    "FOREIGN_PREFIX",
    "FOREIGN_SYNCED",
    "check_foreign_rel",
    "foreign_log",
    "parse_foreign_log",
]

FOREIGN_PREFIX: Final = "foreign"
"""The hub dir other agents' files are kept under."""

FOREIGN_SYNCED: Final = ("claude", "codex", "opencode", "gemini", "copilot")
"""The agents whose stores are carried to the hub read-only (names as `stores` gives)."""

_ROOTS: Final = {
    "claude": ("projects",),
    "codex": ("sessions", "archived_sessions"),
    "opencode": ("storage", "export"),
    "gemini": ("tmp",),
    "copilot": ("session-state",),
}
_DATABASE: Final = re.compile(r"opencode(-[A-Za-z0-9._-]+)?\.db")
_DOCUMENT: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*\.json")
_MAX_PATH: Final = 4096
"""Bytes a relative path may have (Linux's PATH_MAX)."""
_MAX_DEPTH: Final = 32


def check_foreign_rel(agent: str, parts: list[str]) -> str | None:
    """Why `parts` (a path under `agent`'s store home, split) cannot be kept or shown,
    or None when it can: each part one plain name, under one of the agent's session
    dirs, not too long or deep."""
    if agent not in _ROOTS:
        return f"{agent!r} is not an agent whose sessions are carried"
    if len(parts) < 2 or len(parts) > _MAX_DEPTH:
        return "not a file under a session dir"
    if len("/".join(parts).encode("utf-8", "surrogatepass")) > _MAX_PATH:
        return "a path too long"
    if not all(is_safe_name(p) for p in parts):
        return "a name that is no plain path component"
    if parts[0] not in _ROOTS[agent]:
        return f"not under {', '.join(_ROOTS[agent])}"
    if agent == "gemini" and (len(parts) < 4 or parts[2] != "chats"):
        return "not under tmp/<project>/chats"
    if agent == "opencode" and parts[0] == "export":
        if len(parts) != 3 or not _DATABASE.fullmatch(parts[1]):
            return "not export/<database>/<session>.json"
        if not _DOCUMENT.fullmatch(parts[2]):
            return "not export/<database>/<session>.json"
    return None


def foreign_log(machine: str, agent: str, parts: list[str]) -> str:
    """The hub path (relative to the hub root) of a file of `machine`'s `agent` store."""
    return "/".join((FOREIGN_PREFIX, machine, agent, *parts))


def parse_foreign_log(log: object, machine: str) -> tuple[str, list[str]]:
    """(agent, path parts) of a journal's `log` naming a file `machine` keeps in the
    hub; HubNameError saying why when it is no such path (another machine's, absolute,
    `..`, an agent not carried, a dir no session is kept in)."""
    if not isinstance(log, str):
        raise HubNameError(f"{log!r}: not a path")
    if len(log.encode("utf-8", "surrogatepass")) > _MAX_PATH + 200:
        raise HubNameError(f"{log[:80]!r}...: a path too long")
    parts = log.split("/")
    if len(parts) < 3 or parts[0] != FOREIGN_PREFIX:
        raise HubNameError(f"{log!r}: not under {FOREIGN_PREFIX}/")
    check_machine_name(parts[1])
    if parts[1] != machine:
        raise HubNameError(f"{log!r}: not {machine}'s (a machine writes only its own)")
    agent, rel = parts[2], parts[3:]
    why = check_foreign_rel(agent, rel)
    if why is not None:
        raise HubNameError(f"{log!r}: {why}")
    return agent, rel
