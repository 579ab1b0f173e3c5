"""Every agent store on this machine, found without setup.

Where each agent keeps its sessions by default (`_util.env` reads the environment):
`$PI_CODING_AGENT_DIR`, `~/.xcsh/agent`, `~/.omp/agent`, `~/.pi/agent` (an agent dir
with a `sessions/` dir), Claude Code's config dirs (`projects/`), Codex's home
(`sessions/`, `archived_sessions/`), OpenCode's data dir (its database, its older
`storage/`), Gemini CLI's (`tmp/<project>/chats/`) and Copilot CLI's
(`session-state/`). `find_stores` says which exist; `FoundStore.open()` is the
`Store` of one; `archive_roots` what the archive keeps of it.

Other machines' stores of those agents, brought here by `sessiontree sync` (the views
under `$XDG_STATE_HOME/sessiontree/sync/<hub>/machines/<machine>/<agent>`), are found
too, after this machine's, each with the `machine` it came from: read-only, as every
other agent's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from sessiontree._util.env import (
    AGENT_DIR_ENV,
    NATIVE_AGENTS,
    agent_dir_env,
    claude_config_dirs,
    codex_home,
    copilot_home,
    gemini_home,
    native_agent_dir,
    opencode_home,
    state_home,
)
from sessiontree.store._store import Store

__all__ = ["FoundStore", "find_stores", "looked_in", "store_size"]

_NAMES = {
    "xcsh": "xcsh",
    "omp": "oh-my-pi",
    "pi": "pi",
    "claude": "Claude Code",
    "codex": "Codex",
    "opencode": "OpenCode",
    "gemini": "Gemini CLI",
    "copilot": "Copilot CLI",
}


@dataclass(frozen=True, slots=True)
class FoundStore:
    """An agent store that exists on this machine."""

    agent: str
    """xcsh, omp, pi, claude, codex, opencode, gemini, copilot."""
    home: str
    """Its agent dir, config dir or data dir."""
    archive_roots: tuple[str, ...]
    """The dirs under `home` (relative) holding its session files, images and
    subagent files: what `sessiontree archive` keeps."""
    via: str
    """Why it is looked at: the variable that names it, "default", or "sync" (another
    machine's store shown here)."""
    machine: str | None = None
    """The machine its sessions came from through a sync hub; None: this machine."""

    @property
    def agent_name(self) -> str:
        """Its agent's name: "Claude Code"."""
        return _NAMES.get(self.agent, self.agent)

    @property
    def name(self) -> str:
        """Its agent's name, and the machine when another's: "Claude Code (laptop)"."""
        name = self.agent_name
        return name if self.machine is None else f"{name} ({self.machine})"

    @property
    def native(self) -> bool:
        return self.agent in NATIVE_AGENTS

    def open(self) -> Store:
        """This store as a `Store` (another agent's: read-only), with its machine."""
        store = Store(self.home, agent=self.agent)
        store.machine = self.machine
        return store


def _native_agent(path: str) -> str:
    parent, name = os.path.split(os.path.normpath(path))
    if name == "agent":
        for agent, directory in NATIVE_AGENTS.items():
            if os.path.basename(parent) == directory:
                return agent
    return "xcsh"


def _subdirs(path: str) -> list[str]:
    try:
        return sorted(n for n in os.listdir(path) if os.path.isdir(os.path.join(path, n)))
    except OSError:
        return []


def _candidates() -> list[tuple[str, str, tuple[str, ...], str]]:
    """(agent, home, the dirs under it that hold sessions, why) of every place looked at,
    in the order `find_stores` takes them."""
    out: list[tuple[str, str, tuple[str, ...], str]] = []
    env = agent_dir_env()
    if env is not None:
        out.append((_native_agent(env), env, ("sessions", "blobs"), f"${AGENT_DIR_ENV}"))
    for agent in NATIVE_AGENTS:
        out.append((agent, native_agent_dir(agent), ("sessions", "blobs"), "default"))
    for home in claude_config_dirs():
        out.append(("claude", home, ("projects",), "default"))
    out.append(("codex", codex_home(), ("sessions", "archived_sessions"), "default"))
    out.append(("opencode", opencode_home(), ("storage",), "default"))
    gemini = gemini_home()
    out.append(("gemini", gemini, _gemini_chats(gemini), "default"))
    out.append(("copilot", copilot_home(), ("session-state",), "default"))
    return out


def _gemini_chats(home: str) -> tuple[str, ...]:
    return tuple(
        os.path.join("tmp", p, "chats")
        for p in _subdirs(os.path.join(home, "tmp"))
        if os.path.isdir(os.path.join(home, "tmp", p, "chats"))
    )


_VIEW_ROOTS = {
    "claude": ("projects",),
    "codex": ("sessions", "archived_sessions"),
    "opencode": ("storage",),
    "copilot": ("session-state",),
}


def _machine_stores() -> list[FoundStore]:
    """The other machines' stores a sync shows here (see the module doc)."""
    from sessiontree.sync import machine_views

    found = []
    for machine, agent, home in machine_views(os.path.join(state_home(), "sync")):
        roots = _gemini_chats(home) if agent == "gemini" else _VIEW_ROOTS[agent]
        present = tuple(r for r in roots if os.path.isdir(os.path.join(home, r)))
        if present:
            found.append(FoundStore(agent, home, present, "sync", machine))
    return found


def looked_in() -> list[tuple[str, str]]:
    """(agent's name, dir) of every place `find_stores` looks, whether a store is there
    or not: what a command that found no session says it searched."""
    places = {
        os.path.abspath(home): _NAMES.get(agent, agent) for agent, home, _, _ in _candidates()
    }
    return [(name, home) for home, name in places.items()]


def find_stores() -> list[FoundStore]:
    """Every agent store that exists here, pi-format agent dirs first (each store
    once, however many names lead to it), then the other machines' a sync shows here
    (`machine` set)."""
    found: list[FoundStore] = []
    seen: set[str] = set()
    for agent, home, roots, via in _candidates():
        real = os.path.realpath(home)
        if real in seen:
            continue
        present = tuple(r for r in roots if os.path.isdir(os.path.join(home, r)))
        if not present and not (agent == "opencode" and _opencode_databases(home)):
            continue
        seen.add(real)
        found.append(FoundStore(agent, os.path.abspath(home), present, via))
    return found + _machine_stores()


def _opencode_databases(home: str) -> list[str]:
    try:
        names = os.listdir(home)
    except OSError:
        return []
    return [
        os.path.join(home, n)
        for n in names
        if n.startswith("opencode") and n.endswith(".db") and os.path.isfile(os.path.join(home, n))
    ]


def store_size(store: FoundStore) -> int:
    """Bytes of the store's session files (their roots, its OpenCode databases)."""
    total = 0
    for root in store.archive_roots:
        for directory, _, names in os.walk(os.path.join(store.home, root)):
            for name in names:
                try:
                    total += os.lstat(os.path.join(directory, name)).st_size
                except OSError:
                    pass
    if store.agent == "opencode":
        for database in _opencode_databases(store.home):
            for path in (database, database + "-wal"):
                try:
                    total += os.lstat(path).st_size
                except OSError:
                    pass
    return total
