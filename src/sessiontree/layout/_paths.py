"""Where things live: the agent dir, session dirs, terminal ids (a session file's
name is `sessiontree.format._naming.session_file_name`).

Untrusted names (session ids, terminal ids, file names from resume arguments
or breadcrumbs) pass `is_safe_name` before they become part of a path.
"""

from __future__ import annotations

import os
import re
import sys

from sessiontree._util.env import (
    NATIVE_AGENTS,
    agent_dir_or_default,
    default_agent_dir,
    get_agent_dir,
    terminal_variable,
)

__all__ = [
    "EXTERNAL_SESSION_DIRS",
    "default_agent_dir",
    "encode_session_dir_name",
    "get_agent_dir",
    "get_default_session_dir",
    "get_terminal_id",
    "is_safe_name",
    "native_agent_of",
]

_UNSAFE_NAME = re.compile(r"[\x00-\x1f\x7f/\\]")

EXTERNAL_SESSION_DIRS = "external-session-dirs"
"""File in the agent dir listing session dirs outside `<agent>/sessions` whose
sessions use the agent's blob store (so `gc` marks their references too)."""


def native_agent_of(path: str) -> str:
    """Whose agent dir `path` is by its name: `~/.pi/agent` is pi's, `~/.omp/agent`
    oh-my-pi's (`"omp"`), for any home; any other is xcsh's (whose format oh-my-pi
    shares)."""
    parent, name = os.path.split(os.path.normpath(os.path.abspath(path)))
    if name == "agent":
        for agent, directory in NATIVE_AGENTS.items():
            if os.path.basename(parent) == directory:
                return agent
    return "xcsh"


def encode_session_dir_name(cwd: str) -> str:
    """`--` + cwd without its leading slash, `/`, `\\` and `:` as `-`, + `--`."""
    trimmed = cwd[1:] if cwd[:1] in ("/", "\\") else cwd
    return "--" + re.sub(r"[/\\:]", "-", trimmed) + "--"


def home_relative_dir_name(cwd: str, home: str | None = None) -> str | None:
    """The directory name newer TypeScript agents use: `-<path relative to home>`.

    Paths under the temp dir are named `-tmp-<rel>`; other paths have none.
    """
    home = home if home is not None else os.path.expanduser("~")
    norm = os.path.normpath(cwd)
    for base, prefix in ((home, "-"), ("/tmp", "-tmp-")):
        base = os.path.normpath(base)
        if norm == base:
            return prefix.rstrip("-") or "-"
        if norm.startswith(base.rstrip("/") + "/"):
            rel = norm[len(base.rstrip("/")) + 1 :]
            return prefix + re.sub(r"[/\\:]", "-", rel)
    return None


def get_default_session_dir(cwd: str, agent_dir: str | None = None, storage: object = None) -> str:
    """`<agent dir>/sessions/--<cwd-encoded>--` (not created here)."""
    return os.path.join(agent_dir_or_default(agent_dir), "sessions", encode_session_dir_name(cwd))


def is_safe_name(name: str) -> bool:
    """True when `name` can be one path component: no separators, `..`, NUL or control chars."""
    return (
        bool(name)
        and name not in (".", "..")
        and _UNSAFE_NAME.search(name) is None
        and len(name.encode("utf-8", "surrogatepass")) <= 255
    )


def get_terminal_id() -> str | None:
    """A stable id of this terminal, named as the TypeScript agents name it.

    The stdin TTY (`/dev/pts/3` -> `pts-3`), else the multiplexer or emulator
    from the environment (`tmux-<pane>`, `kitty-<id>`, `apple-<id>`, `wt-<id>`).
    None when there is no terminal or the id would not be a safe file name.
    """
    candidate: str | None = None
    try:
        if sys.stdin is not None and sys.stdin.isatty():
            tty = os.ttyname(0)
            if tty.startswith("/dev/"):
                candidate = tty[5:].replace("/", "-")
    except (OSError, ValueError, AttributeError):
        candidate = None
    if candidate is None:
        candidate = terminal_variable()
    if candidate is None or not is_safe_name(candidate):
        return None
    return candidate
