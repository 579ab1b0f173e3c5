"""The environment, read in one place: where the default store is.

Only a default (`get_agent_dir()`, what `Store()` opens without a location) reads
the environment; everything else is handed the agent dir it works on. Nothing in
the package writes the environment (`tests/test_environment.py` holds both).
"""

from __future__ import annotations

import os

__all__ = ["default_agent_dir", "get_agent_dir"]


def default_agent_dir() -> str:
    """The agent dir when `$PI_CODING_AGENT_DIR` is not set: `~/.xcsh/agent`."""
    return os.path.join(os.path.expanduser("~"), ".xcsh", "agent")


def get_agent_dir() -> str:
    """The agent dir: `$PI_CODING_AGENT_DIR`, else `~/.xcsh/agent`.

    Read, never written: code that works on another agent dir (the CLI's
    `--agent-dir`, the web app) passes it down as `agent_dir=`.
    """
    env = os.environ.get("PI_CODING_AGENT_DIR")
    if env:
        return os.path.expanduser(env)
    return default_agent_dir()
