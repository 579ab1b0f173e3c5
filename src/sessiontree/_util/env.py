"""The environment, read in one place: where the default store is, and where the other
agents keep theirs.

Only defaults read the environment: `Store()` without a location (`default_store`),
a library function given no agent dir (`agent_dir_or_default`), the other agents'
default homes, the terminal's id and the local time zone's name. Everything else is
handed the agent dir it works on. Nothing in the package writes the environment, and
no module but this one reads it (`tests/project/test_environment.py` holds both).
"""

from __future__ import annotations

import os
from typing import Final

__all__ = [
    "AGENT_DIR_ENV",
    "NATIVE_AGENTS",
    "STORE_ENV",
    "agent_dir_env",
    "agent_dir_or_default",
    "claude_config_dirs",
    "codex_home",
    "copilot_home",
    "default_agent_dir",
    "default_store",
    "default_store_choice",
    "gemini_home",
    "get_agent_dir",
    "native_agent_dir",
    "opencode_home",
    "terminal_variable",
    "time_zone_name",
]

STORE_ENV: Final = "SESSIONTREE_STORE"
"""The default store (a path or a URL), as `--store` names one."""
AGENT_DIR_ENV: Final = "PI_CODING_AGENT_DIR"
"""The default agent dir, as the TypeScript agents read it."""

NATIVE_AGENTS: Final = {"xcsh": ".xcsh", "omp": ".omp", "pi": ".pi"}
"""The agents whose format this package writes, and the dir in the home holding each
one's agent dir (`~/<dir>/agent`)."""


def _read(name: str) -> str | None:
    """The value of one variable, None when unset or empty: every read goes through here."""
    return os.environ.get(name) or None


def _home() -> str:
    return os.path.expanduser("~")


def native_agent_dir(agent: str) -> str:
    """The default agent dir of xcsh, oh-my-pi (`omp`) or pi: `~/.<agent>/agent`."""
    return os.path.join(_home(), NATIVE_AGENTS[agent], "agent")


def default_agent_dir() -> str:
    """The agent dir when `$PI_CODING_AGENT_DIR` is not set: `~/.xcsh/agent`, else the
    first of `~/.omp/agent` and `~/.pi/agent` that exists (a home where only pi ran
    works with no setup), else `~/.xcsh/agent`."""
    for agent in NATIVE_AGENTS:
        candidate = native_agent_dir(agent)
        if os.path.isdir(candidate):
            return candidate
    return native_agent_dir("xcsh")


def agent_dir_env() -> str | None:
    """`$PI_CODING_AGENT_DIR` (`~` expanded), None when it is not set."""
    env = _read(AGENT_DIR_ENV)
    return os.path.expanduser(env) if env else None


def get_agent_dir() -> str:
    """The agent dir: `$PI_CODING_AGENT_DIR`, else `~/.xcsh/agent`.

    Read, never written: code that works on another agent dir (the CLI's
    `--agent-dir`, the web app, a `Store`) passes it down as `agent_dir=`.
    """
    env = _read(AGENT_DIR_ENV)
    return os.path.expanduser(env) if env else default_agent_dir()


def agent_dir_or_default(agent_dir: str | None = None) -> str:
    """`agent_dir` when given, else the default one (`get_agent_dir`): the one place a
    library function given no agent dir chooses it."""
    return agent_dir if agent_dir is not None else get_agent_dir()


def state_home() -> str:
    """Where sessiontree keeps state of this machine's own that is not a cache of one
    agent dir (the sync's state per hub): `$XDG_STATE_HOME/sessiontree`, else
    `~/.local/state/sessiontree`."""
    base = _read("XDG_STATE_HOME") or os.path.join(_home(), ".local", "state")
    return os.path.join(base, "sessiontree")


def default_store_choice() -> tuple[str, bool]:
    """(`default_store()`, whether a variable named it): each variable read once.
    Nothing named (False): the CLI reads every store found besides it."""
    store = _read(STORE_ENV)
    if store:
        return store, True
    env = _read(AGENT_DIR_ENV)
    if env:
        return os.path.expanduser(env), True
    return default_agent_dir(), False


def default_store() -> str:
    """Where `Store()` (and the CLI without `--store` or `--agent-dir`) works:
    `$SESSIONTREE_STORE` (a path or a URL), else the default agent dir."""
    return default_store_choice()[0]


# ---------------------------------------------------------------------------- other agents


def claude_config_dirs() -> list[str]:
    """Claude Code's config dirs: `$CLAUDE_CONFIG_DIR` (comma-separated), else `~/.claude`
    and `~/.config/claude`."""
    env = _read("CLAUDE_CONFIG_DIR") or ""
    dirs = [os.path.abspath(os.path.expanduser(d.strip())) for d in env.split(",") if d.strip()]
    if dirs:
        return list(dict.fromkeys(dirs))
    return [os.path.join(_home(), ".claude"), os.path.join(_home(), ".config", "claude")]


def codex_home() -> str:
    """`$CODEX_HOME`, else `~/.codex`."""
    env = _read("CODEX_HOME")
    return os.path.abspath(os.path.expanduser(env)) if env else os.path.join(_home(), ".codex")


def opencode_home() -> str:
    """`$XDG_DATA_HOME/opencode`, else `~/.local/share/opencode`."""
    base = _read("XDG_DATA_HOME") or os.path.join(_home(), ".local", "share")
    return os.path.join(os.path.abspath(os.path.expanduser(base)), "opencode")


def gemini_home() -> str:
    """`$GEMINI_CLI_HOME/.gemini`, else `~/.gemini`."""
    base = _read("GEMINI_CLI_HOME") or _home()
    return os.path.join(os.path.abspath(os.path.expanduser(base)), ".gemini")


def copilot_home() -> str:
    """`$COPILOT_HOME`, else `~/.copilot`."""
    env = _read("COPILOT_HOME")
    return os.path.abspath(os.path.expanduser(env)) if env else os.path.join(_home(), ".copilot")


# ---------------------------------------------------------------------------- the host


_TERMINALS: Final = (
    ("TMUX_PANE", "tmux-"),
    ("KITTY_WINDOW_ID", "kitty-"),
    ("TERM_SESSION_ID", "apple-"),
    ("WT_SESSION", "wt-"),
)


def terminal_variable() -> str | None:
    """This terminal's id from the multiplexer or emulator that says it (`tmux-<pane>`,
    `kitty-<id>`, `apple-<id>`, `wt-<id>`), as the TypeScript agents name it; None
    when none does. Not yet checked to be a safe file name."""
    for variable, prefix in _TERMINALS:
        value = _read(variable)
        if value:
            return prefix + value
    return None


def time_zone_name() -> str | None:
    """`$TZ`: the name the local time zone was given, if any."""
    return _read("TZ")
